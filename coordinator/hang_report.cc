#include "coordinator/hang_report.h"

#include <algorithm>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace yoke::server {
namespace {

// The clauses of a hang check's verdict that name ranks to blame:
// "ranks 2,5 never arrived", "rank 3 never arrived" (behind), and "ranks 1
// did not answer within 5s (dead or unreachable)" (silent), up to the next
// ';'. Group 1 is the rank list.
const std::regex& MissingRe() {
  static const std::regex re(
      R"(ranks? ([0-9]+(?:, ?[0-9]+)*) (?:never arrived|did not answer[^;]*))");
  return re;
}

const v1::Assignment* ShareOfRank(const v1::Attempt& a, int rank) {
  for (const v1::Assignment& s : a.assignments()) {
    if (rank >= s.first_rank() && rank < s.first_rank() + std::max(s.num_replicas(), 1)) return &s;
  }
  return nullptr;
}

}  // namespace

bool IsCollectiveTimeout(const std::string& reason) {
  return std::regex_search(reason, MissingRe());
}

std::vector<int> MissingRanks(const std::string& reason) {
  std::vector<int> out;
  for (auto m = std::sregex_iterator(reason.begin(), reason.end(), MissingRe());
       m != std::sregex_iterator(); ++m) {
    for (absl::string_view part : absl::StrSplit((*m)[1].str(), ',')) {
      int r;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &r) &&
          std::find(out.begin(), out.end(), r) == out.end()) {
        out.push_back(r);
      }
    }
  }
  return out;
}

std::string RanksOf(const v1::Assignment& share) {
  const int n = std::max(share.num_replicas(), 1);
  if (n == 1) return absl::StrCat("rank ", share.first_rank());
  return absl::StrCat("ranks ", share.first_rank(), "-", share.first_rank() + n - 1);
}

std::string AttributeHang(const std::string& reason, const v1::Attempt& attempt,
                          const std::map<int, int64_t>& completed,
                          const std::map<std::string, std::string>& addresses) {
  if (!IsCollectiveTimeout(reason)) return reason;
  // After each clause, the workers of the ranks it names, each once.
  std::string out;
  size_t copied = 0;
  for (auto m = std::sregex_iterator(reason.begin(), reason.end(), MissingRe());
       m != std::sregex_iterator(); ++m) {
    std::vector<std::string> workers;
    for (int rank : MissingRanks(m->str())) {
      const v1::Assignment* s = ShareOfRank(attempt, rank);
      if (s != nullptr &&
          std::find(workers.begin(), workers.end(), s->worker_id()) == workers.end()) {
        workers.push_back(s->worker_id());
      }
    }
    const size_t end = static_cast<size_t>(m->position(0) + m->length(0));
    absl::StrAppend(&out, reason.substr(copied, end - copied));
    copied = end;
    if (!workers.empty()) {
      for (std::string& w : workers) {
        auto a = addresses.find(w);
        if (a != addresses.end() && !a->second.empty()) absl::StrAppend(&w, " at ", a->second);
      }
      absl::StrAppend(&out, " (worker", workers.size() > 1 ? "s " : " ",
                      absl::StrJoin(workers, ", "), ")");
    }
  }
  absl::StrAppend(&out, reason.substr(copied));

  std::vector<const v1::Assignment*> shares;
  for (const v1::Assignment& s : attempt.assignments()) shares.push_back(&s);
  std::sort(shares.begin(), shares.end(), [](const v1::Assignment* a, const v1::Assignment* b) {
    return a->first_rank() < b->first_rank();
  });
  std::vector<std::string> per_rank;
  for (const v1::Assignment* s : shares) {
    const int n = std::max(s->num_replicas(), 1);
    std::string label = n == 1 ? absl::StrCat("r", s->first_rank())
                               : absl::StrCat("r", s->first_rank(), "-", s->first_rank() + n - 1);
    auto it = completed.find(s->first_rank());
    per_rank.push_back(
        absl::StrCat(label, "=", it == completed.end() ? "none" : absl::StrCat(it->second)));
  }
  absl::StrAppend(&out, "; last collective completed per rank: ", absl::StrJoin(per_rank, " "));
  return out;
}

}  // namespace yoke::server
