#include "engine/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace yoke::engine {

int64_t BufferPlan::total_elements() const {
  return std::accumulate(slot_elements.begin(), slot_elements.end(), int64_t{0});
}

BufferPlan PlanBuffers(const std::vector<BufferLife>& buffers) {
  BufferPlan plan;
  plan.slot.assign(buffers.size(), -1);
  // Buffers in the order they are written (ties: the larger first, so it
  // gets the best-fitting slot).
  std::vector<int> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (buffers[a].first != buffers[b].first) return buffers[a].first < buffers[b].first;
    return buffers[a].elements > buffers[b].elements;
  });
  // slot_last[s]: the last step that reads the buffer slot s holds now.
  std::vector<int> slot_last;
  for (int b : order) {
    const BufferLife& life = buffers[b];
    // A slot is free when its buffer's last read came before this write.
    int best = -1, largest = -1;
    for (int s = 0; s < static_cast<int>(slot_last.size()); ++s) {
      if (slot_last[s] >= life.first) continue;
      const int64_t size = plan.slot_elements[s];
      if (size >= life.elements && (best < 0 || size < plan.slot_elements[best])) best = s;
      if (largest < 0 || size > plan.slot_elements[largest]) largest = s;
    }
    // No free slot is large enough: grow the largest free one (it wastes the
    // least), or open a new one.
    int s = best >= 0 ? best : largest;
    if (s < 0) {
      s = static_cast<int>(slot_last.size());
      slot_last.push_back(0);
      plan.slot_elements.push_back(0);
    }
    plan.slot_elements[s] = std::max(plan.slot_elements[s], life.elements);
    slot_last[s] = life.last;
    plan.slot[b] = s;
  }
  return plan;
}

absl::Status CheckBufferPlan(const std::vector<BufferLife>& buffers, const BufferPlan& plan) {
  if (plan.slot.size() != buffers.size()) {
    return absl::InternalError(
        absl::StrCat("the plan has ", plan.slot.size(), " slots for ", buffers.size(), " buffers"));
  }
  const int slots = static_cast<int>(plan.slot_elements.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const int s = plan.slot[i];
    if (s < 0 || s >= slots) return absl::InternalError(absl::StrCat("buffer ", i, ": slot ", s));
    if (plan.slot_elements[s] < buffers[i].elements) {
      return absl::InternalError(absl::StrCat("buffer ", i, " (", buffers[i].elements,
                                              " elements) in slot ", s, " of ",
                                              plan.slot_elements[s]));
    }
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      const BufferLife &a = buffers[i], &b = buffers[j];
      if (plan.slot[j] == s && a.first <= b.last && b.first <= a.last) {
        return absl::InternalError(absl::StrCat("buffers ", i, " (steps ", a.first, "-", a.last,
                                                ") and ", j, " (steps ", b.first, "-", b.last,
                                                ") are live together in slot ", s));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace yoke::engine
