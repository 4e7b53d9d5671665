#include "collective/store.h"

#include <thread>

#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

TEST(InMemoryStoreTest, SetThenGetAndOverwrite) {
  InMemoryStore s;
  ASSERT_TRUE(s.Set("a", "1").ok());
  EXPECT_EQ(*s.Get("a", absl::ZeroDuration()), "1");
  ASSERT_TRUE(s.Set("a", "2").ok());
  EXPECT_EQ(*s.Get("a", absl::Seconds(1)), "2");
}

TEST(InMemoryStoreTest, GetWaitsForALaterSet) {
  InMemoryStore s;
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(s.Set("k", std::string("\0x", 2)).ok());
  });
  auto v = s.Get("k", absl::Seconds(10));
  t.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("\0x", 2));
}

TEST(InMemoryStoreTest, MissingKeyTimesOutNamingIt) {
  InMemoryStore s;
  const absl::Time start = absl::Now();
  auto v = s.Get("missing/key", absl::Milliseconds(100));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("missing/key"), std::string::npos) << v.status();
  EXPECT_EQ(s.Get("missing/key", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(PrefixStoreTest, KeysLiveUnderThePrefix) {
  InMemoryStore base;
  PrefixStore a(&base, "job/1/");
  PrefixStore b(&base, "job/2/");
  ASSERT_TRUE(a.Set("x", "from a").ok());
  EXPECT_EQ(*base.Get("job/1/x", absl::ZeroDuration()), "from a");
  EXPECT_EQ(*a.Get("x", absl::ZeroDuration()), "from a");
  auto missing = b.Get("x", absl::Milliseconds(10));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("job/2/x"), std::string::npos);
}

}  // namespace
}  // namespace yoke::collective
