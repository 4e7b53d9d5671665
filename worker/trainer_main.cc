// yoke-trainer: trains one job in this process.
//
//   yoke-trainer JOB.yaml [--set path=value ...] [--resume CKPT]
//                [--output text|json|events] [--log-level LEVEL]
//                [--world-size N --rank R --replicas K
//                 --coordinator HOST:PORT --job-id ID --attempt A
//                 --gloo-hostname ADDR]
//   yoke-trainer --resume CKPT [...]      (spec taken from the checkpoint)
//   yoke-trainer --spec-file FILE|- [...] (a serialized v1::JobSpec)
//
// `yoke train` runs this binary on a YAML file, and the worker daemon runs
// it once per attempt with --spec-file (the spec as the coordinator sent it,
// serialized; "-" reads it from stdin). A YAML spec, or the one in a
// checkpoint, is validated here (common::ValidateJobSpec); a --spec-file
// spec was validated where it was submitted, so only what depends on this
// machine is checked: that the file is a regular file of at most 16 MiB
// holding a JobSpec, and the data and checkpoint files it names.
//
// Human-readable progress goes to stdout (a redrawn bar on a
// terminal, log lines otherwise); with --output json or events it goes to
// stderr instead. json: stdout's last line is the TrainResult as one JSON
// object. events: stdout carries one v1::TrainerEvent per line as JSON
// ({"info": ...}, {"step": ...}, {"epoch": ...}, {"result": ...}, and
// {"error": "message"} before a non-zero exit), which is what the worker
// daemon parses.
//
// Data parallelism: --world-size N is the job's number of ranks (replicas);
// this process runs the --replicas K (default 1) consecutive ranks from
// --rank R (its first global rank), one thread each. With N > 1 the ranks
// rendezvous through the coordinator's per-attempt store (--coordinator,
// --job-id, --attempt); --gloo-hostname is the address this process's Gloo
// connections listen on (default 127.0.0.1: every rank on this machine).
// training.batch_size is the global batch. Only global
// rank 0 evaluates, checkpoints and reports epochs and the result; a failed
// collective exits 1 with the communicator's message (op, bucket, ranks).
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
#include "collective/store.h"
#include "common/config.h"
#include "common/job_spec_binary.h"
#include "common/job_validate.h"
#include "common/logging.h"
#include "engine/checkpoint.h"
#include "google/protobuf/util/json_util.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace {

std::atomic<yoke::worker::Trainer*> g_trainer{nullptr};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  if (yoke::worker::Trainer* t = g_trainer.load()) t->RequestStop();
}

void Usage(FILE* f) {
  std::fputs(
      "usage: yoke train JOB.yaml [--set path=value ...] [--resume CHECKPOINT]\n"
      "                  [--output text|json|events] [--log-level debug|info|warn|error]\n"
      "                  [--world-size N --rank R --replicas K\n"
      "                   --coordinator HOST:PORT --job-id ID --attempt A\n"
      "                   --gloo-hostname ADDR]\n"
      "       yoke train --resume CHECKPOINT   (continue with the checkpoint's own spec)\n"
      "       yoke train --spec-file FILE|- [...]  (a serialized JobSpec, as the worker\n"
      "                                           daemon writes it; - reads stdin)\n",
      f);
}

