// Observability end to end, with real servers from Debian's packages:
//   - A coordinator (mutual TLS) and two workers serving /metrics, and a real
//     Prometheus scraping all three during a 4-rank job (2 workers x 2
//     replicas). Prometheus's HTTP API answers
//     yoke_samples_per_second{job="ID"} > 0, promtool accepts every
//     exposition, and the job's series stay under a stated bound.
//   - The dashboard in a real headless Chromium while the job runs: the
//     jobs table has the job's row, the job page's charts have points, and a
//     PNG screenshot is taken.
//   - /metrics and the dashboard refuse requests without a token.
//   - `yoke get ID` shows where a step's time goes.
// Skips visibly where prometheus, promtool or chromium is missing.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

using std::chrono::seconds;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The "PREFIX HOST:PORT" line a daemon printed on stdout (its log), or "".
std::string PrintedAddress(const std::string& log, const std::string& prefix) {
  std::smatch m;
  const std::string text = ReadFile(log);
  std::regex re(prefix + " (\\S+)");
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

std::string Curl(const std::string& url, const std::string& token = "",
                 const std::string& extra = "") {
  std::string cmd = "curl -s --max-time 10 " + extra + " ";
  if (!token.empty()) cmd += "-H 'Authorization: Bearer " + token + "' ";
  return Sh(cmd + "'" + url + "'").out;
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = 0; (p = text.find(needle, p)) != std::string::npos; p += needle.size()) ++n;
  return n;
}

