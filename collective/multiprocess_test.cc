// Ranks as real processes: collective_test_rank children bootstrap through a
// real coordinator (in this process, on loopback) and allreduce over Gloo.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/coordinator_store.h"
#include "collective/gloo_communicator.h"
#include "collective/shm_communicator.h"
#include "collective/testing/shm_segments.h"
#include "common/clock.h"
#include "common/testing/child_process.h"
#include "coordinator/grpc_service.h"
#include "coordinator/job_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using ::testing::HasSubstr;
using testing::ShmSegments;

std::string HelperPath() { return common::SiblingBinary("collective_test_rank"); }
using common::Spawn;
using common::WaitExit;

class MultiProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::CoordinatorOptions o;
    auto c = server::Coordinator::Create(&jobs_, common::RealClock::Get(), o);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    server::ServerOptions so;
    so.listen = "127.0.0.1:0";
    auto s = server::CoordinatorServer::Start(coord_.get(), so);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    coord_->rendezvous()->Open("job-mp", 1);
  }
  void TearDown() override {
    server_.reset();
    coord_.reset();
  }

  std::vector<std::string> Args(int rank, int size, const std::string& mode) {
    return {HelperPath(),
            absl::StrCat("--coordinator=", server_->address()),
            "--job=job-mp",
            "--attempt=1",
            absl::StrCat("--rank=", rank),
            absl::StrCat("--size=", size),
            "--count=100003",
            absl::StrCat("--mode=", mode)};
  }

  // The shared-memory path: both ranks on one host.
  std::vector<std::string> ShmArgs(int rank, const std::string& mode) {
    std::vector<std::string> a = Args(rank, 2, mode);
    a.push_back("--rank_hosts=w-1@127.0.0.1,w-2@127.0.0.1");
    a.push_back("--dtype=f32");
    return a;
  }

  server::InMemoryJobStore jobs_;
  std::unique_ptr<server::Coordinator> coord_;
  std::unique_ptr<server::CoordinatorServer> server_;
};

TEST_F(MultiProcessTest, TwoProcessesAllreduceThroughTheCoordinator) {
  const pid_t a = Spawn(Args(0, 2, "allreduce"));
  const pid_t b = Spawn(Args(1, 2, "allreduce"));
  EXPECT_EQ(WaitExit(a), 0);
  EXPECT_EQ(WaitExit(b), 0);
}

TEST_F(MultiProcessTest, KilledPeerProcessFailsTheOpWithoutHanging) {
  // Rank 0 is this process; rank 1 a child that stops after one allreduce.
  const pid_t child = Spawn(Args(1, 2, "hang"));
  CoordinatorStore store(server_->address(), "job-mp", 1);
  GlooOptions o;
  o.hang_grace = absl::Seconds(1);
  auto comm = CreateGlooCommunicator(&store, 0, 2, o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<int64_t> buf(100003);
  for (int64_t i = 0; i < 100003; ++i) buf[i] = i;
  ASSERT_TRUE((*comm)->Allreduce(Buffer{buf.data(), 100003, DataType::kI64}, {})->Wait().ok());
  EXPECT_EQ(buf[5], 1000 + 10);

  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  AllreduceOptions ao;
  ao.timeout = absl::Seconds(30);
  const absl::Time start = absl::Now();
  absl::Status s = (*comm)->Allreduce(Buffer{buf.data(), 100003, DataType::kI64}, ao)->Wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("allreduce #2 on rank 0 of 2 failed"));
  EXPECT_THAT(s.message(), HasSubstr("ranks 1 did not answer"));
}

TEST_F(MultiProcessTest, TwoProcessesOnOneHostAllreduceThroughSharedMemory) {
  const pid_t a = Spawn(ShmArgs(0, "allreduce"));
  const pid_t b = Spawn(ShmArgs(1, "allreduce"));
  EXPECT_EQ(WaitExit(a), 0);
  EXPECT_EQ(WaitExit(b), 0);
}

TEST_F(MultiProcessTest, KilledLocalPeerFailsTheShmAllreduceNamingIt) {
  const std::set<std::string> before = ShmSegments();
  // Rank 0 is this process; rank 1 a child on the same "host" that stops
  // after one allreduce.
  const pid_t child = Spawn(ShmArgs(1, "hang"));
  CoordinatorStore store(server_->address(), "job-mp", 1);
  GlooOptions o;
  o.hang_grace = absl::Seconds(1);
  o.rank_hosts = {"w-1@127.0.0.1", "w-2@127.0.0.1"};
  auto comm = CreateCommunicator(&store, 0, 2, o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> buf(100003);
  for (int64_t i = 0; i < 100003; ++i) buf[i] = static_cast<float>(i);
  ASSERT_TRUE((*comm)->Allreduce(Buffer{buf.data(), 100003}, {})->Wait().ok());
  EXPECT_EQ(buf[5], 1000 + 10);

  // Killed but not reaped yet: a zombie still answers kill(pid, 0), and
  // must count as dead all the same.
  kill(child, SIGKILL);
  AllreduceOptions ao;
  ao.timeout = absl::Seconds(30);
  const absl::Time start = absl::Now();
  absl::Status s = (*comm)->Allreduce(Buffer{buf.data(), 100003}, ao)->Wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("allreduce #2 on rank 0 of 2 failed: local rank 1 (pid " +
                                     std::to_string(child) + ") died"));
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  comm->reset();
  std::set<std::string> added;
  for (const auto& n : ShmSegments()) {
    if (!before.count(n)) added.insert(n);
  }
  EXPECT_TRUE(added.empty()) << "left in /dev/shm: " << *added.begin();
}

}  // namespace
}  // namespace yoke::collective
