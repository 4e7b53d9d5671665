// ReadRegularFile: the one way the daemons and the CLI read a whole file
// that a user named (job files, daemon configs, serialized specs).
//
// Only a regular file is read (a directory, a FIFO or /dev/zero is refused
// before any byte is read, so nothing blocks or grows without end), only up
// to the size it had when opened, and only if that size is at most
// `max_bytes`. Errors name the path and what was wrong, never the file's
// bytes: NOT_FOUND when it cannot be opened, INVALID_ARGUMENT when it is not
// a regular file or too large, UNAVAILABLE when a read fails.
//
// Thread-safety: a free function; safe from any thread.
#ifndef YOKE_COMMON_READ_FILE_H_
#define YOKE_COMMON_READ_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace yoke::common {

// `what` names the file's role in messages ("job file", "config file").
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes,
                                            const std::string& what);

}  // namespace yoke::common

#endif  // YOKE_COMMON_READ_FILE_H_