class ObservabilityE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* tool : {"prometheus", "promtool", "chromium", "curl"}) {
      if (Sh(std::string("command -v ") + tool).exit_code != 0) {
        GTEST_SKIP() << tool << " is not installed (scripts/install-deps.sh installs it)";
      }
    }
    dir_ = MakeTempDir("yoke_obs");
  }
  void TearDown() override {
    prometheus_.Kill();
    workers_.clear();
    coordinator_.Kill();
    if (!HasFailure() && !dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } else if (!dir_.empty()) {
      std::fprintf(stderr, "directory kept for inspection: %s\n", dir_.c_str());
    }
  }

  RunResult Yoke(const std::string& args, bool merge_stderr = true) const {
    return Sh(BinDir() + "/yoke " + args + " --coordinator " + grpc_ + " --tls-dir " + dir_ +
                  "/tls/admin",
              merge_stderr);
  }

  // The steps of the scenario, in order; each fills the members below that
  // the later ones use.

  // Certificates for the cluster, and a coordinator (mutual TLS) with its
  // HTTP port: sets grpc_ and http_.
  void StartCoordinator() {
    ASSERT_EQ(IssueTestCerts(dir_ + "/tls", {"127.0.0.1"}, {"w-1", "w-2"}), "");
    coordinator_ = Daemon(
        {BinDir() + "/yoke-coordinator", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
         "--store", dir_ + "/coordinator.db", "--tls-dir", dir_ + "/tls/coordinator"},
        dir_ + "/coordinator.log");
    ASSERT_TRUE(
        WaitFor([&] { return !PrintedAddress(dir_ + "/coordinator.log", "listening on").empty(); },
                seconds(20)))
        << LogTails(dir_);
    grpc_ = PrintedAddress(dir_ + "/coordinator.log", "listening on");
    http_ = PrintedAddress(dir_ + "/coordinator.log", "http on");
    ASSERT_FALSE(http_.empty()) << LogTails(dir_);
  }

  // Workers w-1 and w-2, 2 cpu replicas each, serving /metrics: sets
  // worker_metrics_ once each has registered.
  void StartWorkers() {
    for (int i = 1; i <= 2; ++i) {
      const std::string id = "w-" + std::to_string(i);
      const std::string log = dir_ + "/worker-" + id + ".log";
      workers_.emplace_back(
          std::vector<std::string>{BinDir() + "/yoke-worker", "--coordinator", grpc_,
                                   "--cpu-replicas", "2", "--work-dir", dir_ + "/work-" + id,
                                   "--heartbeat-interval", "500ms", "--metrics-listen",
                                   "127.0.0.1:0", "--tls-dir", dir_ + "/tls/" + id},
          log);
      ASSERT_TRUE(WaitFor(
          [&] { return ReadFile(log).find("registered with") != std::string::npos; }, seconds(20)))
          << LogTails(dir_);
      worker_metrics_.push_back(PrintedAddress(log, "metrics on"));
      ASSERT_FALSE(worker_metrics_.back().empty()) << LogTails(dir_);
    }
  }

  // Authentication: nothing without a token, a viewer token opens it all.
  // Sets token_ to that viewer token.
  void CheckAuthenticationAndCreateAViewerToken() {
    EXPECT_EQ(Curl("http://" + http_ + "/metrics", "", "-o /dev/null -w '%{http_code}'"), "401");
    EXPECT_EQ(Curl("http://" + http_ + "/api/jobs", "", "-o /dev/null -w '%{http_code}'"), "401");
    EXPECT_EQ(Curl("http://" + http_ + "/metrics", "not-a-token", "-o /dev/null -w '%{http_code}'"),
              "401");
    RunResult tok = Yoke("token create --role viewer --name dashboard --ttl 1h", false);
    ASSERT_EQ(tok.exit_code, 0) << tok.out;
    token_ = tok.out.substr(0, tok.out.find('\n'));
    ASSERT_FALSE(token_.empty());
    EXPECT_EQ(Curl("http://" + http_ + "/metrics", token_, "-o /dev/null -w '%{http_code}'"),
              "200");
  }

  // Prometheus scrapes the coordinator (with the token) and both workers
  // every second. honor_labels keeps Yoke's `job` label (the job id) rather
  // than renaming it exported_job under the scrape job's name. Sets
  // prom_port_.
  void StartPrometheus() {
    prom_port_ = FreePort();
    {
      std::ofstream cfg(dir_ + "/prometheus.yml");
      cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
          << "scrape_configs:\n"
          << "  - job_name: yoke-coordinator\n    honor_labels: true\n"
          << "    authorization:\n      credentials: " << token_
          << "\n    static_configs:\n      - targets: ['" << http_ << "']\n"
          << "  - job_name: yoke-workers\n    honor_labels: true\n"
          << "    static_configs:\n      - targets: ['" << worker_metrics_[0] << "', '"
          << worker_metrics_[1] << "']\n";
    }
    const std::string prometheus_bin = Sh("command -v prometheus").out;
    prometheus_ = Daemon({prometheus_bin.substr(0, prometheus_bin.find('\n')),
                          "--config.file=" + dir_ + "/prometheus.yml",
                          "--storage.tsdb.path=" + dir_ + "/prometheus-data",
                          "--web.listen-address=127.0.0.1:" + std::to_string(prom_port_)},
                         dir_ + "/prometheus.log");
  }

  // A 4-rank MLP far longer than the checks take (it is cancelled once
  // everything is checked). Sets id_.
  void SubmitALongJob() {
    RunResult sub = Yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                         " --set distribution.workers=2 --set distribution.devices_per_worker=2"
                         " --set training.epochs=500 --set training.threads=1"
                         " --set training.log_every_steps=10"
                         " --set data.train.num_examples=8192 --set data.test.num_examples=500"
                         " --set checkpoint.dir=" +
                         dir_ + "/ckpt");
    ASSERT_EQ(sub.exit_code, 0) << sub.out;
    id_ = sub.out.substr(0, sub.out.find('\n'));
  }

  // Prometheus's answer to the instant query `query` (JSON).
  std::string PromQuery(const std::string& query) const {
    return Curl("http://127.0.0.1:" + std::to_string(prom_port_) + "/api/v1/query", "",
                "-G --data-urlencode '" + std::string("query=") + query + "'");
  }

  // Prometheus has a positive throughput for the job from a worker, and it
  // scraped the coordinator's metrics too (both workers busy).
  void ExpectPrometheusToSeeTheJob() {
    const std::string query = "yoke_samples_per_second{job=\"" + id_ + "\"} > 0";
    std::string answer;
    const bool seen = WaitFor(
        [&] {
          answer = PromQuery(query);
          return answer.find("\"result\":[{") != std::string::npos;
        },
        seconds(120));
    ASSERT_TRUE(seen) << "Prometheus never answered " << query << ": " << answer << "\n"
                      << LogTails(dir_);
    std::printf("Prometheus: %s -> %s\n", query.c_str(), answer.substr(0, 300).c_str());
    std::string busy;
    EXPECT_TRUE(WaitFor(
        [&] {
          busy = PromQuery("yoke_workers{state=\"busy\"} == 2");
          return busy.find("\"result\":[{") != std::string::npos;
        },
        seconds(30)))
        << busy;
  }

  // Every exposition passes promtool's checks, and the job's series are
  // bounded: per trainer (2 here, rank 0 and rank 2) 6 gauges and a
  // histogram of 14 buckets + Inf + sum + count; the coordinator adds one
  // goodput gauge. A 4-rank job never has more than 4 trainers.
  void ExpectExpositionsToPassPromtoolWithBoundedSeries() {
    int series = 0;
    for (size_t i = 0; i < worker_metrics_.size(); ++i) {
      const std::string path = dir_ + "/worker-" + std::to_string(i) + ".prom";
      Sh("curl -s --max-time 10 -o " + path + " http://" + worker_metrics_[i] + "/metrics");
      RunResult check = Sh("promtool check metrics < " + path, true);
      EXPECT_EQ(check.exit_code, 0) << check.out << ReadFile(path);
      series += Count(ReadFile(path), "job=\"" + id_ + "\"");
    }
    const std::string coord_path = dir_ + "/coordinator.prom";
    Sh("curl -s --max-time 10 -H 'Authorization: Bearer " + token_ + "' -o " + coord_path +
       " http://" + http_ + "/metrics");
    RunResult check = Sh("promtool check metrics < " + coord_path, true);
    EXPECT_EQ(check.exit_code, 0) << check.out << ReadFile(coord_path);
    const std::string coord_text = ReadFile(coord_path);
    series += Count(coord_text, "job=\"" + id_ + "\"");
    EXPECT_GE(series, 2 * 23) << "both trainers report";
    EXPECT_LE(series, 4 * 23 + 1);
    std::printf("series of the 4-rank job: %d (bound %d)\n", series, 4 * 23 + 1);
    EXPECT_NE(coord_text.find("yoke_jobs{state=\"running\"} 1"), std::string::npos) << coord_text;
    EXPECT_NE(coord_text.find("yoke_workers{state=\"busy\"} 2"), std::string::npos) << coord_text;
    EXPECT_NE(coord_text.find("yoke_job_submissions_total 1"), std::string::npos) << coord_text;
    EXPECT_NE(coord_text.find("yoke_scheduling_latency_seconds_count 1"), std::string::npos);
    EXPECT_NE(coord_text.find("yoke_rpc_latency_seconds_count{method=\"Heartbeat\"}"),
              std::string::npos);
  }

  // The dashboard in Chromium, while the job runs: the jobs table, the job
  // page's charts and breakdown, the workers page, and a PNG screenshot
  // (copied to $YOKE_DASHBOARD_PNG where set). /login puts the token in a
  // cookie and sends the browser on to the page.
  void ExpectTheDashboardToShowTheJob() {
    const std::string chromium =
        "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
        "--user-data-dir=" +
        dir_ + "/chromium --virtual-time-budget=8000 ";
    auto page = [&](const std::string& path) {
      return "'http://" + http_ + "/login?token=" + token_ + "&next=" + path + "'";
    };
    RunResult jobs = Sh(chromium + "--dump-dom " + page("/") + " 2>/dev/null");
    EXPECT_NE(jobs.out.find("data-ready=\"1\""), std::string::npos) << jobs.out;
    EXPECT_NE(jobs.out.find("data-job=\"" + id_ + "\""), std::string::npos) << jobs.out;
    EXPECT_NE(jobs.out.find("RUNNING"), std::string::npos) << jobs.out;
    RunResult job_page = Sh(chromium + "--dump-dom " + page("/job/" + id_) + " 2>/dev/null");
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(job_page.out, m, std::regex("id=\"loss\"[^>]*data-points=\"(\\d+)\"")) ||
        std::regex_search(job_page.out, m, std::regex("data-points=\"(\\d+)\"[^>]*id=\"loss\"")))
        << job_page.out;
    EXPECT_GT(std::stoi(m[1].str()), 0) << "the loss chart has points";
    EXPECT_NE(job_page.out.find("w-1"), std::string::npos) << "the job's workers are listed";
    EXPECT_NE(job_page.out.find("compute"), std::string::npos) << "the step-time breakdown";
    RunResult workers_page = Sh(chromium + "--dump-dom " + page("/workers") + " 2>/dev/null");
    EXPECT_NE(workers_page.out.find("data-worker=\"w-2\""), std::string::npos) << workers_page.out;
    const std::string png = dir_ + "/dashboard.png";
    Sh(chromium + "--window-size=1280,1000 --screenshot=" + png + " " + page("/job/" + id_) +
       " 2>/dev/null");
    const std::string shot = ReadFile(png);
    ASSERT_GT(shot.size(), 10000u) << "no screenshot";
    EXPECT_EQ(shot.substr(1, 3), "PNG");
    if (const char* keep = std::getenv("YOKE_DASHBOARD_PNG")) {
      std::filesystem::copy_file(png, keep, std::filesystem::copy_options::overwrite_existing);
    }
  }

  std::string dir_;
  std::string grpc_;
  std::string http_;                         // the coordinator's HTTP address
  std::vector<std::string> worker_metrics_;  // each worker's /metrics address
  std::string token_;                        // a viewer's bearer token
  int prom_port_ = 0;                        // Prometheus's HTTP port
  std::string id_;                           // the running job
  Daemon coordinator_;
  std::vector<Daemon> workers_;
  Daemon prometheus_;
};

TEST_F(ObservabilityE2ETest, PrometheusScrapesAndChromiumShowsARunningJob) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  ASSERT_NO_FATAL_FAILURE(StartWorkers());
  ASSERT_NO_FATAL_FAILURE(CheckAuthenticationAndCreateAViewerToken());
  StartPrometheus();
  ASSERT_NO_FATAL_FAILURE(SubmitALongJob());
  ASSERT_NO_FATAL_FAILURE(ExpectPrometheusToSeeTheJob());
  ExpectExpositionsToPassPromtoolWithBoundedSeries();
  ASSERT_NO_FATAL_FAILURE(ExpectTheDashboardToShowTheJob());

  // `yoke get` splits the step time.
  RunResult get = Yoke("get " + id_);
  EXPECT_EQ(get.exit_code, 0) << get.out;
  EXPECT_NE(get.out.find("compute"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find("exposed allreduce"), std::string::npos) << get.out;
  std::printf("%s", get.out.c_str());

  RunResult cancel = Yoke("cancel " + id_);
  EXPECT_EQ(cancel.exit_code, 0) << cancel.out;
}

}  // namespace
}  // namespace yoke::e2e
