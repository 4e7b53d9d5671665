// Two macros for code that calls the API, where every fallible call returns
// absl::Status or absl::StatusOr<T>:
//
//   YOKE_RETURN_IF_ERROR(opt.Step());
//   YOKE_ASSIGN_OR_RETURN(yoke::Tensor logits, model.Forward(batch));
//
// Each returns the error from the enclosing function (which must return
// absl::Status or an absl::StatusOr).
#ifndef YOKE_STATUS_H_
#define YOKE_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define YOKE_RETURN_IF_ERROR(expr)                       \
  do {                                                   \
    ::absl::Status _yoke_api_status = (expr);            \
    if (!_yoke_api_status.ok()) return _yoke_api_status; \
  } while (0)

#define YOKE_API_CONCAT_IMPL(a, b) a##b
#define YOKE_API_CONCAT(a, b) YOKE_API_CONCAT_IMPL(a, b)
#define YOKE_ASSIGN_OR_RETURN(lhs, expr) \
  YOKE_API_ASSIGN_OR_RETURN_IMPL(YOKE_API_CONCAT(_yoke_api_statusor_, __LINE__), lhs, expr)
#define YOKE_API_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#endif  // YOKE_STATUS_H_
