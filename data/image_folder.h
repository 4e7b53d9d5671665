// Image-folder reader: a directory of JPEG and PNG files, one folder per class.
//
//   root/<class>/**/*.{jpg,jpeg,png}     (extensions in any case)
//
// Labels follow the class folders' names sorted byte-wise, as Keras'
// image_dataset_from_directory numbers them; class_names() returns them in
// label order. Inside a class, files are ordered by (directory, name), also
// as Keras lists them; other files (.txt, .gif, hidden or not) are ignored.
// Files are told apart by their signature, so a PNG named x.jpg decodes.
//
// Opening lists the files only (nothing is decoded): an unreadable root, no
// class folder, an empty class folder, or a path that resolves (through a
// symlink) outside the root is an INVALID_ARGUMENT naming the path. Load()
// reads, decodes (image_decode.h), resizes every image to `height` x `width`
// and crops it:
//   - kNone: the example is the resized image;
//   - kCenter: the centre crop_height x crop_width window;
//   - kRandom: a window at a random offset when training (a pure function
//     of (seed, epoch, index), so resumed runs crop alike), the centre one
//     when evaluating.
// The example shape is (crop or image H, W, channels), bytes 0..255, exactly
// like an IDX image: the same pixels give the same tensors.
//
// A file that cannot be read or decoded fails Load() with its path
// (skip_bad == false), or is skipped: Load() returns nullptr, counts it
// (skipped()), and warns once per file. With `cache`, each resized image is
// kept in memory (height*width*channels bytes per image) after its first
// decode. With `cache_file`, it is kept in that file instead
// (image_cache_file.h), keyed by the file list after the split (real paths,
// sizes, mtimes), height, width, channels and the resize filter's version,
// so a change to any of them rebuilds the file. Crops are cut after the
// cache, so the crop settings are not part of the key.
//
// validation_split > 0 shuffles the file list with `seed` and holds out the
// last floor(split * n) files, as Keras does: subset "training" keeps the
// rest, "validation" the held-out part; both keep every class folder's label.
//
// Thread-safety: every method is const and safe from many threads (each
// with its own scratch).
#ifndef YOKE_DATA_IMAGE_FOLDER_H_
#define YOKE_DATA_IMAGE_FOLDER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/image_cache_file.h"

namespace yoke::data {

enum class CropMode { kNone, kCenter, kRandom };

struct ImageFolderOptions {
  std::string root;
  int64_t height = 0;  // resize target, > 0
  int64_t width = 0;
  int channels = 3;  // 1 or 3
  CropMode crop = CropMode::kNone;
  int64_t crop_height = 0;  // with a crop: 0 < crop <= resize target
  int64_t crop_width = 0;
  double validation_split = 0;  // [0, 1)
  std::string subset;           // "training" or "validation" when split > 0
  uint64_t seed = 0;            // the split's shuffle and the random crops
  bool cache = false;
  std::string cache_file;  // "" = none; not with `cache`
  bool skip_bad = false;
};

class ImageFolderDataset final : public Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<ImageFolderDataset>> Open(
      const ImageFolderOptions& options);
  ~ImageFolderDataset() override;

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  const std::vector<int64_t>& example_shape() const override { return shape_; }
  int num_classes() const override { return static_cast<int>(classes_.size()); }
  ElementType element_type() const override { return ElementType::kU8; }
  // Load(i, 0, false, scratch); a bad image reads as zeros here.
  const void* Example(int64_t i, void* scratch) const override;
  int32_t Label(int64_t i) const override { return labels_[i]; }
  absl::StatusOr<const void*> Load(int64_t i, int64_t epoch, bool train,
                                   void* scratch) const override;
  bool decodes() const override { return true; }
  bool may_skip() const override { return o_.skip_bad; }
  std::vector<std::string> class_names() const override { return classes_; }

  // The file of example i (its real path, inside the root).
  const std::string& path(int64_t i) const { return files_[i]; }
  // Bad images skipped so far (each counted once).
  int64_t skipped() const { return skipped_.load(); }
  // Images read and decoded from their files so far (cache hits are not).
  int64_t decoded() const { return decoded_.load(); }
  // The file cache, or nullptr without cache_file.
  const ImageCacheFile* cache_file() const { return cache_file_.get(); }

 private:
  explicit ImageFolderDataset(const ImageFolderOptions& o);
  // Open's steps, in this order, after the options were checked.
  // ListFiles: every class folder's images (real paths inside the root) in
  // label order, and within a class in Keras' order, into classes_, files_
  // and labels_. A dangling symlink is skipped and counted with skip_bad;
  // any other listing error, or a class left with no image, fails with
  // INVALID_ARGUMENT naming the path.
  absl::Status ListFiles();
  // With validation_split: keeps only the subset's part of files_ and
  // labels_ (see the file comment); INVALID_ARGUMENT if either part would be
  // empty. Without, nothing.
  absl::Status SplitSubset();
  // Sizes shape_, image_bytes_, bad_ and (with `cache`) the in-memory cache
  // for files_.
  void AllocateState();
  // With cache_file: opens it (image_cache_file.h), keyed by files_ (paths,
  // sizes, mtimes), the resize target, channels and the resize filter's
  // version; errors are prefixed "cache_file". Without, nothing.
  absl::Status OpenCacheFile();
  // Decodes example i, resized, into `out` (height*width*channels bytes).
  absl::Status DecodeResized(int64_t i, uint8_t* out) const;

  ImageFolderOptions o_;
  std::vector<int64_t> shape_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int32_t> labels_;
  size_t image_bytes_ = 0;  // height * width * channels
  // cache_state_[i]: 0 empty, 1 being filled, 2 filled (cache_ holds it).
  std::unique_ptr<std::atomic<uint8_t>[]> cache_state_;
  std::unique_ptr<uint8_t[]> cache_;
  std::unique_ptr<ImageCacheFile> cache_file_;
  // bad_[i] set once example i failed (warned and counted once).
  std::unique_ptr<std::atomic<bool>[]> bad_;
  mutable std::atomic<int64_t> skipped_{0};
  mutable std::atomic<int64_t> decoded_{0};
};

}  // namespace yoke::data

#endif  // YOKE_DATA_IMAGE_FOLDER_H_
