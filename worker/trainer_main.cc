// yoke-trainer: trains one job in this process.
//
//   yoke-trainer JOB.yaml [--set path=value ...] [--resume CKPT]
//                [--output text|json|events] [--log-level LEVEL]
//                [--rank R --world-size N]
//   yoke-trainer --resume CKPT [...]      (spec taken from the checkpoint)
//
// `yoke train` runs this binary, and the worker daemon runs it once per
// attempt. Human-readable progress goes to stdout (a redrawn bar on a
// terminal, log lines otherwise); with --output json or events it goes to
// stderr instead. json: stdout's last line is the TrainResult as one JSON
// object. events: stdout carries one v1::TrainerEvent per line as JSON
// ({"info": ...}, {"step": ...}, {"epoch": ...}, {"result": ...}, and
// {"error": "message"} before a non-zero exit), which is what the worker
// daemon parses. --rank/--world-size place this process in a multi-replica
// job; until the collectives exist (issue 4) only a world of 1 is accepted.
// Exit status: 0 on success, 2 for a bad command line, spec or input file,
// 1 when training fails, 130/143 when stopped by SIGINT/SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/logging.h"
#include "engine/checkpoint.h"
#include "google/protobuf/util/json_util.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace {

std::atomic<yoke::Trainer*> g_trainer{nullptr};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  if (yoke::Trainer* t = g_trainer.load()) t->RequestStop();
}

void Usage(FILE* f) {
  std::fputs(
      "usage: yoke train JOB.yaml [--set path=value ...] [--resume CHECKPOINT]\n"
      "                  [--output text|json|events] [--log-level debug|info|warn|error]\n"
      "                  [--rank R --world-size N]\n"
      "       yoke train --resume CHECKPOINT   (continue with the checkpoint's own spec)\n",
      f);
}

// Set with --output events: failures are reported on stdout too.
yoke::EventProgress* g_events = nullptr;

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "yoke train: %s\n", message.c_str());
  if (g_events) g_events->OnError(message);
  return code;
}
int Fail(const absl::Status& s, int code) { return Fail(std::string(s.message()), code); }

// Parses a non-negative decimal int flag value; false if malformed.
bool ParseInt(const char* text, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0 || v > 1 << 30) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string job_file, resume, output = "text", log_level = "warn";
  int rank = 0, world_size = 1;
  bool bad_number = false;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "yoke train: %s needs a value\n", name);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      Usage(stdout);
      return 0;
    } else if (a == "--set") {
      const char* v = value("--set");
      if (!v) return 2;
      overrides.push_back(v);
    } else if (a.rfind("--set=", 0) == 0) {
      overrides.push_back(a.substr(6));
    } else if (a == "--resume") {
      const char* v = value("--resume");
      if (!v) return 2;
      resume = v;
    } else if (a == "--output" || a == "-o") {
      const char* v = value("--output");
      if (!v) return 2;
      output = v;
    } else if (a.rfind("--output=", 0) == 0) {
      output = a.substr(9);
    } else if (a == "--rank" || a == "--world-size") {
      const char* v = value(a.c_str());
      if (!v) return 2;
      if (!ParseInt(v, a == "--rank" ? &rank : &world_size)) {
        std::fprintf(stderr, "yoke train: %s must be a non-negative integer, got '%s'\n",
                     a.c_str(), v);
        bad_number = true;
      }
    } else if (a == "--log-level") {
      const char* v = value("--log-level");
      if (!v) return 2;
      log_level = v;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "yoke train: unknown flag '%s'\n", a.c_str());
      Usage(stderr);
      return 2;
    } else if (job_file.empty()) {
      job_file = a;
    } else {
      std::fprintf(stderr, "yoke train: more than one job file ('%s', '%s')\n",
                   job_file.c_str(), a.c_str());
      return 2;
    }
  }
  if (output != "text" && output != "json" && output != "events") {
    std::fprintf(stderr, "yoke train: --output must be text, json or events, got '%s'\n",
                 output.c_str());
    return 2;
  }
  yoke::EventProgress events(stdout);
  if (output == "events") g_events = &events;
  if (bad_number) return Fail("--rank and --world-size must be non-negative integers", 2);
  if (world_size < 1) return Fail(absl::StrCat("--world-size: must be >= 1, got ", world_size), 2);
  if (rank >= world_size) {
    return Fail(absl::StrCat("--rank: must be in [0, ", world_size, "), got ", rank), 2);
  }
  // Training N replicas as if each were alone would silently produce N
  // different models; refuse until gradients can be exchanged.
  if (world_size > 1) {
    return Fail(absl::StrCat("--world-size ", world_size,
                             ": multi-replica training arrives with the collectives "
                             "(issue 4)"),
                2);
  }
  if (job_file.empty() && resume.empty()) {
    Usage(stderr);
    return 2;
  }
  yoke::InitLogging("yoke-trainer", log_level);

  yoke::v1::JobSpec spec;
  if (!job_file.empty()) {
    auto spec_or = yoke::LoadJobSpecFile(job_file, overrides);
    if (!spec_or.ok()) return Fail(spec_or.status(), 2);
    spec = *std::move(spec_or);
  } else {
    auto ck = yoke::ReadCheckpoint(resume);
    if (!ck.ok()) return Fail(ck.status(), 2);
    spec = ck->header.spec();
    if (!overrides.empty()) {
      std::fprintf(stderr, "yoke train: --set needs a job file (got only --resume)\n");
      return 2;
    }
  }

  FILE* human = output == "text" ? stdout : stderr;
  yoke::ConsoleProgress console(human, isatty(fileno(human)) != 0);
  yoke::TeeProgress tee(&console, &events);
  yoke::TrainerOptions opts;
  opts.resume = resume;
  opts.progress = output == "events" ? static_cast<yoke::ProgressSink*>(&tee) : &console;
  auto trainer_or = yoke::Trainer::Create(spec, opts);
  if (!trainer_or.ok()) return Fail(trainer_or.status(), 2);
  std::unique_ptr<yoke::Trainer> trainer = *std::move(trainer_or);

  g_trainer.store(trainer.get());
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto result = trainer->Run();
  g_trainer.store(nullptr);
  if (!result.ok()) return Fail(result.status(), 1);
  if (output == "json") {
    std::string json;
    google::protobuf::util::JsonPrintOptions jo;
    jo.preserve_proto_field_names = true;
    jo.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(*result, &json, jo);
    std::printf("%s\n", json.c_str());
  }
  int sig = g_signal.load();
  return sig == 0 ? 0 : 128 + sig;
}
