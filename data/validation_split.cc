#include "data/validation_split.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rng.h"

namespace yoke::data {
namespace {

// Keeps the split's Philox stream apart from the sampler's shuffles and the
// other users of training.seed.
constexpr uint64_t kValidationKey = 0x76616c6964617465ULL;  // "validate"

class IndexSubset final : public Dataset {
 public:
  IndexSubset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {}
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  const std::vector<int64_t>& example_shape() const override { return base_->example_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  ElementType element_type() const override { return base_->element_type(); }
  const void* Example(int64_t i, void* scratch) const override {
    return base_->Example(indices_[i], scratch);
  }
  int32_t Label(int64_t i) const override { return base_->Label(indices_[i]); }
  absl::StatusOr<const void*> Load(int64_t i, int64_t epoch, bool train,
                                   void* scratch) const override {
    return base_->Load(indices_[i], epoch, train, scratch);
  }
  bool decodes() const override { return base_->decodes(); }
  bool may_skip() const override { return base_->may_skip(); }
  std::vector<std::string> class_names() const override { return base_->class_names(); }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

}  // namespace

absl::StatusOr<SplitIndices> SplitForValidation(int64_t size, double fraction, uint64_t seed) {
  if (!(fraction > 0.0 && fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.validation_split: must be in (0, 1) to split, got ", fraction));
  }
  const auto held = static_cast<int64_t>(std::floor(fraction * static_cast<double>(size)));
  if (held < 1 || held >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.validation_split: ", fraction, " of the ", size, " training examples holds out ",
        held, ", leaving ", held < 1 ? "no validation" : "no training", " examples; use a ",
        held < 1 ? "larger" : "smaller", " fraction or more data"));
  }
  std::vector<int64_t> p(size);
  std::iota(p.begin(), p.end(), int64_t{0});
  common::Philox rng(seed ^ kValidationKey, 0);
  for (int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  SplitIndices s;
  s.validation.assign(p.begin(), p.begin() + held);
  s.train.assign(p.begin() + held, p.end());
  std::sort(s.validation.begin(), s.validation.end());
  std::sort(s.train.begin(), s.train.end());
  return s;
}

std::unique_ptr<Dataset> Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices) {
  return std::make_unique<IndexSubset>(std::move(base), std::move(indices));
}

}  // namespace yoke::data
