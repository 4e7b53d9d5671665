// Real Gloo over loopback: every rank is a thread with its own communicator,
// bootstrapped through one InMemoryStore. Results are checked exactly
// against a reference (integer-valued floats, so sums are exact).
#include "collective/gloo_communicator.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/half.h"
#include "collective/testing/gloo_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using ::testing::HasSubstr;

std::vector<std::unique_ptr<Communicator>> Connect(int n, InMemoryStore* store,
                                                   const GlooOptions& o = {}) {
  return testing::ConnectGloo(n, store, o);
}
using testing::OnEveryRank;

// Integer-valued element i of rank r: small enough that sums stay exact.
int64_t Value(int r, int64_t i) { return (i * 7 + r * 13) % 101 - 50; }

// Rank r's elements 0..count-1, as T.
template <typename T>
std::vector<T> RankValues(int r, int64_t count) {
  std::vector<T> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<T>(Value(r, i));
  return v;
}

// The index of the first element where got != want, or -1. Equal bits are
// equal values, so memcmp answers the common case at once: the 64 MiB checks
// ran for a minute element by element in the sanitized build, whose test
// files are unoptimized.
template <typename T>
int64_t FirstMismatch(const T* got, const T* want, int64_t count) {
  if (std::memcmp(got, want, count * sizeof(T)) == 0) return -1;
  for (int64_t i = 0; i < count; ++i) {
    if (!(got[i] == want[i])) return i;
  }
  return -1;
}

template <typename T>
void CheckAllreduce(std::vector<std::unique_ptr<Communicator>>& comms, DataType dt, int64_t count,
                    ReduceOp op) {
  const int n = comms.size();
  std::vector<T> want(count, 0);
  for (int q = 0; q < n; ++q) {
    for (int64_t i = 0; i < count; ++i) want[i] += static_cast<T>(Value(q, i));
  }
  if (op == ReduceOp::kAverage) {
    for (auto& w : want) w = static_cast<T>(w / static_cast<T>(n));
  }
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<T> buf = RankValues<T>(r, count);
    AllreduceOptions o;
    o.op = op;
    o.tag = "check";
    auto w = c.Allreduce(Buffer{buf.data(), count, dt}, o);
    ASSERT_TRUE(w->Wait().ok()) << w->Wait();
    EXPECT_TRUE(w->IsCompleted());
    const int64_t bad = FirstMismatch(buf.data(), want.data(), count);
    ASSERT_EQ(bad, -1) << "rank " << r << " of " << n << " element " << bad << " of " << count
                       << ": got " << buf[bad] << ", want " << want[bad];
  });
}

class GlooSizesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooSizesTest, AllreduceBroadcastAllgatherBarrierAreExact) {
  const int n = GetParam();
  InMemoryStore store;
  auto comms = Connect(n, &store);
  ASSERT_EQ(comms[0]->size(), n);
  EXPECT_STREQ(comms[0]->backend(), "gloo");

  const std::vector<int64_t> counts = {1, 2, 7, 1023, 256, (1 << 18) + 3};
  for (int64_t count : counts) {
    CheckAllreduce<float>(comms, DataType::kF32, count, ReduceOp::kSum);
    CheckAllreduce<float>(comms, DataType::kF32, count, ReduceOp::kAverage);
  }
  CheckAllreduce<int32_t>(comms, DataType::kI32, 1023, ReduceOp::kSum);
  CheckAllreduce<int32_t>(comms, DataType::kI32, 1023, ReduceOp::kAverage);
  CheckAllreduce<int64_t>(comms, DataType::kI64, (1 << 18) + 3, ReduceOp::kSum);

  for (int root = 0; root < n; ++root) {
    for (int64_t count : {int64_t{1}, int64_t{1023}, int64_t{(1 << 18) + 3}}) {
      OnEveryRank(comms, [&](int r, Communicator& c) {
        std::vector<int32_t> buf(count);
        for (int64_t i = 0; i < count; ++i) buf[i] = Value(r, i);
        ASSERT_TRUE(c.Broadcast(Buffer{buf.data(), count, DataType::kI32}, root, {})->Wait().ok());
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], Value(root, i)) << root << " " << i;
      });
    }
  }

  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{(1 << 18) + 3}}) {
    OnEveryRank(comms, [&](int r, Communicator& c) {
      std::vector<float> in(count), out(count * n, -1);
      for (int64_t i = 0; i < count; ++i) in[i] = Value(r, i);
      auto w = c.Allgather(Buffer{in.data(), count}, Buffer{out.data(), count * n}, {});
      ASSERT_TRUE(w->Wait().ok());
      for (int q = 0; q < n; ++q) {
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(out[q * count + i], Value(q, i));
      }
    });
  }

  OnEveryRank(comms, [&](int r, Communicator& c) {
    const int64_t before = c.issued_seq();
    auto w = c.Barrier({});
    EXPECT_EQ(w->seq(), before + 1);
    ASSERT_TRUE(w->Wait().ok());
    EXPECT_EQ(c.completed_seq(), c.issued_seq());
  });
}

