#include "data/synthetic_dataset.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/names/format_names.h"

namespace yoke::data {

namespace {

// splitmix64's finaliser: a bijection on 64 bits with full avalanche, so
// consecutive counters give unrelated outputs.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Separates the label stream from the pixel streams of the same example.
constexpr uint64_t kLabelTag = 0x6C6162656C730000ull;

// An example larger than this (1 GiB of bytes) is surely a typo in `shape`.
constexpr int64_t kMaxExampleBytes = kMaxSyntheticExampleValues;

class SyntheticDataset final : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions o) : o_(std::move(o)) {
    numel_ = 1;
    for (int64_t d : o_.shape) numel_ *= d;
  }
  int64_t size() const override { return o_.num_examples; }
  const std::vector<int64_t>& example_shape() const override { return o_.shape; }
  int num_classes() const override { return o_.num_classes; }
  ElementType element_type() const override { return ElementType::kU8; }

  const void* Example(int64_t i, void* scratch) const override {
    auto* out = static_cast<uint8_t*>(scratch);
    const uint64_t key = Mix64(o_.seed + Mix64(static_cast<uint64_t>(i) * kGolden));
    // Eight bytes per hash: the generator costs less than the float
    // conversion that follows it.
    int64_t j = 0;
    uint64_t w = 0;
    for (; j + 8 <= numel_; j += 8, ++w) {
      const uint64_t h = Mix64(key + w * kGolden);
      std::memcpy(out + j, &h, 8);
    }
    if (j < numel_) {
      const uint64_t h = Mix64(key + w * kGolden);
      std::memcpy(out + j, &h, static_cast<size_t>(numel_ - j));
    }
    return out;
  }

  int32_t Label(int64_t i) const override {
    const uint64_t h = Mix64((o_.seed ^ kLabelTag) + Mix64(static_cast<uint64_t>(i)));
    return static_cast<int32_t>(h % static_cast<uint64_t>(o_.num_classes));
  }

 private:
  SyntheticOptions o_;
  int64_t numel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> MakeSynthetic(const SyntheticOptions& options) {
  if (options.shape.empty()) {
    return absl::InvalidArgumentError("shape: required for synthetic data, e.g. [28, 28, 1]");
  }
  int64_t numel = 1;
  for (int64_t d : options.shape) {
    if (d <= 0 || d > kMaxExampleBytes || numel * d > kMaxExampleBytes) {
      return absl::InvalidArgumentError(absl::StrCat("shape: ", ShapeToString(options.shape),
                                                     " must have dimensions > 0 and at most ",
                                                     kMaxExampleBytes, " values in all"));
    }
    numel *= d;
  }
  if (options.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes: must be > 0, got ", options.num_classes));
  }
  if (options.num_examples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_examples: must be > 0, got ", options.num_examples));
  }
  return std::unique_ptr<Dataset>(std::make_unique<SyntheticDataset>(options));
}

}  // namespace yoke::data
