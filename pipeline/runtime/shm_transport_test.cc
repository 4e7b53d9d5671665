// ShmTransport on its own: messages matched by key through rings that wrap
// and fill, a peer that dies, closes or aborts, the fallback for a stage on
// another host, and segments that never outlive the bootstrap.
// (stage_runner_test.cc trains through it.)
#include "pipeline/runtime/shm_transport.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/file_store.h"
#include "collective/store.h"
#include "collective/testing/shm_segments.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::pipeline {
namespace {

using ::testing::HasSubstr;

engine::Tensor Filled(int64_t n, float base) {
  engine::Tensor t = engine::Tensor::Zeros({n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = base + static_cast<float>(i);
  return t;
}

// Checks that `t` holds Filled(n, base).
void ExpectFilled(const engine::Tensor& t, float base) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    ASSERT_EQ(t.data<float>()[i], base + static_cast<float>(i)) << "element " << i;
  }
}

struct Pair {
  std::unique_ptr<ShmTransport> a, b;  // stages 0 and 1
};

// Two co-located stages in this process, rings of `bytes`.
Pair Connect(collective::Store* store, int64_t bytes, absl::Duration timeout = absl::Seconds(10)) {
  ShmTransportOptions o;
  o.activation_ring_bytes = o.gradient_ring_bytes = bytes;
  o.timeout = timeout;
  Pair p;
  absl::Status sa;
  std::thread t([&] {
    auto a = ShmTransport::Create(store, 0, 2, {true, true}, o, nullptr);
    sa = a.status();
    if (a.ok()) p.a = std::move(a).value();
  });
  auto b = ShmTransport::Create(store, 1, 2, {true, true}, o, nullptr);
  t.join();
  EXPECT_TRUE(sa.ok()) << sa;
  EXPECT_TRUE(b.ok()) << b.status();
  if (b.ok()) p.b = std::move(b).value();
  return p;
}

TEST(ShmTransport, MessagesAreMatchedByKeyNotByArrival) {
  const std::set<std::string> before = collective::testing::ShmSegments();
  collective::InMemoryStore store;
  Pair p = Connect(&store, 1 << 16);
  ASSERT_NE(p.a, nullptr);
  ASSERT_NE(p.b, nullptr);
  // Segments are unlinked as soon as both stages have mapped them.
  EXPECT_EQ(collective::testing::ShmSegments(), before);
  EXPECT_TRUE(p.a->shared(1));
  EXPECT_GE(p.a->ring_bytes(1), 1 << 16);
  ASSERT_TRUE(p.a->Send(1, MessageKind::kActivation, 0, Filled(5, 0)).ok());
  ASSERT_TRUE(p.a->Send(1, MessageKind::kActivation, 1, Filled(7, 100)).ok());
  ASSERT_TRUE(p.a->Send(1, MessageKind::kGradient, 0, Filled(3, 200)).ok());
  // The same key twice: taken in the order sent.
  ASSERT_TRUE(p.a->Send(1, MessageKind::kActivation, 0, Filled(5, 300)).ok());
  engine::Tensor g = engine::Tensor::Zeros({3}), x1 = engine::Tensor::Zeros({7});
  engine::Tensor x0 = engine::Tensor::Zeros({5});
  ASSERT_TRUE(p.b->Recv(0, MessageKind::kGradient, 0, &g).ok());
  ExpectFilled(g, 200);
  ASSERT_TRUE(p.b->Recv(0, MessageKind::kActivation, 1, &x1).ok());
  ExpectFilled(x1, 100);
  ASSERT_TRUE(p.b->Recv(0, MessageKind::kActivation, 0, &x0).ok());
  ExpectFilled(x0, 0);
  ASSERT_TRUE(p.b->Recv(0, MessageKind::kActivation, 0, &x0).ok());
  ExpectFilled(x0, 300);
  // And back down the other ring.
  ASSERT_TRUE(p.b->Send(0, MessageKind::kGradient, 4, Filled(6, 7)).ok());
  engine::Tensor d = engine::Tensor::Zeros({6});
  ASSERT_TRUE(p.a->Recv(1, MessageKind::kGradient, 4, &d).ok());
  ExpectFilled(d, 7);
}

TEST(ShmTransport, AFullRingMakesTheSenderWaitAndWrapsAround) {
  collective::InMemoryStore store;
  // Room for two records of 1,000 floats: every ring position is used, and
  // records cross the end with a skip before them.
  const int64_t bytes = RingBytesFor(1, 1000);
  Pair p = Connect(&store, bytes);
  ASSERT_NE(p.a, nullptr);
  constexpr int kMessages = 200;
  absl::Status sent;
  std::thread sender([&] {
    for (int i = 0; i < kMessages && sent.ok(); ++i) {
      // Sizes vary, so the skips fall at varying places.
      sent = p.a->Send(1, MessageKind::kActivation, i % 3, Filled(300 + (i * 37) % 700, i));
    }
  });
  for (int i = 0; i < kMessages; ++i) {
    engine::Tensor x = engine::Tensor::Zeros({300 + (i * 37) % 700});
    const absl::Status s = p.b->Recv(0, MessageKind::kActivation, i % 3, &x);
    ASSERT_TRUE(s.ok()) << "message " << i << ": " << s;
    ExpectFilled(x, i);
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let it fill
  }
  sender.join();
  EXPECT_TRUE(sent.ok()) << sent;
  EXPECT_LE(p.a->peak_ring_bytes(1), p.a->ring_bytes(1));
  EXPECT_GT(p.a->peak_ring_bytes(1), p.a->ring_bytes(1) / 2);
}

TEST(ShmTransport, WrongSizesAndMissingMessagesAreNamed) {
  collective::InMemoryStore store;
  Pair p = Connect(&store, RingBytesFor(2, 100), absl::Milliseconds(300));
  ASSERT_NE(p.a, nullptr);
  // Larger than the ring: refused at once, naming the message.
  absl::Status s = p.a->Send(1, MessageKind::kActivation, 2, Filled(1000, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("activation 2 from stage 0 to stage 1"));
  // Smaller than the ring but more than half of it: from some positions it
  // could never fit, so it is refused too, rather than waiting forever.
  const int64_t most = p.a->ring_bytes(1) / 4 * 3 / 4;  // floats in 3/4 of the ring
  s = p.a->Send(1, MessageKind::kActivation, 3, Filled(most, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("it needs twice that"));
  // A receiver expecting another size.
  ASSERT_TRUE(p.a->Send(1, MessageKind::kActivation, 0, Filled(10, 0)).ok());
  engine::Tensor x = engine::Tensor::Zeros({11});
  s = p.b->Recv(0, MessageKind::kActivation, 0, &x);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("holds 10 values; the receiver expects 11"));
  // One that never comes.
  const auto start = std::chrono::steady_clock::now();
  s = p.b->Recv(0, MessageKind::kGradient, 5, &x);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("gradient 5 from stage 0 to stage 1, which never came"));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(290));
  // Not a neighbour.
  EXPECT_EQ(p.a->Send(3, MessageKind::kActivation, 0, Filled(1, 0)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShmTransport, ANeighbourThatClosesOrAbortsFailsTheWaitAtOnce) {
  collective::InMemoryStore store;
  {
    Pair p = Connect(&store, 1 << 16, absl::Seconds(30));
    ASSERT_NE(p.a, nullptr);
    engine::Tensor x = engine::Tensor::Zeros({4});
    absl::Status s;
    const auto start = std::chrono::steady_clock::now();
    std::thread waiter([&] { s = p.b->Recv(0, MessageKind::kActivation, 0, &x); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    p.a.reset();  // stage 0 leaves (its thread failed, say)
    waiter.join();
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_THAT(s.message(), HasSubstr("stage 0 broke the shared-memory group"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  collective::InMemoryStore store2;
  Pair p = Connect(&store2, 1 << 16, absl::Seconds(30));
  ASSERT_NE(p.a, nullptr);
  engine::Tensor x = engine::Tensor::Zeros({4});
  absl::Status s;
  std::thread waiter([&] { s = p.a->Recv(1, MessageKind::kGradient, 0, &x); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  p.a->Abort(absl::CancelledError("another replica of this trainer failed"));
  waiter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  // Its neighbour's next wait fails too.
  s = p.b->Recv(0, MessageKind::kActivation, 0, &x);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

// Stage 0 as a child process that sends one message and is killed: stage 1
// gets the message, then its next receive fails within a fraction of its
// timeout, naming the dead stage as a peer's echo ("died while this rank
// waited for it").
TEST(ShmTransport, ADeadNeighbourProcessIsNamedAtOnce) {
  common::TempDir dir("yoke_shm_transport");
  const std::set<std::string> before = collective::testing::ShmSegments();
  const pid_t child = fork();
  if (child == 0) {
    auto store = collective::FileStore::Open(dir.path());
    if (!store.ok()) _exit(2);
    auto t = ShmTransport::Create(store->get(), 0, 2, {true, true}, ShmTransportOptions{}, nullptr);
    if (!t.ok()) _exit(3);
    if (!(*t)->Send(1, MessageKind::kActivation, 0, Filled(8, 1)).ok()) _exit(4);
    raise(SIGKILL);  // dies without its destructor: only its pid can tell
    _exit(5);
  }
  ASSERT_GT(child, 0);
  auto store = collective::FileStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  ShmTransportOptions o;
  o.timeout = absl::Seconds(30);
  auto t = ShmTransport::Create(store->get(), 1, 2, {true, true}, o, nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  engine::Tensor x = engine::Tensor::Zeros({8});
  ASSERT_TRUE((*t)->Recv(0, MessageKind::kActivation, 0, &x).ok());
  ExpectFilled(x, 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << WEXITSTATUS(status);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = (*t)->Recv(0, MessageKind::kActivation, 1, &x);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("stage 0 (pid "));
  EXPECT_THAT(s.message(), HasSubstr("died while this rank waited for it"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(collective::testing::ShmSegments(), before);
}

// A recording stand-in for the transport across hosts.
class Recording final : public Transport {
 public:
  explicit Recording(std::vector<std::string>* log) : log_(log) {}
  absl::Status Send(int to, MessageKind kind, int mb, const engine::Tensor&) override {
    log_->push_back(absl::StrCat("send ", MessageName(1, to, kind, mb)));
    return absl::OkStatus();
  }
  absl::Status Recv(int from, MessageKind kind, int mb, engine::Tensor*) override {
    log_->push_back(absl::StrCat("recv ", MessageName(from, 1, kind, mb)));
    return absl::OkStatus();
  }

 private:
  std::vector<std::string>* log_;
};

// Stage 1 of 3 shares its host with stage 0 only: messages to and from
// stage 2 go through the fallback, those of stage 0 through shared memory.
TEST(ShmTransport, AStageOnAnotherHostGoesThroughTheFallback) {
  collective::InMemoryStore store;
  std::vector<std::string> log;
  std::unique_ptr<ShmTransport> s0;
  absl::Status s0_status;
  std::thread t([&] {
    auto a =
        ShmTransport::Create(&store, 0, 3, {true, true, false}, ShmTransportOptions{}, nullptr);
    s0_status = a.status();
    if (a.ok()) s0 = std::move(a).value();
  });
  auto s1 = ShmTransport::Create(&store, 1, 3, {true, true, false}, ShmTransportOptions{},
                                 std::make_unique<Recording>(&log));
  t.join();
  ASSERT_TRUE(s0_status.ok()) << s0_status;
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_TRUE((*s1)->shared(0));
  EXPECT_FALSE((*s1)->shared(2));
  engine::Tensor x = engine::Tensor::Zeros({2});
  ASSERT_TRUE(s0->Send(1, MessageKind::kActivation, 0, Filled(2, 9)).ok());
  ASSERT_TRUE((*s1)->Recv(0, MessageKind::kActivation, 0, &x).ok());
  ExpectFilled(x, 9);
  ASSERT_TRUE((*s1)->Send(2, MessageKind::kActivation, 0, x).ok());
  ASSERT_TRUE((*s1)->Recv(2, MessageKind::kGradient, 0, &x).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"send activation 0 from stage 1 to stage 2",
                                           "recv gradient 0 from stage 2 to stage 1"}));
  // Without a fallback, a stage on another host is refused at creation.
  collective::InMemoryStore lone;
  auto refused =
      ShmTransport::Create(&lone, 2, 3, {true, false, false}, ShmTransportOptions{}, nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

}  // namespace
}  // namespace yoke::pipeline
