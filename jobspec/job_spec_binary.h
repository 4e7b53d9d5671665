// The binary form of a JobSpec: what the coordinator hands a worker and the
// worker hands its trainer (`yoke-trainer --spec-file FILE`).
//
// The spec is validated once, where it enters the system (the coordinator's
// Submit, or `yoke train` on a YAML file); the binary form carries an
// already-validated spec, so its reader checks only that the bytes are a
// JobSpec, not what the spec says. The file is the plain protobuf
// serialization of v1::JobSpec, at most kMaxJobSpecBytes long.
//
// Thread-safety: every function is safe to call from any thread.
#ifndef YOKE_JOBSPEC_JOB_SPEC_BINARY_H_
#define YOKE_JOBSPEC_JOB_SPEC_BINARY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

// Far above any real spec (a few KB), far below what a mistaken path (a
// dataset, a device) would make the trainer read into memory.
inline constexpr int64_t kMaxJobSpecBytes = 16 << 20;

// The spec's deterministic serialization: equal specs give equal bytes in
// one build, so its digest identifies the spec.
std::string SerializeJobSpec(const v1::JobSpec& spec);

// SHA-256 of SerializeJobSpec(spec): 32 raw bytes.
std::string JobSpecDigest(const v1::JobSpec& spec);

// Writes SerializeJobSpec(spec) to `path` (replacing it). FAILED_PRECONDITION
// naming the path if it cannot be written.
absl::Status WriteJobSpecFile(const std::string& path, const v1::JobSpec& spec);

// Reads a spec written by WriteJobSpecFile from `path`, or from standard
// input for "-". INVALID_ARGUMENT naming the path for anything that is not a
// regular file (a directory, a FIFO, a device; stdin may be a pipe), for
// more than `max_bytes`, for an empty file and for bytes that do not parse
// as a JobSpec; NOT_FOUND if it does not exist; FAILED_PRECONDITION if it
// cannot be opened or read.
absl::StatusOr<v1::JobSpec> ReadJobSpecFile(const std::string& path,
                                            int64_t max_bytes = kMaxJobSpecBytes);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_JOB_SPEC_BINARY_H_
