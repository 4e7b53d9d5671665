// Status helpers shared by every component.
//
// Debian's Abseil (20220623) has absl::Status and absl::StatusOr but none of the
// propagation macros, so we keep two small ones here. Library code returns
// Status; only main() functions turn a Status into an exit code.
#ifndef YOKE_COMMON_STATUS_H_
#define YOKE_COMMON_STATUS_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define YOKE_CONCAT_IMPL(a, b) a##b
#define YOKE_CONCAT(a, b) YOKE_CONCAT_IMPL(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status _yoke_status = (expr);        \
    if (!_yoke_status.ok()) return _yoke_status; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (a StatusOr<T>); on error
// returns its status, otherwise moves the value into `lhs` (which may be a
// declaration such as `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  YOKE_ASSIGN_OR_RETURN_IMPL(YOKE_CONCAT(_yoke_statusor_, __LINE__), lhs, expr)
#define YOKE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

namespace yoke::common {

// Returns `s` with `prefix: ` prepended to its message (same code).
inline absl::Status Annotate(const absl::Status& s, const std::string& prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, ": ", s.message()));
}

}  // namespace yoke::common

#endif  // YOKE_COMMON_STATUS_H_
