#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {

absl::StatusOr<Shape> CudaLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  twin_->set_name(name());
  twin_->set_index(index());
  first_param_ = static_cast<int>(params->entries().size());
  first_state_ = static_cast<int>(params->state_entries().size());
  absl::StatusOr<Shape> out = twin_->Build(inputs, params);
  if (!out.ok()) return out.status();
  num_params_ = static_cast<int>(params->entries().size()) - first_param_;
  params_ = params;
  input_shapes_ = inputs;
  output_shape_ = *out;
  return out;
}

}  // namespace yoke::engine::cuda
