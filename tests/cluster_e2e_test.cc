// End to end: `yoke up --workers 2`, two MLP jobs submitted through the CLI,
// each trained for one epoch by a real worker's trainer, watched to the end.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

TEST(ClusterE2ETest, TwoMlpJobsSucceedOnTwoWorkers) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  EXPECT_NE(cluster.up_output().find("export YOKE_COORDINATOR=" + cluster.address()),
            std::string::npos)
      << cluster.up_output();

  RunResult r = cluster.Yoke("workers --output json");
  ASSERT_EQ(r.exit_code, 0);
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(ParseJson("{\"workers\":" + r.out + "}", &workers)) << r.out;
  EXPECT_EQ(workers.workers_size(), 2);

  // One thread each: the two trainers share the machine's two cores.
  const std::string submit = "submit " + Config("fashion_mnist_mlp.yaml") +
                             " --set training.epochs=1 --set training.threads=1";
  RunResult s1 = cluster.Yoke(submit + " --set name=mlp-a");
  RunResult s2 = cluster.Yoke(submit + " --set name=mlp-b --output json");
  ASSERT_EQ(s1.exit_code, 0) << s1.out;
  ASSERT_EQ(s2.exit_code, 0) << s2.out;
  std::string id1 = Trim(s1.out);
  v1::SubmitJobResponse resp2;
  ASSERT_TRUE(ParseJson(s2.out, &resp2)) << s2.out;
  std::string id2 = resp2.job_id();
  ASSERT_FALSE(id1.empty());
  ASSERT_NE(id1, id2);

  RunResult w1 = cluster.Yoke("watch " + id1, true);
  EXPECT_EQ(w1.exit_code, 0) << w1.out << cluster.Logs();
  EXPECT_NE(w1.out.find("test accuracy"), std::string::npos) << w1.out;
  RunResult w2 = cluster.Yoke("watch " + id2, true);
  EXPECT_EQ(w2.exit_code, 0) << w2.out << cluster.Logs();

  for (const auto& id : {id1, id2}) {
    v1::Job job;
    ASSERT_TRUE(cluster.GetJob(id, &job)) << id;
    EXPECT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason();
    EXPECT_GE(job.result().test_accuracy(), 0.82) << id;
    EXPECT_EQ(job.result().epochs(), 1);
    EXPECT_EQ(job.result().steps(), 938);  // ceil(60000 / 64)
    EXPECT_EQ(job.history_size(), 1);
    ASSERT_GE(job.attempts_size(), 1);
    EXPECT_EQ(job.attempts(job.attempts_size() - 1).state(), v1::ATTEMPT_SUCCEEDED);
    std::printf("%s: test accuracy %.4f, %.0f samples/s\n", id.c_str(),
                job.result().test_accuracy(), job.result().samples_per_second());
  }

  r = cluster.Yoke("jobs --output json");
  ASSERT_EQ(r.exit_code, 0);
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(ParseJson("{\"jobs\":" + r.out + "}", &jobs)) << r.out;
  ASSERT_EQ(jobs.jobs_size(), 2);
  std::set<std::string> names;
  for (const auto& j : jobs.jobs()) {
    EXPECT_EQ(j.state(), v1::JOB_SUCCEEDED);
    names.insert(j.spec().name());
  }
  EXPECT_EQ(names, (std::set<std::string>{"mlp-a", "mlp-b"}));

  r = cluster.Yoke("jobs");  // the table for people
  EXPECT_NE(r.out.find("SUCCEEDED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(id1), std::string::npos) << r.out;

  r = cluster.Yoke("logs " + id1);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.out.empty()) << "the trainer's log lines reach the coordinator";
}

}  // namespace
}  // namespace yoke::e2e
