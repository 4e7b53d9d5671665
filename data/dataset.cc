#include "data/dataset.h"

#include <utility>

#include "absl/strings/str_join.h"

namespace yoke::data {

namespace {

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Forwards to the base for i < n. Cheap enough to stay virtual: the pipeline
// calls it once per example, not once per value.
class FirstN final : public Dataset {
 public:
  FirstN(std::unique_ptr<Dataset> base, int64_t n) : base_(std::move(base)), n_(n) {}
  int64_t size() const override { return n_; }
  const std::vector<int64_t>& example_shape() const override { return base_->example_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  ElementType element_type() const override { return base_->element_type(); }
  const void* Example(int64_t i, void* scratch) const override {
    return base_->Example(i, scratch);
  }
  int32_t Label(int64_t i) const override { return base_->Label(i); }
  absl::StatusOr<const void*> Load(int64_t i, int64_t epoch, bool train,
                                   void* scratch) const override {
    return base_->Load(i, epoch, train, scratch);
  }
  bool decodes() const override { return base_->decodes(); }
  bool may_skip() const override { return base_->may_skip(); }
  std::vector<std::string> class_names() const override { return base_->class_names(); }

 private:
  std::unique_ptr<Dataset> base_;
  int64_t n_;
};

}  // namespace

int64_t Dataset::example_numel() const { return NumElements(example_shape()); }

void Dataset::ExampleAsFloat(int64_t i, float* out) const {
  const int64_t n = example_numel();
  std::vector<unsigned char> scratch(example_bytes());
  const void* p = Example(i, scratch.data());
  if (element_type() == ElementType::kU8) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (int64_t j = 0; j < n; ++j) out[j] = b[j];
  } else {
    const auto* f = static_cast<const float*>(p);
    for (int64_t j = 0; j < n; ++j) out[j] = f[j];
  }
}

template <typename T>
InMemoryDataset<T>::InMemoryDataset(std::vector<int64_t> shape, int num_classes,
                                    std::vector<T> values, std::vector<int32_t> labels)
    : shape_(std::move(shape)),
      numel_(NumElements(shape_)),
      num_classes_(num_classes),
      values_(std::move(values)),
      labels_(std::move(labels)) {}

template <>
ElementType InMemoryDataset<uint8_t>::element_type() const {
  return ElementType::kU8;
}
template <>
ElementType InMemoryDataset<float>::element_type() const {
  return ElementType::kF32;
}

template class InMemoryDataset<uint8_t>;
template class InMemoryDataset<float>;

std::unique_ptr<Dataset> TakeFirst(std::unique_ptr<Dataset> base, int64_t n) {
  if (n >= base->size()) return base;
  return std::make_unique<FirstN>(std::move(base), n);
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return "(" + absl::StrJoin(shape, ", ") + ")";
}

}  // namespace yoke::data
