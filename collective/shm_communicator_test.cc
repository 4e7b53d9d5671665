// The shared-memory communicator with ranks as threads of this process (the
// segment and its counters work the same between threads as between
// processes; shm_multiprocess_test.cc covers real processes and a killed
// peer).
#include "collective/shm_communicator.h"

#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/testing/gloo_ranks.h"
#include "collective/testing/shm_segments.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using testing::ConnectGloo;
using ::testing::HasSubstr;
using testing::OnEveryRank;
using testing::ShmSegments;

// `hosts[r]` is rank r's host; each rank listens on it.
std::vector<std::unique_ptr<Communicator>> ConnectShm(const std::vector<std::string>& hosts,
                                                      Store* store, const ShmOptions& so = {},
                                                      GlooOptions base = {}) {
  const int n = static_cast<int>(hosts.size());
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o = base;
      o.rank_hosts = hosts;
      o.hostname = RankHost(hosts[r]);
      auto c = CreateCommunicator(store, r, n, o, so);
      ASSERT_TRUE(c.ok()) << c.status();
      comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Floats of many magnitudes and both signs, so that sums round.
std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-12, 12);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(gen), exp(gen));
  return v;
}

// Runs one allreduce of data[r] on every rank; returns the results.
std::vector<std::vector<float>> AllreduceAll(std::vector<std::unique_ptr<Communicator>>& comms,
                                             std::vector<std::vector<float>> data, ReduceOp op) {
  OnEveryRank(comms, [&](int r, Communicator& c) {
    AllreduceOptions o;
    o.op = op;
    o.timeout = absl::Seconds(30);
    auto& d = data[r];
    absl::Status s = c.Allreduce(Buffer{d.data(), static_cast<int64_t>(d.size())}, o)->Wait();
    EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
  });
  return data;
}

// The first n floats of a and b hold the same bits. memcmp is not called on
// empty vectors, whose data() may be null (undefined behaviour even for 0
// bytes; UBSan stops the test).
template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b, int64_t n) {
  if (static_cast<int64_t>(a.size()) < n || static_cast<int64_t>(b.size()) < n) return false;
  return n == 0 || std::memcmp(a.data(), b.data(), n * sizeof(T)) == 0;
}

TEST(LocalRanksTest, GroupsByTheAddressAfterTheAt) {
  GlooOptions o;
  o.rank_hosts = {"w-1@10.0.0.1", "w-2@10.0.0.2", "w-3@10.0.0.1", "w-4@10.0.0.3"};
  EXPECT_EQ(LocalRanks(2, 4, o, {}), (std::vector<int>{0, 2}));
  EXPECT_EQ(LocalRanks(0, 4, o, {}), (std::vector<int>{0, 2}));
  // Alone on its host, but others share theirs: its own group of one, so
  // that every rank takes the same (hierarchical) path.
  EXPECT_EQ(LocalRanks(1, 4, o, {}), (std::vector<int>{1}));
  GlooOptions spread;
  spread.rank_hosts = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  EXPECT_TRUE(LocalRanks(0, 3, spread, {}).empty());  // nobody shares: plain Gloo
  ShmOptions off;
  off.enabled = false;
  EXPECT_TRUE(LocalRanks(0, 4, o, off).empty());
  GlooOptions partial;
  partial.rank_hosts = {"10.0.0.1", "10.0.0.1"};  // names 2 of 4 ranks
  EXPECT_TRUE(LocalRanks(0, 4, partial, {}).empty());
  GlooOptions unknown;
  unknown.rank_hosts = {"w-1@", "w-2@", "w-3@10.0.0.1", "w-4@10.0.0.1"};  // no address for 0, 1
  EXPECT_TRUE(LocalRanks(0, 4, unknown, {}).empty());
  EXPECT_TRUE(LocalRanks(2, 4, unknown, {}).empty());
}

TEST(LocalRanksTest, EnvironmentTurnsItOff) {
  GlooOptions o;
  o.rank_hosts = {"127.0.0.1", "127.0.0.1"};
  ASSERT_EQ(LocalRanks(0, 2, o, {}).size(), 2u);
  setenv("YOKE_SHM", "0", 1);
  const bool off = LocalRanks(0, 2, o, {}).empty();
  unsetenv("YOKE_SHM");
  EXPECT_TRUE(off);
}

