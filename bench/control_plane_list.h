// control_plane_bench --list-jobs N (issue 30): ListJobs with N jobs in the
// store. Goal: a whole `yoke jobs` walk of 10,000 jobs has p99 under 1 s.
#ifndef YOKE_BENCH_CONTROL_PLANE_LIST_H_
#define YOKE_BENCH_CONTROL_PLANE_LIST_H_

#include "proto/yoke/v1/coordinator.grpc.pb.h"

namespace yoke::bench {

// Submits `jobs` copies of `spec` (no worker is registered, so they stay
// PENDING) from 4 threads, checks that a walk through every page lists
// exactly those jobs, whole and as summaries, then times `rounds` of each:
//   walk summary  every page of 1,000, summaries (what `yoke jobs` reads)
//   walk whole    every page, whole specs (`yoke jobs --output json`)
//   page 100      the newest page of 100, summaries (the dashboard's)
// Returns the exit status: 1 when a submission failed or the check did.
int ListJobsBench(v1::Coordinator::Stub* client, const v1::JobSpec& spec, int jobs, int rounds);

}  // namespace yoke::bench

#endif  // YOKE_BENCH_CONTROL_PLANE_LIST_H_
