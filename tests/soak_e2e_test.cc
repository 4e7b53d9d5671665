// A soak of one shared `yoke up` cluster (issue 30): three submitters with
// their own tokens for two minutes (YOKE_SOAK_SECONDS). Eve is hostile: she
// floods the coordinator with specs of ~600 KB, with jobs that run as long as
// she may, with jobs no worker can hold, and asks for the highest priority.
// Alice and Bob are normal: each submits a small MLP, waits for its end, and
// submits again. The coordinator runs with the quotas an operator of a shared
// cluster would set (kConfig), passed by `yoke up --coordinator-config`.
//
// Checked, for the whole run:
//   - every one of Alice's and Bob's jobs SUCCEEDED;
//   - none waited behind Eve's: no job of Eve's was placed while one of
//     theirs was waiting (fair share, backfill and Eve's device cap);
//   - the coordinator's resident memory stayed under 300 MiB plus 4x the
//     spec bytes that may wait (Eve's quota, the only large specs);
//   - Eve's refusals name the limit (RESOURCE_EXHAUSTED) or the role
//     (PERMISSION_DENIED for the priority), through gRPC and the CLI alike;
//   - her long jobs are stopped at the run-time limit, as FAILED.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "config/config.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kSpecQuota = 4 << 20;
constexpr int kMaxRunSeconds = 30;
const std::string kConfig = absl::StrCat(
    "max_pending_jobs_per_submitter: 12\n"
    "max_pending_spec_bytes_per_submitter: ",
    kSpecQuota,
    "\n"
    "max_submits_per_minute_per_submitter: 60\n"
    "max_running_devices_per_submitter: 2\n"
    "default_max_run_seconds: ",
    kMaxRunSeconds, "\n");

int SoakSeconds() {
  const char* s = std::getenv("YOKE_SOAK_SECONDS");
  return s != nullptr && std::atoi(s) > 0 ? std::atoi(s) : 120;
}

