// A range of TCP ports, "FIRST-LAST", as WorkerConfig.data_ports and
// yoke-trainer's --data-ports give it (collective/listen_ports.h uses it).
#ifndef YOKE_COMMON_PORT_RANGE_H_
#define YOKE_COMMON_PORT_RANGE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace yoke::common {

struct PortRange {
  int first = 0;  // 0: no range (the kernel picks)
  int last = 0;   // inclusive
  bool empty() const { return first == 0; }
  int size() const { return empty() ? 0 : last - first + 1; }
  std::string ToString() const;  // "41000-41099", or "" when empty
};

// "41000-41099" or a single port "41000"; "" is the empty range. Ports are
// 1..65535 and first <= last; anything else is InvalidArgument naming it.
absl::StatusOr<PortRange> ParsePortRange(absl::string_view text);

}  // namespace yoke::common

#endif  // YOKE_COMMON_PORT_RANGE_H_
