#include "collective/reducer.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using ::testing::HasSubstr;

// Connects `size` ranks over Gloo (loopback) and runs body(rank, comm) on one
// thread per rank. Each rank leaves the group before its communicator goes:
// a rank that closes its connections as soon as its own last op is done can
// cut short a peer still finishing that op ("Connection closed by peer").
// `clean_leave`: every rank's Leave() must succeed (false where the body
// breaks the group on purpose).
void RunRanks(int size, const std::function<void(int, Communicator*)>& body,
              bool clean_leave = true) {
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.connect_timeout = absl::Seconds(30);
      auto comm = CreateGlooCommunicator(&store, r, size, o);
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(r, comm->get());
      const absl::Status left = (*comm)->Leave(absl::Seconds(30));
      if (clean_leave && !::testing::Test::HasFailure()) {
        EXPECT_TRUE(left.ok()) << "rank " << r << ": " << left;
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Five parameters with 16-float alignment, as ParamSet lays them out:
//   p0 [0, 60)  p1 [64, 94)  p2 [96, 296)  p3 [304, 344)  p4 [352, 422)
std::vector<ParamRange> Layout() { return {{0, 60}, {64, 30}, {96, 200}, {304, 40}, {352, 70}}; }
constexpr int64_t kFlat = 432;

TEST(ReducerTest, BucketsFollowReverseDeclarationOrderAndCaps) {
  RunRanks(1, [](int, Communicator* comm) {
    std::vector<float> g(kFlat);
    ReducerOptions o;
    o.first_bucket_bytes = 400;  // 100 floats
    o.bucket_bytes = 800;        // 200 floats
    auto r = Reducer::Create(comm, Buffer{g.data(), kFlat}, Layout(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& b = (*r)->buckets();
    ASSERT_EQ(b.size(), 3u);
    // p4 is 70 floats (< 100), so p3 joins: [304, 422) = 118 floats closes it.
    EXPECT_EQ(b[0].params, (std::vector<int>{4, 3}));
    EXPECT_EQ(b[0].offset, 304);
    EXPECT_EQ(b[0].count, 118);
    // p2 reaches the cap on its own.
    EXPECT_EQ(b[1].params, (std::vector<int>{2}));
    EXPECT_EQ(b[1].offset, 96);
    EXPECT_EQ(b[1].count, 200);
    // The rest, padding between p0 and p1 included: [0, 94).
    EXPECT_EQ(b[2].params, (std::vector<int>{1, 0}));
    EXPECT_EQ(b[2].offset, 0);
    EXPECT_EQ(b[2].count, 94);
  });
}

TEST(ReducerTest, DefaultCapsAreOneAndTwentyFiveMiB) {
  RunRanks(1, [](int, Communicator* comm) {
    const int64_t M = 1 << 20;  // floats; 4 MiB each
    // Declaration order: 8 MiB, 20 MiB, 12 MiB, 0.4 MiB, 0.8 MiB. Create
    // never touches the data.
    std::vector<ParamRange> p = {{0, 2 * M},
                                 {2 * M, 5 * M},
                                 {7 * M, 3 * M},
                                 {10 * M, M / 10 / 16 * 16},
                                 {11 * M, M / 5 / 16 * 16}};
    auto r = Reducer::Create(comm, Buffer{nullptr, 12 * M}, p, ReducerOptions());
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& b = (*r)->buckets();
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[0].params, (std::vector<int>{4, 3}));  // 0.8 MiB < 1 MiB: one more
    EXPECT_EQ(b[1].params, (std::vector<int>{2, 1}));  // 12 MiB + 20 MiB >= 25 MiB
    EXPECT_EQ(b[2].params, (std::vector<int>{0}));
    EXPECT_EQ(b[1].offset, 2 * M);
    EXPECT_EQ(b[1].count, 8 * M);
  });
}

TEST(ReducerTest, RejectsBadLayouts) {
  RunRanks(1, [](int, Communicator* comm) {
    std::vector<float> g(kFlat);
    Buffer buf{g.data(), kFlat};
    auto overlap = Reducer::Create(comm, buf, {{0, 10}, {5, 10}}, {});
    EXPECT_EQ(overlap.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(overlap.status().message(), HasSubstr("parameter 1 [5, 15)"));
    EXPECT_FALSE(Reducer::Create(comm, buf, {{0, kFlat + 1}}, {}).ok());
    EXPECT_FALSE(Reducer::Create(comm, buf, {{0, 0}}, {}).ok());
    ReducerOptions o;
    o.bucket_bytes = 0;
    EXPECT_FALSE(Reducer::Create(comm, buf, Layout(), o).ok());
    o = ReducerOptions();
    o.wire = DataType::kI32;
    EXPECT_FALSE(Reducer::Create(comm, buf, Layout(), o).ok());
    Buffer ints{g.data(), kFlat, DataType::kI32};
    EXPECT_FALSE(Reducer::Create(comm, ints, Layout(), {}).ok());
  });
}

// Per-sample gradients of sample s, element i: small dyadic values, so every
// sum below is exact in f32 and the comparison can be exact too.
float SampleGrad(int s, int64_t i) { return static_cast<float>((s * 7 + i * 3) % 11 - 5) * 0.25f; }

// Rank 0 sees samples 0..4, rank 1 samples 5..7: each holds d(sum of its
// per-sample losses)/dθ; sum over ranks / global count is the exact mean over
// all 8 samples (not the mean of the two ranks' means, which would weigh
// rank 1's samples 5/3 times as much).
TEST(ReducerTest, UnevenCountsAverageExactly) {
  const int counts[2] = {5, 3};
  std::vector<float> results[2];
  int64_t totals[2] = {0, 0};
  RunRanks(2, [&](int rank, Communicator* comm) {
    std::vector<float> g(kFlat, 0.0f);
    ReducerOptions o;
    o.first_bucket_bytes = 400;
    o.bucket_bytes = 800;
    auto r = Reducer::Create(comm, Buffer{g.data(), kFlat}, Layout(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int step = 0; step < 2; ++step) {  // a second step reuses the reducer
      ASSERT_TRUE((*r)->Prepare(counts[rank]).ok());
      const int first = rank == 0 ? 0 : 5;
      for (int p = 4; p >= 0; --p) {  // as backward would
        const ParamRange pr = Layout()[p];
        for (int64_t i = pr.offset; i < pr.offset + pr.count; ++i) {
          g[i] = 0;
          for (int s = first; s < first + counts[rank]; ++s) g[i] += SampleGrad(s, i);
        }
        (*r)->MarkReady(p);
      }
      auto t = (*r)->Finish();
      ASSERT_TRUE(t.ok()) << t.status();
      totals[rank] = t->samples;
      EXPECT_EQ(t->stop_votes, 0);
    }
    for (float& v : g) v *= 1.0f / static_cast<float>(totals[rank]);
    results[rank] = g;
  });
  EXPECT_EQ(totals[0], 8);
  EXPECT_EQ(totals[1], 8);
  ASSERT_EQ(results[0].size(), static_cast<size_t>(kFlat));
  ASSERT_EQ(results[1].size(), static_cast<size_t>(kFlat));
  int64_t differs_from_mean_of_means = 0;
  for (const ParamRange& pr : Layout()) {
    for (int64_t i = pr.offset; i < pr.offset + pr.count; ++i) {
      float sum = 0, sum0 = 0, sum1 = 0;
      for (int s = 0; s < 8; ++s) (s < 5 ? sum0 : sum1) += SampleGrad(s, i);
      sum = sum0 + sum1;
      EXPECT_EQ(results[0][i], sum / 8) << i;
      EXPECT_EQ(results[1][i], results[0][i]) << i;
      if (results[0][i] != (sum0 / 5 + sum1 / 3) / 2) ++differs_from_mean_of_means;
    }
  }
  EXPECT_GT(differs_from_mean_of_means, 100);  // the test can tell them apart
}

// A bucket's allreduce starts as soon as its parameters are ready, while
// "backward" still holds the others; buckets are issued in order even when
// readiness comes out of order.
TEST(ReducerTest, BucketsStartWhenReadyAndInOrder) {
  RunRanks(2, [](int rank, Communicator* comm) {
    std::vector<float> g(kFlat, 1.0f);
    ReducerOptions o;
    o.first_bucket_bytes = 400;
    o.bucket_bytes = 800;
    auto r = Reducer::Create(comm, Buffer{g.data(), kFlat}, Layout(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    Reducer& red = **r;
    ASSERT_TRUE(red.Prepare(1, rank).ok());   // rank 1 votes to stop
    const int64_t base = comm->issued_seq();  // the count
    red.MarkReady(2);                         // bucket 1 complete, bucket 0 not
    EXPECT_EQ(comm->issued_seq(), base);      // waits for bucket 0
    red.MarkReady(4);
    EXPECT_EQ(comm->issued_seq(), base);
    red.MarkReady(3);  // bucket 0, then bucket 1
    EXPECT_EQ(comm->issued_seq(), base + 2);
    red.MarkReady(1);
    EXPECT_EQ(comm->issued_seq(), base + 2);  // p0 is still missing
    auto t = red.Finish();                    // p0 never marked: still reduced
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(comm->issued_seq(), base + 3);
    EXPECT_EQ(t->samples, 2);
    EXPECT_EQ(t->stop_votes, 1);
    for (const ParamRange& pr : Layout()) {
      for (int64_t i = pr.offset; i < pr.offset + pr.count; ++i) ASSERT_EQ(g[i], 2.0f) << i;
    }
  });
}

TEST(ReducerTest, MisuseFailsFinish) {
  RunRanks(1, [](int, Communicator* comm) {
    std::vector<float> g(kFlat);
    auto r = Reducer::Create(comm, Buffer{g.data(), kFlat}, Layout(), {});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE((*r)->Prepare(3).ok());
    EXPECT_EQ((*r)->Prepare(3).code(), absl::StatusCode::kFailedPrecondition);
    (*r)->MarkReady(4);
    (*r)->MarkReady(4);
    auto t = (*r)->Finish();
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("MarkReady(4) was already called"));
    // The next step is clean again.
    ASSERT_TRUE((*r)->Prepare(2).ok());
    auto ok = (*r)->Finish();
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->samples, 2);
  });
}

// Compressed buckets: f16 keeps ~11 significant bits, bf16 ~8; each of the 2
// ranks' values is rounded once and the sum once more, so the relative error
// of a sum of two same-magnitude values is within ~1.5 ulp of the wire type:
// 2^-11 * 1.5 ≈ 7.3e-4 (f16) and 2^-8 * 1.5 ≈ 5.9e-3 (bf16), plus cancellation
// where the two ranks' values nearly cancel, hence an absolute bound relative
// to the inputs' scale (1).
TEST(ReducerTest, CompressionWithinTolerance) {
  for (DataType wire : {DataType::kF16, DataType::kBF16}) {
    const double tol = wire == DataType::kF16 ? 2e-3 : 1.6e-2;
    double max_err = 0;
    RunRanks(2, [&](int rank, Communicator* comm) {
      std::vector<float> g(kFlat, 0.0f);
      auto value = [](int rank, int64_t i) {
        return std::sin(0.37 * static_cast<double>(i) + rank) * (1 + rank);
      };
      for (const ParamRange& pr : Layout()) {
        for (int64_t i = pr.offset; i < pr.offset + pr.count; ++i) g[i] = value(rank, i);
      }
      ReducerOptions o;
      o.wire = wire;
      o.first_bucket_bytes = 400;
      auto r = Reducer::Create(comm, Buffer{g.data(), kFlat}, Layout(), o);
      ASSERT_TRUE(r.ok());
      ASSERT_TRUE((*r)->Prepare(1000).ok());
      auto t = (*r)->Finish();
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->samples, 2000);  // the count is never compressed
      if (rank != 0) return;
      for (const ParamRange& pr : Layout()) {
        for (int64_t i = pr.offset; i < pr.offset + pr.count; ++i) {
          const double want = value(0, i) + value(1, i);
          max_err = std::max(max_err, std::fabs(g[i] - want) / 3.0);  // scale: |sum| <= 3
        }
      }
    });
    std::printf("[ measured ] %s wire: max error %.3g (relative to scale 3), bound %.3g\n",
                DataTypeName(wire), max_err, tol);
    EXPECT_LT(max_err, tol) << DataTypeName(wire);
    EXPECT_GT(max_err, 0) << DataTypeName(wire) << ": compression had no effect?";
  }
}

// A rank that stops taking part: the other's Finish fails within the
// timeout, naming the bucket, instead of hanging.
TEST(ReducerTest, MissingRankTimesOutNamingTheBucket) {
  absl::Notification done;
  RunRanks(
      2,
      [&](int rank, Communicator* comm) {
        std::vector<float> g(kFlat, 1.0f);
        ReducerOptions o;
        o.timeout = absl::Seconds(2);
        auto r = Reducer::Create(comm, Buffer{g.data(), kFlat}, Layout(), o);
        ASSERT_TRUE(r.ok());
        ASSERT_TRUE((*r)->Prepare(1).ok());
        if (rank == 1) {
          // Joins the count, then never reaches its buckets.
          done.WaitForNotification();
          return;
        }
        auto t = (*r)->Finish();
        done.Notify();
        ASSERT_FALSE(t.ok());
        EXPECT_EQ(t.status().code(), absl::StatusCode::kDeadlineExceeded) << t.status();
        std::printf("[ measured ] %s\n", std::string(t.status().message()).c_str());
        EXPECT_THAT(t.status().message(), HasSubstr("(bucket 0) on rank 0 of 2 timed out"));
        // The hang check names the rank that never joined.
        EXPECT_THAT(t.status().message(), HasSubstr("ranks 1 never arrived"));
      },
      /*clean_leave=*/false);
}

}  // namespace
}  // namespace yoke::collective
