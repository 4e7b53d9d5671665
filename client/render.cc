#include "client/render.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "google/protobuf/util/json_util.h"
#include "jobspec/ps_check.h"
#include "telemetry/train_metrics.h"

namespace yoke::client {
namespace {

std::string StripPrefix(const std::string& name, const std::string& prefix) {
  return name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : name;
}

// Table cells are one line; a multi-line reason would break the columns.
std::string OneLine(const std::string& s, size_t max_len = 80) {
  std::string out;
  for (char c : s) out.push_back(c == '\n' || c == '\t' ? ' ' : c);
  if (out.size() > max_len) out = out.substr(0, max_len - 3) + "...";
  return out;
}

std::string ModelSummary(const v1::ModelSpec& m) {
  if (!m.zoo().empty()) return absl::StrCat("zoo ", m.zoo());
  return absl::StrCat(m.layers_size(), " layers");
}

}  // namespace

std::string JobStateName(v1::JobState s) { return StripPrefix(v1::JobState_Name(s), "JOB_"); }

std::string AttemptStateName(v1::AttemptState s) {
  return StripPrefix(v1::AttemptState_Name(s), "ATTEMPT_");
}

bool ParseJobState(const std::string& text, v1::JobState* out, std::string* error) {
  std::string up;
  for (char c : text) up.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (up.compare(0, 4, "JOB_") != 0) up = "JOB_" + up;
  if (up != "JOB_STATE_UNSPECIFIED" && v1::JobState_Parse(up, out)) return true;
  std::vector<std::string> known;
  for (int i = v1::JobState_MIN; i <= v1::JobState_MAX; ++i) {
    if (v1::JobState_IsValid(i) && i != v1::JOB_STATE_UNSPECIFIED) {
      std::string n = JobStateName(static_cast<v1::JobState>(i));
      for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      known.push_back(n);
    }
  }
  *error = absl::StrCat("unknown job state '", text, "' (known: ", absl::StrJoin(known, ", "), ")");
  return false;
}

std::string FormatAge(int64_t now_ms, int64_t then_ms) {
  if (then_ms <= 0) return "-";
  int64_t s = std::max<int64_t>(0, (now_ms - then_ms) / 1000);
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 2 * 3600) return absl::StrCat(s / 60, "m");
  if (s < 2 * 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line.append(width[i] - r[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string ProgressSummary(const v1::Job& job) {
  const auto& p = job.progress();
  if (p.steps_per_epoch() == 0 && p.step() == 0) {
    if (job.state() == v1::JOB_SUCCEEDED && job.result().epochs() > 0) {
      return absl::StrCat("epoch ", job.result().epochs(), " step ", job.result().steps());
    }
    return "-";
  }
  return absl::StrCat("epoch ", p.epoch() + 1, "/", p.epochs(), " step ", p.step_in_epoch(), "/",
                      p.steps_per_epoch());
}

std::string JobsTable(const std::vector<v1::Job>& jobs, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "PROGRESS", "ACCURACY", "AGE", "REASON"}};
  for (const auto& j : jobs) {
    std::string acc = "-";
    if (j.state() == v1::JOB_SUCCEEDED) {
      acc = absl::StrFormat("%.4f", j.result().test_accuracy());
    } else if (j.history_size() > 0) {
      acc = absl::StrFormat("%.4f", j.history(j.history_size() - 1).test_accuracy());
    }
    rows.push_back({j.id(), j.spec().name().empty() ? "-" : OneLine(j.spec().name(), 40),
                    JobStateName(j.state()), ProgressSummary(j), acc,
                    FormatAge(now_ms, j.create_time_ms()), OneLine(j.reason())});
  }
  return FormatTable(rows);
}

std::string WorkersTable(const std::vector<v1::Worker>& workers, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "HOST", "ADDRESS", "DEVICES", "STATE", "RUNNING", "LAST HEARTBEAT", "AUTH"}};
  for (const auto& w : workers) {
    int cpu = 0, cuda = 0, cores = 0;
    for (const auto& d : w.devices()) {
      (d.kind() == "cuda" ? cuda : cpu)++;
      if (d.kind() == "cpu") cores = std::max(cores, d.cores());
    }
    std::vector<std::string> devs;
    if (cpu > 0) {
      // The replicas share the host's cores; older workers do not report them.
      devs.push_back(absl::StrCat(cpu, " cpu (", w.free_cpu(), " free",
                                  cores > 0 ? absl::StrCat(", ", cores, " cores") : "", ")"));
    }
    if (cuda > 0) devs.push_back(absl::StrCat(cuda, " cuda (", w.free_cuda(), " free)"));
    std::string state = w.alive() ? "alive" : OneLine(absl::StrCat("lost: ", w.reason()), 60);
    std::string hb = w.last_heartbeat_ms() > 0
                         ? absl::StrCat(FormatAge(now_ms, w.last_heartbeat_ms()), " ago")
                         : "-";
    rows.push_back({OneLine(w.id(), 40), OneLine(w.hostname(), 40),
                    w.address().empty() ? "-" : OneLine(w.address(), 64),
                    devs.empty() ? "-" : absl::StrJoin(devs, ", "), state,
                    w.running().empty() ? "-" : OneLine(absl::StrJoin(w.running(), ","), 60), hb,
                    // "INSECURE" stands out: anyone could claim to be it.
                    w.auth() == "insecure" ? "INSECURE"
                    : w.auth().empty()     ? "-"
                                           : w.auth()});
  }
  return FormatTable(rows);
}

