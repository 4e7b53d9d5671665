// The parameter-server runtime on real Gloo links over loopback, every rank
// a thread: sync against the allreduce reducer, bounded s = 0 against sync,
// the staleness bound with one worker held, async, and a missing push.
#include "ps/runtime/shard_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collective/reducer.h"
#include "collective/store.h"
#include "collective/testing/gloo_ranks.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/testing/random.h"
#include "gloo/context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/runtime/links.h"
#include "ps/runtime/ps_client.h"

namespace yoke::ps {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 5;
constexpr int64_t kMinShardBytes = 16 << 10;  // so that the MLP spreads over 2 PS tasks

v1::OptimizerSpec Sgd() {
  v1::OptimizerSpec o;
  o.set_type("sgd");
  o.set_lr(0.05f);
  o.set_momentum(0.9f);
  return o;
}

v1::OptimizerSpec Adam() {
  v1::OptimizerSpec o;
  o.set_type("adam");
  o.set_lr(1e-3f);
  return o;
}

// One worker's model: the zoo MLP on 28x28 inputs, every step on its own
// random batch (worker w's batch has 32 - 8w examples, so the workers'
// sample counts differ).
struct Replica {
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::Loss> loss;
  int worker = 0;

  explicit Replica(int w) : worker(w) {
    v1::ModelSpec spec;
    spec.set_zoo("mlp");
    model = engine::Model::Create(spec, {28, 28, 1}, 10).value();
    model->params().Initialize(kSeed);
    loss = engine::CreateLoss("softmax_cross_entropy").value();
  }
  engine::ParamSet& params() { return model->params(); }
  int64_t batch() const { return 32 - 8 * (worker % 3); }

