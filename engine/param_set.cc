#include "engine/param_set.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/rng.h"

namespace yoke::engine {
namespace {

int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

void Fill(const ParamSet::Entry& e, float* p, uint64_t seed, uint64_t stream) {
  int64_t n = NumElements(e.shape);
  if (e.init.kind == Init::Kind::kConstant) {
    for (int64_t i = 0; i < n; ++i) p[i] = e.init.a;
    return;
  }
  common::Philox rng(seed, stream);
  for (int64_t i = 0; i < n; ++i) p[i] = (2.0f * rng.NextFloat() - 1.0f) * e.init.a;
}

}  // namespace

int ParamSet::Declare(const std::string& name, const Shape& shape, Init init) {
  if (finalized_) {
    std::fprintf(stderr, "yoke: ParamSet::Declare(%s) after Finalize\n", name.c_str());
    std::abort();
  }
  entries_.push_back(Entry{name, shape, size_, init});
  size_ += AlignUp(NumElements(shape), kAlign);
  return static_cast<int>(entries_.size()) - 1;
}

int ParamSet::DeclareState(const std::string& name, const Shape& shape, Init init) {
  if (finalized_) {
    std::fprintf(stderr, "yoke: ParamSet::DeclareState(%s) after Finalize\n", name.c_str());
    std::abort();
  }
  state_entries_.push_back(Entry{name, shape, state_size_, init});
  state_size_ += AlignUp(NumElements(shape), kAlign);
  return static_cast<int>(state_entries_.size()) - 1;
}

absl::Status ParamSet::Finalize(Device device) {
  // Errors name the layer that holds the most parameters, the likely culprit.
  const Entry* largest = nullptr;
  for (const Entry& e : entries_) {
    if (largest == nullptr || NumElements(e.shape) > NumElements(largest->shape)) largest = &e;
  }
  std::string what = "the parameters";
  if (largest != nullptr) {
    absl::StrAppend(&what, " (largest: layer ", largest->name.substr(0, largest->name.find('/')),
                    ", ", NumElements(largest->shape), " values)");
  }
  ASSIGN_OR_RETURN(values_, Tensor::AllocateZeros({size_}, DType::kF32, device, what));
  ASSIGN_OR_RETURN(grads_, Tensor::AllocateZeros({size_}, DType::kF32, device,
                                                 absl::StrCat("the gradients of ", what)));
  ASSIGN_OR_RETURN(state_,
                   Tensor::AllocateZeros({state_size_}, DType::kF32, device, "the state buffers"));
  finalized_ = true;
  return absl::OkStatus();
}

void ParamSet::Initialize(uint64_t seed) {
  // On a device, the same values are drawn on the host and copied over, so
  // a seed gives every device the same initial model.
  const bool host = values_.device().is_cpu();
  Tensor values = host ? values_ : Tensor::Zeros(values_.shape());
  Tensor state = host || !state_.defined() ? state_ : Tensor::Zeros(state_.shape());
  for (size_t i = 0; i < entries_.size(); ++i) {
    Fill(entries_[i], values.data<float>() + entries_[i].offset, seed,
         2 * (static_cast<int64_t>(i) + init_offset_));
  }
  for (size_t i = 0; i < state_entries_.size(); ++i) {
    Fill(state_entries_[i], state.data<float>() + state_entries_[i].offset, seed,
         2 * (static_cast<int64_t>(i) + state_init_offset_) + 1);
  }
  if (!host) {
    values_.CopyFrom(values);
    if (state_.defined()) state_.CopyFrom(state);
  }
}

Tensor ParamSet::value(int id) const {
  return values_.View(entries_[id].offset, entries_[id].shape);
}
Tensor ParamSet::grad(int id) const { return grads_.View(entries_[id].offset, entries_[id].shape); }
Tensor ParamSet::state(int id) const {
  return state_.View(state_entries_[id].offset, state_entries_[id].shape);
}

int64_t ParamSet::num_parameters() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += NumElements(e.shape);
  return n;
}

}  // namespace yoke::engine
