#include "data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "common/rng.h"
#include "common/status.h"
#include "data/image_decode.h"
#include "data/listing/image_folder_list.h"
#include "spdlog/spdlog.h"

namespace yoke::data {

namespace fs = std::filesystem;

namespace {

// Keeps the split's shuffle and the crops apart from the other streams.
constexpr uint64_t kSplitKey = 0x53504C4954494D47ull;  // "SPLITIMG"
constexpr uint64_t kCropKey = 0x43524F50494D4731ull;   // "CROPIMG1"
// The resize filter's version, part of the cache key: bump it when
// ResizeImage's output changes, so old cache files are rebuilt.
constexpr int kResizeVersion = 1;
// A single image file above this is refused rather than read.
constexpr uint64_t kMaxImageFileBytes = uint64_t{1} << 30;

// The option checks Open() makes before touching the disk: INVALID_ARGUMENT
// naming the option.
absl::Status ValidateOptions(const ImageFolderOptions& o) {
  if (o.height <= 0 || o.width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image_size: must be two sizes > 0, got ", o.height, "x", o.width));
  }
  if (o.channels != 1 && o.channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat("channels: must be 1 or 3, got ", o.channels));
  }
  if (o.crop != CropMode::kNone && (o.crop_height <= 0 || o.crop_width <= 0 ||
                                    o.crop_height > o.height || o.crop_width > o.width)) {
    return absl::InvalidArgumentError(absl::StrCat("crop_size: must lie in (0, image_size], got ",
                                                   o.crop_height, "x", o.crop_width, " for ",
                                                   o.height, "x", o.width));
  }
  if (!(o.validation_split >= 0 && o.validation_split < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation_split: must be in [0, 1), got ", o.validation_split));
  }
  if (o.cache && !o.cache_file.empty()) {
    return absl::InvalidArgumentError("cache and cache_file: set one of them, not both");
  }
  if ((o.validation_split > 0) != !o.subset.empty() ||
      (!o.subset.empty() && o.subset != "training" && o.subset != "validation")) {
    return absl::InvalidArgumentError(
        "subset: 'training' or 'validation' goes with validation_split > 0, and only then");
  }
  return absl::OkStatus();
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const ImageFolderOptions& o) : o_(o) {}
ImageFolderDataset::~ImageFolderDataset() = default;

absl::StatusOr<std::unique_ptr<ImageFolderDataset>> ImageFolderDataset::Open(
    const ImageFolderOptions& o) {
  RETURN_IF_ERROR(ValidateOptions(o));
  std::unique_ptr<ImageFolderDataset> d(new ImageFolderDataset(o));
  RETURN_IF_ERROR(d->ListFiles());
  RETURN_IF_ERROR(d->SplitSubset());
  d->AllocateState();
  RETURN_IF_ERROR(d->OpenCacheFile());
  return d;
}

absl::Status ImageFolderDataset::ListFiles() {
  // The listing rules (and their errors) are common/'s, shared with
  // `yoke validate --data` and the coordinator's submit check.
  ASSIGN_OR_RETURN(common::ImageFolderClasses classes, common::ListImageFolderClasses(o_.root));
  const std::string& root = classes.root;
  classes_ = classes.names;
  for (size_t c = 0; c < classes_.size(); ++c) {
    ASSIGN_OR_RETURN(std::vector<common::ListedImage> listed,
                     common::ListImageFolderClass(classes, classes_[c]));
    for (const common::ListedImage& l : listed) {
      std::error_code lec;
      if (o_.skip_bad && !fs::exists(l.path, lec)) {  // a dangling symlink
        spdlog::warn("skipping a bad image ({} skipped so far): {}: cannot resolve", ++skipped_,
                     l.path.string());
        continue;
      }
      ASSIGN_OR_RETURN(std::string real, common::ResolveInside(l.path, root));
      files_.push_back(std::move(real));
      labels_.push_back(static_cast<int32_t>(c));
    }
    if (labels_.empty() || labels_.back() != static_cast<int32_t>(c)) {
      return absl::InvalidArgumentError(absl::StrCat((fs::path(root) / classes_[c]).string(),
                                                     ": class folder '", classes_[c],
                                                     "' holds no readable image"));
    }
  }
  return absl::OkStatus();
}

absl::Status ImageFolderDataset::SplitSubset() {
  if (!(o_.validation_split > 0)) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(files_.size());
  // Fisher-Yates with the seed, then the last floor(split * n) are held out.
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  common::Philox rng(o_.seed ^ kSplitKey, 0);
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng.Uniform(static_cast<uint64_t>(i + 1))]);
  }
  const int64_t num_val = static_cast<int64_t>(o_.validation_split * n);
  if (num_val == 0 || num_val == n) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation_split: ", o_.validation_split, " of ", n, " images leaves ",
                     num_val == 0 ? "no validation image" : "no training image"));
  }
  const bool val = o_.subset == "validation";
  std::vector<std::string> files;
  std::vector<int32_t> labels;
  for (int64_t k = val ? n - num_val : 0; k < (val ? n : n - num_val); ++k) {
    files.push_back(files_[order[k]]);
    labels.push_back(labels_[order[k]]);
  }
  files_ = std::move(files);
  labels_ = std::move(labels);
  return absl::OkStatus();
}

