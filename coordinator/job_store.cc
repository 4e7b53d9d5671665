#include "coordinator/job_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/quote.h"
#include "google/protobuf/unknown_field_set.h"

namespace yoke::server {

std::string FormatJobId(int64_t n) { return absl::StrFormat("job-%06d", n); }

int ClampPageSize(int requested) {
  if (requested <= 0) return 100;
  return std::min(requested, 1000);
}

std::string SerializeJobWithSpec(const v1::Job& job, const std::string& spec) {
  std::string out;
  if (job.has_spec()) {
    v1::Job rest = job;  // without the spec: small
    rest.clear_spec();
    rest.SerializeToString(&out);
  } else {
    job.SerializeToString(&out);
  }
  // Field 2 (spec), length-delimited; the length as a varint.
  out.push_back(static_cast<char>((v1::Job::kSpecFieldNumber << 3) | 2));
  for (uint64_t n = spec.size(); true; n >>= 7) {
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  out.append(spec);
  return out;
}

bool ParseJob(const std::string& bytes, bool summary, v1::Job* job) {
  if (!summary) return job->ParseFromString(bytes);
  // The top-level fields as raw bytes (a spec is one string, not parsed):
  // every field but the spec is parsed, and of the spec only its name.
  using google::protobuf::UnknownField;
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return false;
  std::string spec;  // repeated occurrences merge, as concatenation does
  bool has_spec = false;
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    if (f.number() != v1::Job::kSpecFieldNumber) continue;
    if (f.type() != UnknownField::TYPE_LENGTH_DELIMITED) return false;
    spec.append(f.length_delimited());
    has_spec = true;
  }
  fields.DeleteByNumber(v1::Job::kSpecFieldNumber);
  std::string rest;
  if (!fields.SerializeToString(&rest) || !job->ParseFromString(rest)) return false;
  google::protobuf::UnknownFieldSet spec_fields;
  if (!spec_fields.ParseFromString(spec)) return false;
  v1::JobSpec name_only;
  for (int i = 0; i < spec_fields.field_count(); ++i) {
    const UnknownField& f = spec_fields.field(i);
    if (f.number() != v1::JobSpec::kNameFieldNumber) continue;
    if (f.type() != UnknownField::TYPE_LENGTH_DELIMITED) return false;
    name_only.set_name(f.length_delimited());  // the last one wins
  }
  if (has_spec) *job->mutable_spec() = std::move(name_only);
  return true;
}

namespace {

absl::Status NotFound(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("job ", common::Quote(id), " not found"));
}

bool StateMatches(const std::vector<v1::JobState>& states, v1::JobState s) {
  return states.empty() || std::find(states.begin(), states.end(), s) != states.end();
}

}  // namespace

absl::StatusOr<std::string> InMemoryJobStore::Create(v1::Job job) {
  absl::MutexLock lock(&mu_);
  const int64_t seq = next_seq_++;
  job.set_id(FormatJobId(seq));
  const std::string id = job.id();
  jobs_[id] = Entry{seq, std::move(job), {}};
  ++writes_;
  return id;
}

absl::StatusOr<std::string> InMemoryJobStore::CreateWithSpec(v1::Job job, const std::string& spec) {
  if (!job.mutable_spec()->ParseFromString(spec)) {
    return absl::InvalidArgumentError("JobStore::CreateWithSpec: the spec is not a JobSpec");
  }
  return Create(std::move(job));
}

absl::StatusOr<v1::Job> InMemoryJobStore::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(id);
  return it->second.job;
}

