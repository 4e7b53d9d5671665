// The workers' advertised addresses (issue: multi-host): the coordinator
// keeps what each worker registered, lists it, hands every rank's worker and
// address to the trainers with an attempt's spec, and refuses an address no
// DNS name or IP could be.
#include <string>

#include "common/testing/fake_clock.h"
#include "config/config.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_store.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

v1::RegisterWorkerRequest Reg(const std::string& address) {
  v1::RegisterWorkerRequest r;
  r.set_hostname("host");
  r.set_address(address);
  v1::Device* d = r.add_devices();
  d->set_kind("cpu");
  d->set_index(0);
  return r;
}

class CoordinatorAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Coordinator::Create(&store_, &clock_, CoordinatorOptions{});
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
  }
  InMemoryJobStore store_;
  common::FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
};

TEST_F(CoordinatorAddressTest, AttemptsNameEveryRanksWorkerAndAddress) {
  auto w1 = coord_->RegisterWorker(Reg("10.0.0.5"));
  auto w2 = coord_->RegisterWorker(Reg("10.0.0.6"));
  ASSERT_TRUE(w1.ok() && w2.ok());

  std::map<std::string, std::string> listed;
  for (const v1::Worker& w : coord_->ListWorkers()) listed[w.id()] = w.address();
  EXPECT_EQ(listed[w1->worker_id()], "10.0.0.5");
  EXPECT_EQ(listed[w2->worker_id()], "10.0.0.6");

  auto spec = common::LoadJobSpecString(R"(
model: {zoo: mlp, hidden: [8]}
data: {train: {format: synthetic, shape: [4, 4, 1], num_classes: 2, num_examples: 64}}
training: {epochs: 1, batch_size: 8, optimizer: {type: sgd, lr: 0.1}}
distribution: {workers: 2}
)",
                                        {}, "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(coord_->Submit(*spec, 0).ok());

  for (const auto* w : {&*w1, &*w2}) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w->worker_id());
    auto r = coord_->Heartbeat(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->desired_size(), 1);
    const v1::DesiredAttempt& d = r->desired(0);
    ASSERT_EQ(d.rank_workers_size(), 2);
    ASSERT_EQ(d.rank_addresses_size(), 2);
    // The rank this worker runs is named with this worker's id and address.
    EXPECT_EQ(d.rank_workers(d.first_rank()), w->worker_id());
    EXPECT_EQ(d.rank_addresses(d.first_rank()), w == &*w1 ? "10.0.0.5" : "10.0.0.6");
    EXPECT_NE(d.rank_workers(0), d.rank_workers(1));
  }
}

TEST_F(CoordinatorAddressTest, AnAddressLongerThanAnyHostNameIsRefused) {
  auto r = coord_->RegisterWorker(Reg(std::string(300, 'a')));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("address"), std::string::npos) << r.status();
  EXPECT_TRUE(coord_->ListWorkers().empty());
}

}  // namespace
}  // namespace yoke::server
