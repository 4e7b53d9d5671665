#include "coordinator/sqlite_job_store.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "common/status.h"
#include "coordinator/private_file.h"

namespace yoke::server {
namespace {

constexpr char kSchema[] = "yoke-jobs-v1";

// Binds a text/blob parameter without copying; the data must outlive step().
void BindText(sqlite3_stmt* st, int i, const std::string& s) {
  sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
}
void BindBlob(sqlite3_stmt* st, int i, const std::string& s) {
  sqlite3_bind_blob(st, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
}
std::string ColumnBlob(sqlite3_stmt* st, int i) {
  const void* p = sqlite3_column_blob(st, i);
  return std::string(static_cast<const char*>(p), sqlite3_column_bytes(st, i));
}

absl::Status NotFound(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("job ", common::Quote(id), " not found"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path,
                                                                     const Options& options) {
  // Specs and owners are for the coordinator's user only (private_file.h).
  if (absl::Status s = MakePrivate(path); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("job store ", s.message()));
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("job store '", path, "': cannot open: ", msg));
  }
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(db, path));
  RETURN_IF_ERROR(store->Init(options));
  return store;
}

SqliteJobStore::~SqliteJobStore() {
  absl::MutexLock lock(&mu_);
  for (auto& [sql, st] : stmts_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

absl::Status SqliteJobStore::Error(const char* what) {
  const int code = sqlite3_errcode(db_);
  const std::string msg =
      absl::StrCat("job store '", path_, "': ", what, ": ", sqlite3_errmsg(db_));
  // A damaged or foreign file, or one held by another process, is something
  // the operator must fix; anything else is our bug or a full disk.
  if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT || code == SQLITE_BUSY ||
      code == SQLITE_LOCKED) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

absl::Status SqliteJobStore::Exec(const char* sql) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) return Error(sql);
  return absl::OkStatus();
}

absl::StatusOr<sqlite3_stmt*> SqliteJobStore::Prepare(const char* sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) {
    sqlite3_reset(it->second);
    sqlite3_clear_bindings(it->second);
    return it->second;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &st, nullptr) != SQLITE_OK) return Error(sql);
  stmts_[sql] = st;
  return st;
}

absl::Status SqliteJobStore::Init(const Options& options) {
  absl::MutexLock lock(&mu_);
  // Fail at once instead of waiting when another process holds the lock.
  sqlite3_busy_timeout(db_, 0);
  // The first statement reads the header: a file that is not a database
  // fails here (SQLITE_NOTADB) with a clear message rather than later.
  RETURN_IF_ERROR(common::Annotate(Exec("PRAGMA locking_mode=EXCLUSIVE"), "opening"));
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * st, Prepare("PRAGMA journal_mode=WAL"));
    if (sqlite3_step(st) != SQLITE_ROW) return Error("setting WAL mode");
    const std::string mode = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_reset(st);
    if (mode != "wal" && path_ != ":memory:") {
      return absl::FailedPreconditionError(
          absl::StrCat("job store '", path_, "': cannot use WAL mode (got '", mode, "')"));
    }
  }
  RETURN_IF_ERROR(
      Exec(options.full_sync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  // Take the exclusive lock now, so a second coordinator fails at startup.
  if (sqlite3_exec(db_, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    if (sqlite3_errcode(db_) == SQLITE_BUSY) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job store '", path_, "': locked by another process (another yoke-coordinator?)"));
    }
    return Error("locking");
  }
  absl::Status s = [&]() -> absl::Status {
    RETURN_IF_ERROR(
        Exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
             "CREATE TABLE IF NOT EXISTS jobs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
             "  state INTEGER NOT NULL, priority INTEGER NOT NULL, create_time_ms INTEGER NOT NULL,"
             "  job BLOB NOT NULL);"
             "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, seq);"
             "CREATE TABLE IF NOT EXISTS logs (job_id TEXT NOT NULL, seq INTEGER NOT NULL,"
             "  line BLOB NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;"));
    ASSIGN_OR_RETURN(sqlite3_stmt * get, Prepare("SELECT value FROM meta WHERE key = 'schema'"));
    const int rc = sqlite3_step(get);
    if (rc == SQLITE_ROW) {
      const std::string v = reinterpret_cast<const char*>(sqlite3_column_text(get, 0));
      sqlite3_reset(get);
      if (v != kSchema) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job store '", path_, "': schema '", v, "', this coordinator reads '", kSchema, "'"));
      }
      return absl::OkStatus();
    }
    if (rc != SQLITE_DONE) return Error("reading the schema version");
    return Exec("INSERT INTO meta (key, value) VALUES ('schema', 'yoke-jobs-v1')");
  }();
  if (!s.ok()) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }
  return Exec("COMMIT");
}

