#include "collective/reducer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace yoke::collective {

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(Communicator* comm, Buffer grads,
                                                         std::vector<ParamRange> params,
                                                         const ReducerOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("reducer: no communicator");
  if (grads.dtype != DataType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("reducer: the gradient buffer must be f32, got ", DataTypeName(grads.dtype)));
  }
  if (options.first_bucket_bytes <= 0 || options.bucket_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reducer: bucket caps must be > 0, got first_bucket_bytes=", options.first_bucket_bytes,
        " bucket_bytes=", options.bucket_bytes));
  }
  if (options.wire != DataType::kF32 && options.wire != DataType::kF16 &&
      options.wire != DataType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reducer: wire type must be f32, f16 or bf16, got ", DataTypeName(options.wire)));
  }
  int64_t end = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamRange& p = params[i];
    if (p.count <= 0 || p.offset < end || p.offset + p.count > grads.count) {
      return absl::InvalidArgumentError(
          absl::StrCat("reducer: parameter ", i, " [", p.offset, ", ", p.offset + p.count,
                       ") must be non-empty, after the previous one (which ends at ", end,
                       ") and inside the gradient buffer (", grads.count, " elements)"));
    }
    end = p.offset + p.count;
  }

  std::unique_ptr<Reducer> r(new Reducer(comm, grads, options));
  r->bucket_of_.assign(params.size(), -1);
  const int64_t elem = static_cast<int64_t>(DataTypeSize(grads.dtype));
  Bucket cur;
  int64_t cur_end = 0;  // one past the highest element of `cur`
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const ParamRange& p = params[i];
    if (cur.params.empty()) cur_end = p.offset + p.count;
    cur.params.push_back(i);
    cur.offset = p.offset;
    cur.count = cur_end - p.offset;
    r->bucket_of_[i] = static_cast<int>(r->buckets_.size());
    const int64_t cap = r->buckets_.empty() ? options.first_bucket_bytes : options.bucket_bytes;
    if (cur.count * elem >= cap) {
      r->buckets_.push_back(std::move(cur));
      cur = Bucket();
    }
  }
  if (!cur.params.empty()) r->buckets_.push_back(std::move(cur));
  r->ready_.assign(params.size(), 0);
  r->pending_.assign(r->buckets_.size(), 0);
  return r;
}

absl::Status Reducer::Prepare(int64_t local_count, int64_t stop_vote) {
  if (in_step_) {
    return absl::FailedPreconditionError("reducer: Prepare() before the last step's Finish()");
  }
  if (local_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reducer: local_count must be >= 0, got ", local_count));
  }
  in_step_ = true;
  error_ = absl::OkStatus();
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int>(buckets_[b].params.size());
  }
  next_bucket_ = 0;
  works_.clear();
  // The count goes first: it is known now, it is tiny, and operations run in
  // issue order, so it never delays a bucket. It travels as i64, so it is
  // exact.
  totals_[0] = local_count;
  totals_[1] = stop_vote;
  AllreduceOptions o;
  o.timeout = options_.timeout;
  o.tag = "sample count";
  o.wire = DataType::kI64;  // its own type: never compressed
  count_work_ = comm_->Allreduce(Buffer{totals_, 2, DataType::kI64, DeviceKind::kCpu, 0}, o);
  return absl::OkStatus();
}

void Reducer::MarkReady(int param) {
  if (!in_step_) {
    if (error_.ok()) error_ = absl::FailedPreconditionError("reducer: MarkReady() outside a step");
    return;
  }
  if (param < 0 || param >= static_cast<int>(ready_.size()) || ready_[param]) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(
          absl::StrCat("reducer: MarkReady(", param, ") ",
                       param < 0 || param >= static_cast<int>(ready_.size())
                           ? absl::StrCat("is out of range [0, ", ready_.size(), ")")
                           : std::string("was already called this step")));
    }
    return;
  }
  ready_[param] = 1;
  --pending_[bucket_of_[param]];
  IssueReady();
}

void Reducer::IssueReady() {
  while (next_bucket_ < static_cast<int>(buckets_.size()) && pending_[next_bucket_] == 0) {
    const Bucket& b = buckets_[next_bucket_];
    AllreduceOptions o;
    o.timeout = options_.timeout;
    o.tag = absl::StrCat("bucket ", next_bucket_);
    o.wire = options_.wire;
    Buffer buf = grads_;
    buf.data = static_cast<float*>(grads_.data) + b.offset;
    buf.count = b.count;
    if (works_.empty()) first_issue_ = absl::Now();
    works_.push_back(comm_->Allreduce(buf, o));
    ++next_bucket_;
  }
}

absl::StatusOr<StepTotals> Reducer::Finish() {
  if (!in_step_) return absl::FailedPreconditionError("reducer: Finish() without Prepare()");
  in_step_ = false;
  // Parameters backward never reached (unused in this step) still reduce:
  // every rank must issue every bucket.
  for (size_t i = 0; i < ready_.size(); ++i) {
    if (!ready_[i]) {
      ready_[i] = 1;
      --pending_[bucket_of_[i]];
    }
  }
  IssueReady();
  absl::Status status = count_work_->Wait();
  for (auto& w : works_) {
    absl::Status s = w->Wait();
    if (status.ok()) status = s;
  }
  const double comm_seconds =
      works_.empty() ? 0.0 : absl::ToDoubleSeconds(absl::Now() - first_issue_);
  count_work_.reset();
  works_.clear();
  if (!status.ok()) return status;
  if (!error_.ok()) return error_;
  return StepTotals{totals_[0], totals_[1], comm_seconds};
}

}  // namespace yoke::collective
