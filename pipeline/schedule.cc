#include "pipeline/schedule.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace yoke::pipeline {
namespace {

constexpr int kMaxCount = 4096;

std::vector<Action> StageActions(ScheduleKind kind, int p, int m, int s) {
  std::vector<Action> a;
  auto forward = [&](int i) {
    if (s > 0) a.push_back({Op::kRecvActivation, i});
    a.push_back({Op::kForward, i});
    if (s < p - 1) a.push_back({Op::kSendActivation, i});
  };
  auto backward = [&](int i) {
    if (s < p - 1) a.push_back({Op::kRecvGradient, i});
    a.push_back({Op::kBackward, i});
    if (s > 0) a.push_back({Op::kSendGradient, i});
  };
  if (kind == ScheduleKind::kGPipe) {
    for (int i = 0; i < m; ++i) forward(i);
    for (int i = 0; i < m; ++i) backward(i);
    return a;
  }
  const int warmup = std::min(p - s - 1, m);
  for (int i = 0; i < warmup; ++i) forward(i);
  for (int k = 0; k < m - warmup; ++k) {
    forward(warmup + k);
    backward(k);
  }
  for (int i = m - warmup; i < m; ++i) backward(i);
  return a;
}

// Per micro-batch, what one stage has done so far.
struct Done {
  bool recv_act = false, forward = false, send_act = false;
  bool recv_grad = false, backward = false, send_grad = false;
};

absl::Status Broken(int s, size_t k, const Action& a, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("stage ", s, ", action ", k, " (", ActionName(a), "): ", why));
}