TEST(ShmCommunicatorTest, TwoRanksAreBitIdenticalToGloo) {
  InMemoryStore gstore, sstore;
  auto gloo = ConnectGloo(2, &gstore);
  ShmOptions so;
  so.chunk_elems = 1000;  // several chunks for the larger sizes
  auto shm = ConnectShm({"127.0.0.1", "127.0.0.1"}, &sstore, so);
  ASSERT_EQ(shm.size(), 2u);
  uint32_t seed = 1;
  for (int64_t n : {0, 1, 2, 3, 7, 999, 1000, 1001, 2999, 12345}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      std::vector<std::vector<float>> in = {RandomFloats(n, seed), RandomFloats(n, seed + 1)};
      seed += 2;
      auto want = AllreduceAll(gloo, in, op);
      auto got = AllreduceAll(shm, in, op);
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(got[r].size(), static_cast<size_t>(n));
        EXPECT_EQ(SameBits(got[r], want[r], n), true)
            << "rank " << r << ", " << n << " elements, op " << static_cast<int>(op);
      }
      // The data were not left as they came in (n > 0): the op did something.
      if (n > 0) {
        EXPECT_NE(got[0][0], in[0][0]);
      }
    }
  }
}

// i32 and i64 go through the segment too (the reducer's sample count);
// averages truncate as Gloo's do.
TEST(ShmCommunicatorTest, IntegersMatchGloo) {
  InMemoryStore gstore, sstore;
  auto gloo = ConnectGloo(2, &gstore);
  ShmOptions so;
  so.chunk_elems = 100;  // 50 i64s per chunk
  auto shm = ConnectShm({"127.0.0.1", "127.0.0.1"}, &sstore, so);
  ASSERT_EQ(shm.size(), 2u);
  std::mt19937 gen(5);
  std::uniform_int_distribution<int64_t> dist(-1000000, 1000000);
  for (DataType t : {DataType::kI32, DataType::kI64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const int64_t n = 333;
      std::vector<std::vector<int64_t>> in(2, std::vector<int64_t>(n));
      for (auto& v : in) {
        for (auto& x : v) x = dist(gen);
      }
      auto run = [&](std::vector<std::unique_ptr<Communicator>>& comms) {
        std::vector<std::vector<int64_t>> out = in;
        std::vector<std::vector<int32_t>> out32(2);
        OnEveryRank(comms, [&](int r, Communicator& c) {
          out32[r].assign(out[r].begin(), out[r].end());
          AllreduceOptions o;
          o.op = op;
          Buffer b =
              t == DataType::kI32 ? Buffer{out32[r].data(), n, t} : Buffer{out[r].data(), n, t};
          absl::Status s = c.Allreduce(b, o)->Wait();
          EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
          if (t == DataType::kI32) out[r].assign(out32[r].begin(), out32[r].end());
        });
        return out;
      };
      auto want = run(gloo);
      auto got = run(shm);
      EXPECT_EQ(got, want) << DataTypeName(t) << " op " << static_cast<int>(op);
      EXPECT_EQ(got[0][0], op == ReduceOp::kSum ? in[0][0] + in[1][0] : (in[0][0] + in[1][0]) / 2);
    }
  }
}

// 3 and 4 local ranks sum in local-rank order: every rank gets the same bits,
// close to the exact (double) sum.
TEST(ShmCommunicatorTest, ThreeAndFourRanksAgreeBitForBit) {
  for (int n : {3, 4}) {
    InMemoryStore store;
    ShmOptions so;
    so.chunk_elems = 777;
    auto comms = ConnectShm(std::vector<std::string>(n, "127.0.0.1"), &store, so);
    ASSERT_EQ(comms.size(), static_cast<size_t>(n));
    for (int64_t count : {1, 5, 1001, 4000}) {
      std::vector<std::vector<float>> in;
      for (int r = 0; r < n; ++r) in.push_back(RandomFloats(count, 100 * n + r + count));
      auto got = AllreduceAll(comms, in, ReduceOp::kSum);
      for (int r = 1; r < n; ++r) {
        EXPECT_EQ(SameBits(got[r], got[0], count), true)
            << n << " ranks, " << count << " elements: rank " << r << " differs from rank 0";
      }
      for (int64_t i = 0; i < count; ++i) {
        double exact = 0, mag = 0;
        for (int r = 0; r < n; ++r) {
          exact += in[r][i];
          mag += std::fabs(in[r][i]);
        }
        ASSERT_NEAR(got[0][i], exact, 1e-6 * mag + 1e-30) << "element " << i;
      }
    }
  }
}

