// Pipeline schedules: what each stage of a pipeline does in one training
// step, in order, and the offline check of the whole cross-stage order that
// runs before step 1.
//
// A step pushes `micro_batches` (m) micro-batches through `stages` (p)
// stages. Stage s runs, for each micro-batch i, a forward F(i) and a
// backward B(i), and talks only to its neighbours: it receives i's
// activation from s-1 before F(i) and sends its own to s+1 after; it
// receives i's gradient from s+1 before B(i) and sends its own to s-1 after.
//
//   - GPipe: every forward (micro-batch order), then every backward (the
//     same order). A stage holds up to m micro-batches of activations.
//   - 1F1B (PipeDream-flush): stage s runs min(p-s-1, m) forwards to fill
//     the pipeline, then alternates one forward and one backward, then runs
//     the backwards left. A stage holds up to p-s micro-batches, at most p.
// Backwards run in micro-batch order under both, so a stage's gradient sums
// its micro-batches in the same order as one rank accumulating them would.
// m < p is allowed: the warm-up is then cut short.
//
// Transport model the check assumes (and the transport must keep): a send
// is posted without waiting for its receiver (isend), messages are matched
// by (kind, micro-batch) and never by arrival order, and a receive blocks
// until its message has been posted. Under that model VerifySchedule proves
// the step completes, or names the stages that wait on each other.
//
// Thread-safety: pure functions.
#ifndef YOKE_PIPELINE_SCHEDULE_H_
#define YOKE_PIPELINE_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace yoke::pipeline {

enum class ScheduleKind { kGPipe, k1F1B };

enum class Op {
  kRecvActivation,  // from stage-1
  kForward,
  kSendActivation,  // to stage+1
  kRecvGradient,    // from stage+1
  kBackward,
  kSendGradient,  // to stage-1
};

struct Action {
  Op op;
  int micro_batch = 0;
  bool operator==(const Action& o) const { return op == o.op && micro_batch == o.micro_batch; }
};

// "recv activation 3", "forward 0", ...
std::string ActionName(const Action& a);

// Every stage's actions, [stage][k]. INVALID_ARGUMENT unless stages >= 1
// and micro_batches >= 1 (and both at most 4096).
absl::StatusOr<std::vector<std::vector<Action>>> BuildSchedule(ScheduleKind kind, int stages,
                                                               int micro_batches);

// What running a verified schedule costs, from a simulation in which a
// forward takes `forward_cost`, a backward `backward_cost` and messages take
// no time.
struct ScheduleStats {
  // Per stage: the most micro-batches whose forward ran and backward did
  // not yet (activations held at once).
  std::vector<int> peak_in_flight;
  double makespan = 0;  // the step, start to last backward
  // The stages' idle time over stages x makespan.
  double bubble_fraction = 0;
};

// The offline check of a whole schedule ([stage][k]) for `micro_batches`:
//   - each stage runs exactly one forward and one backward per micro-batch,
//     the forward first; it receives before it computes and sends after,
//     and talks only to the neighbours that exist (stage 0 receives no
//     activation, the last stage no gradient);
//   - every send has its one receive and every receive its send;
//   - under the transport model above the step completes: no set of stages
//     waits on each other.
// OK with the stats, or FAILED_PRECONDITION naming the first rule broken:
// the stage, the action's position and name, and for a deadlock each
// waiting stage and what it waits for.
absl::StatusOr<ScheduleStats> VerifySchedule(const std::vector<std::vector<Action>>& schedule,
                                             int micro_batches, double forward_cost = 1.0,
                                             double backward_cost = 2.0);

// The bubble fraction of an ideal synchronous pipeline: (p-1)/(m+p-1).
double IdealBubbleFraction(int stages, int micro_batches);

}  // namespace yoke::pipeline

#endif  // YOKE_PIPELINE_SCHEDULE_H_
