// DistributedContext (include/yoke/distributed.h): ranks as threads of this
// process, joined through a real file rendezvous and real Gloo.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "yoke/yoke.h"

namespace {

using yoke::common::TempDir;

const std::vector<int64_t> kShape = {2, 2, 1};

// `n` examples of kShape, different for each `salt`.
yoke::Batch MakeBatch(int n, int salt) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) x.push_back(std::sin(1.0f + salt * 7 + i * 3 + j));
    y.push_back((i + salt) % 3);
  }
  auto b = yoke::Batch::FromData(kShape, x, y);
  EXPECT_TRUE(b.ok()) << b.status();
  return std::move(*b);
}

absl::StatusOr<yoke::Model> MakeModel(uint64_t seed) {
  return yoke::ModelBuilder().Flatten().Dense(6).Relu().Dense(3).Build(kShape, 3, seed);
}

// The gradient of one process on all the examples (local == global mean).
std::vector<float> ReferenceGradient(const std::vector<std::pair<int, int>>& slices) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (auto [n, salt] : slices) {
    yoke::Batch b = MakeBatch(n, salt);
    x.insert(x.end(), b.data(), b.data() + n * 4);
    y.insert(y.end(), b.labels(), b.labels() + n);
  }
  auto model = MakeModel(1);
  auto all = yoke::Batch::FromData(kShape, x, y);
  auto logits = model->Forward(*all);
  auto loss = yoke::CrossEntropyLoss(*logits, *all);
  EXPECT_TRUE(loss->Backward().ok());
  return model->Gradients();
}

struct RankResult {
  absl::Status status;
  std::vector<float> initial, grad;
  uint64_t checksum = 0;
};

// Two ranks: rank 0 with seed 1 and `n0` examples, rank 1 with seed 2 (so
// only the broadcast makes them equal) and `n1` examples (0: it skips
// Backward). Each allreduces, then takes one SGD step.
std::vector<RankResult> RunTwoRanks(int n0, int n1) {
  TempDir dir;
  std::vector<RankResult> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      RankResult& res = out[r];
      res.status = [&]() -> absl::Status {
        yoke::DistributedOptions o;
        o.rank = r;
        o.world_size = 2;
        o.rendezvous = "file:" + dir.path();
        o.timeout_seconds = 60;
        YOKE_ASSIGN_OR_RETURN(yoke::DistributedContext ctx, yoke::DistributedContext::Create(o));
        YOKE_ASSIGN_OR_RETURN(yoke::Model model, MakeModel(r + 1));
        YOKE_RETURN_IF_ERROR(ctx.BroadcastParameters(model));
        res.initial = model.Parameters();
        yoke::SgdOptions sgd;
        sgd.lr = 0.1f;
        YOKE_ASSIGN_OR_RETURN(yoke::Optimizer opt, yoke::Optimizer::Sgd(model, sgd));
        const int n = r == 0 ? n0 : n1;
        if (n > 0) {
          yoke::Batch batch = MakeBatch(n, r);
          YOKE_ASSIGN_OR_RETURN(yoke::Tensor logits, model.Forward(batch));
          YOKE_ASSIGN_OR_RETURN(yoke::Loss loss, yoke::CrossEntropyLoss(logits, batch));
          YOKE_RETURN_IF_ERROR(loss.Backward());
        }
        YOKE_RETURN_IF_ERROR(ctx.AllreduceGradients(model));
        res.grad = model.Gradients();
        YOKE_RETURN_IF_ERROR(opt.Step());
        res.checksum = model.Checksum();
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Unequal slices (3 and 5 examples): the allreduced gradient is the mean
// over all 8, as one process with the whole batch computes it, on both
// ranks; the broadcast made rank 1 start from rank 0's parameters.
TEST(DistributedTest, AllreduceIsTheExactMeanOverTheGlobalBatch) {
  std::vector<RankResult> res = RunTwoRanks(3, 5);
  ASSERT_TRUE(res[0].status.ok()) << res[0].status;
  ASSERT_TRUE(res[1].status.ok()) << res[1].status;
  auto model0 = MakeModel(1);
  EXPECT_EQ(res[0].initial, model0->Parameters());
  EXPECT_EQ(res[1].initial, model0->Parameters());
  const std::vector<float> want = ReferenceGradient({{3, 0}, {5, 1}});
  ASSERT_EQ(res[0].grad.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(res[0].grad[i], want[i], 1e-5) << i;
    EXPECT_EQ(res[1].grad[i], res[0].grad[i]) << i;
  }
  EXPECT_EQ(res[0].checksum, res[1].checksum);
}

// A rank with an empty slice contributes nothing: the mean is rank 0's.
TEST(DistributedTest, EmptySliceContributesNothing) {
  std::vector<RankResult> res = RunTwoRanks(4, 0);
  ASSERT_TRUE(res[0].status.ok()) << res[0].status;
  ASSERT_TRUE(res[1].status.ok()) << res[1].status;
  const std::vector<float> want = ReferenceGradient({{4, 0}});
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(res[1].grad[i], want[i], 1e-5) << i;
  EXPECT_EQ(res[0].checksum, res[1].checksum);
}

TEST(DistributedTest, RendezvousTimeoutNamesTheMissingRank) {
  TempDir dir;
  yoke::DistributedOptions o;
  o.rank = 0;
  o.world_size = 3;
  o.rendezvous = "file:" + dir.path();
  o.timeout_seconds = 0.3;
  auto ctx = yoke::DistributedContext::Create(o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(ctx.status().message().find("ranks 1, 2"), std::string::npos) << ctx.status();
}

TEST(DistributedTest, WorldSizeOneNeedsNoRendezvousAndAllreduceKeepsTheLocalMean) {
  auto ctx = yoke::DistributedContext::Create({});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ(ctx->world_size(), 1);
  auto model = MakeModel(1);
  ASSERT_TRUE(ctx->BroadcastParameters(*model).ok());
  yoke::Batch batch = MakeBatch(4, 0);
  auto logits = model->Forward(batch);
  auto loss = yoke::CrossEntropyLoss(*logits, batch);
  ASSERT_TRUE(loss->Backward().ok());
  ASSERT_TRUE(ctx->AllreduceGradients(*model).ok());
  const std::vector<float> want = ReferenceGradient({{4, 0}});
  EXPECT_EQ(model->Gradients(), want);
}

TEST(DistributedTest, OptionsFromEnvironment) {
  setenv("YOKE_RANK", "1", 1);
  setenv("YOKE_WORLD_SIZE", "4", 1);
  setenv("YOKE_RENDEZVOUS", "file:/tmp/x", 1);
  setenv("YOKE_TIMEOUT_S", "12.5", 1);
  setenv("YOKE_JOB_ID", "job-7", 1);
  setenv("YOKE_ATTEMPT", "3", 1);
  auto o = yoke::DistributedContext::OptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->rendezvous, "file:/tmp/x");
  EXPECT_EQ(o->timeout_seconds, 12.5);
  EXPECT_EQ(o->job_id, "job-7");
  EXPECT_EQ(o->attempt, 3);
  setenv("YOKE_RANK", "one", 1);
  auto bad = yoke::DistributedContext::OptionsFromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("YOKE_RANK"), std::string::npos) << bad.status();
  setenv("YOKE_RANK", "4", 1);
  EXPECT_EQ(yoke::DistributedContext::OptionsFromEnvironment().status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* v : {"YOKE_RANK", "YOKE_WORLD_SIZE", "YOKE_RENDEZVOUS", "YOKE_TIMEOUT_S",
                        "YOKE_JOB_ID", "YOKE_ATTEMPT"}) {
    unsetenv(v);
  }
  yoke::DistributedOptions no_rdzv;
  no_rdzv.world_size = 2;
  auto c = yoke::DistributedContext::Create(no_rdzv);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("YOKE_RENDEZVOUS"), std::string::npos) << c.status();
  no_rdzv.rendezvous = "tcp://host:1";
  c = yoke::DistributedContext::Create(no_rdzv);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("file:DIR"), std::string::npos) << c.status();
}