// Set with --output events: failures are reported on stdout too.
yoke::worker::EventProgress* g_events = nullptr;

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
  std::string job_file, spec_file, resume, output = "text", log_level = "warn";
  std::string coordinator, job_id, gloo_hostname = "127.0.0.1";
  int rank = 0, world_size = 1, replicas = 1, attempt = 0;
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
    } else if (a == "--spec-file") {
      const char* v = value("--spec-file");
      if (!v) return 2;
      spec_file = v;
    } else if (a.rfind("--spec-file=", 0) == 0) {
      spec_file = a.substr(12);
    } else if (a == "--output" || a == "-o") {
      const char* v = value("--output");
      if (!v) return 2;
      output = v;
    } else if (a.rfind("--output=", 0) == 0) {
      output = a.substr(9);
    } else if (a == "--rank" || a == "--world-size" || a == "--replicas" ||
               a == "--attempt") {
      const char* v = value(a.c_str());
      if (!v) return 2;
      int* dst = a == "--rank" ? &rank
                 : a == "--world-size" ? &world_size
                 : a == "--replicas"   ? &replicas
                                       : &attempt;
      if (!ParseInt(v, dst)) {
        std::fprintf(stderr, "yoke train: %s must be a non-negative integer, got '%s'\n",
                     a.c_str(), v);
        bad_number = true;
      }
    } else if (a == "--coordinator" || a == "--job-id" || a == "--gloo-hostname") {
      const char* v = value(a.c_str());
      if (!v) return 2;
      (a == "--coordinator" ? coordinator : a == "--job-id" ? job_id : gloo_hostname) = v;
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
  yoke::worker::EventProgress events(stdout);
  if (output == "events") g_events = &events;
  if (bad_number) {
    return Fail("--rank, --world-size, --replicas and --attempt must be non-negative integers",
                2);
  }
  if (world_size < 1) return Fail(absl::StrCat("--world-size: must be >= 1, got ", world_size), 2);
  if (replicas < 1) return Fail(absl::StrCat("--replicas: must be >= 1, got ", replicas), 2);
  if (rank + replicas > world_size) {
    return Fail(absl::StrCat("--rank: ranks ", rank, "..", rank + replicas - 1, " (--rank, ",
                             "--replicas ", replicas, ") must be in [0, ", world_size, ")"),
                2);
  }
  if (world_size > 1 && replicas < world_size && (coordinator.empty() || job_id.empty())) {
    return Fail(absl::StrCat("--world-size ", world_size, " with ranks in other processes ",
                             "needs --coordinator HOST:PORT and --job-id to rendezvous"),
                2);
  }
  if (!spec_file.empty() && !job_file.empty()) {
    return Fail(absl::StrCat("give a job file ('", job_file, "') or --spec-file ('", spec_file,
                             "'), not both"),
                2);
  }
  if (!spec_file.empty() && !overrides.empty()) {
    return Fail("--set needs a YAML job file; --spec-file takes the spec as it is", 2);
  }
  if (job_file.empty() && spec_file.empty() && resume.empty()) {
    Usage(stderr);
    return 2;
  }
  yoke::common::InitLogging("yoke-trainer", log_level);

  yoke::v1::JobSpec spec;
  if (!spec_file.empty()) {
    auto spec_or = yoke::common::ReadJobSpecFile(spec_file);
    if (!spec_or.ok()) return Fail(spec_or.status(), 2);
    spec = *std::move(spec_or);
  } else if (!job_file.empty()) {
    auto spec_or = yoke::common::LoadJobSpecFile(job_file, overrides);
    if (!spec_or.ok()) return Fail(spec_or.status(), 2);
    spec = *std::move(spec_or);
  } else {
    auto ck = yoke::engine::ReadCheckpoint(resume);
    if (!ck.ok()) return Fail(ck.status(), 2);
    spec = ck->header.spec();
    if (!overrides.empty()) {
      std::fprintf(stderr, "yoke train: --set needs a job file (got only --resume)\n");
      return 2;
    }
  }
  if (spec_file.empty()) {
    absl::Status valid = yoke::common::ValidateJobSpec(spec);
    if (!valid.ok()) return Fail(valid, 2);
  }

  FILE* human = output == "text" ? stdout : stderr;
  yoke::worker::ConsoleProgress console(human, isatty(fileno(human)) != 0);
  yoke::worker::TeeProgress tee(&console, &events);
  // All ranks in this process: they rendezvous in memory.
  yoke::collective::InMemoryStore local_store;
  yoke::worker::TrainerOptions opts;
  opts.spec_validated = true;  // above, or where it was submitted (--spec-file)
  opts.resume = resume;
  opts.world_size = world_size;
  opts.first_rank = rank;
  opts.num_replicas = replicas;
  if (world_size > 1 && coordinator.empty()) opts.store = &local_store;
  opts.coordinator = coordinator;
  opts.job_id = job_id;
  opts.attempt = attempt;
  opts.hostname = gloo_hostname;
  opts.progress = output == "events" ? static_cast<yoke::worker::ProgressSink*>(&tee) : &console;
  auto trainer_or = yoke::worker::Trainer::Create(spec, opts);
  if (!trainer_or.ok()) return Fail(trainer_or.status(), 2);
  std::unique_ptr<yoke::worker::Trainer> trainer = *std::move(trainer_or);

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
