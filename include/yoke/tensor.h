// yoke::Tensor: a dense float array with a shape, as the public API passes
// logits and gradients around. A plain value (copies copy the values).
//
// A Tensor that Model::Forward returned also remembers which model and
// which forward pass produced it, so that a loss computed from it can
// backpropagate through that model (Loss::Backward); a Tensor you build
// yourself has no such origin.
//
// Thread-safety: as a std::vector.
#ifndef YOKE_TENSOR_H_
#define YOKE_TENSOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke {

class Tensor {
 public:
  Tensor() = default;
  // INVALID_ARGUMENT unless every dimension is >= 0 and values.size() is
  // their product.
  static absl::StatusOr<Tensor> Create(std::vector<int64_t> shape, std::vector<float> values);

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return static_cast<int64_t>(values_.size()); }
  const std::vector<float>& values() const { return values_; }
  std::vector<float>& mutable_values() { return values_; }
  // Row-major element (i, j) of a 2-D tensor; requires rank 2 and in range.
  float at(int64_t i, int64_t j) const { return values_[i * shape_[1] + j]; }

  // The library's internals (which forward pass produced it); not part of
  // the API.
  struct Origin;
  const std::shared_ptr<const Origin>& origin() const { return origin_; }
  void set_origin(std::shared_ptr<const Origin> origin) { origin_ = std::move(origin); }

 private:
  std::vector<int64_t> shape_;
  std::vector<float> values_;
  std::shared_ptr<const Origin> origin_;
};

}  // namespace yoke

#endif  // YOKE_TENSOR_H_
