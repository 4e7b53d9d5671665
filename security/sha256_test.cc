#include "security/sha256.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(Sha256Test, MatchesTheStandardTestVectors) {
  // FIPS 180-2, appendix B.1 and B.2.
  EXPECT_EQ(absl::BytesToHexString(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      absl::BytesToHexString(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, HashesEmbeddedZerosAndTheEmptyString) {
  EXPECT_EQ(absl::BytesToHexString(Sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_NE(Sha256(std::string("a\0b", 3)), Sha256("a"));
  EXPECT_EQ(Sha256(std::string("a\0b", 3)).size(), 32u);
}

}  // namespace
}  // namespace yoke::common
