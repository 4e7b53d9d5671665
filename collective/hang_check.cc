#include "collective/hang_check.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace yoke::collective {
namespace {

std::string RequestKey(int rank) { return absl::StrCat("hang/request/", rank); }
std::string StateKey(int rank) { return absl::StrCat("hang/state/", rank); }

}  // namespace

HangListener::HangListener(Store* store, int rank, absl::Duration poll,
                           std::function<SeqState(int64_t)> state,
                           std::function<void(const HangRequest&)> on_request)
    : store_(store),
      rank_(rank),
      poll_(poll),
      state_(std::move(state)),
      on_request_(std::move(on_request)),
      thread_([this] { Run(); }) {}

HangListener::~HangListener() {
  stop_.Notify();
  // An empty request is the wake-up; a real one always has text.
  absl::Status s = store_->Set(RequestKey(rank_), "");
  if (!s.ok())
    spdlog::warn("collective: rank {}: cannot wake the hang listener: {}", rank_, s.ToString());
  thread_.join();
}

void HangListener::Run() {
  while (!stop_.HasBeenNotified()) {
    absl::StatusOr<std::string> req = store_->Get(RequestKey(rank_), poll_);
    if (stop_.HasBeenNotified()) return;
    if (!req.ok()) {
      if (req.status().code() != absl::StatusCode::kDeadlineExceeded) {
        // The store is failing (coordinator gone): do not spin on it.
        stop_.WaitForNotificationWithTimeout(poll_);
      }
      continue;
    }
    if (req->empty()) continue;
    std::vector<std::string> parts = absl::StrSplit(*req, absl::MaxSplits('\n', 3));
    parts.resize(4);
    HangRequest r;
    if (!absl::SimpleAtoi(parts[0], &r.seq)) r.seq = 0;
    if (!absl::SimpleAtoi(parts[1], &r.from_rank)) r.from_rank = -1;
    r.signature = parts[2];
    r.what = parts[3];
    const SeqState st = state_(r.seq);
    absl::Status s =
        store_->Set(StateKey(rank_), absl::StrCat(st.issued, " ", st.completed, " ", st.signature));
    if (!s.ok())
      spdlog::warn("collective: rank {}: cannot answer a hang check: {}", rank_, s.ToString());
    on_request_(r);
    return;
  }
}

HangVerdict CheckHang(Store* store, int rank, int size, int64_t seq, const std::string& signature,
                      const std::string& what, absl::Duration grace) {
  HangVerdict v;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    absl::Status s =
        store->Set(RequestKey(r), absl::StrCat(seq, "\n", rank, "\n", signature, "\n", what));
    if (!s.ok()) {
      v.text = absl::StrCat("cannot ask the other ranks (", s.message(), ")");
      return v;
    }
  }
  const absl::Time deadline = absl::Now() + grace;
  std::vector<int> behind, silent;
  std::vector<std::string> different;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    absl::StatusOr<std::string> a =
        store->Get(StateKey(r), std::max(deadline - absl::Now(), absl::ZeroDuration()));
    std::vector<std::string> parts;
    if (a.ok()) parts = absl::StrSplit(*a, absl::MaxSplits(' ', 2));
    int64_t issued = 0;
    if (parts.size() < 3 || !absl::SimpleAtoi(parts[0], &issued)) {
      silent.push_back(r);
    } else if (issued < seq) {
      behind.push_back(r);
    } else if (!parts[2].empty() && parts[2] != signature) {
      different.push_back(absl::StrCat("rank ", r, " called ", parts[2]));
    }
  }
  std::vector<std::string> out;
  if (!different.empty()) {
    v.mismatch = true;
    out.push_back(absl::StrCat("ranks disagree on op #", seq, ": ", absl::StrJoin(different, ", "),
                               ", this rank ", signature));
  }
  if (!behind.empty())
    out.push_back(absl::StrCat("ranks ", absl::StrJoin(behind, ","), " never arrived"));
  if (!silent.empty()) {
    out.push_back(absl::StrCat("ranks ", absl::StrJoin(silent, ","), " did not answer within ",
                               absl::FormatDuration(grace), " (dead or unreachable)"));
  }
  v.text = out.empty() ? "every rank arrived (a peer is slow or stuck inside the op)"
                       : absl::StrJoin(out, "; ");
  return v;
}

absl::Status HangStatus(const std::string& what, bool timed_out, const std::string& error,
                        const HangVerdict& verdict) {
  if (verdict.mismatch) return absl::InvalidArgumentError(absl::StrCat(what, ": ", verdict.text));
  if (timed_out) return absl::DeadlineExceededError(absl::StrCat(what, ": ", verdict.text));
  return absl::UnavailableError(absl::StrCat(what, ": ", error, "; ", verdict.text));
}

absl::Status PeerFailureStatus(const HangRequest& r, int rank, int size,
                               const std::string& my_signature) {
  if (!my_signature.empty() && !r.signature.empty() && my_signature != r.signature) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op #", r.seq, " on rank ", rank, " of ", size, ": ranks disagree on op #", r.seq,
        ": rank ", r.from_rank, " called ", r.signature, ", this rank ", my_signature));
  }
  return absl::AbortedError(absl::StrCat("rank ", rank, " of ", size,
                                         ": communicator broken by a peer's failure: ", r.what));
}

}  // namespace yoke::collective
