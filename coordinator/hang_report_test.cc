#include "coordinator/hang_report.h"

#include "gtest/gtest.h"

namespace yoke::server {
namespace {

v1::Attempt FourRanks() {
  v1::Attempt a;
  a.set_number(1);
  a.set_world_size(6);
  auto add = [&](const std::string& w, int first, int n) {
    v1::Assignment* s = a.add_assignments();
    s->set_worker_id(w);
    s->set_first_rank(first);
    s->set_num_replicas(n);
  };
  add("w-3", 0, 1);
  add("w-1", 1, 1);
  add("w-7", 2, 2);  // ranks 2, 3
  add("w-2", 4, 1);
  add("w-5", 5, 1);
  return a;
}

TEST(HangReportTest, RecognisesCollectiveTimeouts) {
  EXPECT_TRUE(IsCollectiveTimeout(
      "allreduce #1234 (bucket 3) timed out after 30s on rank 0 of 4: ranks 2,5 never arrived"));
  EXPECT_TRUE(
      IsCollectiveTimeout("barrier #1 timed out after 5s on rank 1 of 2: rank 0 never arrived"));
  EXPECT_FALSE(IsCollectiveTimeout("data.train.images: file not found"));
  EXPECT_FALSE(IsCollectiveTimeout(""));
  EXPECT_EQ(MissingRanks("...: ranks 2, 5,11 never arrived"), (std::vector<int>{2, 5, 11}));
  EXPECT_TRUE(MissingRanks("no ranks here").empty());
}

TEST(HangReportTest, NamesTheWorkersOfTheMissingRanksAndEveryRanksProgress) {
  const std::string reason =
      "trainer of rank 0 on w-3 exited with code 1: allreduce #1234 (bucket 3) timed out after "
      "30s on rank 0 of 6: ranks 3,5 never arrived";
  std::map<int, int64_t> done = {{0, 1233}, {1, 1233}, {2, 1199}, {5, 1200}};
  EXPECT_EQ(AttributeHang(reason, FourRanks(), done),
            reason +
                " (workers w-7, w-5); last collective completed per rank: r0=1233 r1=1233 "
                "r2-3=1199 r4=none r5=1200");
}

TEST(HangReportTest, NamesTheBlamedWorkersAddresses) {
  const std::string reason =
      "trainer of rank 0 on w-3 exited with code 1: allreduce #9 (bucket 0) timed out after "
      "4s on rank 0 of 6: ranks 3,5 did not answer within 3s (dead or unreachable)";
  std::string out = AttributeHang(reason, FourRanks(), {},
                                  {{"w-7", "10.0.0.7"}, {"w-5", "10.0.0.5"}, {"w-3", "10.0.0.3"}});
  EXPECT_NE(out.find("(workers w-7 at 10.0.0.7, w-5 at 10.0.0.5)"), std::string::npos) << out;
  // Workers that are not blamed are not named.
  EXPECT_EQ(out.find("w-3 at"), std::string::npos) << out;
}

TEST(HangReportTest, OneWorkerAndTextAfterTheRanksKeepTheirPlace) {
  std::map<int, int64_t> done = {{0, 7}, {1, 7}, {2, 3}, {4, 7}, {5, 7}};
  EXPECT_EQ(AttributeHang("x: ranks 2,3 never arrived. giving up", FourRanks(), done),
            "x: ranks 2,3 never arrived (worker w-7). giving up; last collective completed per "
            "rank: r0=7 r1=7 r2-3=3 r4=7 r5=7");
  // A rank outside the attempt names no worker, but the progress still helps.
  EXPECT_EQ(AttributeHang("x: rank 9 never arrived", FourRanks(), {}),
            "x: rank 9 never arrived; last collective completed per rank: r0=none r1=none "
            "r2-3=none r4=none r5=none");
}

TEST(HangReportTest, SilentRanksAreBlamedToo) {
  const std::string reason =
      "allreduce #9 (bucket 0) timed out after 5s on rank 0 of 6: ranks 1 never arrived; "
      "ranks 4,5 did not answer within 2s (dead or unreachable)";
  EXPECT_TRUE(IsCollectiveTimeout("x: ranks 1 did not answer within 2s (dead or unreachable)"));
  EXPECT_EQ(MissingRanks(reason), (std::vector<int>{1, 4, 5}));
  EXPECT_EQ(AttributeHang(reason, FourRanks(), {{0, 8}, {1, 7}, {2, 8}, {4, 3}, {5, 3}}),
            "allreduce #9 (bucket 0) timed out after 5s on rank 0 of 6: ranks 1 never arrived "
            "(worker w-1); ranks 4,5 did not answer within 2s (dead or unreachable) (workers "
            "w-2, w-5); last collective completed per rank: r0=8 r1=7 r2-3=8 r4=3 r5=3");
}

TEST(HangReportTest, OtherReasonsAreUnchanged) {
  EXPECT_EQ(AttributeHang("trainer on w-1 killed by signal 9", FourRanks(), {{0, 5}}),
            "trainer on w-1 killed by signal 9");
}

TEST(HangReportTest, RanksOfAShare) {
  EXPECT_EQ(RanksOf(FourRanks().assignments(0)), "rank 0");
  EXPECT_EQ(RanksOf(FourRanks().assignments(2)), "ranks 2-3");
}

}  // namespace
}  // namespace yoke::server