// Data parallelism needs every rank to apply the SAME reduced gradient, bit
// for bit, or the replicas drift apart over training. With non-integer
// floats the order of the additions shows: an algorithm that sums in a
// different order on each rank (gloo's AllreduceRing, for 3+ ranks) fails
// this, whatever the message size.
TEST_P(GlooSizesTest, AllreduceGivesEveryRankTheSameBits) {
  const int n = GetParam();
  InMemoryStore store;
  auto comms = Connect(n, &store);
  for (int64_t count :
       {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}, int64_t{(1 << 18) + 3}}) {
    std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
    OnEveryRank(comms, [&](int r, Communicator& c) {
      std::vector<float>& buf = bufs[r];
      for (int64_t i = 0; i < count; ++i) {
        // Magnitudes spread over ~6 decades: rounding depends on the order.
        buf[i] = std::sin(0.37 * i + 1.3 * r) * std::pow(10.0, (i * 5 + r * 3) % 7 - 3);
      }
      AllreduceOptions o;
      o.tag = "same bits";
      ASSERT_TRUE(c.Allreduce(Buffer{buf.data(), count, DataType::kF32}, o)->Wait().ok());
    });
    for (int r = 1; r < n; ++r) {
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(bufs[r][i], bufs[0][i])
            << "rank " << r << " of " << n << " element " << i << " of " << count;
      }
    }
    // And it is the sum, to f32 rounding.
    for (int64_t i = 0; i < count; i += 97) {
      double want = 0;
      for (int q = 0; q < n; ++q) {
        want += static_cast<float>(std::sin(0.37 * i + 1.3 * q) *
                                   std::pow(10.0, (i * 5 + q * 3) % 7 - 3));
      }
      ASSERT_NEAR(bufs[0][i], want, 1e-5 * std::fabs(want) + 1e-6) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooSizesTest, ::testing::Values(2, 3, 4));

// Leave() returns only once every peer has left too, whatever its own ops
// still had to do; it is no op of the sequence, and later ops fail.
TEST(GlooTest, LeaveWaitsUntilEveryPeerHasLeft) {
  InMemoryStore store;
  auto comms = Connect(3, &store);
  std::vector<double> left_after_s(3);
  std::vector<absl::Status> left(3);
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<float> buf(1000, 1.0f);
    ASSERT_TRUE(c.Allreduce(Buffer{buf.data(), 1000, DataType::kF32}, {})->Wait().ok());
    const auto t0 = std::chrono::steady_clock::now();
    if (r == 0) {
      // Rank 0 is late to leave (still busy with work of its own).
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    left[r] = c.Leave(absl::Seconds(30));
    left_after_s[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(c.issued_seq(), 1);
    EXPECT_EQ(c.completed_seq(), 1);
    absl::Status after = c.Barrier({})->Wait();
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    EXPECT_THAT(after.message(), HasSubstr("has left"));
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(left[r].ok()) << r << ": " << left[r];
  EXPECT_GE(left_after_s[1], 0.25);
  EXPECT_GE(left_after_s[2], 0.25);
}

// A peer that closes its connections without leaving (it failed, or was
// killed) fails Leave() at once, not at its timeout.
TEST(GlooTest, LeaveFailsPromptlyWhenAPeerClosesWithoutLeaving) {
  InMemoryStore store;
  auto comms = Connect(2, &store);
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<float> buf(1000, 1.0f);
    ASSERT_TRUE(c.Allreduce(Buffer{buf.data(), 1000, DataType::kF32}, {})->Wait().ok());
  });
  comms[1].reset();
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = comms[0]->Leave(absl::Seconds(30));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("leave on rank 0 of 2"));
  EXPECT_LT(took, 10);
}

