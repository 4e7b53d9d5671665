// DistributedContext through a real coordinator's per-attempt rendezvous
// (coordinator:HOST:PORT), the store trainers of a cluster job use.
#include <thread>

#include "common/clock.h"
#include "coordinator/grpc_service.h"
#include "coordinator/job_store.h"
#include "gtest/gtest.h"
#include "yoke/yoke.h"

namespace {

class CoordinatorRendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = yoke::server::Coordinator::Create(&jobs_, yoke::common::RealClock::Get(),
                                               yoke::server::CoordinatorOptions{});
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    yoke::server::ServerOptions so;
    so.listen = "127.0.0.1:0";
    auto s = yoke::server::CoordinatorServer::Start(coord_.get(), so);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    coord_->rendezvous()->Open("job-1", 3);
  }
  void TearDown() override {
    server_.reset();
    coord_.reset();
  }

  yoke::DistributedOptions Options(int rank, int attempt) const {
    yoke::DistributedOptions o;
    o.rank = rank;
    o.world_size = 2;
    o.rendezvous = "coordinator:" + server_->address();
    o.job_id = "job-1";
    o.attempt = attempt;
    o.timeout_seconds = 30;
    return o;
  }

  yoke::server::InMemoryJobStore jobs_;
  std::unique_ptr<yoke::server::Coordinator> coord_;
  std::unique_ptr<yoke::server::CoordinatorServer> server_;
};

// Two ranks join through the coordinator, and rank 1 gets rank 0's
// parameters.
TEST_F(CoordinatorRendezvousTest, TwoRanksJoinAndBroadcast) {
  std::vector<float> params[2];
  absl::Status status[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      status[r] = [&]() -> absl::Status {
        YOKE_ASSIGN_OR_RETURN(yoke::DistributedContext ctx,
                              yoke::DistributedContext::Create(Options(r, 3)));
        YOKE_ASSIGN_OR_RETURN(yoke::Model model, yoke::Model::FromZoo("mlp", {4, 4, 1}, 3, r + 1));
        YOKE_RETURN_IF_ERROR(ctx.BroadcastParameters(model));
        params[r] = model.Parameters();
        return ctx.Barrier();
      }();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  auto model0 = yoke::Model::FromZoo("mlp", {4, 4, 1}, 3, 1);
  EXPECT_EQ(params[1], model0->Parameters());
}

// An attempt the coordinator has not opened is refused, naming it.
TEST_F(CoordinatorRendezvousTest, StaleAttemptIsRefused) {
  auto ctx = yoke::DistributedContext::Create(Options(0, 2));
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), absl::StatusCode::kFailedPrecondition) << ctx.status();
  EXPECT_NE(ctx.status().message().find("job-1/2"), std::string::npos) << ctx.status();
}

TEST_F(CoordinatorRendezvousTest, NeedsAJobId) {
  yoke::DistributedOptions o = Options(0, 3);
  o.job_id.clear();
  auto ctx = yoke::DistributedContext::Create(o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.status().message().find("YOKE_JOB_ID"), std::string::npos) << ctx.status();
}

}  // namespace