  // Leaves d(sum of the batch's losses)/d theta in the flat gradients,
  // telling `ready` of each parameter as backward finishes it.
  void Backward(int64_t step, const engine::Model::GradReadyFn& ready = nullptr) {
    const int64_t n = batch();
    std::vector<float> x =
        engine::testing::UniformVector(n * 784, kSeed, 1000 * step + worker, 0.0f, 1.0f);
    std::vector<float> u = engine::testing::UniformVector(n, kSeed + 1, 1000 * step + worker);
    std::vector<int32_t> y(n);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>((u[i] + 1.0f) * 4.99f);
    engine::LayerContext ctx;
    ctx.seed = kSeed;
    ctx.step = step;
    auto logits =
        model->Forward(engine::Tensor::Wrap(x.data(), {n, 28, 28, 1}, engine::DType::kF32), ctx);
    ASSERT_TRUE(logits.ok()) << logits.status();
    engine::Tensor dlogits = engine::Tensor::Empty(logits->shape());
    ASSERT_TRUE(loss->Compute(*logits, engine::Tensor::Wrap(y.data(), {n}, engine::DType::kI32),
                              1.0f, &dlogits)
                    .ok());
    ASSERT_TRUE(model->Backward(dlogits, ctx, ready).ok());
  }
  std::vector<float> Values() {
    const engine::Tensor& v = params().flat_values();
    return std::vector<float>(v.data<float>(), v.data<float>() + v.numel());
  }
};

std::unique_ptr<engine::LrSchedule> Constant(const v1::OptimizerSpec& o) {
  return engine::CreateSchedule(v1::ScheduleSpec(), o.lr(), 1000).value();
}

// The reference: `workers` replicas averaging gradients with the reducer
// over Gloo, as the data-parallel trainer does. Rank 0's values after
// `steps` steps.
std::vector<float> Allreduce(int workers, const v1::OptimizerSpec& opt, int64_t steps) {
  collective::InMemoryStore store;
  auto comms = collective::testing::ConnectGloo(workers, &store);
  std::vector<std::vector<float>> out(workers);
  collective::testing::OnEveryRank(comms, [&](int r, collective::Communicator& comm) {
    Replica rep(r);
    engine::ParamSet& ps = rep.params();
    std::vector<collective::ParamRange> ranges;
    for (const auto& e : ps.entries()) ranges.push_back({e.offset, engine::NumElements(e.shape)});
    collective::Buffer grads{ps.flat_grads().data<float>(), ps.flat_grads().numel()};
    auto reducer = collective::Reducer::Create(&comm, grads, ranges, {}).value();
    auto optimizer = engine::CreateOptimizer(opt, &ps).value();
    auto schedule = Constant(opt);
    for (int64_t t = 0; t < steps; ++t) {
      rep.Backward(t);
      ASSERT_TRUE(reducer->Prepare(rep.batch()).ok());
      auto totals = reducer->Finish();
      ASSERT_TRUE(totals.ok()) << totals.status();
      ASSERT_TRUE(
          optimizer->Step(schedule->Lr(t), 1.0f / static_cast<float>(totals->samples)).ok());
    }
    out[r] = rep.Values();
  });
  return out[0];
}

// A checkpoint's worth of a PS job: values, optimizer state, update count.
struct Snap {
  std::vector<float> values;
  std::vector<std::pair<std::string, engine::Tensor>> state;  // whole-model arrays
  int64_t steps = -1;                                         // -1: none taken
};

struct PsRun {
  int workers = 2;
  int ps_tasks = 1;
  ServerOptions server;
  // The workers' timeout for an answer (zero: server.timeout's).
  absl::Duration client_timeout = absl::ZeroDuration();
  v1::OptimizerSpec optimizer = Sgd();
  int64_t steps = 50;
  // Called by worker w before its step t (to hold it); may be empty.
  std::function<void(int w, int64_t t)> before_step;
  bool train = true;  // false: constant gradients, no model (faster)
  // Worker 0 takes a snapshot after its step `snapshot_after` (-1: none).
  int64_t snapshot_after = -1;
  // Start from this snapshot, at step `first_step`, instead of the seed.
  const Snap* from = nullptr;
  int64_t first_step = 0;
  // Worker 0 also takes a snapshot after its last step: the final model
  // (under bounded, a worker's last pull may miss the others' last steps).
  bool final_snapshot = false;
  // Workers push each shard during backward (BeginStep, MarkReady,
  // FinishStep) instead of after it (PushPull).
  bool overlap = false;
};

struct PsResult {
  std::vector<std::vector<float>> values;  // per worker, after its last step
  std::vector<absl::Status> status;        // per rank
  std::vector<ServerStats> servers;
  std::vector<ClientStats> clients;
  Snap snapshot;  // worker 0's, with snapshot_after
  Snap final;     // worker 0's, with final_snapshot
};

// A snapshot through `client` into `out`; the state arrays are named and
// sized as an optimizer of `opt` over the worker's model names them.
absl::Status TakeSnapshot(PsClient& client, Replica& rep, const v1::OptimizerSpec& opt, Snap* out) {
  auto optimizer = engine::CreateOptimizer(opt, &rep.params());
  if (!optimizer.ok()) return optimizer.status();
  std::vector<float*> state;
  for (const auto& [name, t] : (*optimizer)->State()) {
    out->state.emplace_back(name, engine::Tensor::Empty(t.shape()));
    state.push_back(out->state.back().second.data<float>());
  }
  out->values.resize(rep.params().flat_values().numel());
  return client.Snapshot(out->values.data(), state, &out->steps);
}

// The job: ranks [0, workers) are workers, the rest PS tasks.
PsResult RunPs(const PsRun& run) {
  const int size = run.workers + run.ps_tasks;
  Replica init(0);
  const std::vector<float> initial = run.from ? run.from->values : init.Values();
  const ShardMap map =
      BuildShardMap(static_cast<int64_t>(initial.size()), run.ps_tasks, kMinShardBytes).value();
  collective::InMemoryStore store;
  PsResult res;
  res.values.resize(run.workers);
  res.status.resize(size);
  res.servers.resize(run.ps_tasks);
  res.clients.resize(run.workers);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      if (r >= run.workers) {
        const int k = r - run.workers;
        if (k >= static_cast<int>(map.shards.size())) return;  // an idle PS task
        const Shard& shard = map.shards[k];
        auto server = ShardServer::Create(&store, run.workers, shard, initial.data() + shard.offset,
                                          run.optimizer, Constant(run.optimizer), run.server);
        if (server.ok() && run.from != nullptr) {
          res.status[r] = (*server)->RestoreOptimizer(run.from->state, run.from->steps);
          if (!res.status[r].ok()) return;
        }
        res.status[r] = server.ok() ? (*server)->Run() : server.status();
        if (server.ok()) res.servers[k] = (*server)->stats();
        return;
      }
      Replica rep(r);
      std::copy(initial.begin(), initial.end(), rep.params().flat_values().data<float>());
      auto links =
          ConnectWorkerLinks(&store, r, 0, map, [](int) { return collective::GlooOptions(); });
      if (!links.ok()) {
        res.status[r] = links.status();
        return;
      }
      auto client = PsClient::Create(
          *links, r, map,
          run.client_timeout > absl::ZeroDuration() ? run.client_timeout : run.server.timeout);
      if (!client.ok()) {
        res.status[r] = client.status();
        return;
      }
      std::vector<float> constant(initial.size(), 1e-3f * static_cast<float>(r + 1));
      if (run.overlap) {
        std::vector<std::pair<int64_t, int64_t>> params;
        for (const auto& e : rep.params().entries()) {
          params.emplace_back(e.offset, engine::NumElements(e.shape));
        }
        (*client)->SetParams(params);
      }
      for (int64_t t = run.first_step; t < run.steps && res.status[r].ok(); ++t) {
        if (run.before_step) run.before_step(r, t);
        float* values = rep.params().flat_values().data<float>();
        if (run.overlap) {
          res.status[r] =
              (*client)->BeginStep(rep.params().flat_grads().data<float>(), values, rep.batch());
          if (!res.status[r].ok()) break;
          PsClient* c = client->get();
          rep.Backward(t, [c](int p) { c->MarkReady(p); });
          res.status[r] = (*client)->FinishStep();
        } else {
          if (run.train) rep.Backward(t);
          const float* g = run.train ? rep.params().flat_grads().data<float>() : constant.data();
          res.status[r] = (*client)->PushPull(g, values, rep.batch());
        }
        if (r == 0 && t == run.snapshot_after && res.status[r].ok()) {
          res.status[r] = TakeSnapshot(**client, rep, run.optimizer, &res.snapshot);
        }
      }
      if (r == 0 && run.final_snapshot && res.status[r].ok()) {
        res.status[r] = TakeSnapshot(**client, rep, run.optimizer, &res.final);
      }
      if (res.status[r].ok()) res.status[r] = (*client)->Leave();
      res.values[r] = rep.Values();
      res.clients[r] = (*client)->stats();
    });
  }
  for (auto& t : threads) t.join();
  return res;
}

double RelMaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

void ExpectAllOk(const PsResult& r) {
  for (size_t i = 0; i < r.status.size(); ++i)
    EXPECT_TRUE(r.status[i].ok()) << i << ": " << r.status[i];
}

class SyncEqualsAllreduce : public ::testing::TestWithParam<int> {};

// 2 workers and 1 or 2 PS tasks under sync equal 2 allreduce replicas after
// 50 steps (the bound: 1e-6 of the largest parameter); PS 1 runs
// Adam, whose state lives on the PS.
TEST_P(SyncEqualsAllreduce, After50Steps) {
  PsRun run;
  run.ps_tasks = GetParam();
  run.optimizer = GetParam() == 1 ? Sgd() : Adam();
  const PsResult ps = RunPs(run);
  ExpectAllOk(ps);
  const std::vector<float> want = Allreduce(2, run.optimizer, run.steps);
  EXPECT_EQ(ps.values[0], ps.values[1]);  // every worker pulled the same values
  const double d = RelMaxDiff(ps.values[0], want);
  std::printf(
      "[ measured ] sync, 2 workers + %d PS (%s), 50 steps vs allreduce: "
      "max |diff| / max |w| = %.3g\n",
      run.ps_tasks, run.optimizer.type().c_str(), d);
  EXPECT_LE(d, 1e-6);
  int64_t updates = 0;
  for (const ServerStats& s : ps.servers) {
    EXPECT_EQ(s.pushes, 2 * run.steps);
    updates = std::max(updates, s.updates);
  }
  EXPECT_EQ(updates, run.steps);  // one update per step, not per push
  // The trained values moved: the comparison is not of two untouched models.
  EXPECT_GT(RelMaxDiff(Replica(0).Values(), want), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(PsTasks, SyncEqualsAllreduce, ::testing::Values(1, 2));

TEST(BoundedTest, StalenessZeroIsSyncToTheBit) {
  PsRun run;
  run.workers = 3;
  run.ps_tasks = 2;
  run.optimizer = Adam();
  run.steps = 20;
  const PsResult sync = RunPs(run);
  run.server.consistency = Consistency::kBounded;
  run.server.max_staleness = 0;
  const PsResult bounded = RunPs(run);
  ExpectAllOk(sync);
  ExpectAllOk(bounded);
  EXPECT_EQ(sync.values[0], bounded.values[0]);
  EXPECT_EQ(sync.values[2], bounded.values[0]);
}

// One worker alone: async applies each push as the update sync would.
TEST(AsyncTest, OneWorkerEqualsSync) {
  PsRun run;
  run.workers = 1;
  run.steps = 10;
  const PsResult sync = RunPs(run);
  run.server.consistency = Consistency::kAsync;
  const PsResult async = RunPs(run);
  ExpectAllOk(sync);
  ExpectAllOk(async);
  EXPECT_EQ(sync.values[0], async.values[0]);
}

// With s = 2 and worker 2 held before its first step, workers 0 and 1 finish
// exactly 2 steps and wait; each step worker 2 takes lets them take one more.
TEST(BoundedTest, FastWorkersRunExactlySStepsAhead) {
  constexpr int64_t kS = 2;
  std::atomic<int64_t> allowed{0};
  std::atomic<int64_t> started[3] = {0, 0, 0};  // steps begun, per worker
  PsRun run;
  run.workers = 3;
  run.steps = 8;
  run.train = false;
  run.server.consistency = Consistency::kBounded;
  run.server.max_staleness = kS;
  run.before_step = [&](int w, int64_t t) {
    if (w == 2) {
      while (allowed.load() <= t) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    started[w].store(t + 1);
  };
  std::thread check([&] {
    // Worker w has finished step t once it has started step t + 1.
    auto settle = [&](int64_t want) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while ((started[0].load() < want + 1 || started[1].load() < want + 1) &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // would they go further?
      EXPECT_EQ(started[0].load(), want + 1) << "worker 0 with worker 2 at step " << want - kS;
      EXPECT_EQ(started[1].load(), want + 1) << "worker 1 with worker 2 at step " << want - kS;
    };
    settle(kS);  // worker 2 before step 0: the others are in step kS, waiting for its answer
    for (int64_t k = 1; k <= 3; ++k) {
      allowed.store(k);
      settle(kS + k);
    }
    allowed.store(run.steps);
  });
  const PsResult r = RunPs(run);
  check.join();
  ExpectAllOk(r);
  EXPECT_EQ(r.servers[0].updates, run.steps);
  EXPECT_GT(r.servers[0].held_answers, 0);
  EXPECT_GT(r.clients[0].longest_wait, 0.25);  // it waited for worker 2
}

// Under async nobody waits for the held worker: workers 0 and 1 finish all
// their steps while worker 2 has not begun, and every push is an update.
TEST(AsyncTest, NobodyWaitsForAHeldWorker) {
  std::atomic<int64_t> allowed{0};
  std::atomic<int> finished{0};
  PsRun run;
  run.workers = 3;
  run.steps = 8;
  run.train = false;
  run.server.consistency = Consistency::kAsync;
  run.before_step = [&](int w, int64_t t) {
    if (w != 2) {
      if (t == run.steps - 1) finished.fetch_add(1);
      return;
    }
    while (allowed.load() <= t) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  std::thread release([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (finished.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(finished.load(), 2);
    allowed.store(run.steps);
  });
  const PsResult r = RunPs(run);
  release.join();
  ExpectAllOk(r);
  EXPECT_EQ(r.servers[0].updates, 3 * run.steps);
  EXPECT_EQ(r.servers[0].held_answers, 0);
}

// Snapshots after step 19 of 50, by worker 0. `run` is the job; `reference`
// gives the values an unbroken job has after n steps. The snapshot must hold
// reference(20) to the bit, taking it must change nothing after it, and 2
// fresh PS tasks restored from it must train steps 20..49 to reference(50);
// restored without the optimizer state (zeros, step 0) they must not.
void ExpectSnapshotIsACutThatRestores(PsRun run,
                                      const std::function<std::vector<float>(int64_t)>& reference) {
  run.steps = 50;
  run.snapshot_after = 19;
  run.final_snapshot = true;
  const PsResult whole = RunPs(run);
  ExpectAllOk(whole);
  ASSERT_EQ(whole.snapshot.steps, 20);
  EXPECT_EQ(whole.snapshot.values, reference(20));
  const std::vector<float> want = reference(50);
  EXPECT_EQ(whole.final.values, want);
  for (const ServerStats& st : whole.servers) {
    EXPECT_EQ(st.snapshots, 2);
  }
  PsRun resumed = run;
  resumed.snapshot_after = -1;
  resumed.before_step = nullptr;
  resumed.from = &whole.snapshot;
  resumed.first_step = 20;
  const PsResult rest = RunPs(resumed);
  ExpectAllOk(rest);
  EXPECT_EQ(rest.final.values, want);
  EXPECT_EQ(rest.final.steps, 50);
  Snap values_only = whole.snapshot;
  for (auto& [name, t] : values_only.state) std::fill_n(t.data<float>(), t.numel(), 0.0f);
  values_only.steps = 0;
  resumed.from = &values_only;
  const PsResult fresh = RunPs(resumed);
  ExpectAllOk(fresh);
  EXPECT_GT(RelMaxDiff(fresh.final.values, want), 1e-6);
}

// Sync with Adam over 2 PS tasks: the snapshot is 20 allreduce steps.
TEST(SnapshotTest, SyncIsTheAllreduceCutAndRestores) {
  PsRun run;
  run.ps_tasks = 2;
  run.optimizer = Adam();
  ExpectSnapshotIsACutThatRestores(run, [&](int64_t n) { return Allreduce(2, run.optimizer, n); });
}

// Bounded s = 2 with worker 1 held 300 ms before its step 18: worker 0 asks
// for its snapshot after step 19 while step 19's update still waits for
// worker 1, and the answer waits for it. With constant gradients the
// updates do not depend on staleness, so the cut is sync's to the bit
// (momentum SGD: the state matters on restore).
TEST(SnapshotTest, BoundedWaitsForTheStepsUpdate) {
  PsRun run;
  run.ps_tasks = 2;
  run.train = false;
  run.server.consistency = Consistency::kBounded;
  run.server.max_staleness = 2;
  run.before_step = [](int w, int64_t t) {
    if (w == 1 && t == 18) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  ExpectSnapshotIsACutThatRestores(run, [&](int64_t n) {
    PsRun sync;
    sync.ps_tasks = 2;
    sync.train = false;
    sync.steps = n;
    sync.final_snapshot = true;
    return RunPs(sync).final.values;
  });
}

// Shards pushed during backward, as each becomes whole, change nothing:
// sync over 2 PS tasks still equals allreduce to the bit, and most shards
// went out before backward ended (the MLP's last layers, in the higher
// shard, finish first).
TEST(OverlapTest, PushesDuringBackwardEqualAllreduce) {
  PsRun run;
  run.ps_tasks = 2;
  run.optimizer = Adam();
  run.steps = 20;
  run.overlap = true;
  const PsResult ps = RunPs(run);
  ExpectAllOk(ps);
  EXPECT_EQ(ps.values[0], Allreduce(2, run.optimizer, run.steps));
  EXPECT_EQ(ps.values[1], ps.values[0]);
  for (const ClientStats& c : ps.clients) {
    EXPECT_EQ(c.pushes, run.steps);
    // Each step pushes both shards; the last one completes with backward's
    // last parameter, still inside backward.
    EXPECT_EQ(c.early_pushes, 2 * run.steps);
  }
}

// Async: the snapshot is what the shard holds when asked; one worker alone
// makes that exactly its own steps' updates.
TEST(SnapshotTest, AsyncOneWorkerHoldsItsSteps) {
  PsRun run;
  run.workers = 1;
  run.steps = 12;
  run.snapshot_after = 6;
  run.server.consistency = Consistency::kAsync;
  const PsResult r = RunPs(run);
  ExpectAllOk(r);
  EXPECT_EQ(r.snapshot.steps, 7);
  run.steps = 7;
  run.snapshot_after = -1;
  run.server.consistency = Consistency::kSync;
  EXPECT_EQ(r.snapshot.values, RunPs(run).values[0]);
}

// A worker that never pushes: the PS task names it, and the worker whose
// answer it holds names the PS task.
TEST(ErrorsTest, AMissingPushIsNamed) {
  PsRun run;
  run.workers = 2;
  run.steps = 3;
  run.train = false;
  run.server.timeout = absl::Milliseconds(800);
  // Worker 0 waits longer for its answer than the PS task for the push:
  // with equal timeouts worker 0 sometimes gave up first, and its link's
  // break then reached the PS task before its own timeout.
  run.client_timeout = absl::Milliseconds(1600);
  run.before_step = [&](int w, int64_t t) {
    if (w == 1 && t == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
  };
  const PsResult r = RunPs(run);
  ASSERT_FALSE(r.status[2].ok());
  EXPECT_EQ(r.status[2].code(), absl::StatusCode::kDeadlineExceeded) << r.status[2];
  EXPECT_THAT(r.status[2].message(), HasSubstr("PS task 0"));
  EXPECT_THAT(r.status[2].message(), HasSubstr("worker 1 (step 1)"));
  ASSERT_FALSE(r.status[0].ok());
  EXPECT_THAT(r.status[0].message(), HasSubstr("worker 0"));
  EXPECT_THAT(r.status[0].message(), HasSubstr("PS task 0"));
}

// Abort, as a failed sibling replica calls it from another thread: a PS task
// waiting for pushes and a worker waiting for its answer both return ABORTED
// at once, long before their timeout.
TEST(ErrorsTest, AbortEndsThePsTasksAndTheWorkersWaits) {
  collective::InMemoryStore store;
  const ShardMap map = BuildShardMap(1000, 1).value();
  std::vector<float> values(1000, 0.5f), grads(1000, 0.1f);
  ServerOptions so;
  so.timeout = absl::Seconds(60);
  auto server =
      ShardServer::Create(&store, 2, map.shards[0], values.data(), Sgd(), Constant(Sgd()), so)
          .value();
  absl::Status served, pushed;
  const auto start = std::chrono::steady_clock::now();
  std::thread ps([&] { served = server->Run(); });
  auto links =
      ConnectWorkerLinks(&store, 0, 0, map, [](int) { return collective::GlooOptions(); }).value();
  auto client = PsClient::Create(links, 0, map, absl::Seconds(60)).value();
  // Worker 0 pushes step 0; under sync its answer waits for worker 1, who
  // never pushes.
  std::thread worker([&] { pushed = client->PushPull(grads.data(), values.data(), 8); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  client->Abort();
  worker.join();
  server->Abort();
  ps.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(pushed.code(), absl::StatusCode::kAborted) << pushed;
  EXPECT_EQ(served.code(), absl::StatusCode::kAborted) << served;
  EXPECT_THAT(served.message(), HasSubstr("PS task 0"));
  EXPECT_LT(seconds, 10);
  // An aborted client is done: the next step is refused at once.
  EXPECT_EQ(client->PushPull(grads.data(), values.data(), 8).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace yoke::ps