// 2 hosts x 2 ranks on loopback (127.0.0.1 and 127.0.0.2): the leaders sum
// the hosts' partial sums over Gloo. Without that step each host would hold
// only its own sum.
TEST(ShmCommunicatorTest, TwoHostsTimesTwoRanksGoThroughTheLeaders) {
  InMemoryStore store;
  const std::vector<std::string> hosts = {"a@127.0.0.1", "b@127.0.0.2", "a@127.0.0.1",
                                          "b@127.0.0.2"};
  ShmOptions so;
  so.chunk_elems = 500;
  auto comms = ConnectShm(hosts, &store, so);
  ASSERT_EQ(comms.size(), 4u);
  for (int64_t count : {1, 3, 1001}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      std::vector<std::vector<float>> in;
      for (int r = 0; r < 4; ++r) in.push_back(RandomFloats(count, 7 * r + count));
      auto got = AllreduceAll(comms, in, op);
      for (int r = 1; r < 4; ++r) {
        EXPECT_EQ(SameBits(got[r], got[0], count), true) << "rank " << r << " differs from rank 0";
      }
      for (int64_t i = 0; i < count; ++i) {
        double exact = 0, mag = 0;
        for (int r = 0; r < 4; ++r) {
          exact += in[r][i];
          mag += std::fabs(in[r][i]);
        }
        if (op == ReduceOp::kAverage) {
          exact /= 4;
          mag /= 4;
        }
        ASSERT_NEAR(got[0][i], exact, 1e-6 * mag + 1e-30) << "element " << i;
      }
    }
  }
}

// The local sum is a pairwise tree, so 4 ranks on one host give the same
// bits as 2 hosts of 2 (whose leaders add the hosts' sums): a job keeps its
// results when its ranks move between hosts that way. 3 ranks: (a0+a1)+a2.
TEST(ShmCommunicatorTest, FourLocalRanksEqualTwoHostsOfTwoBitForBit) {
  InMemoryStore one_store, two_store, three_store;
  auto one = ConnectShm(std::vector<std::string>(4, "127.0.0.1"), &one_store);
  auto two = ConnectShm({"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"}, &two_store);
  auto three = ConnectShm(std::vector<std::string>(3, "127.0.0.1"), &three_store);
  ASSERT_EQ(one.size(), 4u);
  ASSERT_EQ(two.size(), 4u);
  ASSERT_EQ(three.size(), 3u);
  const int64_t n = 5000;
  std::vector<std::vector<float>> in;
  for (int r = 0; r < 4; ++r) in.push_back(RandomFloats(n, 40 + r));
  auto a = AllreduceAll(one, in, ReduceOp::kAverage);
  auto b = AllreduceAll(two, in, ReduceOp::kAverage);
  EXPECT_EQ(SameBits(a[0], b[0], n), true);
  auto c = AllreduceAll(three, {in[0], in[1], in[2]}, ReduceOp::kSum);
  int64_t differs_from_left_to_right = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float pair = in[0][i] + in[1][i];
    ASSERT_EQ(c[0][i], pair + in[2][i]) << "element " << i;
    differs_from_left_to_right += (pair + in[2][i]) != (in[0][i] + (in[1][i] + in[2][i]));
  }
  // The data are such that the order matters (so the checks above can fail).
  EXPECT_GT(differs_from_left_to_right, 0);
}