// The trainer's end: each rank leaves after its last allreduce and closes its
// connections at once (the process exits). Without Leave(), rank 1's close
// failed rank 0's allreduce, still finishing inside Gloo, with "Connection
// closed by peer" in about 1 round of 1,000 of this loop when 8 threads spun
// on the 2 cores (rank 0's op thread must lose its core between its last send
// and its last wait; too rare to test for here). With it, neither the last
// allreduce nor the leaving itself (rank 1 closes right after it) may fail.
TEST(GlooTest, ARankThatLeavesAndClosesAtOnceNeverFailsItsPeer) {
  int failures = 0;
  std::string first;
  for (int round = 0; round < 50; ++round) {
    InMemoryStore store;
    auto comms = Connect(2, &store);
    absl::Status last[2], left[2];
    OnEveryRank(comms, [&](int r, Communicator& c) {
      std::vector<float> buf(1000, 1.0f);
      last[r] = c.Allreduce(Buffer{buf.data(), 1000, DataType::kF32}, {})->Wait();
      left[r] = c.Leave(absl::Seconds(30));
      if (r == 1) comms[1].reset();
    });
    for (int r = 0; r < 2; ++r) {
      if (!last[r].ok() || !left[r].ok()) {
        ++failures;
        if (first.empty()) {
          first =
              absl::StrCat("rank ", r, ": ", last[r].ToString(), "; leave: ", left[r].ToString());
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "first: " << first;
}

TEST(GlooTest, SixtyFourMiBAllreduceOnTwoRanks) {
  InMemoryStore store;
  auto comms = Connect(2, &store);
  CheckAllreduce<float>(comms, DataType::kF32, 16 << 20, ReduceOp::kSum);
}

// The largest size the issue asks for, plus an odd tail, on 3 ranks (a ring
// whose chunks do not divide evenly): allreduce, broadcast and allgather.
TEST(GlooTest, SixtyFourMiBPlusThreeElementsOnThreeRanks) {
  InMemoryStore store;
  auto comms = Connect(3, &store);
  const int64_t count = (int64_t{16} << 20) + 3;  // f32: 64 MiB + 12 bytes
  CheckAllreduce<float>(comms, DataType::kF32, count, ReduceOp::kSum);
  const std::vector<int32_t> root_values = RankValues<int32_t>(2, count);
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<int32_t> buf = RankValues<int32_t>(r, count);
    ASSERT_TRUE(c.Broadcast(Buffer{buf.data(), count, DataType::kI32}, 2, {})->Wait().ok());
    const int64_t bad = FirstMismatch(buf.data(), root_values.data(), count);
    ASSERT_EQ(bad, -1) << "broadcast, rank " << r << " element " << bad;
  });
  std::vector<std::vector<float>> rank_values;
  for (int q = 0; q < 3; ++q) rank_values.push_back(RankValues<float>(q, count));
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<float> in = rank_values[r], out(count * 3, -1);
    ASSERT_TRUE(
        c.Allgather(Buffer{in.data(), count}, Buffer{out.data(), count * 3}, {})->Wait().ok());
    for (int q = 0; q < 3; ++q) {
      const int64_t bad = FirstMismatch(out.data() + q * count, rank_values[q].data(), count);
      ASSERT_EQ(bad, -1) << "allgather, rank " << r << ", block " << q << " element " << bad;
    }
  });
}

TEST(GlooTest, OneRankIsTheIdentity) {
  InMemoryStore store;
  auto comms = Connect(1, &store);
  std::vector<float> buf = {1, 2, 3};
  AllreduceOptions o;
  o.op = ReduceOp::kAverage;
  ASSERT_TRUE(comms[0]->Allreduce(Buffer{buf.data(), 3}, o)->Wait().ok());
  EXPECT_EQ(buf, (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE(comms[0]->Barrier({})->Wait().ok());
}

TEST(GlooTest, OpsQueueAndCompleteInIssueOrder) {
  InMemoryStore store;
  auto comms = Connect(2, &store);
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<std::vector<int64_t>> bufs(20, std::vector<int64_t>(1000, r + 1));
    std::vector<std::unique_ptr<Work>> works;
    for (auto& b : bufs) works.push_back(c.Allreduce(Buffer{b.data(), 1000, DataType::kI64}, {}));
    for (size_t i = 0; i < works.size(); ++i) {
      EXPECT_EQ(works[i]->seq(), static_cast<int64_t>(i) + 1);
      ASSERT_TRUE(works[i]->Wait().ok());
      EXPECT_EQ(bufs[i][999], 3);
    }
    EXPECT_EQ(c.completed_seq(), 20);
  });
}

// Wire compression: the reference is the exact sum; each f16 (bf16) rounding
// is within 2^-11 (2^-8) of its value, and an n-rank ring sum rounds each
// input once and each partial sum once.
void CheckCompressed(DataType wire, double unit_roundoff) {
  for (int n : {2, 3}) {
    InMemoryStore store;
    auto comms = Connect(n, &store);
    const int64_t count = 100003;
    auto value = [](int r, int64_t i) { return std::sin(0.01 * i + r) * (1 + (i % 5)); };
    OnEveryRank(comms, [&](int r, Communicator& c) {
      std::vector<float> buf(count);
      for (int64_t i = 0; i < count; ++i) buf[i] = value(r, i);
      AllreduceOptions o;
      o.wire = wire;
      o.op = ReduceOp::kAverage;
      ASSERT_TRUE(c.Allreduce(Buffer{buf.data(), count}, o)->Wait().ok());
      for (int64_t i = 0; i < count; ++i) {
        double sum = 0, abs = 0;
        for (int q = 0; q < n; ++q) {
          sum += value(q, i);
          abs += std::fabs(value(q, i));
        }
        const double tol = 2 * n * unit_roundoff * abs / n + 1e-7;
        ASSERT_NEAR(buf[i], sum / n, tol) << "element " << i << " of " << n << " ranks";
      }
    });
  }
}

