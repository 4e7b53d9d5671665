// Parameter-server jobs (distribution.strategy: parameter_server): the
// rules the spec alone decides, and where the PS tasks' ranks sit.
//
// The job's ranks: its workers x devices_per_worker replicas, then its PS
// tasks. The coordinator places them in one share per worker: share i holds
// worker i's replicas and then the PS tasks k with k % workers == i, so the
// PS tasks spread over the machines and every share's ranks stay contiguous.
// RoleOfRank tells a trainer which of its ranks are replicas (and their
// data-parallel rank) and which are PS tasks.
//
// Thread-safety: pure functions.
#ifndef YOKE_JOBSPEC_PS_CHECK_H_
#define YOKE_JOBSPEC_PS_CHECK_H_

#include <string>
#include <vector>

#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

inline constexpr int kMaxParameterServers = 64;
inline constexpr int kMaxStaleness = 1000;

// distribution.strategy is parameter_server.
bool IsParameterServerJob(const v1::JobSpec& spec);
// Its PS tasks: distribution.parameter_servers, or 0 for any other job.
int ParameterServerTasks(const v1::JobSpec& spec);

// A PS job whose replicas may die and come back alone while the others
// train on: consistency async or bounded (sync steps every replica
// together). Such a job's replicas have no group of their own, which a
// dead replica would break: early stopping's decision reaches them through
// the attempt's store (the trainer's ShareEarlyStop). The coordinator
// then restarts a failed share that holds only replicas, rank 0's aside,
// as the share's next incarnation instead of the whole attempt.
bool RestartsReplicasAlone(const v1::JobSpec& spec);

// Every violation of the parameter-server rules, each naming its field:
// the strategy's own fields, and the options a PS job cannot honour.
std::vector<std::string> ParameterServerSpecErrors(const v1::JobSpec& spec);

struct PsShare {
  int first_rank = 0;
  int num_ranks = 0;  // the worker's replicas, then its PS tasks
};
// The shares of `workers` workers with `per_worker` replicas each and
// `ps_tasks` PS tasks, in worker order.
std::vector<PsShare> PsShares(int workers, int per_worker, int ps_tasks);

struct RankRole {
  bool ps = false;
  int index = 0;  // the data-parallel rank, or the PS task
};
// The role of global rank `rank` in that layout (rank < workers x per_worker
// + ps_tasks).
RankRole RoleOfRank(int rank, int workers, int per_worker, int ps_tasks);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_PS_CHECK_H_
