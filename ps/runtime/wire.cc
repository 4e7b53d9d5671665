#include "ps/runtime/wire.h"

#include "absl/strings/str_cat.h"

namespace yoke::ps {

std::string PsName(int workers, int rank) {
  if (rank < workers) return absl::StrCat("worker ", rank);
  return absl::StrCat("PS task ", rank - workers, " (rank ", rank, ")");
}

}  // namespace yoke::ps
