// JobStore: the coordinator's durable copy of every job and its log lines.
//
// A job is stored whole, as a serialized v1::Job (spec, state, attempts and
// their assignments, progress, epoch history, result); a few of its fields
// are also kept as indexed columns for listing. Log lines live apart, keyed
// by (job id, seq), so appending a line never rewrites the job.
//
// Contract:
//   - Create assigns the id ("job-000001", increasing) and stores the job in
//     one transaction; nothing is stored if it fails.
//   - Put and Update replace a stored job in one transaction: every state
//     change the coordinator makes is durable once they return OK.
//   - List returns jobs newest first; the page token is opaque.
//   - CreateWithSpec and PutWithSpec take the spec serialized, so a job whose
//     spec is large (up to 1 MiB serialized, many times that once parsed) is
//     stored without the caller holding it parsed; the stored job is the same
//     as Create/Put of the job with that spec.
//   - AppendLogs assigns each line the job's next seq (1, 2, ...).
//
// Implementations: SqliteJobStore (coordinator/sqlite_job_store.h, the default)
// and InMemoryJobStore (the fake for unit tests; same semantics, nothing
// survives the object).
//
// Thread-safety: all methods of both implementations may be called from any
// thread; each call is atomic with respect to the others.
#ifndef YOKE_COORDINATOR_JOB_STORE_H_
#define YOKE_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "jobspec/job_state.h"
#include "proto/yoke/v1/coordinator.pb.h"

namespace yoke::server {

// One definition, shared with the CLI.
using common::IsTerminal;

struct JobListQuery {
  std::vector<v1::JobState> states;  // empty: every state
  int page_size = 100;               // clamped to [1, 1000]
  std::string page_token;            // "" for the first page
  // A page ends early once its jobs' serialized bytes would pass this (it
  // always holds at least one job), so that a page of 1 MiB specs stays
  // under gRPC's 4 MiB message limit.
  size_t max_bytes = 2 << 20;
  // Each job's spec carries only its name (ListJobsRequest.summary): what a
  // table of jobs shows, without parsing or sending specs of up to 1 MiB.
  bool summary = false;
};

struct JobListPage {
  std::vector<v1::Job> jobs;    // newest first
  std::string next_page_token;  // "" on the last page
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Stores `job` with a fresh id (its `id` field is overwritten) and returns
  // the id.
  virtual absl::StatusOr<std::string> Create(v1::Job job) = 0;
  // Create with `spec`, a serialized v1::JobSpec, as the job's spec (`job`'s
  // own is ignored).
  virtual absl::StatusOr<std::string> CreateWithSpec(v1::Job job, const std::string& spec) = 0;

  // NOT_FOUND naming the id if there is no such job.
  virtual absl::StatusOr<v1::Job> Get(const std::string& id) = 0;

  // INVALID_ARGUMENT for a page token this store did not hand out.
  virtual absl::StatusOr<JobListPage> List(const JobListQuery& query) = 0;

  // Replaces the stored job with id `job.id()`. NOT_FOUND if absent.
  virtual absl::Status Put(const v1::Job& job) = 0;
  // Put with `spec`, a serialized v1::JobSpec, as the job's spec (`job`'s own
  // is ignored).
  virtual absl::Status PutWithSpec(const v1::Job& job, const std::string& spec) = 0;

  // Reads the job, runs `fn` on it and stores the result, all in one
  // transaction. If `fn` returns an error nothing changes and that error is
  // returned. `fn` must not change the id.
  virtual absl::Status Update(const std::string& id,
                              const std::function<absl::Status(v1::Job*)>& fn) = 0;

  // Appends `lines` to the job's log, assigning seq = last seq + 1, ... in
  // order (the `seq` fields of `*lines` are set). NOT_FOUND for an unknown
  // job.
  virtual absl::Status AppendLogs(const std::string& id, std::vector<v1::LogLine>* lines) = 0;

  // Up to `limit` lines with seq > since_seq, in seq order.
  virtual absl::StatusOr<std::vector<v1::LogLine>> ReadLogs(const std::string& id,
                                                            int64_t since_seq, int limit) = 0;

  // The highest seq appended to the job's log (0 if none).
  virtual absl::StatusOr<int64_t> LastLogSeq(const std::string& id) = 0;

  // Calls `visit` with every job that is not SUCCEEDED, FAILED or CANCELLED,
  // oldest first: what the coordinator reloads after a restart. One job is
  // parsed at a time, so a store of large waiting specs is never held parsed
  // all at once. Stops at visit's first error and returns it. `visit` must
  // not call the store.
  virtual absl::Status ForEachNonTerminal(const std::function<absl::Status(v1::Job)>& visit) = 0;
  // How many jobs are in each state (states with none are absent).
  virtual absl::StatusOr<std::map<v1::JobState, int64_t>> CountByState() = 0;
};

// Formats the n-th job id: "job-000001". Exposed for tests.
std::string FormatJobId(int64_t n);

// Clamps a requested page size to [1, 1000], 0 meaning the default 100.
int ClampPageSize(int requested);

// A serialized v1::Job: `job` without its spec, then `spec` (a serialized
// v1::JobSpec) as its spec field. Never parses `spec`.
std::string SerializeJobWithSpec(const v1::Job& job, const std::string& spec);

// Parses a serialized v1::Job into `job`; with `summary` its spec is reduced
// to its name without parsing the rest of it (JobListQuery::summary). False
// for bytes that are not a v1::Job.
bool ParseJob(const std::string& bytes, bool summary, v1::Job* job);

class InMemoryJobStore final : public JobStore {
 public:
  absl::StatusOr<std::string> Create(v1::Job job) override;
  absl::StatusOr<std::string> CreateWithSpec(v1::Job job, const std::string& spec) override;
  absl::StatusOr<v1::Job> Get(const std::string& id) override;
  absl::StatusOr<JobListPage> List(const JobListQuery& query) override;
  absl::Status Put(const v1::Job& job) override;
  absl::Status PutWithSpec(const v1::Job& job, const std::string& spec) override;
  absl::Status Update(const std::string& id,
                      const std::function<absl::Status(v1::Job*)>& fn) override;
  absl::Status AppendLogs(const std::string& id, std::vector<v1::LogLine>* lines) override;
  absl::StatusOr<std::vector<v1::LogLine>> ReadLogs(const std::string& id, int64_t since_seq,
                                                    int limit) override;
  absl::StatusOr<int64_t> LastLogSeq(const std::string& id) override;
  absl::Status ForEachNonTerminal(const std::function<absl::Status(v1::Job)>& visit) override;
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountByState() override;

  // Number of Put/Update/Create calls so far: lets tests check that the
  // coordinator does not rewrite jobs on every heartbeat.
  int64_t writes() const;

 private:
  struct Entry {
    int64_t seq;
    v1::Job job;
    std::vector<v1::LogLine> logs;
  };
  mutable absl::Mutex mu_;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_JOB_STORE_H_