// Uneven hosts: 2 ranks on one, 1 alone on the other, which is then its
// host's leader without a segment.
TEST(ShmCommunicatorTest, UnevenHostsAgreeBitForBit) {
  InMemoryStore store;
  auto comms = ConnectShm({"127.0.0.1", "127.0.0.2", "127.0.0.1"}, &store);
  ASSERT_EQ(comms.size(), 3u);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    const int64_t n = 1003;
    std::vector<std::vector<float>> in;
    for (int r = 0; r < 3; ++r) in.push_back(RandomFloats(n, 60 + r));
    auto got = AllreduceAll(comms, in, op);
    for (int r = 1; r < 3; ++r) {
      EXPECT_EQ(SameBits(got[r], got[0], n), true) << "rank " << r;
    }
    for (int64_t i = 0; i < n; ++i) {
      // Host 127.0.0.1 sums ranks 0 and 2; its leader adds rank 1's.
      float want = (in[0][i] + in[2][i]) + in[1][i];
      if (op == ReduceOp::kAverage) want /= 3;
      ASSERT_EQ(got[1][i], want) << "element " << i;
    }
  }
}

// What the shm path does not carry goes to the inner Gloo communicator, in
// issue order with the shm ops.
TEST(ShmCommunicatorTest, OtherOpsGoThroughGloo) {
  InMemoryStore store;
  auto comms = ConnectShm({"127.0.0.1", "127.0.0.1"}, &store);
  ASSERT_EQ(comms.size(), 2u);
  OnEveryRank(comms, [](int r, Communicator& c) {
    std::vector<int64_t> ints = {r + 1, 10 * (r + 1)};
    std::vector<float> f = {static_cast<float>(r) + 0.5f, 3.0f};
    std::vector<float> wire = {1.0f + r, 2.0f};
    std::vector<float> root = {r == 1 ? 42.0f : 0.0f};
    std::vector<float> gathered(2);
    float mine = 7.0f + r;
    AllreduceOptions half;
    half.wire = DataType::kF16;
    auto w1 = c.Allreduce(Buffer{ints.data(), 2, DataType::kI64}, {});
    auto w2 = c.Allreduce(Buffer{f.data(), 2}, {});
    auto w3 = c.Allreduce(Buffer{wire.data(), 2}, half);
    auto w4 = c.Broadcast(Buffer{root.data(), 1}, /*root=*/1, {});
    auto w5 = c.Allgather(Buffer{&mine, 1}, Buffer{gathered.data(), 2}, {});
    auto w6 = c.Barrier({});
    for (auto* w : {w1.get(), w2.get(), w3.get(), w4.get(), w5.get(), w6.get()}) {
      EXPECT_TRUE(w->Wait().ok()) << "rank " << r << " op #" << w->seq();
    }
    EXPECT_EQ(w6->seq(), 6);
    EXPECT_EQ(c.completed_seq(), 6);
    EXPECT_EQ(ints, (std::vector<int64_t>{3, 30}));
    EXPECT_EQ(f, (std::vector<float>{2.0f, 6.0f}));
    EXPECT_EQ(wire, (std::vector<float>{3.0f, 4.0f}));
    EXPECT_EQ(root[0], 42.0f);
    EXPECT_EQ(gathered, (std::vector<float>{7.0f, 8.0f}));
    absl::Status left = c.Leave(absl::Seconds(10));
    EXPECT_TRUE(left.ok()) << "rank " << r << ": " << left;
  });
}

TEST(ShmCommunicatorTest, SegmentIsUnlinkedOnceEveryRankMappedIt) {
  const std::set<std::string> before = ShmSegments();
  InMemoryStore store;
  auto comms = ConnectShm({"127.0.0.1", "127.0.0.1", "127.0.0.1"}, &store);
  ASSERT_EQ(comms.size(), 3u);
  // Still usable after the name is gone: the mappings hold the memory.
  auto got = AllreduceAll(comms, {{1.0f}, {2.0f}, {4.0f}}, ReduceOp::kSum);
  EXPECT_EQ(got[2][0], 7.0f);
  std::set<std::string> added;
  for (const auto& n : ShmSegments()) {
    if (!before.count(n)) added.insert(n);
  }
  EXPECT_TRUE(added.empty()) << "left in /dev/shm: " << *added.begin();
}

