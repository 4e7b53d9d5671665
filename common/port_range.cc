#include "common/port_range.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace yoke::common {

std::string PortRange::ToString() const { return empty() ? "" : absl::StrCat(first, "-", last); }

absl::StatusOr<PortRange> ParsePortRange(absl::string_view text) {
  if (text.empty()) return PortRange{};
  std::vector<absl::string_view> parts = absl::StrSplit(text, '-');
  int a = 0, b = 0;
  const bool ok = (parts.size() == 1 || parts.size() == 2) && absl::SimpleAtoi(parts[0], &a) &&
                  absl::SimpleAtoi(parts.back(), &b) && a >= 1 && b <= 65535 && a <= b;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane port range '", text,
                     "': want FIRST-LAST (or one port), with 1 <= FIRST <= LAST <= 65535"));
  }
  return PortRange{a, b};
}

}  // namespace yoke::common
