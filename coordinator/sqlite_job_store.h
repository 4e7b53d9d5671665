// SqliteJobStore: the JobStore in one SQLite file (the coordinator's default).
//
// Layout (schema version 1, recorded in table `meta` as
// ("schema", "yoke-jobs-v1") so a foreign or future file is refused):
//   jobs(seq INTEGER PRIMARY KEY, id TEXT UNIQUE, state, priority,
//        create_time_ms, job BLOB)   -- job = serialized v1::Job
//   logs(job_id, seq, line BLOB, PRIMARY KEY (job_id, seq))
//
// Durability: WAL journal with synchronous=NORMAL. In WAL mode NORMAL still
// writes every commit to the log before returning, so a commit survives the
// process dying at any point (kill -9, a crash); only an OS crash or power
// loss can drop the last few commits. FULL would add an fsync per commit,
// and commits happen under the coordinator's lock on the heartbeat path, so
// `Options.full_sync` trades that latency for power-loss durability.
//
// The file is opened with an exclusive lock held for the store's lifetime,
// so two coordinators can never share (and corrupt the state of) one store;
// the OS drops the lock when the process dies, so a restart after kill -9
// opens it again at once.
//
// Thread-safety: one connection guarded by a mutex; every method is safe
// from any thread.
#ifndef YOKE_COORDINATOR_SQLITE_JOB_STORE_H_
#define YOKE_COORDINATOR_SQLITE_JOB_STORE_H_

#include <map>
#include <memory>
#include <string>

#include "coordinator/job_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace yoke::server {

class SqliteJobStore final : public JobStore {
 public:
  struct Options {
    // fsync every commit (synchronous=FULL); see the header comment.
    bool full_sync = false;
  };

  // Opens (creating if needed) the store at `path`. Fails with
  // FAILED_PRECONDITION naming the path when the file is not a SQLite
  // database, is a database of something else, has an unknown schema
  // version, or is locked by another process; UNAVAILABLE if it cannot be
  // opened at all (permissions, missing directory).
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path,
                                                              const Options& options);
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path) {
    return Open(path, Options());
  }
  ~SqliteJobStore() override;

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

 private:
  SqliteJobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Init(const Options& options);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Job> GetLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND unless the job exists; reads no record.
  absl::Status ExistsLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Create of `job` with `spec` (serialized) as its spec; null: its own.
  absl::StatusOr<std::string> CreateBlob(v1::Job job, const std::string* spec);
  // Put of `job`, already serialized as `blob`.
  absl::Status PutLocked(const v1::Job& job, const std::string& blob)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> LastLogSeqLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` between BEGIN IMMEDIATE and COMMIT, rolling back on error.
  absl::Status InTransaction(const std::function<absl::Status()>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A cached prepared statement for `sql` (a string literal), reset and with
  // its bindings cleared; owned by the store.
  absl::StatusOr<sqlite3_stmt*> Prepare(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  std::map<const char*, sqlite3_stmt*> stmts_ ABSL_GUARDED_BY(mu_);
  const std::string path_;
};

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_SQLITE_JOB_STORE_H_
