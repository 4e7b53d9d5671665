// SHA-256 (OpenSSL's), the one hash the project uses: job-spec digests
// (jobspec/job_spec_binary.h) and stored token hashes
// (coordinator/auth_store.cc).
#ifndef YOKE_SECURITY_SHA256_H_
#define YOKE_SECURITY_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace yoke::common {

// SHA-256 of `bytes`: 32 raw bytes.
std::string Sha256(absl::string_view bytes);

}  // namespace yoke::common

#endif  // YOKE_SECURITY_SHA256_H_
