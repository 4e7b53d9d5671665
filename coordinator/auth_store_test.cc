#include "coordinator/auth_store.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace yoke::server {
namespace {

using common::Role;

std::string TempDb(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::filesystem::remove(path);
  return path;
}

TEST(AuthStoreTest, ATokenIsItsRoleAndNameUntilItExpires) {
  auto store = AuthStore::Open(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::Time t0 = absl::Now();
  auto token = (*store)->CreateToken(Role::kSubmitter, "ci-bot", absl::Hours(1), t0);
  ASSERT_TRUE(token.ok()) << token.status();
  auto info = (*store)->CheckToken(*token, t0 + absl::Minutes(59));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->role, Role::kSubmitter);
  EXPECT_EQ(info->name, "ci-bot");
  auto late = (*store)->CheckToken(*token, t0 + absl::Minutes(61));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(late.status().message().find("expired"), absl::string_view::npos) << late.status();
}

TEST(AuthStoreTest, AWrongSecretOrARevokedTokenIsRefusedWithoutEchoingIt) {
  auto store = AuthStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  const absl::Time now = absl::Now();
  auto token = (*store)->CreateToken(Role::kViewer, "grafana", absl::Hours(1), now);
  ASSERT_TRUE(token.ok());
  std::string forged = *token;
  forged.back() = forged.back() == '0' ? '1' : '0';
  auto r = (*store)->CheckToken(forged, now);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
  const std::string secret = token->substr(token->find('.') + 1);
  EXPECT_EQ(r.status().message().find(secret.substr(0, 16)), absl::string_view::npos);
  EXPECT_EQ((*store)->CheckToken("Basic abc", now).status().code(),
            absl::StatusCode::kUnauthenticated);

  const std::string id = token->substr(5, 16);
  ASSERT_TRUE((*store)->RevokeToken(id).ok());
  auto revoked = (*store)->CheckToken(*token, now);
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(revoked.status().message().find("revoked"), absl::string_view::npos);
  EXPECT_EQ((*store)->RevokeToken("0123456789abcdef").code(), absl::StatusCode::kNotFound);
}

TEST(AuthStoreTest, TokensAreForPeopleNotWorkersAndNeedASaneTtl) {
  auto store = AuthStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  const absl::Time now = absl::Now();
  EXPECT_EQ((*store)->CreateToken(Role::kWorker, "w-1", absl::Hours(1), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->CreateToken(Role::kAdmin, "a b", absl::Hours(1), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->CreateToken(Role::kAdmin, "a", absl::ZeroDuration(), now).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AuthStoreTest, TokensAndTheRendezvousKeySurviveARestartAndOnlyHashesAreStored) {
  const std::string path = TempDb("auth_store_test.db");
  std::string token, secret_before;
  {
    auto store = AuthStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    token = *(*store)->CreateToken(Role::kAdmin, "ops", absl::Hours(1), absl::Now());
    secret_before = (*store)->RendezvousSecret("job-000001", 1);
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  EXPECT_EQ(bytes.str().find(token.substr(token.find('.') + 1)), std::string::npos)
      << "the token's secret is in the file";
  auto store = AuthStore::Open(path);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->CheckToken(token, absl::Now()).ok());
  EXPECT_EQ((*store)->RendezvousSecret("job-000001", 1), secret_before);
  std::filesystem::remove(path);
}

TEST(AuthStoreTest, RendezvousSecretsDifferPerAttemptAndPerStore) {
  auto a = AuthStore::Open(":memory:");
  auto b = AuthStore::Open(":memory:");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string s = (*a)->RendezvousSecret("job-000001", 1);
  EXPECT_EQ(s.size(), 64u);
  EXPECT_NE(s, (*a)->RendezvousSecret("job-000001", 2));
  EXPECT_NE(s, (*a)->RendezvousSecret("job-000002", 1));
  EXPECT_NE(s, (*b)->RendezvousSecret("job-000001", 1));
}

}  // namespace
}  // namespace yoke::server
