// What each piece of observability costs, timed alone: the figures behind
// bench/observability_overhead.sh's end-to-end comparison, which on a 2-core
// machine shared with other work cannot resolve an effect under a few
// percent by itself.
//
//   observability_cost_bench [--step_ms 10] [--log_every 100] [--ranks 4]
//                            [--scrape_seconds 1] [--repeat 5]
//
// Timed, each as the median of --repeat rounds:
//   trainer, every step      the step loop's own accounting: 6 clock reads
//                            and CountStepSeconds (always on: `yoke get` and
//                            the metrics share it)
//   trainer, every log step  TensorBoard: 3 scalars and a flush to a real
//                            file in a temp directory
//   worker, every log step   WorkerMetrics::OnStep for one rank's report
//   worker, every scrape     WorkerMetrics::Exposition for --ranks ranks
//   coordinator, per scrape  CoordinatorMetrics::Exposition (2 workers, one
//                            running job, an RPC histogram per method)
//   HTTP, per scrape         a real HTTP server on loopback serving the
//                            worker exposition, client and server together
//                            (the row is this less the exposition alone)
// Before timing, each output is checked: the exposition holds every rank's
// series, the event file grows by the records written, the HTTP body equals
// the exposition.
//
// It then adds them up for a job with the given step time, log interval and
// scrape interval (Prometheus' default is 15 s; the end-to-end script scrapes
// every second, and so does the default here) and prints the CPU they take
// per second of training, as a share of ONE core's time: an upper bound on
// the step-time cost, since the job itself uses every core.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_metrics.h"
#include "net/http_server.h"
#include "proto/yoke/v1/coordinator.pb.h"
#include "proto/yoke/v1/metrics.pb.h"
#include "telemetry/tensorboard.h"
#include "telemetry/train_metrics.h"
#include "worker/worker_metrics.h"

ABSL_FLAG(double, step_ms, 10, "the job's step time, ms (the MLP's is about 10 on 2 cores)");
ABSL_FLAG(int, log_every, 100, "training.log_every_steps");
ABSL_FLAG(int, ranks, 4, "ranks on the worker being scraped");
ABSL_FLAG(double, scrape_seconds, 1, "seconds between scrapes of each /metrics");
ABSL_FLAG(int, repeat, 5, "rounds per figure; the median is kept");

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "observability_cost_bench: %s\n", why.c_str());
  std::exit(1);
}

// Median over --repeat rounds of the seconds per call of `fn`, each round
// running it `n` times.
double SecondsPerCall(int n, const std::function<void()>& fn) {
  std::vector<double> rounds;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeat); ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) fn();
    rounds.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / n);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

yoke::v1::StepProgress Report(int64_t step, int log_every) {
  yoke::v1::StepProgress p;
  p.set_step(step);
  p.set_epoch(1);
  p.set_loss(0.5);
  p.set_lr(0.01);
  p.set_samples_per_second(6400);
  p.set_window_steps(log_every);
  p.set_step_seconds(0.01 * log_every);
  p.set_data_wait_seconds(0.0001 * log_every);
  p.set_allreduce_exposed_seconds(0.001 * log_every);
  p.set_allreduce_seconds(0.003 * log_every);
  for (int i = 0; i < log_every; ++i)
    yoke::common::CountStepSeconds(0.01, p.mutable_step_seconds_histogram());
  return p;
}

// Where the timed work's results go, so that it is not optimized away.
volatile int64_t sink = 0;

// The trainer's per-step accounting, checked and then timed: seconds per
// step.
double TimeStepAccounting() {
  google::protobuf::RepeatedField<int64_t> counts;
  yoke::common::CountStepSeconds(0.012, &counts);
  if (counts.size() != static_cast<int>(yoke::common::kStepSecondsBuckets.size()) + 1 ||
      counts[4] != 1) {
    Die("CountStepSeconds put 12 ms in the wrong bucket");
  }
  // 6 clock reads (step start, data wait start/end, Finish start/end, step
  // end) and the histogram count, as trainer_step.cc does them.
  const double per_step = SecondsPerCall(1000000, [&] {
    Clock::time_point t[6];
    for (auto& x : t) x = Clock::now();
    yoke::common::CountStepSeconds(std::chrono::duration<double>(t[5] - t[0]).count(), &counts);
  });
  sink = sink + counts[0];
  return per_step;
}