// The per-stage rules: each action once, in dependency order, with
// neighbours that exist; then nothing missing.
absl::Status CheckStage(const std::vector<Action>& actions, int s, int p, int m) {
  std::vector<Done> d(m);
  for (size_t k = 0; k < actions.size(); ++k) {
    const Action& a = actions[k];
    if (a.micro_batch < 0 || a.micro_batch >= m) {
      return Broken(s, k, a, absl::StrCat("no such micro-batch (the step has ", m, ")"));
    }
    Done& x = d[a.micro_batch];
    bool* flag = nullptr;
    switch (a.op) {
      case Op::kRecvActivation:
        if (s == 0) return Broken(s, k, a, "the first stage has no stage before it");
        if (x.forward) return Broken(s, k, a, "received after its forward");
        flag = &x.recv_act;
        break;
      case Op::kForward:
        if (s > 0 && !x.recv_act) return Broken(s, k, a, "forward before its activation arrived");
        flag = &x.forward;
        break;
      case Op::kSendActivation:
        if (s == p - 1) return Broken(s, k, a, "the last stage has no stage after it");
        if (!x.forward) return Broken(s, k, a, "sent before its forward ran");
        flag = &x.send_act;
        break;
      case Op::kRecvGradient:
        if (s == p - 1) return Broken(s, k, a, "the last stage has no stage after it");
        if (x.backward) return Broken(s, k, a, "received after its backward");
        flag = &x.recv_grad;
        break;
      case Op::kBackward:
        if (!x.forward) return Broken(s, k, a, "backward before its forward");
        if (s < p - 1 && !x.recv_grad) {
          return Broken(s, k, a, "backward before its gradient arrived");
        }
        flag = &x.backward;
        break;
      case Op::kSendGradient:
        if (s == 0) return Broken(s, k, a, "the first stage has no stage before it");
        if (!x.backward) return Broken(s, k, a, "sent before its backward ran");
        flag = &x.send_grad;
        break;
    }
    if (*flag) return Broken(s, k, a, "a second time");
    *flag = true;
  }
  for (int i = 0; i < m; ++i) {
    const Done& x = d[i];
    const char* missing = !x.forward                  ? "forward"
                          : !x.backward               ? "backward"
                          : s > 0 && !x.recv_act      ? "receive of the activation"
                          : s < p - 1 && !x.send_act  ? "send of the activation"
                          : s < p - 1 && !x.recv_grad ? "receive of the gradient"
                          : s > 0 && !x.send_grad     ? "send of the gradient"
                                                      : nullptr;
    if (missing != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("stage ", s, " never runs the ", missing, " of micro-batch ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ActionName(const Action& a) {
  const char* op = "";
  switch (a.op) {
    case Op::kRecvActivation:
      op = "receive activation";
      break;
    case Op::kForward:
      op = "forward";
      break;
    case Op::kSendActivation:
      op = "send activation";
      break;
    case Op::kRecvGradient:
      op = "receive gradient";
      break;
    case Op::kBackward:
      op = "backward";
      break;
    case Op::kSendGradient:
      op = "send gradient";
      break;
  }
  return absl::StrCat(op, " ", a.micro_batch);
}

absl::StatusOr<std::vector<std::vector<Action>>> BuildSchedule(ScheduleKind kind, int stages,
                                                               int micro_batches) {
  if (stages < 1 || stages > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.stages: must be 1 to ", kMaxCount, ", got ", stages));
  }
  if (micro_batches < 1 || micro_batches > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.micro_batches: must be 1 to ", kMaxCount, ", got ", micro_batches));
  }
  std::vector<std::vector<Action>> s(stages);
  for (int i = 0; i < stages; ++i) s[i] = StageActions(kind, stages, micro_batches, i);
  return s;
}

absl::StatusOr<ScheduleStats> VerifySchedule(const std::vector<std::vector<Action>>& schedule,
                                             int micro_batches, double forward_cost,
                                             double backward_cost) {
  const int p = static_cast<int>(schedule.size());
  const int m = micro_batches;
  if (p < 1 || m < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a schedule needs stages and micro-batches, got ", p, " and ", m));
  }
  for (int s = 0; s < p; ++s) {
    if (absl::Status st = CheckStage(schedule[s], s, p, m); !st.ok()) return st;
  }
  // Run it: a stage goes on until a receive whose message is not posted yet;
  // the times are a dataflow, so the order stages are visited in does not
  // change them.
  constexpr double kNotPosted = -1;
  std::vector<std::vector<double>> act(p, std::vector<double>(m, kNotPosted));
  std::vector<std::vector<double>> grad(p, std::vector<double>(m, kNotPosted));
  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0);
  std::vector<int> in_flight(p, 0);
  ScheduleStats stats;
  stats.peak_in_flight.assign(p, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      for (; pc[s] < schedule[s].size(); ++pc[s], moved = true) {
        const Action& a = schedule[s][pc[s]];
        const int i = a.micro_batch;
        if (a.op == Op::kRecvActivation) {
          if (act[s - 1][i] == kNotPosted) break;
          clock[s] = std::max(clock[s], act[s - 1][i]);
        } else if (a.op == Op::kRecvGradient) {
          if (grad[s + 1][i] == kNotPosted) break;
          clock[s] = std::max(clock[s], grad[s + 1][i]);
        } else if (a.op == Op::kForward) {
          clock[s] += forward_cost;
          stats.peak_in_flight[s] = std::max(stats.peak_in_flight[s], ++in_flight[s]);
        } else if (a.op == Op::kBackward) {
          clock[s] += backward_cost;
          --in_flight[s];
        } else if (a.op == Op::kSendActivation) {
          act[s][i] = clock[s];
        } else {
          grad[s][i] = clock[s];
        }
      }
    }
  }
  std::vector<std::string> waiting;
  for (int s = 0; s < p; ++s) {
    if (pc[s] == schedule[s].size()) continue;
    const Action& a = schedule[s][pc[s]];
    const int from = a.op == Op::kRecvActivation ? s - 1 : s + 1;
    waiting.push_back(absl::StrCat("stage ", s, " waits at action ", pc[s], " (", ActionName(a),
                                   " from stage ", from, ")"));
  }
  if (!waiting.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the schedule deadlocks: ", absl::StrJoin(waiting, "; ")));
  }
  stats.makespan = *std::max_element(clock.begin(), clock.end());
  const double busy = static_cast<double>(m) * (forward_cost + backward_cost);
  if (stats.makespan > 0) {
    stats.bubble_fraction = (stats.makespan - busy) / stats.makespan;
  }
  return stats;
}

double IdealBubbleFraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace yoke::pipeline
