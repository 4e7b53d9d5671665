// ParamSet: every parameter of a model in one flat buffer.
//
// Layers declare their parameters (and non-trainable state such as
// batch-norm running statistics) while the model is being built. Finalize()
// then allocates three flat f32 buffers:
//   values  – trainable parameters, each entry 64-byte aligned
//   grads   – same layout as values; Backward overwrites each entry
//   state   – non-trainable buffers (running mean/var), checkpointed and
//             broadcast with the parameters but never reduced
// Optimizers update `values` from `grads` in one pass over the flat buffer,
// and the reducer buckets `grads` by offset without copying.
//
// Not thread-safe; one ParamSet belongs to one replica.
#ifndef YOKE_ENGINE_PARAM_SET_H_
#define YOKE_ENGINE_PARAM_SET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/tensor.h"

namespace yoke::engine {

// How a parameter starts. kUniform draws from U(-a, a); kConstant fills a.
struct Init {
  enum class Kind { kConstant, kUniform };
  Kind kind = Kind::kConstant;
  float a = 0.0f;
  static Init Constant(float v) { return Init{Kind::kConstant, v}; }
  static Init Uniform(float bound) { return Init{Kind::kUniform, bound}; }
};

class ParamSet {
 public:
  struct Entry {
    std::string name;  // "<layer>/<param>", e.g. "dense_1/kernel"
    Shape shape;
    int64_t offset;  // elements into the flat buffer
    Init init;
  };

  // Declares a trainable parameter; returns its id. Only before Finalize().
  int Declare(const std::string& name, const Shape& shape, Init init);
  // Declares a non-trainable state buffer; returns its id.
  int DeclareState(const std::string& name, const Shape& shape, Init init);

  // Allocates the flat buffers on `device`, zeroed. RESOURCE_EXHAUSTED
  // ("out of memory: N bytes for the parameters (largest: layer X, K values)
  // (M bytes in use)") when they do not fit; the set stays unfinalized.
  absl::Status Finalize(Device device = Device::CPU());
  bool finalized() const { return finalized_; }

  // Fills every value and state entry from its Init, deterministically from
  // `seed` and the entry's position (independent of thread count).
  void Initialize(uint64_t seed);
  // The positions Initialize counts from: a pipeline stage's set starts
  // after the entries of the layers before it, so that every stage draws
  // the values the whole model would (Model::CreateStage).
  void set_init_offset(int64_t entries, int64_t state_entries) {
    init_offset_ = entries;
    state_init_offset_ = state_entries;
  }

  Tensor value(int id) const;
  Tensor grad(int id) const;
  Tensor state(int id) const;

  const std::vector<Entry>& entries() const { return entries_; }
  const std::vector<Entry>& state_entries() const { return state_entries_; }

  // The flat buffers: (padded_size,) each.
  const Tensor& flat_values() const { return values_; }
  const Tensor& flat_grads() const { return grads_; }
  const Tensor& flat_state() const { return state_; }

  // Number of trainable scalars (without alignment padding).
  int64_t num_parameters() const;

 private:
  static constexpr int64_t kAlign = 16;  // floats (64 bytes)
  std::vector<Entry> entries_;
  std::vector<Entry> state_entries_;
  int64_t size_ = 0;
  int64_t state_size_ = 0;
  bool finalized_ = false;
  int64_t init_offset_ = 0, state_init_offset_ = 0;
  Tensor values_, grads_, state_;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_PARAM_SET_H_
