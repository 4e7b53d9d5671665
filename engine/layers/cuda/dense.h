// dense on CUDA: y = x W + b through cuBLASLt (kernels/cuda/matmul.h), fp32.
//
// x: (N, D) -> y: (N, U), parameters as the CPU layer (engine/layers/dense.h):
// kernel W (D, U), bias b (U) unless no_bias. The three products run as
// column-major cuBLASLt matmuls on the row-major buffers; the bias and its
// gradient are the deterministic kernels of kernels/cuda/bias.h.
//
// One LtGemm per product and batch size, created on first use (an epoch sees
// at most two batch sizes; the cache keeps the last four).
//
// Thread-safety: as Layer.
#ifndef YOKE_ENGINE_LAYERS_CUDA_DENSE_H_
#define YOKE_ENGINE_LAYERS_CUDA_DENSE_H_

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/kernels/cuda/matmul.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {

class CudaDenseLayer final : public CudaLayer {
 public:
  CudaDenseLayer(std::unique_ptr<Layer> twin, const v1::LayerSpec& spec)
      : CudaLayer(std::move(twin), spec) {}

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;

 private:
  bool has_bias() const { return num_params() > 1; }
  // The cached matmul of product p at batch n.
  absl::StatusOr<LtGemm*> Gemm(DenseProduct p, int64_t n, bool tf32);

  std::map<std::tuple<int, int64_t, bool>, std::unique_ptr<LtGemm>> gemms_;  // (product, n, tf32)
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_LAYERS_CUDA_DENSE_H_
