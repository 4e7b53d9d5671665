// Facts about job states that the coordinator and the CLI both rely on.
//
// Thread-safety: pure functions.
#ifndef YOKE_JOBSPEC_JOB_STATE_H_
#define YOKE_JOBSPEC_JOB_STATE_H_

#include "proto/yoke/v1/coordinator.pb.h"

namespace yoke::common {

// True for the states a job never leaves: SUCCEEDED, FAILED, CANCELLED.
inline bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED || s == v1::JOB_CANCELLED;
}

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_JOB_STATE_H_