v1::JobSpec Spec(const std::string& yaml) {
  auto spec = common::LoadJobSpecString(yaml, {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

// Alice's and Bob's job: a few seconds of the Fashion-MNIST MLP.
v1::JobSpec NormalSpec(const std::string& name) {
  auto spec = common::LoadJobSpecFile(
      Config("fashion_mnist_mlp.yaml"),
      {"name=" + name, "training.epochs=1", "data.train.num_examples=2000", "training.threads=1"});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

constexpr char kSyntheticJob[] = R"(
data:
  train: {format: synthetic, shape: [4, 4, 1], num_classes: 2, num_examples: 64}
training: {epochs: 100000, batch_size: 8, threads: 1, optimizer: {type: sgd, lr: 0.1}}
)";

// Eve's: runs until the coordinator stops it.
v1::JobSpec LongSpec() {
  return Spec(absl::StrCat("name: eve-long\nmodel: {zoo: mlp, hidden: [8]}\n", kSyntheticJob));
}
// Eve's: 120,000 relu layers, about 600 KB serialized.
v1::JobSpec BigSpec() {
  v1::JobSpec s = Spec(absl::StrCat(
      "name: eve-big\nmodel: {layers: [flatten, {dense: {units: 2}}]}\n", kSyntheticJob));
  for (int i = 0; i < 120000; ++i) s.mutable_model()->add_layers()->mutable_relu();
  return s;
}
// Eve's: two devices on one worker, where every worker has one.
v1::JobSpec UnplaceableSpec() {
  v1::JobSpec s = LongSpec();
  s.set_name("eve-wide");
  s.mutable_distribution()->set_devices_per_worker(2);
  return s;
}

bool Terminal(v1::JobState s) {
  return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED || s == v1::JOB_CANCELLED;
}

struct Record {
  std::string who;
  v1::Job job;
};

class Soak {
 public:
  explicit Soak(const TestCluster* cluster) : cluster_(cluster) {}

  // A token of role submitter named `name`, and a client that uses it with
  // only the CA (what a user outside the cluster holds).
  std::unique_ptr<client::CoordinatorClient> ClientFor(const std::string& name) {
    RunResult r = cluster_->Yoke("token create --role submitter --name " + name + " --ttl 1h");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    tokens_[name] = r.out.substr(0, r.out.find('\n'));
    client::CredentialFlags f;
    f.tls_dir = CaOnlyDir();
    f.token = tokens_[name];
    auto creds = client::ResolveCredentials(f);
    EXPECT_TRUE(creds.ok()) << creds.status();
    client::ClientOptions o;
    if (creds.ok()) o.credentials = *creds;
    return std::make_unique<client::CoordinatorClient>(cluster_->address(), o);
  }

  std::string CaOnlyDir() const {
    const std::string dir = cluster_->dir() + "/ca-only";
    if (!std::filesystem::exists(dir + "/ca.crt")) {
      std::filesystem::create_directories(dir);
      std::filesystem::copy_file(cluster_->dir() + "/tls/ca/ca.crt", dir + "/ca.crt");
    }
    return dir;
  }
  const std::string& token(const std::string& name) { return tokens_[name]; }

  // Submits, then polls the job to its end.
  void RunNormal(const std::string& who, client::CoordinatorClient* c, Clock::time_point end) {
    for (int n = 0; Clock::now() < end; ++n) {
      auto t0 = Clock::now();
      auto id = c->SubmitJob(NormalSpec(absl::StrCat(who, "-", n)));
      Took(who + "'s submit", t0);
      ASSERT_TRUE(id.ok()) << who << ": " << id.status();
      v1::Job job;
      const auto give_up = Clock::now() + std::chrono::minutes(3);
      while (Clock::now() < give_up) {
        t0 = Clock::now();
        auto j = c->GetJob(*id);
        Took(who + "'s GetJob", t0);
        ASSERT_TRUE(j.ok()) << who << ": " << j.status();
        job = *j;
        if (Terminal(job.state())) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      Add(who, job);
    }
  }

  // Eve, until `end`: one of her four moves, then the next, as fast as the
  // coordinator answers.
  void RunHostile(client::CoordinatorClient* c, Clock::time_point end) {
    const v1::JobSpec big = BigSpec(), long_job = LongSpec(), wide = UnplaceableSpec();
    ASSERT_GT(big.ByteSizeLong(), 500000u);
    for (int n = 0; Clock::now() < end; ++n) {
      absl::StatusOr<std::string> id;
      switch (n % 4) {
        case 0:
          id = c->SubmitJob(big);
          break;
        case 1:
          id = c->SubmitJob(long_job);
          break;
        case 2:
          id = c->SubmitJob(wide);
          break;
        default:
          id = c->SubmitJob(long_job, /*priority=*/1000);
          EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied) << id.status();
          break;
      }
      std::lock_guard<std::mutex> l(mu_);
      if (id.ok()) {
        eve_ids_.push_back(*id);
      } else {
        ++eve_refusals_[id.status().code()];
        if (id.status().code() == absl::StatusCode::kResourceExhausted) {
          EXPECT_NE(id.status().message().find("max_"), absl::string_view::npos) << id.status();
        }
      }
    }
    // She is past a quota now (submit rate or waiting jobs): the CLI names
    // it as gRPC does.
    RunResult cli = cluster_->Yoke("submit " + Config("fashion_mnist_mlp.yaml") + " --tls-dir " +
                                       CaOnlyDir() + " --token " + token("eve"),
                                   true);
    EXPECT_NE(cli.exit_code, 0) << cli.out;
    EXPECT_NE(cli.out.find("_per_submitter: "), std::string::npos) << cli.out;  // the quota
  }

  // The slowest answer Alice or Bob got: what a DEADLINE_EXCEEDED (the
  // client's 10 s) grew from.
  void Took(const std::string& call, Clock::time_point start) {
    const int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::lock_guard<std::mutex> l(mu_);
    if (ms > slowest_ms_) {
      slowest_ms_ = ms;
      slowest_call_ = call;
    }
  }

  void Add(const std::string& who, const v1::Job& job) {
    std::lock_guard<std::mutex> l(mu_);
    records_.push_back({who, job});
  }

  const TestCluster* cluster_;
  std::map<std::string, std::string> tokens_;
  std::mutex mu_;
  std::vector<Record> records_;
  std::vector<std::string> eve_ids_;
  std::map<absl::StatusCode, int> eve_refusals_;
  int64_t slowest_ms_ = 0;
  std::string slowest_call_;
};

// The part of a normal job's wait during which no other normal job ran.
// Alice and Bob share the one device Eve's cap leaves them, so one may wait
// as long as the other's job runs (seconds, or much longer on a loaded
// machine); time beyond that is time spent behind Eve or the scheduler.
int64_t UnexplainedWaitMs(const Record& r, const std::vector<Record>& normal) {
  const int64_t from = r.job.create_time_ms(), to = r.job.start_time_ms();
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (const Record& o : normal) {
    if (&o == &r || o.job.start_time_ms() == 0) continue;
    const int64_t end = o.job.end_time_ms() > 0 ? o.job.end_time_ms() : to;
    const int64_t b = std::max(from, o.job.start_time_ms()), e = std::min(to, end);
    if (b < e) busy.push_back({b, e});
  }
  std::sort(busy.begin(), busy.end());
  int64_t covered = 0, reach = from;
  for (const auto& [b, e] : busy) {
    if (e <= reach) continue;
    covered += e - std::max(b, reach);
    reach = e;
  }
  return std::max<int64_t>(0, to - from - covered);
}

// An attempt of Eve's placed while one of Alice's or Bob's jobs waited: its
// start after the normal job's creation and before the normal job's start.
std::string PlacedAhead(const std::vector<Record>& normal, const std::vector<v1::Job>& eve) {
  for (const Record& r : normal) {
    for (const v1::Job& e : eve) {
      for (const v1::Attempt& a : e.attempts()) {
        const int64_t t = a.start_time_ms();
        if (t > r.job.create_time_ms() && t < r.job.start_time_ms()) {
          return absl::StrCat(e.id(), " (Eve's) attempt ", a.number(), " started at ", t, " while ",
                              r.job.id(), " (", r.who, "'s) waited from ", r.job.create_time_ms(),
                              " to ", r.job.start_time_ms());
        }
      }
    }
  }
  return "";
}

// Every attempt that held a device while `r` waited, normal or Eve's, with
// its worker and times relative to r's submission: what a failed wait bound
// needs to be understood.
std::string Timeline(const Record& r, const std::vector<Record>& normal,
                     const std::vector<v1::Job>& eve) {
  const int64_t from = r.job.create_time_ms(), to = r.job.start_time_ms();
  std::string out =
      absl::StrCat(r.who, "'s ", r.job.id(), " waited ", to - from,
                   " ms; attempts that overlapped the wait (ms from its submission):");
  std::vector<const v1::Job*> jobs;
  for (const Record& o : normal) jobs.push_back(&o.job);
  for (const v1::Job& e : eve) jobs.push_back(&e);
  for (const v1::Job* j : jobs) {
    for (const v1::Attempt& a : j->attempts()) {
      const int64_t end = a.end_time_ms() > 0 ? a.end_time_ms() : j->end_time_ms();
      if (a.start_time_ms() >= to || (end > 0 && end <= from)) continue;
      absl::StrAppend(&out, "\n  ", j->id(), " (", j->owner(), ", ", j->spec().name(), ") attempt ",
                      a.number(), " on ",
                      a.assignments_size() > 0 ? a.assignments(0).worker_id() : "?", ": ",
                      a.start_time_ms() - from, " .. ", end > 0 ? end - from : -1, " ",
                      v1::AttemptState_Name(a.state()), " ", a.reason());
    }
  }
  return out;
}

TEST(SoakE2ETest, ThreeSubmittersOneHostileForTwoMinutes) {
  const std::string config_dir = MakeTempDir("yoke_soak_config");
  const std::string config = config_dir + "/coordinator.yaml";
  std::ofstream(config) << kConfig;
  TestCluster cluster(3, "--coordinator-config " + config);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  Soak soak(&cluster);
  auto alice = soak.ClientFor("alice");
  auto bob = soak.ClientFor("bob");
  auto eve = soak.ClientFor("eve");

  const int seconds = SoakSeconds();
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::atomic<bool> done{false};
  int64_t peak_rss = 0;
  std::thread sampler([&] {
    while (!done) {
      peak_rss = std::max(peak_rss, RssBytes(cluster.state().coordinator_pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });
  std::thread eve_thread([&] { soak.RunHostile(eve.get(), end); });
  std::thread alice_thread([&] { soak.RunNormal("alice", alice.get(), end); });
  std::thread bob_thread([&] { soak.RunNormal("bob", bob.get(), end); });
  alice_thread.join();
  bob_thread.join();
  eve_thread.join();

  done = true;
  sampler.join();

  // Eve's jobs, as they stand now; then they are cancelled.
  std::vector<v1::Job> eve_jobs;
  int eve_stopped_at_limit = 0;
  for (const std::string& id : soak.eve_ids_) {
    auto j = eve->GetJob(id);
    ASSERT_TRUE(j.ok()) << j.status();
    eve_jobs.push_back(*j);
    if (j->state() == v1::JOB_FAILED && j->reason().find("max_run_seconds") != std::string::npos) {
      ++eve_stopped_at_limit;
    }
    if (!Terminal(j->state())) (void)eve->CancelJob(id);
  }

  int normal_jobs = 0;
  int64_t longest_wait_ms = 0, longest_unexplained_ms = 0;
  const Record* worst = nullptr;
  for (const Record& r : soak.records_) {
    ++normal_jobs;
    EXPECT_EQ(r.job.state(), v1::JOB_SUCCEEDED)
        << r.who << "'s " << r.job.id() << ": " << r.job.reason() << "\n"
        << cluster.Logs();
    longest_wait_ms = std::max(longest_wait_ms, r.job.start_time_ms() - r.job.create_time_ms());
    const int64_t unexplained = UnexplainedWaitMs(r, soak.records_);
    if (worst == nullptr || unexplained > longest_unexplained_ms) worst = &r;
    longest_unexplained_ms = std::max(longest_unexplained_ms, unexplained);
  }
  const std::string ahead = PlacedAhead(soak.records_, eve_jobs);
  EXPECT_EQ(ahead, "");
  const int64_t bound = (300 << 20) + 4 * kSpecQuota;
  std::printf(
      "[ measured ] %d s: %d normal jobs, longest wait %.1f s (%.1f s of it with no other normal "
      "job running); Eve: %zu accepted, %d stopped at "
      "the run-time limit, refused %d (RESOURCE_EXHAUSTED) + %d (PERMISSION_DENIED); "
      "coordinator peak RSS %.1f MiB (bound %.1f MiB); slowest answer to Alice or Bob %.2f s "
      "(%s)\n",
      seconds, normal_jobs, longest_wait_ms / 1000.0, longest_unexplained_ms / 1000.0,
      soak.eve_ids_.size(), eve_stopped_at_limit,
      soak.eve_refusals_[absl::StatusCode::kResourceExhausted],
      soak.eve_refusals_[absl::StatusCode::kPermissionDenied], peak_rss / 1048576.0,
      bound / 1048576.0, soak.slowest_ms_ / 1000.0, soak.slowest_call_.c_str());
  EXPECT_GE(normal_jobs, 4);
  // Alice and Bob share the one device Eve's cap leaves them, so one may
  // wait for the other's job, never for Eve's (30 s). A 32.6 s wait once
  // failed a bound on the whole wait in CI (usually 4 s): on a loaded
  // machine the other's job can run that long.
  EXPECT_LT(longest_unexplained_ms, kMaxRunSeconds * 1000 / 2)
      << (worst == nullptr ? "" : Timeline(*worst, soak.records_, eve_jobs));
  EXPECT_GT(peak_rss, 0);
  EXPECT_LT(peak_rss, bound);
  EXPECT_GT(soak.eve_refusals_[absl::StatusCode::kResourceExhausted], 0);
  EXPECT_GT(soak.eve_refusals_[absl::StatusCode::kPermissionDenied], 0);
  if (seconds > kMaxRunSeconds + 10) {
    EXPECT_GT(eve_stopped_at_limit, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(config_dir, ec);
}

}  // namespace
}  // namespace yoke::e2e
