// Hang attribution: turns a failed multi-rank attempt's reason into one that
// says where the job stood and which machines to look at.
//
// A collective that times out fails its trainer with a message from the
// communicator's watchdog (collective/communicator.h), e.g.
//   "allreduce #1234 (bucket 3) timed out after 30s on rank 0 of 4:
//    ranks 2,5 never arrived"
// The trainer knows ranks, not machines. The coordinator knows both: each
// share of the attempt (worker, first rank, replicas) and the last
// collective sequence number each share's trainer reported as completed in
// its heartbeats (StepProgress.collective_seq_completed). AttributeHang adds
// them to the message (a rank that did not answer the hang check at all,
// "ranks 1 did not answer within 5s (dead or unreachable)", is blamed the
// same way):
//   "... ranks 2,5 never arrived (worker w-7); last collective completed
//    per rank: r0=1233 r1=1233 r2=1199 r3=1233"
// A share with several replicas is one trainer process, which reports one
// number for its ranks: it is listed as "r2-3=1199". A share that never
// reported a number is listed as "r2=none".
//
// Pure functions; thread-safe.
#ifndef YOKE_COORDINATOR_HANG_REPORT_H_
#define YOKE_COORDINATOR_HANG_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/yoke/v1/coordinator.pb.h"

namespace yoke::server {

// True if `reason` is a collective timeout report: it names ranks that
// "never arrived" or "did not answer" the hang check (dead or unreachable).
bool IsCollectiveTimeout(const std::string& reason);

// The ranks a collective timeout report blames (never arrived, or did not
// answer), each once, in the order it names them; empty if it names none.
std::vector<int> MissingRanks(const std::string& reason);

// "rank 1" or "ranks 2-3": the global ranks of `share`.
std::string RanksOf(const v1::Assignment& share);

// `reason` with the workers of the blamed ranks after each clause that
// names them ("(worker w-2 at 10.0.0.6)" when `addresses` maps the worker id
// to its advertised address), and the per-rank progress appended.
// `completed` maps a share's first rank to the last collective_seq_completed
// its trainer reported. Returns `reason` unchanged if it is not a collective
// timeout.
std::string AttributeHang(const std::string& reason, const v1::Attempt& attempt,
                          const std::map<int, int64_t>& completed,
                          const std::map<std::string, std::string>& addresses = {});

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_HANG_REPORT_H_