void ImageFolderDataset::AllocateState() {
  const bool crop = o_.crop != CropMode::kNone;
  shape_ = {crop ? o_.crop_height : o_.height, crop ? o_.crop_width : o_.width, o_.channels};
  image_bytes_ = static_cast<size_t>(o_.height * o_.width * o_.channels);
  const size_t n = files_.size();
  bad_.reset(new std::atomic<bool>[n]);
  for (size_t i = 0; i < n; ++i) bad_[i].store(false);
  if (o_.cache) {
    cache_state_.reset(new std::atomic<uint8_t>[n]);
    for (size_t i = 0; i < n; ++i) cache_state_[i].store(0);
    cache_.reset(new uint8_t[n * image_bytes_]);
  }
}

absl::Status ImageFolderDataset::OpenCacheFile() {
  if (o_.cache_file.empty()) return absl::OkStatus();
  const size_t n = files_.size();
  // The key: everything the cached bytes depend on. The files are listed
  // in example order with their size and mtime, so an edited, replaced,
  // added or removed image, or another split, changes it.
  // Hashed entry by entry: a million files need no 100 MB string.
  CacheKeyHasher key;
  key.Add(absl::StrCat("yoke image cache\n", o_.height, "x", o_.width, "x", o_.channels, " resize ",
                       kResizeVersion, "\n", n, "\n"));
  for (const std::string& f : files_) {
    struct stat st;
    key.Add(f);
    key.Add(absl::string_view("\0", 1));
    key.Add(::stat(f.c_str(), &st) != 0
                ? std::string("unreadable\n")
                : absl::StrCat(st.st_size, " ", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "\n"));
  }
  absl::StatusOr<std::unique_ptr<ImageCacheFile>> cf = ImageCacheFile::Open(
      o_.cache_file, key.key(), static_cast<int64_t>(n), static_cast<int64_t>(image_bytes_));
  if (!cf.ok()) return common::Annotate(cf.status(), "cache_file");
  cache_file_ = *std::move(cf);
  return absl::OkStatus();
}

absl::Status ImageFolderDataset::DecodeResized(int64_t i, uint8_t* out) const {
  const std::string& path = files_[i];
  decoded_.fetch_add(1, std::memory_order_relaxed);
  ASSIGN_OR_RETURN(std::string bytes, common::ReadRegularFile(path, kMaxImageFileBytes, "image"));
  absl::StatusOr<Image> img = DecodeImage(bytes.data(), bytes.size(), o_.channels);
  if (!img.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", img.status().message()));
  }
  ResizeImage(img->pixels.data(), img->height, img->width, o_.channels, out, o_.height, o_.width);
  return absl::OkStatus();
}

absl::StatusOr<const void*> ImageFolderDataset::Load(int64_t i, int64_t epoch, bool train,
                                                     void* scratch) const {
  if (bad_[i].load(std::memory_order_relaxed)) return nullptr;  // skipped before
  const bool crop = o_.crop != CropMode::kNone;
  thread_local std::vector<uint8_t> resized_buf;
  uint8_t* target = static_cast<uint8_t*>(scratch);
  if (crop) {
    resized_buf.resize(image_bytes_);
    target = resized_buf.data();
  }
  const uint8_t* resized = target;
  bool filled = false;
  bool mine = false;  // this call fills the cache slot
  if (cache_ != nullptr) {
    uint8_t* slot = cache_.get() + static_cast<size_t>(i) * image_bytes_;
    uint8_t state = cache_state_[i].load(std::memory_order_acquire);
    if (state == 2) {
      resized = slot;
      filled = true;
    } else if (state == 0 && cache_state_[i].compare_exchange_strong(state, 1)) {
      mine = true;
      target = slot;
      resized = slot;
    }
  }
  if (cache_file_ != nullptr && cache_file_->Read(i, target)) filled = true;
  if (!filled) {
    absl::Status s = DecodeResized(i, target);
    if (mine) cache_state_[i].store(s.ok() ? 2 : 0, std::memory_order_release);
    if (s.ok() && cache_file_ != nullptr) cache_file_->Write(i, target);
    if (!s.ok()) {
      if (!o_.skip_bad) return s;
      if (!bad_[i].exchange(true)) {
        const int64_t count = ++skipped_;
        spdlog::warn("skipping a bad image ({} skipped so far): {}", count,
                     std::string(s.message()));
      }
      return nullptr;
    }
  }
  if (!crop) return static_cast<const void*>(resized);

  int64_t y0 = (o_.height - o_.crop_height) / 2, x0 = (o_.width - o_.crop_width) / 2;
  if (o_.crop == CropMode::kRandom && train) {
    common::Philox rng(o_.seed ^ kCropKey, static_cast<uint64_t>(epoch));
    rng.Seek(static_cast<uint64_t>(i));  // one 4-word block per example
    y0 = static_cast<int64_t>(rng.Next() % static_cast<uint32_t>(o_.height - o_.crop_height + 1));
    x0 = static_cast<int64_t>(rng.Next() % static_cast<uint32_t>(o_.width - o_.crop_width + 1));
  }
  const int64_t c = o_.channels;
  const size_t row = static_cast<size_t>(o_.crop_width * c);
  auto* dst = static_cast<uint8_t*>(scratch);
  for (int64_t y = 0; y < o_.crop_height; ++y) {
    std::memcpy(dst + y * row, resized + ((y0 + y) * o_.width + x0) * c, row);
  }
  return static_cast<const void*>(scratch);
}

const void* ImageFolderDataset::Example(int64_t i, void* scratch) const {
  absl::StatusOr<const void*> p = Load(i, 0, false, scratch);
  if (p.ok() && *p != nullptr) return *p;
  std::memset(scratch, 0, example_bytes());
  return scratch;
}

}  // namespace yoke::data