absl::Status SqliteJobStore::InTransaction(const std::function<absl::Status()>& body) {
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status s = body();
  if (s.ok()) s = Exec("COMMIT");
  if (!s.ok()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return s;
}

absl::StatusOr<std::string> SqliteJobStore::Create(v1::Job job) {
  return CreateBlob(std::move(job), nullptr);
}

absl::StatusOr<std::string> SqliteJobStore::CreateWithSpec(v1::Job job, const std::string& spec) {
  return CreateBlob(std::move(job), &spec);
}

absl::StatusOr<std::string> SqliteJobStore::CreateBlob(v1::Job job, const std::string* spec) {
  absl::MutexLock lock(&mu_);
  absl::Status s = InTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * max, Prepare("SELECT COALESCE(MAX(seq), 0) FROM jobs"));
    if (sqlite3_step(max) != SQLITE_ROW) return Error("allocating a job id");
    const int64_t seq = sqlite3_column_int64(max, 0) + 1;
    sqlite3_reset(max);
    job.set_id(FormatJobId(seq));
    const std::string blob =
        spec != nullptr ? SerializeJobWithSpec(job, *spec) : job.SerializeAsString();
    ASSIGN_OR_RETURN(sqlite3_stmt * ins,
                     Prepare("INSERT INTO jobs (seq, id, state, priority, create_time_ms, job) "
                             "VALUES (?, ?, ?, ?, ?, ?)"));
    sqlite3_bind_int64(ins, 1, seq);
    BindText(ins, 2, job.id());
    sqlite3_bind_int(ins, 3, job.state());
    sqlite3_bind_int(ins, 4, job.priority());
    sqlite3_bind_int64(ins, 5, job.create_time_ms());
    BindBlob(ins, 6, blob);
    if (sqlite3_step(ins) != SQLITE_DONE) return Error("storing a job");
    sqlite3_reset(ins);
    return absl::OkStatus();
  });
  RETURN_IF_ERROR(s);
  return job.id();
}

absl::StatusOr<v1::Job> SqliteJobStore::GetLocked(const std::string& id) {
  ASSIGN_OR_RETURN(sqlite3_stmt * st, Prepare("SELECT job FROM jobs WHERE id = ?"));
  BindText(st, 1, id);
  const int rc = sqlite3_step(st);
  if (rc == SQLITE_DONE) return NotFound(id);
  if (rc != SQLITE_ROW) return Error("reading a job");
  v1::Job job;
  const bool ok = job.ParseFromString(ColumnBlob(st, 0));
  sqlite3_reset(st);
  if (!ok) {
    return absl::DataLossError(
        absl::StrCat("job store '", path_, "': job '", id, "' is unreadable (corrupt record)"));
  }
  return job;
}

absl::Status SqliteJobStore::ExistsLocked(const std::string& id) {
  ASSIGN_OR_RETURN(sqlite3_stmt * st, Prepare("SELECT 1 FROM jobs WHERE id = ?"));
  BindText(st, 1, id);
  const int rc = sqlite3_step(st);
  sqlite3_reset(st);
  if (rc == SQLITE_DONE) return NotFound(id);
  if (rc != SQLITE_ROW) return Error("looking up a job");
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> SqliteJobStore::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return GetLocked(id);
}