TEST(GlooTest, F16WireIsWithinF16Rounding) {
  CheckCompressed(DataType::kF16, std::ldexp(1.0, -11));
}
TEST(GlooTest, BF16WireIsWithinBF16Rounding) {
  CheckCompressed(DataType::kBF16, std::ldexp(1.0, -8));
}

TEST(GlooTest, NativeHalfBuffersSum) {
  InMemoryStore store;
  auto comms = Connect(3, &store);
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<uint16_t> h(777), b(777);
    for (int i = 0; i < 777; ++i) {
      h[i] = F32ToF16Scalar(Value(r, i));
      b[i] = F32ToBF16Scalar(Value(r, i));
    }
    ASSERT_TRUE(c.Allreduce(Buffer{h.data(), 777, DataType::kF16}, {})->Wait().ok());
    ASSERT_TRUE(c.Allreduce(Buffer{b.data(), 777, DataType::kBF16}, {})->Wait().ok());
    for (int i = 0; i < 777; ++i) {
      const float want = Value(0, i) + Value(1, i) + Value(2, i);
      ASSERT_EQ(F16ToF32Scalar(h[i]), want);
      ASSERT_EQ(BF16ToF32Scalar(b[i]), want);
    }
  });
}

TEST(GlooTest, BadArgumentsAreInvalidArgument) {
  InMemoryStore store;
  EXPECT_EQ(CreateGlooCommunicator(&store, 0, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCommunicator(&store, -1, 2, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto out_of_range = CreateGlooCommunicator(&store, 2, 2, {});
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("rank: must be in [0, 2), got 2"));

  auto comms = Connect(2, &store);
  Communicator& c = *comms[0];
  std::vector<float> buf(8), out(8);
  std::vector<int32_t> ints(8);
  AllreduceOptions o;
  o.wire = DataType::kF16;
  auto w = c.Allreduce(Buffer{ints.data(), 8, DataType::kI32}, o);
  EXPECT_EQ(w->Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w->Wait().message(), HasSubstr("wire"));
  EXPECT_EQ(c.Broadcast(Buffer{buf.data(), 8}, 2, {})->Wait().code(),
            absl::StatusCode::kInvalidArgument);
  auto g = c.Allgather(Buffer{buf.data(), 8}, Buffer{out.data(), 8}, {});
  EXPECT_EQ(g->Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g->Wait().message(), HasSubstr("2 * 8"));
  EXPECT_EQ(c.Allreduce(Buffer{nullptr, 8}, {})->Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      c.Allreduce(Buffer{buf.data(), 8, DataType::kF32, DeviceKind::kCuda}, {})->Wait().code(),
      absl::StatusCode::kInvalidArgument);
  // Rejected calls are not issued and do not break the communicator.
  EXPECT_EQ(c.issued_seq(), 0);
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<float> b(8, 1);
    ASSERT_TRUE(c.Allreduce(Buffer{b.data(), 8}, {})->Wait().ok());
  });
}

TEST(GlooTest, MismatchedCountsFailInsteadOfHanging) {
  InMemoryStore store;
  GlooOptions go;
  go.hang_grace = absl::Milliseconds(500);
  auto comms = Connect(2, &store, go);
  OnEveryRank(comms, [&](int r, Communicator& c) {
    std::vector<float> b(r == 0 ? 1000 : 3000, 1);
    AllreduceOptions o;
    o.timeout = absl::Seconds(2);
    absl::Status s = c.Allreduce(Buffer{b.data(), static_cast<int64_t>(b.size())}, o)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "rank " << r << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("ranks disagree on op #1")) << s;
    EXPECT_THAT(s.message(), HasSubstr("allreduce 3000 f32 sum")) << s;
  });
}

TEST(GlooTest, MissingPeerAtBootstrapIsDeadlineExceeded) {
  InMemoryStore store;
  GlooOptions o;
  o.connect_timeout = absl::Milliseconds(300);
  auto c = CreateGlooCommunicator(&store, 0, 2, o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("gloo/1"));
}

}  // namespace
}  // namespace yoke::collective
