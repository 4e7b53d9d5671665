// A PS task's audit of the data (ps/runtime/wire.h): it takes each worker's
// data steps in order and each once. A correct PsClient cannot push out of
// order, so these tests speak the wire themselves, over a real link: a step
// pushed twice, or one skipped outside a rejoin, ends the PS task with an
// error that names the worker and the steps.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collective/store.h"
#include "engine/optim/schedule.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/runtime/links.h"
#include "ps/runtime/shard_server.h"
#include "ps/runtime/wire.h"
#include "ps/shard_map.h"

namespace yoke::ps {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kFloats = 64;

// One worker's raw side of its link to the one PS task.
struct RawWorker {
  std::shared_ptr<gloo::Context> link;
  std::vector<float> grads = std::vector<float>(kFloats, 1.0f);
  std::vector<float> values = std::vector<float>(kFloats, 0.0f);

  void Push(int64_t clock, int64_t step) {
    PushHeader h{clock, 1, step};
    auto head = link->createUnboundBuffer(&h, sizeof(h));
    auto body = link->createUnboundBuffer(grads.data(), grads.size() * sizeof(float));
    head->send(kLinkPs, static_cast<uint64_t>(Slot::kHeader));
    body->send(kLinkPs, static_cast<uint64_t>(Slot::kGrads));
    head->waitSend();
    body->waitSend();
  }
  void Pull() {
    auto answer = link->createUnboundBuffer(values.data(), values.size() * sizeof(float));
    answer->recv(kLinkPs, static_cast<uint64_t>(Slot::kParams));
    answer->waitRecv();
  }
};

struct Case {
  const char* name;
  int64_t second_step;  // the data step of the worker's second push
  const char* said;
};

class DataStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(DataStepTest, APushOutOfOrderEndsThePsTaskNamingTheSteps) {
  collective::InMemoryStore store;
  const ShardMap map = BuildShardMap(kFloats, 1).value();
  ServerOptions so;
  so.consistency = Consistency::kAsync;
  so.timeout = absl::Seconds(20);
  so.start_step = 7;
  v1::OptimizerSpec sgd;
  sgd.set_type("sgd");
  sgd.set_lr(0.5f);
  const std::vector<float> initial(kFloats, 1.0f);
  auto server =
      ShardServer::Create(&store, 1, map.shards[0], initial.data(), sgd,
                          engine::CreateSchedule(v1::ScheduleSpec(), 0.5f, 100).value(), so);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Status served;
  std::thread ps([&] { served = (*server)->Run(); });
  auto links = ConnectWorkerLinks(&store, 0, 0, map, [](int) { return collective::GlooOptions(); });
  ASSERT_TRUE(links.ok()) << links.status();
  RawWorker w{links->at(0)};
  w.Push(0, 7);  // the attempt's first step
  w.Pull();
  EXPECT_EQ(w.values[0], 0.5f) << "the first push was applied";
  w.Push(1, GetParam().second_step);
  ps.join();
  ASSERT_FALSE(served.ok());
  EXPECT_EQ(served.code(), absl::StatusCode::kInvalidArgument) << served;
  EXPECT_THAT(served.message(),
              HasSubstr("worker 0's data step " + std::to_string(GetParam().second_step)));
  EXPECT_THAT(served.message(), HasSubstr("its next is 8"));
  EXPECT_THAT(served.message(), HasSubstr(GetParam().said));
  const ServerStats st = (*server)->stats();
  ASSERT_EQ(st.workers.size(), 1u);
  EXPECT_EQ(st.workers[0].pushes, 1);
  EXPECT_EQ(st.updates, 1) << "the refused push was not applied";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DataStepTest,
    ::testing::Values(Case{"Repeated", 7, "its examples would count twice"},
                      Case{"Skipped", 9, "the examples of the steps between would be lost"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace yoke::ps