absl::StatusOr<JobListPage> SqliteJobStore::List(const JobListQuery& query) {
  int64_t before = INT64_MAX;
  if (!query.page_token.empty() && !absl::SimpleAtoi(query.page_token, &before)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: not a token from a previous response: '", query.page_token, "'"));
  }
  const int size = ClampPageSize(query.page_size);
  // The state filter is a list of small integers, so it is inlined rather
  // than bound; that needs a statement per distinct filter (not cached).
  std::string sql = "SELECT seq, job FROM jobs WHERE seq < ?";
  if (!query.states.empty()) {
    std::vector<int> states(query.states.begin(), query.states.end());
    absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  absl::StrAppend(&sql, " ORDER BY seq DESC LIMIT ?");
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    return Error("listing jobs");
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owner(st, sqlite3_finalize);
  sqlite3_bind_int64(st, 1, before);
  sqlite3_bind_int(st, 2, size + 1);
  JobListPage page;
  int64_t last_seq = 0;
  int rows = 0;
  size_t bytes = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    // A summary is counted at its own size, not its row's.
    const size_t row_bytes = static_cast<size_t>(sqlite3_column_bytes(st, 1));
    if (++rows > size ||
        (!page.jobs.empty() && !query.summary && bytes + row_bytes > query.max_bytes)) {
      page.next_page_token = absl::StrCat(last_seq);
      break;
    }
    const int64_t seq = sqlite3_column_int64(st, 0);
    v1::Job job;
    if (!ParseJob(ColumnBlob(st, 1), query.summary, &job)) {
      return absl::DataLossError(absl::StrCat("job store '", path_, "': record seq ", seq,
                                              " is unreadable (corrupt record)"));
    }
    const size_t job_bytes = query.summary ? job.ByteSizeLong() : row_bytes;
    if (!page.jobs.empty() && bytes + job_bytes > query.max_bytes) {
      page.next_page_token = absl::StrCat(last_seq);
      break;
    }
    bytes += job_bytes;
    last_seq = seq;
    page.jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error("listing jobs");
  return page;
}

absl::Status SqliteJobStore::PutLocked(const v1::Job& job, const std::string& blob) {
  ASSIGN_OR_RETURN(sqlite3_stmt * st,
                   Prepare("UPDATE jobs SET state = ?, priority = ?, job = ? WHERE id = ?"));
  sqlite3_bind_int(st, 1, job.state());
  sqlite3_bind_int(st, 2, job.priority());
  BindBlob(st, 3, blob);
  BindText(st, 4, job.id());
  if (sqlite3_step(st) != SQLITE_DONE) return Error("updating a job");
  sqlite3_reset(st);
  if (sqlite3_changes(db_) == 0) return NotFound(job.id());
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Put(const v1::Job& job) {
  absl::MutexLock lock(&mu_);
  // A single UPDATE is its own transaction (autocommit).
  return PutLocked(job, job.SerializeAsString());
}

absl::Status SqliteJobStore::PutWithSpec(const v1::Job& job, const std::string& spec) {
  const std::string blob = SerializeJobWithSpec(job, spec);
  absl::MutexLock lock(&mu_);
  return PutLocked(job, blob);
}

absl::Status SqliteJobStore::Update(const std::string& id,
                                    const std::function<absl::Status(v1::Job*)>& fn) {
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Job job, GetLocked(id));
    RETURN_IF_ERROR(fn(&job));
    if (job.id() != id) return absl::InternalError("JobStore::Update: the update changed the id");
    return PutLocked(job, job.SerializeAsString());
  });
}

