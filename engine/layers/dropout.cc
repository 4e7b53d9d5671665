#include "engine/layers/dropout.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/registry.h"
#include "engine/rng.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {
namespace {

// Philox blocks (4 draws each) per work item: large enough that the Seek per
// item is noise, small enough to balance two threads on small tensors.
constexpr int64_t kBlocksPerChunk = 1024;
// Separates dropout's Philox key from parameter initialisation, which uses
// the bare job seed.
constexpr uint64_t kDropoutKey = 0x44524F504F555421ull;  // "DROPOUT!"

}  // namespace

absl::StatusOr<Shape> DropoutLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  return shapes::ElementwiseOutput(type(), inputs);
}

DropoutLayer::Saved& DropoutLayer::SavedFor(const LayerContext& ctx) {
  const size_t set = static_cast<size_t>(ctx.activation_set);
  if (set >= masks_.size()) masks_.resize(set + 1);
  return masks_[set];
}

absl::Status DropoutLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                   const LayerContext& ctx) {
  const int64_t n = in[0]->numel();
  Saved& saved = SavedFor(ctx);
  last_set_ = ctx.activation_set;
  saved.masked = ctx.training && rate_ > 0.0f;
  if (!saved.masked) {
    std::memcpy(out->raw(), in[0]->raw(), in[0]->bytes());
    return absl::OkStatus();
  }
  // Counter layout: [replica:16][layer index:16][block:32], stream = step.
  if (ctx.replica < 0 || ctx.replica >= (1 << 16) || index() < 0 || index() >= (1 << 16) ||
      n >= (int64_t{1} << 34)) {
    return absl::OutOfRangeError(absl::StrCat(
        "dropout: replica ", ctx.replica, ", layer index ", index(), " or tensor size ", n,
        " exceeds the mask counter space (replica, index < 65536; size < 2^34)"));
  }
  if (!saved.mask.defined() || saved.mask.numel() < n) {
    ASSIGN_OR_RETURN(saved.mask, Tensor::Allocate({n}, DType::kU8, Device::CPU(),
                                                  absl::StrCat("the mask of layer ", name())));
  }

  const uint64_t base =
      (static_cast<uint64_t>(ctx.replica) << 48) | (static_cast<uint64_t>(index()) << 32);
  // Drop when the 32-bit draw falls below rate * 2^32.
  const uint32_t threshold = static_cast<uint32_t>(
      std::min(4294967295.0, std::floor(static_cast<double>(rate_) * 4294967296.0)));
  const float scale = 1.0f / (1.0f - rate_);
  const uint64_t key = ctx.seed ^ kDropoutKey;
  const uint64_t stream = static_cast<uint64_t>(ctx.step);
  const float* x = in[0]->data<float>();
  float* y = out->data<float>();
  uint8_t* m = saved.mask.data<uint8_t>();
  const int64_t blocks = (n + 3) / 4;
  const int64_t chunks = (blocks + kBlocksPerChunk - 1) / kBlocksPerChunk;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    // Draw the chunk's numbers into a local buffer first: interleaving
    // Next() with the u8 mask stores made the compiler reload the generator
    // state after every store (a char store may alias anything), 4x slower.
    uint32_t draws[4 * kBlocksPerChunk];
    const int64_t b0 = c * kBlocksPerChunk;
    const int64_t i0 = b0 * 4;
    const int64_t len = std::min<int64_t>(n - i0, 4 * kBlocksPerChunk);
    common::Philox rng(key, stream);
    rng.Seek(base + static_cast<uint64_t>(b0));
    for (int64_t j = 0; j < len; ++j) draws[j] = rng.Next();
    const float* __restrict xc = x + i0;
    float* __restrict yc = y + i0;
    uint8_t* __restrict mc = m + i0;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const uint8_t keep = draws[j] >= threshold;
      mc[j] = keep;
      yc[j] = xc[j] * (scale * static_cast<float>(keep));
    }
  }
  return absl::OkStatus();
}

absl::Status DropoutLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                    const Tensor& dout, const std::vector<Tensor*>& din,
                                    const LayerContext& ctx) {
  if (din[0] == nullptr) return absl::OkStatus();
  const Saved& saved = SavedFor(ctx);
  if (!saved.masked) {
    std::memcpy(din[0]->raw(), dout.raw(), dout.bytes());
    return absl::OkStatus();
  }
  const int64_t n = dout.numel();
  const float scale = 1.0f / (1.0f - rate_);
  const uint8_t* __restrict m = saved.mask.data<uint8_t>();
  const float* __restrict dy = dout.data<float>();
  float* __restrict dx = din[0]->data<float>();
#pragma omp parallel for simd if (n > kParallelThreshold)
  // A multiply, not a select, so that the loop vectorises (a conditional
  // load of dy would not).
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (scale * static_cast<float>(m[i]));
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::unique_ptr<Layer>> MakeDropout(const v1::LayerSpec& spec) {
  RETURN_IF_ERROR(CheckArguments(spec));
  return std::unique_ptr<Layer>(new DropoutLayer(spec.dropout().rate()));
}
}  // namespace

YOKE_REGISTER_LAYER("dropout", MakeDropout);

}  // namespace yoke::engine
