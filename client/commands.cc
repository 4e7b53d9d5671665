#include "client/commands.h"

#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/render.h"
#include "common/flags.h"
#include "common/quote.h"
#include "config/config.h"
#include "jobspec/job_state.h"

namespace yoke::client {

const char kClusterCommandsUsage[] =
    "  submit JOB.yaml [--set path=value ...] [--priority N] [--watch]\n"
    "                      submit a job to the coordinator; prints its id\n"
    "  jobs [--state running,pending,...]\n"
    "                      list jobs (newest first)\n"
    "  get ID              a job's details: spec, attempts, progress, result\n"
    "  watch ID            follow a job to its end (exit 0 if it succeeded, 1 if not)\n"
    "  logs ID [-f]        a job's log lines; -f keeps following until the job ends\n"
    "  cancel ID           stop a job's trainers and mark it CANCELLED\n"
    "  workers             list the registered workers\n"
    "  (all of these take --output text|json and --coordinator host:port;\n"
    "   default: $YOKE_COORDINATOR, else the cluster `yoke up` started,\n"
    "   else 127.0.0.1:7070; and --tls-dir DIR, --token TOKEN or --insecure;\n"
    "   default: $YOKE_TLS_DIR, $YOKE_TOKEN, else the `yoke up` cluster's admin)\n";

namespace {

// How long `watch` and `logs -f` keep trying to reconnect after the
// coordinator went away mid-stream (a restart takes a few seconds).
constexpr auto kReconnectFor = std::chrono::seconds(120);

struct Flags {
  bool json = false;
  std::string coordinator;
  CredentialFlags credentials;
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  int priority = 0;
  bool watch = false;
  bool follow = false;
  std::string states;
};

void PrintError(FILE* err, const std::string& cmd, const absl::Status& s) {
  // Messages quote what a caller sent: control bytes are shown escaped.
  std::fprintf(err, "yoke %s: %s\n", cmd.c_str(), common::EscapeControl(s.message(), "\n").c_str());
}

int Submit(CoordinatorClient& c, const Flags& f, FILE* out, FILE* err);
int Watch(CoordinatorClient& c, const std::string& id, const Flags& f, FILE* out, FILE* err);

int Jobs(CoordinatorClient& c, const Flags& f, FILE* out, FILE* err) {
  std::vector<v1::JobState> states;
  if (!f.states.empty()) {
    for (absl::string_view s : absl::StrSplit(f.states, ',', absl::SkipEmpty())) {
      v1::JobState st;
      std::string e;
      if (!ParseJobState(std::string(s), &st, &e)) {
        std::fprintf(err, "yoke jobs: --state: %s\n", e.c_str());
        return 2;
      }
      states.push_back(st);
    }
  }
  // The table shows a spec's name only; --json prints whole jobs.
  auto jobs = c.ListJobs(states, /*summary=*/!f.json);
  if (!jobs.ok()) {
    PrintError(err, "jobs", jobs.status());
    return ExitCodeFor(jobs.status());
  }
  if (f.json) {
    std::fprintf(out, "%s\n", ToJsonArray(*jobs).c_str());
  } else {
    // Names, reasons and ids are other users' text: a terminal must not act
    // on their control bytes, and a NUL must not end the listing.
    std::fputs(common::EscapeControl(JobsTable(*jobs, NowMs()), "\n").c_str(), out);
  }
  return 0;
}

int Get(CoordinatorClient& c, const std::string& id, const Flags& f, FILE* out, FILE* err) {
  auto job = c.GetJob(id);
  if (!job.ok()) {
    PrintError(err, "get", job.status());
    return ExitCodeFor(job.status());
  }
  if (f.json) {
    std::fprintf(out, "%s\n", ToJson(*job).c_str());
  } else {
    std::fputs(common::EscapeControl(JobDetails(*job, NowMs()), "\n").c_str(), out);
  }
  return 0;
}

int Cancel(CoordinatorClient& c, const std::string& id, const Flags& f, FILE* out, FILE* err) {
  auto job = c.CancelJob(id);
  if (!job.ok()) {
    PrintError(err, "cancel", job.status());
    return ExitCodeFor(job.status());
  }
  if (f.json) {
    std::fprintf(out, "%s\n", ToJson(*job).c_str());
  } else {
    std::fprintf(out, "%s %s%s%s\n", job->id().c_str(), JobStateName(job->state()).c_str(),
                 job->reason().empty() ? "" : ": ", common::EscapeControl(job->reason()).c_str());
  }
  return 0;
}

int Workers(CoordinatorClient& c, const Flags& f, FILE* out, FILE* err) {
  auto ws = c.ListWorkers();
  if (!ws.ok()) {
    PrintError(err, "workers", ws.status());
    return ExitCodeFor(ws.status());
  }
  if (f.json) {
    std::fprintf(out, "%s\n", ToJsonArray(*ws).c_str());
  } else {
    std::fputs(common::EscapeControl(WorkersTable(*ws, NowMs()), "\n").c_str(), out);
  }
  return 0;
}

// A stream broke after it had delivered something: the coordinator
// restarted or the network hiccupped, so reconnecting is worth it.
bool Transient(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kCancelled ||
         s.code() == absl::StatusCode::kUnknown || s.code() == absl::StatusCode::kInternal;
}

int Logs(CoordinatorClient& c, const std::string& id, const Flags& f, FILE* out, FILE* err) {
  int64_t last_seq = 0;
  bool connected = false;
  auto lost_since = std::chrono::steady_clock::now();
  bool reported = false;
  while (true) {
    absl::Status s = c.GetJobLogs(id, f.follow, last_seq, [&](const v1::LogLine& l) {
      connected = true;
      reported = false;
      if (l.seq() <= last_seq) return true;  // re-sent after a reconnect
      last_seq = l.seq();
      if (f.json) {
        std::fprintf(out, "%s\n", ToJson(l).c_str());
      } else {
        std::fprintf(out, "%s\n", common::EscapeControl(l.text(), "\t").c_str());
      }
      std::fflush(out);
      return true;
    });
    if (s.ok()) {
      if (!f.follow) return 0;
      // The follow stream ends when the job ends; a stream cut short by a
      // restarting coordinator also ends "OK" on some transports, so check.
      auto job = c.GetJob(id);
      if (!job.ok() || common::IsTerminal(job->state())) return 0;
      continue;
    }
    if (!(f.follow && connected && Transient(s))) {
      PrintError(err, "logs", s);
      return ExitCodeFor(s);
    }
    if (!reported) {
      lost_since = std::chrono::steady_clock::now();
      std::fprintf(err, "yoke logs: lost the coordinator (%s); reconnecting\n",
                   std::string(s.message()).c_str());
      reported = true;
    }
    if (std::chrono::steady_clock::now() - lost_since > kReconnectFor) {
      PrintError(err, "logs", s);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int Watch(CoordinatorClient& c, const std::string& id, const Flags& f, FILE* out, FILE* err) {
  // With --output json the live view goes to stderr, so stdout is only the
  // final job.
  FILE* view_out = f.json ? err : out;
  WatchView view(view_out, ::isatty(::fileno(view_out)) == 1);
  v1::Job last;
  bool connected = false;
  bool reported = false;
  auto lost_since = std::chrono::steady_clock::now();
  while (true) {
    absl::Status s = c.WatchJob(id, [&](const v1::JobEvent& ev) {
      if (reported) view.Note("reconnected to the coordinator at " + c.address());
      connected = true;
      reported = false;
      last = ev.job();
      view.OnEvent(ev);
      return true;
    });
    if (s.ok() && connected && common::IsTerminal(last.state())) break;
    if (s.ok()) {
      // The stream ended without a terminal event; ask directly.
      auto job = c.GetJob(id);
      if (job.ok() && common::IsTerminal(job->state())) {
        last = *job;
        break;
      }
      if (!job.ok()) s = job.status();
    }
    if (!s.ok() && !(connected && Transient(s))) {
      view.Close();
      PrintError(err, "watch", s);
      return ExitCodeFor(s);
    }
    if (!s.ok() && !reported) {
      lost_since = std::chrono::steady_clock::now();
      view.Note(absl::StrCat("lost the coordinator (", s.message(), "); reconnecting"));
      reported = true;
    }
    if (reported && std::chrono::steady_clock::now() - lost_since > kReconnectFor) {
      view.Close();
      PrintError(err, "watch", s);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  view.Close();
  // The terminal event carries the job, but ask once more so the printed
  // result is the stored one (it may have been recorded just after).
  if (auto job = c.GetJob(id); job.ok()) last = *job;
  if (f.json) std::fprintf(out, "%s\n", ToJson(last).c_str());
  if (last.state() == v1::JOB_SUCCEEDED) {
    std::fprintf(view_out, "%s\n", ResultSummary(last.result()).c_str());
    return 0;
  }
  std::fprintf(err, "yoke watch: job %s %s%s%s\n", last.id().c_str(),
               JobStateName(last.state()).c_str(), last.reason().empty() ? "" : ": ",
               common::EscapeControl(last.reason()).c_str());
  return 1;
}

int Submit(CoordinatorClient& c, const Flags& f, FILE* out, FILE* err) {
  const std::string& file = f.positional[0];
  // Only parse here: YAML and --set errors carry file:line and need no
  // coordinator. Validation happens once, in the coordinator, which alone
  // knows its data and checkpoint roots and its fleet, and lists the image
  // folders it can see (`yoke validate [--data]` checks a file without one).
  auto spec = common::LoadJobSpecFile(file, f.sets);
  if (!spec.ok()) {
    PrintError(err, "submit", spec.status());
    return 2;
  }
  auto id = c.SubmitJob(*spec, f.priority);
  if (!id.ok()) {
    PrintError(err, "submit", id.status());
    return ExitCodeFor(id.status());
  }
  if (f.json) {
    v1::SubmitJobResponse r;
    r.set_job_id(*id);
    std::fprintf(out, "%s\n", ToJson(r).c_str());
  } else {
    std::fprintf(out, "%s\n", id->c_str());
  }
  std::fflush(out);
  if (!f.watch) return 0;
  return Watch(c, *id, f, out, err);
}

}  // namespace

int ExitCodeFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return 2;
    default:
      return 1;
  }
}

bool IsClusterCommand(const std::string& command) {
  static const std::set<std::string> kCommands = {"submit", "jobs",   "get",    "watch",
                                                  "logs",   "cancel", "workers"};
  return kCommands.count(command) > 0;
}

int RunClusterCommand(const std::string& command, const std::vector<std::string>& args, FILE* out,
                      FILE* err) {
  size_t want_positional = 1;
  std::string usage;
  if (command == "submit") {
    usage = "submit JOB.yaml [--set path=value ...] [--priority N] [--watch]";
  } else if (command == "jobs") {
    want_positional = 0;
    usage = "jobs [--state running,pending,...]";
  } else if (command == "workers") {
    want_positional = 0;
    usage = "workers";
  } else if (command == "logs") {
    usage = "logs ID [-f]";
  } else if (command == "get" || command == "watch" || command == "cancel") {
    usage = command + " ID";
  } else {
    std::fprintf(err, "yoke: unknown command '%s'\n", command.c_str());
    return 2;
  }
  Flags f;
  common::FlagParser parser("yoke " + command,
                            absl::StrCat("usage: yoke ", usage,
                                         " [--output text|json] [--coordinator host:port]\n"
                                         "       [--tls-dir DIR] [--token TOKEN] [--insecure]\n"));
  parser
      .Custom("--output,-o",
              [&f](const std::string& o) {
                if (o != "json" && o != "text") {
                  return absl::InvalidArgumentError(
                      absl::StrCat("--output: expected text or json, got '", o, "'"));
                }
                f.json = o == "json";
                return absl::OkStatus();
              })
      .String("--coordinator", &f.coordinator)
      .String("--tls-dir", &f.credentials.tls_dir)
      .String("--token", &f.credentials.token)
      .Bool("--insecure", &f.credentials.insecure);
  if (command == "submit") {
    parser.Strings("--set", &f.sets).Int("--priority", &f.priority).Bool("--watch", &f.watch);
  } else if (command == "jobs") {
    parser.String("--state", &f.states);
  } else if (command == "logs") {
    parser.Bool("--follow,-f", &f.follow);
  }
  if (auto code = parser.ParseOrExitCode(args, &f.positional, out, err)) return *code;
  if (f.positional.size() != want_positional) {
    std::string e = f.positional.size() > want_positional
                        ? absl::StrCat("unexpected argument '", f.positional[want_positional], "'")
                        : "missing argument";
    return parser.UsageError(err, e);
  }
  auto credentials = ResolveCredentials(f.credentials);
  if (!credentials.ok()) {
    PrintError(err, command, credentials.status());
    return 2;
  }
  ClientOptions options;
  options.credentials = *credentials;
  CoordinatorClient client(ResolveCoordinatorAddress(f.coordinator), options);
  if (command == "submit") return Submit(client, f, out, err);
  if (command == "jobs") return Jobs(client, f, out, err);
  if (command == "workers") return Workers(client, f, out, err);
  const std::string& id = f.positional[0];
  if (command == "get") return Get(client, id, f, out, err);
  if (command == "watch") return Watch(client, id, f, out, err);
  if (command == "logs") return Logs(client, id, f, out, err);
  return Cancel(client, id, f, out, err);
}

}  // namespace yoke::client
