#include "security/sha256.h"

#include <openssl/sha.h>

namespace yoke::common {

std::string Sha256(absl::string_view bytes) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), md);
  return std::string(reinterpret_cast<const char*>(md), sizeof(md));
}

}  // namespace yoke::common
