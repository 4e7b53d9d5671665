#include "engine/testing/grad_check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/rng.h"
#include "gtest/gtest.h"

namespace yoke::engine::testing {
namespace {

void FillUniform(Tensor* t, common::Philox* rng, float lo, float hi) {
  float* p = t->data<float>();
  for (int64_t i = 0; i < t->numel(); ++i) p[i] = lo + (hi - lo) * rng->NextFloat();
}

}  // namespace

void CheckLayerGradients(Layer* layer, const std::vector<Shape>& input_shapes, int64_t batch,
                         const GradCheckOptions& o) {
  ParamSet params;
  auto out_shape_or = layer->Build(input_shapes, &params);
  ASSERT_TRUE(out_shape_or.ok()) << out_shape_or.status();
  ASSERT_TRUE(params.Finalize().ok());
  params.Initialize(o.seed);
  common::Philox rng(o.seed, 12345);
  // Parameters random too (a constant init such as bias = 0 hides errors).
  {
    Tensor v = params.flat_values();
    FillUniform(&v, &rng, -0.5f, 0.5f);
    // Keep state (running stats) sensible: leave as initialised.
  }
  std::vector<Tensor> xs;
  for (const Shape& s : input_shapes) {
    Shape full = s;
    full.insert(full.begin(), batch);
    Tensor x = Tensor::Empty(full);
    FillUniform(&x, &rng, o.input_lo, o.input_hi);
    xs.push_back(x);
  }
  Shape oshape = *out_shape_or;
  oshape.insert(oshape.begin(), batch);
  Tensor out = Tensor::Empty(oshape);
  Tensor r = Tensor::Empty(oshape);
  FillUniform(&r, &rng, -1.0f, 1.0f);

  LayerContext ctx;
  ctx.training = o.training;
  ctx.sync_stats = o.sync_stats;
  ctx.seed = o.seed;
  std::vector<const Tensor*> in;
  for (Tensor& x : xs) in.push_back(&x);

  auto loss = [&]() -> double {
    absl::Status s = layer->Forward(in, &out, ctx);
    EXPECT_TRUE(s.ok()) << s;
    double l = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      l += static_cast<double>(out.data<float>()[i]) * r.data<float>()[i];
    return l;
  };

  // Analytic gradients. State (e.g. running stats) changes on every training
  // Forward; save and restore it so numeric evaluations see the same layer.
  Tensor state0 = Tensor::Empty(params.flat_state().shape());
  state0.CopyFrom(params.flat_state());
  loss();
  std::vector<Tensor> dxs;
  std::vector<Tensor*> din;
  for (Tensor& x : xs) dxs.push_back(Tensor::Zeros(x.shape()));
  for (Tensor& d : dxs) din.push_back(&d);
  ASSERT_TRUE(layer->Backward(in, out, r, din, ctx).ok());
  Tensor analytic_params = Tensor::Empty(params.flat_grads().shape());
  analytic_params.CopyFrom(params.flat_grads());

  auto check = [&](const std::string& what, float* v, const float* analytic, int64_t n) {
    int64_t stride = std::max<int64_t>(1, n / o.max_checks);
    int failures = 0;
    for (int64_t i = 0; i < n && failures < 5; i += stride) {
      float saved = v[i];
      v[i] = saved + o.step;
      params.flat_state().CopyFrom(state0);
      double lp = loss();
      v[i] = saved - o.step;
      params.flat_state().CopyFrom(state0);
      double lm = loss();
      v[i] = saved;
      double numeric = (lp - lm) / (2.0 * o.step);
      double a = analytic[i];
      double err = std::fabs(a - numeric) / std::max({1.0, std::fabs(a), std::fabs(numeric)});
      if (err > o.tolerance) {
        ADD_FAILURE() << layer->type() << " " << what << "[" << i << "]: analytic " << a
                      << " vs numeric " << numeric;
        ++failures;
      }
    }
  };
  for (size_t j = 0; j < xs.size(); ++j) {
    check(absl::StrCat("d input ", j), xs[j].data<float>(), dxs[j].data<float>(), xs[j].numel());
  }
  for (const auto& e : params.entries()) {
    check(absl::StrCat("d ", e.name), params.flat_values().data<float>() + e.offset,
          analytic_params.data<float>() + e.offset, NumElements(e.shape));
  }
}

}  // namespace yoke::engine::testing