// A leader that could not make the segment says why; the other local ranks
// fail with that at once instead of waiting out connect_timeout.
TEST(ShmCommunicatorTest, LeadersFailureReachesTheOtherLocalRanks) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("shm/0/segment", "error no space in /dev/shm").ok());
  GlooOptions o;
  o.rank_hosts = {"127.0.0.1", "127.0.0.1"};
  const absl::Time start = absl::Now();
  auto c = CreateCommunicator(&store, 1, 2, o);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("local leader rank 0 could not make the segment: no space in /dev/shm"));
}

TEST(ShmCommunicatorTest, MismatchedCountsFailOnEveryLocalRank) {
  InMemoryStore store;
  auto comms = ConnectShm({"127.0.0.1", "127.0.0.1"}, &store);
  ASSERT_EQ(comms.size(), 2u);
  OnEveryRank(comms, [](int r, Communicator& c) {
    std::vector<float> v(r == 0 ? 10 : 11, 1.0f);
    AllreduceOptions o;
    o.timeout = absl::Seconds(20);
    absl::Status s = c.Allreduce(Buffer{v.data(), static_cast<int64_t>(v.size())}, o)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "rank " << r << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("local ranks disagree: rank " + std::to_string(1 - r)))
        << "rank " << r << ": " << s;
  });
}

// The same count in different dtypes (i64 here, f32 there): both travel
// through the segment, which notices.
TEST(ShmCommunicatorTest, MismatchedDtypesFailOnEveryLocalRank) {
  InMemoryStore store;
  auto comms = ConnectShm({"127.0.0.1", "127.0.0.1"}, &store);
  ASSERT_EQ(comms.size(), 2u);
  OnEveryRank(comms, [](int r, Communicator& c) {
    std::vector<int64_t> i(4, 1);
    std::vector<float> f(4, 1.0f);
    AllreduceOptions o;
    o.timeout = absl::Seconds(20);
    Buffer b = r == 0 ? Buffer{i.data(), 4, DataType::kI64} : Buffer{f.data(), 4};
    absl::Status s = c.Allreduce(b, o)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "rank " << r << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(r == 0 ? "with 4 f32 elements, this rank 4 i64"
                                              : "with 4 i64 elements, this rank 4 f32"))
        << "rank " << r << ": " << s;
  });
}

TEST(ShmCommunicatorTest, AbsentLocalRankTimesOutNamingIt) {
  InMemoryStore store;
  auto comms = ConnectShm({"127.0.0.1", "127.0.0.1", "127.0.0.1"}, &store);
  ASSERT_EQ(comms.size(), 3u);
  OnEveryRank(comms, [](int r, Communicator& c) {
    if (r == 2) return;  // never calls the op
    std::vector<float> v(100, 1.0f);
    AllreduceOptions o;
    o.timeout = absl::Milliseconds(500);
    o.tag = "bucket 3";
    const absl::Time start = absl::Now();
    absl::Status s = c.Allreduce(Buffer{v.data(), 100}, o)->Wait();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    // The first rank to time out breaks the group; the other fails with it.
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      EXPECT_THAT(s.message(), HasSubstr("allreduce #1 (bucket 3) on rank "));
      EXPECT_THAT(s.message(), HasSubstr("local ranks 2 never arrived"));
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
      EXPECT_THAT(s.message(), HasSubstr("broke the shared-memory group"));
    }
    // Broken for good: the next op fails at once.
    EXPECT_FALSE(c.Allreduce(Buffer{v.data(), 100}, o)->Wait().ok());
  });
}

TEST(ShmCommunicatorTest, AbortOnOneRankFailsItsLocalPeerPromptly) {
  InMemoryStore store;
  auto comms = ConnectShm({"127.0.0.1", "127.0.0.1"}, &store);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<float> v(100, 1.0f);
  AllreduceOptions o;
  o.timeout = absl::Seconds(60);
  auto w = comms[0]->Allreduce(Buffer{v.data(), 100}, o);
  absl::SleepFor(absl::Milliseconds(50));
  comms[1]->Abort("watchdog says so");
  const absl::Time start = absl::Now();
  absl::Status s = w->Wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("local rank 1 broke the shared-memory group"));
}

}  // namespace
}  // namespace yoke::collective
