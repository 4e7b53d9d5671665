// Finite-difference gradient checks for layers (test-only).
//
// For a layer with random inputs x and random parameters, take the scalar
// L = sum(f(x) * R) for a fixed random R, so dL/dout = R. Backward's analytic
// gradients (inputs and parameters) are compared with central differences
// (L(v + h) - L(v - h)) / 2h, evaluated in double from float forwards.
#ifndef YOKE_ENGINE_TESTING_GRAD_CHECK_H_
#define YOKE_ENGINE_TESTING_GRAD_CHECK_H_

#include <memory>
#include <string>
#include <vector>

#include "engine/layer.h"

namespace yoke::engine::testing {

struct GradCheckOptions {
  float step = 1e-2f;                     // h for the central difference
  float tolerance = 2e-2f;                // on |a - n| / max(1, |a|, |n|)
  int max_checks = 200;                   // coordinates checked per tensor (sampled)
  bool training = true;                   // LayerContext::training
  CrossReplicaSum* sync_stats = nullptr;  // LayerContext::sync_stats
  uint64_t seed = 1;
  // Inputs come from U(lo, hi); keep away from kinks (relu at 0) if needed.
  float input_lo = -1.0f, input_hi = 1.0f;
};

// Builds `layer` for per-example `input_shapes`, runs Forward/Backward on a
// batch of `batch` and checks every input and parameter gradient. Reports
// mismatches as gtest failures naming the tensor and coordinate.
void CheckLayerGradients(Layer* layer, const std::vector<Shape>& input_shapes, int64_t batch,
                         const GradCheckOptions& options = {});

}  // namespace yoke::engine::testing

#endif  // YOKE_ENGINE_TESTING_GRAD_CHECK_H_