namespace {

// A PS job's figures on rank 0's trainer: "replica 0: 120 pushes, 6.0 ms
// waiting per step; 1 PS task: 48.5 updates/s, 1 push queued, 7 answers
// held".
std::string PsSummary(const v1::StepProgress& p) {
  const v1::PsWindow& w = p.ps();
  std::string out =
      absl::StrFormat("replica 0: %d pushes, %.1f ms waiting per step", w.pushes(),
                      1e3 * w.wait_seconds() / std::max<int64_t>(p.window_steps(), 1));
  if (w.ps_tasks() > 0) {
    absl::StrAppend(
        &out, absl::StrFormat("; %d PS task%s: %.1f updates/s, %d push%s queued, "
                              "%d answers held",
                              w.ps_tasks(), w.ps_tasks() == 1 ? "" : "s", w.updates_per_second(),
                              w.queue_depth(), w.queue_depth() == 1 ? "" : "es", w.held_answers()));
  }
  return out;
}

}  // namespace

std::string ResultSummary(const v1::TrainResult& r) {
  std::string out = absl::StrFormat(
      "finished: %d epochs, %d steps | test accuracy %.4f, test loss %.4f | %.0f samples/s "
      "(training)%s%s",
      r.epochs(), r.steps(), r.test_accuracy(), r.test_loss(), r.samples_per_second(),
      r.checkpoint().empty() ? "" : " | checkpoint ", r.checkpoint());
  return out + common::FormatBestEpoch(r);
}

namespace {

// A parameter-server job's share: which ranks are replicas and which PS
// tasks (" (replica 1; PS tasks 1, 3)"); "" for any other job.
std::string ShareRoles(const v1::JobSpec& spec, const v1::Assignment& as) {
  const int ps = common::ParameterServerTasks(spec);
  if (ps == 0) return "";
  const int workers = std::max(spec.distribution().workers(), 1);
  const int per = std::max(spec.distribution().devices_per_worker(), 1);
  std::vector<int> replicas, tasks;
  for (int r = as.first_rank(); r < as.first_rank() + as.num_replicas(); ++r) {
    const common::RankRole role = common::RoleOfRank(r, workers, per, ps);
    (role.ps ? tasks : replicas).push_back(role.index);
  }
  std::string out =
      absl::StrCat(" (replica", replicas.size() == 1 ? " " : "s ", absl::StrJoin(replicas, ", "));
  if (!tasks.empty()) {
    absl::StrAppend(&out, "; PS task", tasks.size() == 1 ? " " : "s ", absl::StrJoin(tasks, ", "));
  }
  return out + ")";
}

}  // namespace

