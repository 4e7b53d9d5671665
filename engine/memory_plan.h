// PlanBuffers: shares memory between buffers whose lifetimes do not overlap.
//
// A run of the model is a sequence of steps (one per layer). Each buffer is
// written at one step and last read at another; from the step after its last
// read its memory is free for a buffer written later. The plan gives every
// buffer a slot, and slots are sized to the largest buffer they hold, so a
// run needs the sum of the slot sizes instead of the sum of every buffer.
// This is buffer assignment as inference engines and XLA do it, in its
// simplest form: greedy in step order, best fit among the free slots.
//
// A buffer written at step t never shares a slot with a buffer read at step t
// (a layer's output is never one of its inputs), and nothing here depends on
// a device: the CPU and CUDA engines use the same plan.
//
// Thread-safety: pure functions.
#ifndef YOKE_ENGINE_MEMORY_PLAN_H_
#define YOKE_ENGINE_MEMORY_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace yoke::engine {

struct BufferLife {
  int64_t elements = 0;  // per example
  int first = 0;         // the step that writes it
  int last = 0;          // the last step that reads it; >= first
};

struct BufferPlan {
  std::vector<int> slot;               // per buffer: its slot
  std::vector<int64_t> slot_elements;  // per slot: per-example size
  int64_t total_elements() const;      // the sum over the slots
};

// Every buffer must have 0 <= first <= last; the result's slot[i] belongs to
// buffers[i].
BufferPlan PlanBuffers(const std::vector<BufferLife>& buffers);

// What any plan must hold, whatever the heuristic: every buffer has a slot
// at least its size, and no two buffers whose lifetimes overlap share one.
// INTERNAL naming the first two buffers that break it.
absl::Status CheckBufferPlan(const std::vector<BufferLife>& buffers, const BufferPlan& plan);

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_MEMORY_PLAN_H_