// TensorBoard: what the trainer writes each log step, to an event file in a
// temp directory (removed after). Returns the seconds per log step and, in
// `record_bytes`, what one log step adds to the file.
double TimeTensorBoard(uintmax_t* record_bytes) {
  const std::string dir =
      absl::StrCat(std::filesystem::temp_directory_path().string(), "/yoke-obs-cost-", getpid());
  auto events = yoke::common::EventFileWriter::Create(dir);
  if (!events.ok()) Die(events.status().ToString());
  int64_t tb_step = 0;
  auto write_log_step = [&] {
    ++tb_step;
    for (const char* tag : {"train/loss", "train/learning_rate", "train/samples_per_second"}) {
      if (auto s = (*events)->WriteScalar(tag, tb_step, 0.5f); !s.ok()) Die(s.ToString());
    }
    if (auto s = (*events)->Flush(); !s.ok()) Die(s.ToString());
  };
  write_log_step();
  const auto size_before = std::filesystem::file_size((*events)->path());
  write_log_step();
  const auto size_after = std::filesystem::file_size((*events)->path());
  if (size_after <= size_before) Die("the event file did not grow on a log step");
  const double per_log_tb = SecondsPerCall(2000, write_log_step);
  *record_bytes = size_after - size_before;
  events->reset();
  std::filesystem::remove_all(dir);
  return per_log_tb;
}

// The worker: one report per rank per log step into `worker`, checked in its
// exposition, then timed: seconds per report into `per_report`, per
// exposition of `ranks` ranks into `per_scrape`.
void TimeWorker(yoke::worker::WorkerMetrics& worker, int ranks, int log_every, double* per_report,
                double* per_scrape) {
  std::vector<yoke::v1::StepProgress> reports;
  for (int r = 0; r < ranks; ++r) reports.push_back(Report(100, log_every));
  for (int r = 0; r < ranks; ++r) worker.OnStep("job-1", r, reports[r]);
  const std::string exposition = worker.Exposition();
  for (int r = 0; r < ranks; ++r) {
    if (!absl::StrContains(exposition, absl::StrCat("rank=\"", r, "\""))) {
      Die(absl::StrCat("the worker exposition has no series of rank ", r));
    }
  }
  int next_rank = 0;
  *per_report = SecondsPerCall(20000, [&] {
    worker.OnStep("job-1", next_rank, reports[next_rank]);
    next_rank = (next_rank + 1) % ranks;
  });
  *per_scrape = SecondsPerCall(500, [&] { sink = sink + worker.Exposition().size(); });
}

// The coordinator: its exposition with two workers and one running job,
// checked, then timed: seconds per scrape.
double TimeCoordinatorScrape() {
  yoke::server::CoordinatorMetrics coordinator;
  for (const char* m : {"Heartbeat", "SubmitJob", "GetJob", "ListJobs", "WatchJob", "Rendezvous"}) {
    coordinator.OnRpc(m, 0.001);
  }
  yoke::server::CoordinatorView view;
  view.job_counts = [] {
    return absl::StatusOr<std::map<yoke::v1::JobState, int64_t>>(
        std::map<yoke::v1::JobState, int64_t>{{yoke::v1::JOB_RUNNING, 1},
                                              {yoke::v1::JOB_SUCCEEDED, 20}});
  };
  view.workers = [] {
    std::vector<yoke::v1::Worker> w(2);
    w[0].set_id("w-1");
    w[1].set_id("w-2");
    return w;
  };
  view.running_jobs = [] { return std::vector<yoke::v1::Job>(1); };
  view.now_ms = [] { return int64_t{1000000}; };
  const std::string cexp = coordinator.Exposition(view);
  if (!absl::StrContains(cexp, "yoke_rpc_latency_seconds") ||
      !absl::StrContains(cexp, "yoke_jobs")) {
    Die("the coordinator exposition lacks yoke_rpc_latency_seconds or yoke_jobs");
  }
  return SecondsPerCall(500, [&] { sink = sink + coordinator.Exposition(view).size(); });
}