std::string JobDetails(const v1::Job& job, int64_t now_ms) {
  const auto& s = job.spec();
  std::string out;
  absl::StrAppend(&out, "job:       ", job.id(), s.name().empty() ? "" : "  (" + s.name() + ")",
                  "\n");
  absl::StrAppend(&out, "state:     ", JobStateName(job.state()),
                  job.reason().empty() ? "" : " - " + job.reason(), "\n");
  absl::StrAppend(&out, "priority:  ", job.priority(), "\n");
  absl::StrAppend(&out, "created:   ", FormatAge(now_ms, job.create_time_ms()), " ago");
  if (job.start_time_ms() > 0) {
    absl::StrAppend(&out, ", started ", FormatAge(now_ms, job.start_time_ms()), " ago");
  }
  if (job.end_time_ms() > 0) {
    absl::StrAppend(&out, ", ended ", FormatAge(now_ms, job.end_time_ms()), " ago");
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, "spec:      model ", ModelSummary(s.model()), "; ", s.training().epochs(),
                  " epochs, batch ", s.training().batch_size(), ", optimizer ",
                  s.training().optimizer().type().empty() ? "-" : s.training().optimizer().type(),
                  " lr ", s.training().optimizer().lr(), "\n");
  const auto& p = job.progress();
  if (p.step() > 0) {
    absl::StrAppend(&out, absl::StrFormat("progress:  %s (global %d/%d), loss %.4f, acc %.4f, "
                                          "%.0f samples/s, ETA %s\n",
                                          ProgressSummary(job), p.step(), p.total_steps(), p.loss(),
                                          p.accuracy(), p.samples_per_second(),
                                          common::FormatDuration(p.eta_seconds())));
    // Where the last log window's steps spent their time (rank 0).
    const std::string breakdown = common::FormatBreakdown(common::BreakdownOf(p));
    if (!breakdown.empty()) absl::StrAppend(&out, "step time: ", breakdown, "\n");
    if (p.has_ps()) absl::StrAppend(&out, "ps:        ", PsSummary(p), "\n");
  }
  for (const auto& a : job.attempts()) {
    absl::StrAppend(&out, "attempt ", a.number(), ": ", AttemptStateName(a.state()),
                    ", world size ", a.world_size());
    if (a.start_time_ms() > 0) {
      absl::StrAppend(&out, ", started ", FormatAge(now_ms, a.start_time_ms()), " ago");
    }
    if (!a.reason().empty()) absl::StrAppend(&out, " - ", a.reason());
    absl::StrAppend(&out, "\n");
    for (const auto& as : a.assignments()) {
      absl::StrAppend(
          &out, "  ranks ", as.first_rank(), "..", as.first_rank() + as.num_replicas() - 1, " on ",
          as.worker_id(), " devices [", absl::StrJoin(as.devices(), ","), "]", ShareRoles(s, as),
          as.incarnation() > 0 ? absl::StrCat(", restarted alone ", as.incarnation(),
                                              as.incarnation() == 1 ? " time" : " times")
                               : "",
          "\n");
    }
  }
  for (const auto& e : job.history()) {
    absl::StrAppend(&out, "epoch ", e.epoch(), ": ", common::FormatEpoch(e), "\n");
  }
  if (job.state() == v1::JOB_SUCCEEDED) absl::StrAppend(&out, ResultSummary(job.result()), "\n");
  return out;
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  std::string out;
  auto s = google::protobuf::util::MessageToJsonString(m, &out, opts);
  if (!s.ok()) return "{}";
  return out;
}

void WatchView::Note(const std::string& line) {
  bar_.Clear();
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void WatchView::Close() {
  bar_.Clear();
  std::fflush(out_);
}

void WatchView::OnEvent(const v1::JobEvent& ev) {
  const v1::Job& job = ev.job();
  // Epochs that finished since the last event; a reconnect re-sends the
  // whole history, which must not print twice. They come before the state
  // line: the event that ends a job also carries its last epoch.
  // By epoch number, not position: the coordinator thins a long history
  // (Coordinator::kMaxHistoryEpochs), which moves its entries.
  for (const v1::EpochResult& e : job.history()) {
    if (e.epoch() <= last_epoch_printed_) continue;
    bar_.Clear();
    std::fprintf(out_, "epoch %d done: %s\n", e.epoch(), common::FormatEpoch(e).c_str());
    last_epoch_printed_ = e.epoch();
  }

  if (!seen_ || job.state() != last_state_) {
    bar_.Clear();
    std::fprintf(out_, "%s %s%s%s\n", job.id().c_str(), JobStateName(job.state()).c_str(),
                 job.reason().empty() ? "" : ": ", common::EscapeControl(job.reason()).c_str());
    last_state_ = job.state();
  }
  // ev.message() is not printed: it repeats what the state line, the epoch
  // lines and the progress line already show ("progress", "epoch 1 done").
  seen_ = true;

  const auto& p = job.progress();
  // A step of an epoch whose summary is already printed (the trainer reports
  // its last step and the epoch's end together) would only repeat it, out
  // of order.
  const int64_t epochs_done =
      job.history_size() > 0 ? job.history(job.history_size() - 1).epoch() : 0;
  const bool stale = p.epoch() + 1 <= epochs_done;
  if (job.state() == v1::JOB_RUNNING && p.steps_per_epoch() > 0 && p.step() != last_step_ &&
      !stale) {
    auto now = std::chrono::steady_clock::now();
    if (tty_) {
      if (bar_.Draw(common::ProgressBarText(p))) last_step_ = p.step();
    } else if (last_step_ < 0 || now - last_draw_ >= plain_interval_) {
      last_draw_ = now;
      last_step_ = p.step();
      std::fprintf(out_,
                   "epoch %lld/%lld step %lld/%lld (global %lld/%lld)  loss %.4f  acc %.4f  "
                   "%.0f samples/s  ETA %s\n",
                   static_cast<long long>(p.epoch() + 1), static_cast<long long>(p.epochs()),
                   static_cast<long long>(p.step_in_epoch()),
                   static_cast<long long>(p.steps_per_epoch()), static_cast<long long>(p.step()),
                   static_cast<long long>(p.total_steps()), p.loss(), p.accuracy(),
                   p.samples_per_second(), common::FormatDuration(p.eta_seconds()).c_str());
    }
  }
  std::fflush(out_);
}

}  // namespace yoke::client
