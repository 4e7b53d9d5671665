#include "coordinator/rendezvous.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

TEST(RendezvousTest, PutThenGet) {
  Rendezvous r;
  r.Open("job-1", 1);
  ASSERT_TRUE(r.Put("job-1", 1, "nccl_id", std::string("\0\1\2", 3)).ok());
  auto v = r.Get("job-1", 1, "nccl_id", absl::ZeroDuration());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("\0\1\2", 3));
  ASSERT_TRUE(r.Put("job-1", 1, "nccl_id", "new").ok());
  EXPECT_EQ(*r.Get("job-1", 1, "nccl_id", absl::ZeroDuration()), "new");
}

TEST(RendezvousTest, NamespacesAreSeparateAndMustBeOpen) {
  Rendezvous r;
  r.Open("job-1", 1);
  r.Open("job-1", 2);
  ASSERT_TRUE(r.Put("job-1", 1, "k", "attempt1").ok());
  EXPECT_EQ(r.Get("job-1", 2, "k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.Put("job-2", 1, "k", "v").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.Get("job-2", 1, "k", absl::Seconds(5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  r.Close("job-1", 1);
  EXPECT_EQ(r.num_namespaces(), 1);
  EXPECT_EQ(r.Get("job-1", 1, "k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  r.Open("job-1", 1);  // reopened: the old keys are gone
  EXPECT_EQ(r.Get("job-1", 1, "k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(RendezvousTest, WaitingGetIsWokenByAPutFromAnotherThread) {
  Rendezvous r;
  r.Open("job-1", 1);
  const absl::Time start = absl::Now();
  std::thread putter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(r.Put("job-1", 1, "addr", "10.0.0.1:1234").ok());
  });
  auto v = r.Get("job-1", 1, "addr", absl::Seconds(30));
  const absl::Duration waited = absl::Now() - start;
  putter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "10.0.0.1:1234");
  EXPECT_GE(waited, absl::Milliseconds(90));
  EXPECT_LT(waited, absl::Seconds(10));  // woken, not timed out
}

TEST(RendezvousTest, GetTimesOutNamingTheKey) {
  Rendezvous r;
  r.Open("job-1", 3);
  const absl::Time start = absl::Now();
  auto v = r.Get("job-1", 3, "missing", absl::Milliseconds(150));
  const absl::Duration waited = absl::Now() - start;
  ASSERT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("'missing'"), std::string::npos);
  EXPECT_NE(v.status().message().find("job-1/3"), std::string::npos);
  EXPECT_GE(waited, absl::Milliseconds(140));
}

TEST(RendezvousTest, CloseWakesWaitersWithAborted) {
  Rendezvous r;
  r.Open("job-1", 1);
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    r.Close("job-1", 1);
  });
  const absl::Time start = absl::Now();
  auto v = r.Get("job-1", 1, "k", absl::Seconds(30));
  closer.join();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kAborted);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(RendezvousTest, LimitsAreEnforced) {
  Rendezvous r;
  r.Open("job-1", 1);
  EXPECT_EQ(r.Put("job-1", 1, "", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Put("job-1", 1, std::string(2000, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Put("job-1", 1, "k", std::string((64 << 10) + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.Put("job-1", 1, "k", std::string(64 << 10, 'v')).ok());
}

TEST(RendezvousTest, AnAttemptHoldsAtMost1024Keys) {
  Rendezvous r;
  r.Open("job-1", 1);
  for (int i = 0; i < 1024; ++i) ASSERT_TRUE(r.Put("job-1", 1, absl::StrCat("k", i), "v").ok());
  EXPECT_EQ(r.Put("job-1", 1, "one-more", "v").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(r.Put("job-1", 1, "k7", "overwrite").ok()) << "overwriting adds no key";
  // Another attempt has its own budget.
  r.Open("job-2", 1);
  EXPECT_TRUE(r.Put("job-2", 1, "one-more", "v").ok());
}

TEST(RendezvousTest, AnAttemptHoldsAtMost4MiB) {
  Rendezvous r;
  r.Open("job-1", 1);
  const std::string big(60 << 10, 'v');
  int stored = 0;
  absl::Status s;
  while ((s = r.Put("job-1", 1, absl::StrCat("k", stored), big)).ok()) ++stored;
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(stored, (4 << 20) / ((60 << 10) + 3)) << "stops at 4 MiB, not before";
  // Overwriting a value with a smaller one frees room; closing frees it all.
  EXPECT_TRUE(r.Put("job-1", 1, "k0", "small").ok());
  EXPECT_TRUE(r.Put("job-1", 1, "again", std::string(50 << 10, 'v')).ok());
  r.Close("job-1", 1);
  r.Open("job-1", 1);
  EXPECT_TRUE(r.Put("job-1", 1, "k0", big).ok());
}

}  // namespace
}  // namespace yoke::server
