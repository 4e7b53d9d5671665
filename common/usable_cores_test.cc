#include "common/usable_cores.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

// nproc(1) counts the CPUs the calling process may use.
int Nproc() {
  int n = 0;
  FILE* p = popen("nproc", "r");
  if (p == nullptr) return -1;
  if (fscanf(p, "%d", &n) != 1) n = -1;
  pclose(p);
  return n;
}

TEST(UsableCoresTest, MatchesNproc) { EXPECT_EQ(UsableCores(), Nproc()); }

TEST(UsableCoresTest, FollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &saved)) first = c;
  }
  ASSERT_GE(first, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const int pinned = UsableCores();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(pinned, 1);
  EXPECT_EQ(UsableCores(), CPU_COUNT(&saved));
}

}  // namespace
}  // namespace yoke::common
