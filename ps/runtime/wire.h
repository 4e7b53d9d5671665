// The parameter-server wire: the messages between a worker and a PS task,
// each over their own link (ps/runtime/links.h), a Gloo context of two
// ranks. Workers are numbered by their data-parallel rank, [0, workers), and
// PS task k holds shard k of the ShardMap (ps/shard_map.h), if it has one.
//
// A worker's step, per shard:
//   worker -> PS   kHeader  {clock, samples, step}    24 bytes
//   worker -> PS   kGrads   the shard's gradient sum  count floats
//   PS -> worker   kParams  the shard's values        count floats
// The PS answers once the worker may start its next step (the staleness
// gate, ps/staleness.h), with the values after every update that step may
// see. A header with clock kLeave says the worker is done; nothing follows it.
//
// `clock` counts the worker's steps in this attempt for the staleness gate;
// `step` is its data step, the job's global step whose batch of its data
// shard the gradient comes from. A PS task takes each worker's data steps in
// order, from the attempt's first (ServerOptions::start_step), each once:
// it refuses a step pushed again, so no example counts twice, and one
// skipped, except at a restarted worker's first push (its last push before
// dying may have reached only some of the PS tasks).
//
// A checkpoint (the chief worker's, between two of its steps):
//   worker -> PS   kHeader    {clock, kSnapshot}     24 bytes
//   PS -> worker   kSnapshot  {optimizer steps, state arrays} (16 bytes),
//                             then the shard's values and each optimizer
//                             state array's slice: count floats each
// `clock` is the last step the worker pushed (-1: none yet). Under sync and
// bounded the PS answers right after applying that step's update, and the
// worker's next push has not come, so every shard's answer holds exactly
// the updates of steps up to `clock`: a consistent cut. Under async each
// shard answers with what it holds when the request arrives.
// A worker restarted while the others go on (an incarnation above 0) pulls
// before it pushes. As soon as its link is up, the PS sends
//   PS -> worker   kJoin  {clock, pushed} (16 bytes), then the shard's values
// where `clock` is the step the PS would have it start at: the slowest live
// worker's, and never below a step its earlier incarnations pushed, and
// `pushed` is one past the last data step they pushed to this PS task (the
// attempt's first if none), where its data resumes. The worker starts at the
// largest of its PS tasks' clocks, and its data at the largest `pushed`;
// each PS task moves its clock there at its first push.
// Gloo keeps each (sender, slot) in order, so a worker's grads follow its
// header.
//
// Thread-safety: constants and pure functions.
#ifndef YOKE_PS_RUNTIME_WIRE_H_
#define YOKE_PS_RUNTIME_WIRE_H_

#include <cstdint>

namespace yoke::ps {

enum class Slot : uint64_t {
  kHeader = 0x505301,
  kGrads = 0x505302,
  kParams = 0x505303,
  kSnapshot = 0x505304,
  kJoin = 0x505305,
};

struct PushHeader {
  int64_t clock = 0;    // the worker's step in this attempt, or kLeave
  int64_t samples = 0;  // examples behind the gradient sum (>= 0)
  int64_t step = 0;     // the data step the gradient comes from
};
inline constexpr int64_t kLeave = -1;
// PushHeader::samples of a snapshot request.
inline constexpr int64_t kSnapshot = -2;

// The head of a snapshot answer.
struct SnapshotHead {
  int64_t optimizer_steps = 0;  // the shard's completed updates
  int64_t state_arrays = 0;     // optimizer state arrays that follow the values
};

// The head of a join answer.
struct JoinHead {
  int64_t clock = 0;   // the step the worker may start at
  int64_t pushed = 0;  // one past the last data step its earlier incarnations pushed
};

}  // namespace yoke::ps

#endif  // YOKE_PS_RUNTIME_WIRE_H_
