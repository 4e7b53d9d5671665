// Input-pipeline benchmark: how fast data::Pipeline turns the Fashion-MNIST
// training set into normalised float batches (gather, /255, mean/std, queue),
// with nothing else running, so the trainer's step time can be compared
// against it.
//
//   pipeline_bench [--dir /usr/share/datasets/fashion-mnist] [--batch_size 64]
//                  [--epochs 3] [--prefetch 2]
//   pipeline_bench --image_folder ROOT --image_size N [--channels 1]
//                  [--cache none|memory|file --cache_file PATH] [...]
//
// With --image_folder, an image_folder dataset (JPEG/PNG decoded and resized
// to N x N in the pipeline's decode pool) is read instead, and every epoch is
// timed on its own, so the first epoch (decoding, or reading a cache file a
// previous run left) and the later ones (served by the cache) show apart;
// each line says how many images that epoch decoded. The one-epoch check
// runs after the timing, so it cannot warm a cache for it.
//
// Before timing, one epoch is checked: it has ceil(N / batch) batches, visits
// every example exactly once, each batch's labels are the dataset's labels
// of its indices (all in [0, classes)), and every value is finite and within
// the normalised range of a byte. A failed check exits 1 without timing.
// Then --epochs epochs are timed (one pipeline, consumer recycling buffers)
// and samples/s and batches/s are printed. Exits 2 if the data is missing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/idx_reader.h"
#include "data/image_folder.h"
#include "data/pipeline.h"

ABSL_FLAG(std::string, dir, "/usr/share/datasets/fashion-mnist",
          "directory holding train-{images-idx3,labels-idx1}-ubyte.gz");
ABSL_FLAG(int64_t, batch_size, 64, "global batch size");
ABSL_FLAG(int64_t, epochs, 3, "epochs to time");
ABSL_FLAG(int, prefetch, 2, "PipelineOptions::prefetch");
ABSL_FLAG(std::string, image_folder, "", "read this image_folder root instead of the IDX files");
ABSL_FLAG(int64_t, image_size, 0, "image_folder: resize every image to N x N");
ABSL_FLAG(int, channels, 1, "image_folder: 1 or 3");
ABSL_FLAG(std::string, cache, "none", "image_folder: none, memory or file");
ABSL_FLAG(std::string, cache_file, "", "image_folder: the cache file, with --cache file");

