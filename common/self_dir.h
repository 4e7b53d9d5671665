// Where the running executable lives. Yoke's binaries find each other there:
// `yoke` runs yoke-trainer, yoke-coordinator and yoke-worker from its own
// directory, and yoke-worker runs yoke-trainer from its own.
//
// Thread-safety: safe from any thread.
#ifndef YOKE_COMMON_SELF_DIR_H_
#define YOKE_COMMON_SELF_DIR_H_

#include <string>

namespace yoke::common {

// The directory of the running executable (from /proc/self/exe), without a
// trailing slash; "." when it cannot be read.
std::string SelfDir();

}  // namespace yoke::common

#endif  // YOKE_COMMON_SELF_DIR_H_