// Misuse fails with FAILED_PRECONDITION and a hint, without breaking the
// group: allreducing an unattached model, a second Backward before the
// allreduce, and a Step before it.
TEST(DistributedTest, OutOfOrderCallsAreClearErrors) {
  TempDir dir;
  absl::Status status[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      status[r] = [&]() -> absl::Status {
        yoke::DistributedOptions o;
        o.rank = r;
        o.world_size = 2;
        o.rendezvous = "file:" + dir.path();
        o.timeout_seconds = 60;
        YOKE_ASSIGN_OR_RETURN(yoke::DistributedContext ctx, yoke::DistributedContext::Create(o));
        YOKE_ASSIGN_OR_RETURN(yoke::Model model, MakeModel(1));
        yoke::SgdOptions sgd;
        YOKE_ASSIGN_OR_RETURN(yoke::Optimizer opt, yoke::Optimizer::Sgd(model, sgd));
        absl::Status s = ctx.AllreduceGradients(model);
        if (s.code() != absl::StatusCode::kFailedPrecondition ||
            s.message().find("BroadcastParameters") == std::string::npos) {
          return absl::InternalError("unattached: " + s.ToString());
        }
        YOKE_RETURN_IF_ERROR(ctx.BroadcastParameters(model));
        yoke::Batch batch = MakeBatch(2, r);
        for (int i = 0; i < 2; ++i) {
          YOKE_ASSIGN_OR_RETURN(yoke::Tensor logits, model.Forward(batch));
          YOKE_ASSIGN_OR_RETURN(yoke::Loss loss, yoke::CrossEntropyLoss(logits, batch));
          s = loss.Backward();
          if (i == 1 && (s.code() != absl::StatusCode::kFailedPrecondition ||
                         s.message().find("AllreduceGradients") == std::string::npos)) {
            return absl::InternalError("second Backward: " + s.ToString());
          }
        }
        s = opt.Step();
        if (s.code() != absl::StatusCode::kFailedPrecondition) {
          return absl::InternalError("Step before the allreduce: " + s.ToString());
        }
        YOKE_RETURN_IF_ERROR(ctx.AllreduceGradients(model));
        return opt.Step();
      }();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
}

// A rank that leaves the group early fails its peer's next allreduce within
// the timeout, with a message naming it.
TEST(DistributedTest, APeerThatLeftFailsTheAllreduceNamingIt) {
  TempDir dir;
  absl::Status rank0;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      yoke::DistributedOptions o;
      o.rank = r;
      o.world_size = 2;
      o.rendezvous = "file:" + dir.path();
      o.timeout_seconds = 2;
      auto ctx = yoke::DistributedContext::Create(o);
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      auto model = MakeModel(1);
      ASSERT_TRUE(ctx->BroadcastParameters(*model).ok());
      if (r == 1) return;  // leaves: the context and the model go away
      yoke::Batch batch = MakeBatch(2, 0);
      auto logits = model->Forward(batch);
      auto loss = yoke::CrossEntropyLoss(*logits, batch);
      ASSERT_TRUE(loss->Backward().ok());
      rank0 = ctx->AllreduceGradients(*model);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(rank0.ok());
  EXPECT_NE(rank0.message().find("ranks 1 "), std::string::npos) << rank0;
}

}  // namespace