namespace yoke::data {
namespace {

// The normalisation the Fashion-MNIST examples would use (train-set mean and
// standard deviation of pixels / 255).
constexpr float kMean = 0.2860f, kStd = 0.3530f;

v1::TransformSpec Normalise() {
  v1::TransformSpec t;
  t.set_divisor(255);
  t.add_mean(kMean);
  t.add_std(kStd);
  return t;
}

absl::StatusOr<std::unique_ptr<Pipeline>> Open(const std::shared_ptr<const Dataset>& ds,
                                               int64_t epochs) {
  SamplerOptions so;
  so.batch_size = absl::GetFlag(FLAGS_batch_size);
  so.seed = 1;
  PipelineOptions po;
  po.prefetch = absl::GetFlag(FLAGS_prefetch);
  po.end_epoch = epochs;
  return Pipeline::Create(ds, so, Normalise(), /*train=*/true, po);
}

// One epoch, checked batch by batch; INTERNAL naming the first violation.
absl::Status CheckOneEpoch(const std::shared_ptr<const Dataset>& ds) {
  auto p = Open(ds, 1);
  if (!p.ok()) return p.status();
  const int64_t batch = absl::GetFlag(FLAGS_batch_size);
  const int64_t want_batches = (ds->size() + batch - 1) / batch;
  const float lo = (0.0f - kMean) / kStd - 1e-5f, hi = (1.0f - kMean) / kStd + 1e-5f;
  std::vector<int> seen(ds->size(), 0);
  int64_t batches = 0;
  for (;;) {
    auto b = (*p)->Next();
    if (!b.ok()) return b.status();
    if (!b->has_value()) break;
    const Batch& x = **b;
    ++batches;
    if (static_cast<int64_t>(x.y.size()) != x.n || static_cast<int64_t>(x.indices.size()) != x.n ||
        static_cast<int64_t>(x.x.size()) != x.n * ds->example_numel()) {
      return absl::InternalError(
          absl::StrCat("batch ", x.step, ": buffers do not hold ", x.n, " examples"));
    }
    for (int64_t i = 0; i < x.n; ++i) {
      const int64_t idx = x.indices[i];
      if (idx < 0 || idx >= ds->size()) {
        return absl::InternalError(
            absl::StrCat("batch ", x.step, ": index ", idx, " out of range"));
      }
      ++seen[idx];
      if (x.y[i] < 0 || x.y[i] >= ds->num_classes() || x.y[i] != ds->Label(idx)) {
        return absl::InternalError(absl::StrCat("batch ", x.step, ": label ", x.y[i],
                                                " for example ", idx, " (dataset says ",
                                                ds->Label(idx), ")"));
      }
    }
    for (float v : x.x) {
      if (!std::isfinite(v) || v < lo || v > hi) {
        return absl::InternalError(
            absl::StrCat("batch ", x.step, ": value ", v, " outside [", lo, ", ", hi, "]"));
      }
    }
    (*p)->Recycle(std::move(**b));
  }
  if (batches != want_batches) {
    return absl::InternalError(absl::StrCat(batches, " batches, want ", want_batches));
  }
  const auto [mn, mx] = std::minmax_element(seen.begin(), seen.end());
  if (*mn != 1 || *mx != 1) {
    return absl::InternalError(
        absl::StrCat("examples visited between ", *mn, " and ", *mx, " times, want once each"));
  }
  return absl::OkStatus();
}

int RunImageFolder() {
  ImageFolderOptions o;
  o.root = absl::GetFlag(FLAGS_image_folder);
  o.height = o.width = absl::GetFlag(FLAGS_image_size);
  o.channels = absl::GetFlag(FLAGS_channels);
  const std::string cache = absl::GetFlag(FLAGS_cache);
  if (cache == "memory") {
    o.cache = true;
  } else if (cache == "file") {
    o.cache_file = absl::GetFlag(FLAGS_cache_file);
    if (o.cache_file.empty()) {
      std::fprintf(stderr, "pipeline_bench: --cache file needs --cache_file PATH\n");
      return 2;
    }
  } else if (cache != "none") {
    std::fprintf(stderr, "pipeline_bench: --cache must be none, memory or file\n");
    return 2;
  }
  const auto t_open = std::chrono::steady_clock::now();
  auto opened = ImageFolderDataset::Open(o);
  if (!opened.ok()) {
    std::fprintf(stderr, "pipeline_bench: %s\n", opened.status().ToString().c_str());
    return 2;
  }
  const double open_secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  const ImageFolderDataset* folder = opened->get();
  std::shared_ptr<const Dataset> ds = *std::move(opened);
  std::printf("%s: %lld images, %dx%lldx%lld, cache %s%s; open %.3f s\n", o.root.c_str(),
              static_cast<long long>(ds->size()), o.channels, static_cast<long long>(o.height),
              static_cast<long long>(o.width), cache.c_str(),
              folder->cache_file() == nullptr  ? ""
              : folder->cache_file()->reused() ? " (reused)"
                                               : " (new)",
              open_secs);
  for (int64_t e = 0; e < absl::GetFlag(FLAGS_epochs); ++e) {
    SamplerOptions so;
    so.batch_size = absl::GetFlag(FLAGS_batch_size);
    so.seed = 1;
    PipelineOptions po;
    po.prefetch = absl::GetFlag(FLAGS_prefetch);
    po.start_epoch = e;
    po.end_epoch = e + 1;
    // Counted and timed from before Create: the pipeline starts at once.
    const int64_t decoded_before = folder->decoded();
    const auto t0 = std::chrono::steady_clock::now();
    auto p = Pipeline::Create(ds, so, Normalise(), /*train=*/true, po);
    if (!p.ok()) {
      std::fprintf(stderr, "pipeline_bench: %s\n", p.status().ToString().c_str());
      return 1;
    }
    int64_t examples = 0;
    for (;;) {
      auto b = (*p)->Next();
      if (!b.ok()) {
        std::fprintf(stderr, "pipeline_bench: %s\n", b.status().ToString().c_str());
        return 1;
      }
      if (!b->has_value()) break;
      examples += (*b)->n;
      (*p)->Recycle(std::move(**b));
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %lld: %lld examples in %.3f s = %.0f samples/s, %lld decoded\n",
                static_cast<long long>(e + 1), static_cast<long long>(examples), secs,
                examples / secs, static_cast<long long>(folder->decoded() - decoded_before));
  }
  if (absl::Status s = CheckOneEpoch(ds); !s.ok()) {
    std::fprintf(stderr, "pipeline_bench: check failed: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

int Run() {
  if (absl::GetFlag(FLAGS_batch_size) <= 0 || absl::GetFlag(FLAGS_epochs) <= 0) {
    std::fprintf(stderr, "pipeline_bench: --batch_size and --epochs must be > 0\n");
    return 2;
  }
  if (!absl::GetFlag(FLAGS_image_folder).empty()) return RunImageFolder();
  const std::string dir = absl::GetFlag(FLAGS_dir) + "/";
  const std::string images = dir + "train-images-idx3-ubyte.gz";
  if (!std::filesystem::exists(images)) {
    std::fprintf(stderr, "pipeline_bench: no %s (scripts/install-deps.sh installs it)\n",
                 images.c_str());
    return 2;
  }
  auto read = ReadIdx(images, dir + "train-labels-idx1-ubyte.gz");
  if (!read.ok()) {
    std::fprintf(stderr, "pipeline_bench: %s\n", read.status().ToString().c_str());
    return 2;
  }
  std::shared_ptr<const Dataset> ds = std::move(read).value();
  if (absl::Status s = CheckOneEpoch(ds); !s.ok()) {
    std::fprintf(stderr, "pipeline_bench: check failed: %s\n", s.ToString().c_str());
    return 1;
  }

  const int64_t epochs = absl::GetFlag(FLAGS_epochs);
  auto p = Open(ds, epochs);
  if (!p.ok()) {
    std::fprintf(stderr, "pipeline_bench: %s\n", p.status().ToString().c_str());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t batches = 0, examples = 0;
  for (;;) {
    auto b = (*p)->Next();
    if (!b.ok() || !b->has_value()) break;
    ++batches;
    examples += (*b)->n;
    (*p)->Recycle(std::move(**b));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (examples != epochs * ds->size()) {
    std::fprintf(stderr, "pipeline_bench: timed %lld examples, want %lld\n",
                 static_cast<long long>(examples), static_cast<long long>(epochs * ds->size()));
    return 1;
  }
  std::printf(
      "Fashion-MNIST train, batch %lld, prefetch %d: %lld epochs, %lld batches in %.3f s = "
      "%.0f samples/s (%.0f batches/s)\n",
      static_cast<long long>(absl::GetFlag(FLAGS_batch_size)), absl::GetFlag(FLAGS_prefetch),
      static_cast<long long>(epochs), static_cast<long long>(batches), secs, examples / secs,
      batches / secs);
  return 0;
}

}  // namespace
}  // namespace yoke::data

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::data::Run();
}