absl::StatusOr<JobListPage> InMemoryJobStore::List(const JobListQuery& query) {
  int64_t before = INT64_MAX;
  if (!query.page_token.empty() && !absl::SimpleAtoi(query.page_token, &before)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: not a token from a previous response: '", query.page_token, "'"));
  }
  const int size = ClampPageSize(query.page_size);
  absl::MutexLock lock(&mu_);
  std::vector<const Entry*> hits;
  for (const auto& [id, e] : jobs_) {
    if (e.seq < before && StateMatches(query.states, e.job.state())) hits.push_back(&e);
  }
  std::sort(hits.begin(), hits.end(),
            [](const Entry* a, const Entry* b) { return a->seq > b->seq; });
  JobListPage page;
  size_t bytes = 0;
  for (size_t i = 0; i < hits.size(); ++i) {
    const size_t job_bytes = hits[i]->job.ByteSizeLong();
    if (static_cast<int>(i) >= size || (i > 0 && bytes + job_bytes > query.max_bytes)) {
      page.next_page_token = absl::StrCat(hits[i - 1]->seq);
      break;
    }
    bytes += job_bytes;
    page.jobs.push_back(hits[i]->job);
    if (query.summary && page.jobs.back().has_spec()) {
      const std::string name = page.jobs.back().spec().name();
      page.jobs.back().mutable_spec()->Clear();
      page.jobs.back().mutable_spec()->set_name(name);
    }
  }
  return page;
}

absl::Status InMemoryJobStore::Put(const v1::Job& job) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job.id());
  if (it == jobs_.end()) return NotFound(job.id());
  it->second.job = job;
  ++writes_;
  return absl::OkStatus();
}

absl::Status InMemoryJobStore::PutWithSpec(const v1::Job& job, const std::string& spec) {
  v1::Job copy = job;
  if (!copy.mutable_spec()->ParseFromString(spec)) {
    return absl::InvalidArgumentError("JobStore::PutWithSpec: the spec is not a JobSpec");
  }
  return Put(copy);
}

absl::Status InMemoryJobStore::Update(const std::string& id,
                                      const std::function<absl::Status(v1::Job*)>& fn) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(id);
  v1::Job copy = it->second.job;
  absl::Status s = fn(&copy);
  if (!s.ok()) return s;
  if (copy.id() != id) return absl::InternalError("JobStore::Update: the update changed the id");
  it->second.job = std::move(copy);
  ++writes_;
  return absl::OkStatus();
}

absl::Status InMemoryJobStore::AppendLogs(const std::string& id, std::vector<v1::LogLine>* lines) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(id);
  auto& logs = it->second.logs;
  for (v1::LogLine& l : *lines) {
    l.set_seq(static_cast<int64_t>(logs.size()) + 1);
    logs.push_back(l);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::LogLine>> InMemoryJobStore::ReadLogs(const std::string& id,
                                                                    int64_t since_seq, int limit) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(id);
  const auto& logs = it->second.logs;
  std::vector<v1::LogLine> out;
  // seq == index + 1, so the first wanted line sits at index since_seq.
  for (int64_t i = std::max<int64_t>(since_seq, 0);
       i < static_cast<int64_t>(logs.size()) && static_cast<int>(out.size()) < limit; ++i) {
    out.push_back(logs[i]);
  }
  return out;
}

absl::StatusOr<int64_t> InMemoryJobStore::LastLogSeq(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(id);
  return static_cast<int64_t>(it->second.logs.size());
}

absl::Status InMemoryJobStore::ForEachNonTerminal(
    const std::function<absl::Status(v1::Job)>& visit) {
  absl::MutexLock lock(&mu_);
  std::vector<const Entry*> hits;
  for (const auto& [id, e] : jobs_) {
    if (!IsTerminal(e.job.state())) hits.push_back(&e);
  }
  std::sort(hits.begin(), hits.end(),
            [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
  for (const Entry* e : hits) {
    if (absl::Status s = visit(e->job); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<v1::JobState, int64_t>> InMemoryJobStore::CountByState() {
  absl::MutexLock lock(&mu_);
  std::map<v1::JobState, int64_t> out;
  for (const auto& [id, e] : jobs_) ++out[e.job.state()];
  return out;
}

int64_t InMemoryJobStore::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

}  // namespace yoke::server
