// Dataset: random access to labelled examples, the interface every reader
// implements.
//
// An example is `example_numel()` values laid out row-major in
// `example_shape()`: (H, W, C) for images (channels-last, like activations),
// (D) for feature vectors. Values are stored as they come from the source
// (bytes 0..255 for IDX/CIFAR, floats for CSV), untransformed; the pipeline
// converts and normalises them while it assembles a batch, so an image dataset
// costs one byte per pixel in memory (Fashion-MNIST train: 47 MB).
//
// Thread-safety: every method is const and safe to call from several threads
// at once, as long as each thread passes its own `scratch`.
#ifndef YOKE_DATA_DATASET_H_
#define YOKE_DATA_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::data {

// How a dataset stores one value of an example.
enum class ElementType { kU8, kF32 };

inline size_t ElementSize(ElementType t) { return t == ElementType::kU8 ? 1 : 4; }

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of examples; always > 0 for a dataset a reader returned.
  virtual int64_t size() const = 0;
  // Shape of one example, e.g. (28, 28, 1); every dimension > 0.
  virtual const std::vector<int64_t>& example_shape() const = 0;
  // Labels lie in [0, num_classes()).
  virtual int num_classes() const = 0;
  virtual ElementType element_type() const = 0;

  // Requires 0 <= i < size(). Returns a pointer to example i's values (of
  // element_type()). In-memory datasets return a pointer into their storage
  // and ignore `scratch`; datasets that generate examples on the fly write
  // into `scratch` (caller-owned, at least example_bytes() long) and return
  // it. The pointer stays valid until `scratch` is reused or the dataset dies.
  virtual const void* Example(int64_t i, void* scratch) const = 0;
  // Requires 0 <= i < size().
  virtual int32_t Label(int64_t i) const = 0;

  // How the pipeline reads example i (requires 0 <= i < size()): like
  // Example(), but a dataset that decodes files as it goes may fail
  // (INVALID_ARGUMENT naming the file) or return nullptr for an example it
  // skips (a bad image under on_bad_image: skip). `epoch` and `train` choose
  // per-epoch random crops. The default returns Example(i, scratch).
  virtual absl::StatusOr<const void*> Load(int64_t i, int64_t epoch, bool train,
                                           void* scratch) const {
    return Example(i, scratch);
  }
  // True when Load() decodes files: the pipeline then spreads each batch
  // over its decode threads.
  virtual bool decodes() const { return false; }
  // True when Load() may skip an example (return nullptr), so that a batch's
  // size is known only by reading it.
  virtual bool may_skip() const { return false; }
  // The class names in label order, for formats that have them (an image
  // folder's class folders); empty otherwise.
  virtual std::vector<std::string> class_names() const { return {}; }

  int64_t example_numel() const;
  size_t example_bytes() const {
    return static_cast<size_t>(example_numel()) * ElementSize(element_type());
  }
  // Example i converted to float, untransformed (bytes become 0..255); `out`
  // holds example_numel() floats. For tests and tools, not the hot path.
  void ExampleAsFloat(int64_t i, float* out) const;
};

// A dataset held in memory: `values` holds size * numel(shape) elements of T,
// example after example. Built by the IDX, CIFAR and CSV readers.
template <typename T>
class InMemoryDataset final : public Dataset {
 public:
  // Requires values.size() == labels.size() * numel(shape) and every label
  // in [0, num_classes); readers check this before constructing.
  InMemoryDataset(std::vector<int64_t> shape, int num_classes, std::vector<T> values,
                  std::vector<int32_t> labels);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  const std::vector<int64_t>& example_shape() const override { return shape_; }
  int num_classes() const override { return num_classes_; }
  ElementType element_type() const override;
  const void* Example(int64_t i, void* scratch) const override {
    return values_.data() + i * numel_;
  }
  int32_t Label(int64_t i) const override { return labels_[i]; }

 private:
  std::vector<int64_t> shape_;
  int64_t numel_;
  int num_classes_;
  std::vector<T> values_;
  std::vector<int32_t> labels_;
};

using ByteDataset = InMemoryDataset<uint8_t>;
using FloatDataset = InMemoryDataset<float>;

// The first `n` examples of `base` (requires 0 < n <= base->size()). Used for
// DatasetSpec.num_examples; num_classes() stays the base's so a capped train
// set and its test set agree on the label space.
std::unique_ptr<Dataset> TakeFirst(std::unique_ptr<Dataset> base, int64_t n);

// "(28, 28, 1)".
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace yoke::data

#endif  // YOKE_DATA_DATASET_H_
