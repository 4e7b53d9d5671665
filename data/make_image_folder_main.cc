// yoke-make-image-folder: writes an IDX image set (Fashion-MNIST by default)
// out as image folders, a PNG tree and a JPEG tree:
//
//   OUT/png/train/<label>_<class>/<index>.png    OUT/png/test/...
//   OUT/jpeg/train/<label>_<class>/<index>.jpg   OUT/jpeg/test/...
//
// Usage: yoke-make-image-folder OUT [--idx-dir DIR] [--train N] [--test N]
//                               [--quality Q] [--formats png,jpeg]
// DIR holds {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (default
// /usr/share/datasets/fashion-mnist); --train/--test keep the first N
// examples (default all); Q is the JPEG quality (default 95).
// scripts/make-image-folder wraps it.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/idx_reader.h"
#include "data/image_folder_writer.h"

namespace {

int Usage(const char* msg) {
  std::fprintf(stderr,
               "yoke-make-image-folder: %s\n"
               "usage: yoke-make-image-folder OUT [--idx-dir DIR] [--train N] [--test N] "
               "[--quality Q] [--formats png,jpeg]\n",
               msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, dir = "/usr/share/datasets/fashion-mnist", formats = "png,jpeg";
  int64_t limit[2] = {0, 0};
  int quality = 95;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      Usage("writes IDX images as PNG and JPEG trees");
      return 0;
    }
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return Usage(("missing value for " + a).c_str());
      const std::string v = argv[++i];
      bool ok = true;
      if (a == "--idx-dir") {
        dir = v;
      } else if (a == "--formats") {
        formats = v;
      } else if (a == "--train") {
        ok = absl::SimpleAtoi(v, &limit[0]) && limit[0] >= 0;
      } else if (a == "--test") {
        ok = absl::SimpleAtoi(v, &limit[1]) && limit[1] >= 0;
      } else if (a == "--quality") {
        ok = absl::SimpleAtoi(v, &quality) && quality >= 1 && quality <= 100;
      } else {
        return Usage(("unknown flag " + a).c_str());
      }
      if (!ok) return Usage(("bad value for " + a + ": " + v).c_str());
    } else if (out.empty()) {
      out = a;
    } else {
      return Usage(("unexpected argument " + a).c_str());
    }
  }
  if (out.empty()) return Usage("OUT is required");
  const char* split_names[2] = {"train", "test"};
  const char* prefixes[2] = {"train", "t10k"};
  for (int s = 0; s < 2; ++s) {
    auto ds = yoke::data::ReadIdx(absl::StrCat(dir, "/", prefixes[s], "-images-idx3-ubyte.gz"),
                                  absl::StrCat(dir, "/", prefixes[s], "-labels-idx1-ubyte.gz"));
    if (!ds.ok()) {
      std::fprintf(stderr, "yoke-make-image-folder: %s\n",
                   std::string(ds.status().message()).c_str());
      return 2;
    }
    std::unique_ptr<yoke::data::Dataset> d = std::move(*ds);
    if (limit[s] > 0) d = yoke::data::TakeFirst(std::move(d), limit[s]);
    for (const char* fmt : {"png", "jpeg"}) {
      if (formats.find(fmt) == std::string::npos) continue;
      yoke::data::ImageFolderWriteOptions o;
      o.jpeg = std::string(fmt) == "jpeg";
      o.quality = quality;
      o.class_names = yoke::data::FashionMnistClassNames();
      const std::string root = absl::StrCat(out, "/", fmt, "/", split_names[s]);
      absl::Status st = yoke::data::WriteImageFolder(*d, root, o);
      if (!st.ok()) {
        std::fprintf(stderr, "yoke-make-image-folder: %s\n", std::string(st.message()).c_str());
        return 1;
      }
      std::printf("%s: %lld images\n", root.c_str(), static_cast<long long>(d->size()));
    }
  }
  return 0;
}
