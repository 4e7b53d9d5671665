#include "data/image_folder_writer.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "data/image_decode.h"

namespace yoke::data {

namespace {

int Digits(int64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::remove(path.c_str());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat(path, ": cannot create"));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteImageFolder(const Dataset& ds, const std::string& root,
                              const ImageFolderWriteOptions& o) {
  const std::vector<int64_t>& shape = ds.example_shape();
  if (ds.element_type() != ElementType::kU8 || shape.size() != 3 ||
      (shape[2] != 1 && shape[2] != 3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteImageFolder: needs byte images of shape (H, W, 1 or 3), got ", ShapeToString(shape)));
  }
  const int label_width = Digits(ds.num_classes() - 1);
  const int index_width = Digits(ds.size() - 1);
  std::vector<std::string> dirs(ds.num_classes());
  for (int c = 0; c < ds.num_classes(); ++c) {
    dirs[c] = absl::StrFormat("%s/%0*d", root, label_width, c);
    if (c < static_cast<int>(o.class_names.size()) && !o.class_names[c].empty()) {
      absl::StrAppend(&dirs[c], "_", o.class_names[c]);
    }
    std::error_code ec;
    std::filesystem::create_directories(dirs[c], ec);
    if (ec) return absl::InternalError(absl::StrCat(dirs[c], ": ", ec.message()));
  }
  Image img;
  img.height = shape[0];
  img.width = shape[1];
  img.channels = static_cast<int>(shape[2]);
  img.pixels.resize(ds.example_bytes());
  const char* ext = o.jpeg ? "jpg" : "png";
  for (int64_t i = 0; i < ds.size(); ++i) {
    const void* p = ds.Example(i, img.pixels.data());
    if (p != img.pixels.data()) {
      const auto* b = static_cast<const uint8_t*>(p);
      img.pixels.assign(b, b + ds.example_bytes());
    }
    absl::StatusOr<std::string> bytes = o.jpeg ? EncodeJpeg(img, o.quality) : EncodePng(img);
    if (!bytes.ok()) return bytes.status();
    RETURN_IF_ERROR(
        WriteFile(absl::StrFormat("%s/%0*d.%s", dirs[ds.Label(i)], index_width, i, ext), *bytes));
  }
  return absl::OkStatus();
}

const std::vector<std::string>& FashionMnistClassNames() {
  static const auto* names =
      new std::vector<std::string>{"t-shirt_top", "trouser", "pullover", "dress", "coat",
                                   "sandal",      "shirt",   "sneaker",  "bag",   "ankle_boot"};
  return *names;
}

}  // namespace yoke::data
