// CoordinatorStore against a real coordinator gRPC server on loopback.
#include "collective/coordinator_store.h"

#include <thread>

#include "common/clock.h"
#include "coordinator/grpc_service.h"
#include "coordinator/job_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using ::testing::HasSubstr;

class CoordinatorStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c =
        server::Coordinator::Create(&jobs_, common::RealClock::Get(), server::CoordinatorOptions{});
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    Serve("127.0.0.1:0");
    coord_->rendezvous()->Open("job-1", 2);
  }
  void Serve(const std::string& listen) {
    server::ServerOptions so;
    so.listen = listen;
    auto s = server::CoordinatorServer::Start(coord_.get(), so);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  void TearDown() override {
    server_.reset();
    coord_.reset();
  }

  server::InMemoryJobStore jobs_;
  std::unique_ptr<server::Coordinator> coord_;
  std::unique_ptr<server::CoordinatorServer> server_;
};

TEST_F(CoordinatorStoreTest, SetThenGetAcrossStores) {
  CoordinatorStore a(server_->address(), "job-1", 2);
  CoordinatorStore b(server_->address(), "job-1", 2);
  ASSERT_TRUE(a.Set("nccl/id", std::string("\0\1\2", 3)).ok());
  auto v = b.Get("nccl/id", absl::Seconds(1));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("\0\1\2", 3));
}

TEST_F(CoordinatorStoreTest, GetWaitsForALaterSet) {
  CoordinatorStore s(server_->address(), "job-1", 2);
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(300));
    ASSERT_TRUE(s.Set("late", "v").ok());
  });
  auto v = s.Get("late", absl::Seconds(10));
  t.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
}

TEST_F(CoordinatorStoreTest, MissingKeyIsDeadlineExceededNamingKeyAndCoordinator) {
  CoordinatorStore s(server_->address(), "job-1", 2);
  auto v = s.Get("gloo/1", absl::Milliseconds(200));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("'gloo/1'"));
  EXPECT_THAT(v.status().message(), HasSubstr(server_->address()));
}

TEST_F(CoordinatorStoreTest, StaleAttemptIsRefused) {
  CoordinatorStore s(server_->address(), "job-1", 1);
  absl::Status st = s.Set("k", "v");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("job-1/1"));
}

TEST_F(CoordinatorStoreTest, UnreachableCoordinatorIsUnavailableAfterRetrying) {
  CoordinatorStoreOptions o;
  o.unavailable_timeout = absl::Milliseconds(500);
  CoordinatorStore s("127.0.0.1:1", "job-1", 2, o);
  const absl::Time start = absl::Now();
  absl::Status st = s.Set("k", "v");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(st.message(), HasSubstr("'k'"));
}

TEST_F(CoordinatorStoreTest, RetriesUntilTheCoordinatorComesBack) {
  const std::string address = server_->address();
  server_.reset();  // the coordinator restarts on the same port
  std::thread restart([&] {
    absl::SleepFor(absl::Milliseconds(500));
    Serve(address);
  });
  CoordinatorStore s(address, "job-1", 2);
  absl::Status st = s.Set("k", "v");
  restart.join();
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(*s.Get("k", absl::ZeroDuration()), "v");
}

}  // namespace
}  // namespace yoke::collective