// GET /metrics from 127.0.0.1:`port` with a minimal HTTP/1.0 client on a
// socket, so a timing is the request's own cost (client and server
// together), not a client library's start-up. Returns the whole response.
std::string HttpGet(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Die("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Die("connect failed");
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) Die("write failed");
  std::string out;
  char buf[16384];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

// A scrape over HTTP: net/http_server.h serving `worker`'s exposition on loopback,
// checked, then timed: seconds per scrape, exposition included.
double TimeHttpScrape(yoke::worker::WorkerMetrics& worker) {
  auto server = yoke::common::HttpServer::Start(
      "127.0.0.1:0", {{"/metrics", [&](const yoke::common::HttpRequest&) {
                         yoke::common::HttpResponse r;
                         r.body = worker.Exposition();
                         return r;
                       }}});
  if (!server.ok()) Die(server.status().ToString());
  const int port = (*server)->port();
  const std::string response = HttpGet(port);
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.1 200") || body == std::string::npos ||
      response.substr(body + 4) != worker.Exposition()) {
    Die("the HTTP scrape did not return the worker's exposition with status 200");
  }
  return SecondsPerCall(300, [&] { sink = sink + HttpGet(port).size(); });
}

// What was timed, in seconds per event.
struct Costs {
  double per_step = 0, per_log_tb = 0, per_report = 0, per_worker_scrape = 0,
         per_coordinator_scrape = 0, per_http_scrape = 0;
  uintmax_t record_bytes = 0;  // the event file's growth per log step
};

// The table: each piece's CPU per second of a job with the given step time,
// log interval, ranks and scrape interval, and their sum.
void PrintTable(const Costs& c, double step_s, int log_every, int ranks, double scrape_s) {
  const double steps_per_s = 1 / step_s;
  const double log_steps_per_s = steps_per_s / log_every;
  const double scrapes_per_s = 1 / scrape_s;
  struct Row {
    const char* what;
    double seconds_per_event;
    double events_per_second;
  };
  const Row rows[] = {
      {"trainer: step accounting, per step", c.per_step, steps_per_s},
      {"trainer: TensorBoard, 3 scalars + flush, per log step", c.per_log_tb, log_steps_per_s},
      {"worker: OnStep, per rank per log step", c.per_report, ranks * log_steps_per_s},
      {"worker: /metrics exposition, per scrape", c.per_worker_scrape, scrapes_per_s},
      {"worker: the HTTP request around it, per scrape", c.per_http_scrape - c.per_worker_scrape,
       scrapes_per_s},
      {"coordinator: /metrics exposition, per scrape", c.per_coordinator_scrape, scrapes_per_s},
  };
  std::printf(
      "job: step %.1f ms, log every %d steps, %d ranks on the worker, a scrape every %.1f s\n",
      step_s * 1000, log_every, ranks, scrape_s);
  std::printf("event file: %llu bytes per log step\n",
              static_cast<unsigned long long>(c.record_bytes));
  std::printf("%-55s %12s %10s %14s\n", "", "us/event", "events/s", "CPU us per s");
  double total = 0;
  for (const Row& r : rows) {
    const double cpu = r.seconds_per_event * r.events_per_second;
    total += cpu;
    std::printf("%-55s %12.3f %10.2f %14.1f\n", r.what, r.seconds_per_event * 1e6,
                r.events_per_second, cpu * 1e6);
  }
  std::printf(
      "all together: %.1f us of CPU per second of training = %.4f%% of one core "
      "(the step-time cost is at most this)\n",
      total * 1e6, total * 100);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const double step_s = absl::GetFlag(FLAGS_step_ms) / 1000;
  const int log_every = absl::GetFlag(FLAGS_log_every);
  const int ranks = absl::GetFlag(FLAGS_ranks);
  const double scrape_s = absl::GetFlag(FLAGS_scrape_seconds);
  if (step_s <= 0 || log_every <= 0 || ranks <= 0 || scrape_s <= 0 ||
      absl::GetFlag(FLAGS_repeat) <= 0) {
    Die("--step_ms, --log_every, --ranks, --scrape_seconds and --repeat must be > 0");
  }
  Costs c;
  c.per_step = TimeStepAccounting();
  c.per_log_tb = TimeTensorBoard(&c.record_bytes);
  yoke::worker::WorkerMetrics worker;
  TimeWorker(worker, ranks, log_every, &c.per_report, &c.per_worker_scrape);
  c.per_coordinator_scrape = TimeCoordinatorScrape();
  c.per_http_scrape = TimeHttpScrape(worker);
  PrintTable(c, step_s, log_every, ranks, scrape_s);
  return sink == -1 ? 1 : 0;  // keeps the timed work from being optimized away
}
