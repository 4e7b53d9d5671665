// batch_norm on CUDA: the CPU layer's semantics (engine/layers/batch_norm.h)
// on device tensors, through the functors of
// engine/kernels/cuda/math/batch_norm.h (deterministic two-level
// per-channel reductions in double).
//
// x: (N, ..., C) -> y: (N, ..., C). Training normalises with the batch's
// mean and biased variance, moves the running statistics (the layer's
// state, CudaLayer::state(0) mean and (1) variance) with the unbiased one,
// and keeps mean and invstd on the device for Backward; eval uses the
// running statistics. Backward overwrites dgamma, dbeta and dx (when
// din[0] is set). Synchronized batch norm (LayerContext::sync_stats) is
// refused with FAILED_PRECONDITION: it needs the GPU reducer.
//
// Scratch: a (6 C) f32 device tensor of per-channel values, allocated on
// the first Forward and kept; the per-chunk partial sums live in the
// device context's workspace.
//
// Thread-safety: as Layer.
#ifndef YOKE_ENGINE_LAYERS_CUDA_BATCH_NORM_H_
#define YOKE_ENGINE_LAYERS_CUDA_BATCH_NORM_H_

#include <memory>
#include <vector>

#include "engine/kernels/cuda/math/batch_norm.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {

class CudaBatchNormLayer final : public CudaLayer {
 public:
  CudaBatchNormLayer(std::unique_ptr<Layer> twin, const v1::LayerSpec& spec);
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;

 private:
  // The buffers for `x`'s row count (allocating the per-channel tensor on
  // first use) and the device context.
  absl::StatusOr<BnBuffers> Buffers(const Tensor& x, DeviceContext** ctx);
  BnParams Params() const;

  float momentum_, epsilon_;
  Tensor channel_values_;  // (kBnChannelFloats * C) f32 on the device
  // Rows of the last training Forward, whose statistics Backward uses; -1: none.
  int64_t trained_rows_ = -1;
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_LAYERS_CUDA_BATCH_NORM_H_