absl::StatusOr<int64_t> SqliteJobStore::LastLogSeqLocked(const std::string& id) {
  ASSIGN_OR_RETURN(sqlite3_stmt * st,
                   Prepare("SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = ?"));
  BindText(st, 1, id);
  if (sqlite3_step(st) != SQLITE_ROW) return Error("reading the log");
  const int64_t last = sqlite3_column_int64(st, 0);
  sqlite3_reset(st);
  return last;
}

absl::Status SqliteJobStore::AppendLogs(const std::string& id, std::vector<v1::LogLine>* lines) {
  if (lines->empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() -> absl::Status {
    RETURN_IF_ERROR(ExistsLocked(id));
    ASSIGN_OR_RETURN(int64_t seq, LastLogSeqLocked(id));
    for (v1::LogLine& l : *lines) {
      l.set_seq(++seq);
      const std::string blob = l.SerializeAsString();
      ASSIGN_OR_RETURN(sqlite3_stmt * ins,
                       Prepare("INSERT INTO logs (job_id, seq, line) VALUES (?, ?, ?)"));
      BindText(ins, 1, id);
      sqlite3_bind_int64(ins, 2, seq);
      BindBlob(ins, 3, blob);
      if (sqlite3_step(ins) != SQLITE_DONE) return Error("appending to the log");
      sqlite3_reset(ins);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<v1::LogLine>> SqliteJobStore::ReadLogs(const std::string& id,
                                                                  int64_t since_seq, int limit) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * st, Prepare("SELECT line FROM logs WHERE job_id = ? AND seq > ? "
                                              "ORDER BY seq LIMIT ?"));
  BindText(st, 1, id);
  sqlite3_bind_int64(st, 2, since_seq);
  sqlite3_bind_int(st, 3, limit);
  std::vector<v1::LogLine> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    v1::LogLine l;
    if (!l.ParseFromString(ColumnBlob(st, 0))) {
      sqlite3_reset(st);
      return absl::DataLossError(
          absl::StrCat("job store '", path_, "': a log line of job '", id, "' is unreadable"));
    }
    out.push_back(std::move(l));
  }
  sqlite3_reset(st);
  if (rc != SQLITE_DONE) return Error("reading the log");
  if (out.empty()) {
    // Tell an unknown job from a job without lines.
    RETURN_IF_ERROR(ExistsLocked(id));
  }
  return out;
}

absl::StatusOr<int64_t> SqliteJobStore::LastLogSeq(const std::string& id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ExistsLocked(id));
  return LastLogSeqLocked(id);
}

absl::Status SqliteJobStore::ForEachNonTerminal(const std::function<absl::Status(v1::Job)>& visit) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * st,
                   Prepare("SELECT seq, job FROM jobs WHERE state NOT IN (4, 5, 6) ORDER BY seq"));
  static_assert(v1::JOB_SUCCEEDED == 4 && v1::JOB_FAILED == 5 && v1::JOB_CANCELLED == 6,
                "the query above lists the terminal states by number");
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    v1::Job job;
    if (!job.ParseFromString(ColumnBlob(st, 1))) {
      const int64_t seq = sqlite3_column_int64(st, 0);
      sqlite3_reset(st);
      return absl::DataLossError(absl::StrCat("job store '", path_, "': record seq ", seq,
                                              " is unreadable (corrupt record)"));
    }
    if (absl::Status s = visit(std::move(job)); !s.ok()) {
      sqlite3_reset(st);
      return s;
    }
  }
  sqlite3_reset(st);
  if (rc != SQLITE_DONE) return Error("listing unfinished jobs");
  return absl::OkStatus();
}

absl::StatusOr<std::map<v1::JobState, int64_t>> SqliteJobStore::CountByState() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * st, Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
  std::map<v1::JobState, int64_t> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const int state = sqlite3_column_int(st, 0);
    if (v1::JobState_IsValid(state)) {
      out[static_cast<v1::JobState>(state)] += sqlite3_column_int64(st, 1);
    }
  }
  sqlite3_reset(st);
  if (rc != SQLITE_DONE) return Error("counting jobs by state");
  return out;
}

}  // namespace yoke::server
