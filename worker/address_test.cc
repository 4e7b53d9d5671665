#include "worker/address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::worker {
namespace {

using ::testing::HasSubstr;

TEST(AddressTest, SplitsHostAndPort) {
  std::string host, port;
  ASSERT_TRUE(SplitHostPort("10.0.0.5:7070", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.5");
  EXPECT_EQ(port, "7070");
  ASSERT_TRUE(SplitHostPort("[fe80::1]:80", &host, &port).ok());
  EXPECT_EQ(host, "fe80::1");
  EXPECT_EQ(port, "80");
  ASSERT_TRUE(SplitHostPort("coordinator.yoke.svc:7070", &host, &port).ok());
  EXPECT_EQ(host, "coordinator.yoke.svc");
  EXPECT_THAT(SplitHostPort("10.0.0.5", &host, &port).message(), HasSubstr("'10.0.0.5'"));
  EXPECT_FALSE(SplitHostPort("10.0.0.5:", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("[::1", &host, &port).ok());
}

TEST(AddressTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopback("127.0.0.1"));
  EXPECT_TRUE(IsLoopback("127.3.2.1"));
  EXPECT_TRUE(IsLoopback("::1"));
  EXPECT_TRUE(IsLoopback("localhost"));
  EXPECT_FALSE(IsLoopback("10.0.0.5"));
  EXPECT_FALSE(IsLoopback("128.0.0.1"));
  EXPECT_FALSE(IsLoopback("worker-1"));
}

TEST(AddressTest, TheRouteToALoopbackCoordinatorStartsOnLoopback) {
  absl::StatusOr<std::string> a = LocalAddressTowards("127.0.0.1:7070");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
  auto derived = ResolveAdvertiseAddress("", "127.0.0.1:7070");
  ASSERT_TRUE(derived.ok()) << derived.status();
  EXPECT_EQ(*derived, "127.0.0.1");
}

TEST(AddressTest, AnUnresolvableCoordinatorIsNamed) {
  absl::StatusOr<std::string> a = LocalAddressTowards("no-such-host.invalid:7070");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("no-such-host.invalid:7070"));
}

TEST(AddressTest, AConfiguredAddressWins) {
  auto a = ResolveAdvertiseAddress("10.1.2.3", "127.0.0.1:7070");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "10.1.2.3");
}

TEST(AddressTest, LoopbackIsRefusedWhenTheCoordinatorIsRemote) {
  auto a = ResolveAdvertiseAddress("127.0.0.1", "10.9.8.7:7070");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a.status().message(), HasSubstr("loopback"));
  EXPECT_THAT(a.status().message(), HasSubstr("10.9.8.7:7070"));
  EXPECT_THAT(a.status().message(), HasSubstr("--advertise-address"));
}

}  // namespace
}  // namespace yoke::worker
