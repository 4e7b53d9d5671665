// 2-D max and average pooling on the CPU through oneDNN, for one fixed
// geometry (batch size included).
//
// x: (N, H, W, C) -> y: (N, OH, OW, C), channels-last. Max pooling ignores
// padded positions (they never win); average pooling divides by the number of
// real (unpadded) inputs in each window. Max pooling's Forward records, in a
// workspace owned by the plan, which input won each window; Backward routes
// dy there, so Backward must follow the Forward of the same inputs.
//
// Thread-safety: a plan belongs to one layer of one replica; not thread-safe.
#ifndef YOKE_ENGINE_KERNELS_CPU_POOL_H_
#define YOKE_ENGINE_KERNELS_CPU_POOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dnnl.hpp"

namespace yoke::cpu {

struct Pool2dGeometry {
  bool max = true;                     // max, else average (excluding padding)
  int64_t n = 0, h = 0, w = 0, c = 0;  // input (N, H, W, C)
  int64_t kh = 2, kw = 2;              // window
  int64_t stride_h = 2, stride_w = 2;
  // As in Conv2dGeometry: after-padding may fall short of the last column.
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t oh = 0, ow = 0;

  std::string DebugString() const;
};

class Pool2dPlan {
 public:
  // INTERNAL when oneDNN rejects the geometry.
  static absl::StatusOr<std::unique_ptr<Pool2dPlan>> Create(const Pool2dGeometry& g);

  // x: (N, H, W, C) -> y: (N, OH, OW, C)
  absl::Status Forward(const float* x, float* y);
  // dy: (N, OH, OW, C) -> dx: (N, H, W, C), overwritten.
  absl::Status Backward(const float* dy, float* dx);

 private:
  Pool2dPlan() = default;
  void Build();

  Pool2dGeometry g_;
  dnnl::pooling_forward fwd_;
  dnnl::pooling_backward bwd_;
  dnnl::memory x_mem_, y_mem_, dx_mem_, dy_mem_, ws_mem_;
  std::unordered_map<int, dnnl::memory> fwd_args_, bwd_args_;
};

}  // namespace yoke::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_POOL_H_
