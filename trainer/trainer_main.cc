// yoke-trainer: trains one job in this process.
//
//   yoke-trainer JOB.yaml [--set path=value ...] [--resume CKPT]
//                [--output text|json|events] [--log-level LEVEL]
//                [--world-size N --rank R --replicas K
//                 --coordinator HOST:PORT --job-id ID --attempt A
//                 --gloo-hostname ADDR --rank-hosts W@ADDR,...
//                 --data-ports FIRST-LAST]
//                [--data-root DIR ... --checkpoint-root DIR ...]
//   yoke-trainer --resume CKPT|DIR [...]  (spec taken from the checkpoint;
//                                          DIR: its newest valid one)
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
// connections listen on (default 127.0.0.1: every rank on this machine),
// and --data-ports the ports they may take (collective/listen_ports.h).
// training.batch_size is the global batch. Only global
// rank 0 evaluates, checkpoints and reports epochs and the result; a failed
// collective exits 1 with the communicator's message (op, bucket, ranks).
// Exit status: 0 on success, 2 for a bad command line, spec or input file
// (also one found mid-training, such as a corrupt image), 1 when training
// fails, 130/143 when stopped by SIGINT/SIGTERM.
//
// Stopping: the first SIGINT or SIGTERM asks the trainer to stop at the next
// step boundary, where rank 0 checkpoints. A trainer far from one (building
// the shuffle order of a huge training set, waiting on slow data) still
// exits within --stop-grace of the signal, without a checkpoint, saying so
// on stderr; the worker daemon passes a little less than its own stop grace,
// so it never needs SIGKILL. A second signal exits at once.
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/listen_ports.h"
#include "collective/store.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/self_dir.h"
#include "config/config.h"
#include "engine/checkpoint.h"
#include "engine/device_backend.h"
#include "google/protobuf/util/json_util.h"
#include "jobspec/job_spec_binary.h"
#include "jobspec/job_validate.h"
#include "jobspec/path_confinement.h"
#include "trainer/main_options.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"

namespace {

std::atomic<yoke::worker::Trainer*> g_trainer{nullptr};
std::atomic<int> g_signal{0};

sem_t g_stop_requested;  // posted by the first signal, for the stop watchdog

void OnSignal(int sig) {
  if (g_signal.exchange(sig) != 0) _exit(128 + sig);  // a second signal
  if (yoke::worker::Trainer* t = g_trainer.load()) t->RequestStop();
  sem_post(&g_stop_requested);
}

// Exits 128 + the signal `grace` after the first one unless the trainer has
// stopped by then. It writes with write(2) and leaves with _exit: no stdio
// lock or destructor that the main thread may be inside.
void StartStopWatchdog(absl::Duration grace) {
  sem_init(&g_stop_requested, 0, 0);
  if (grace <= absl::ZeroDuration()) return;
  std::thread([grace] {
    while (sem_wait(&g_stop_requested) != 0) {
    }
    const int sig = g_signal.load();
    const std::string msg = absl::StrCat("yoke-trainer: stopping on signal ", sig,
                                         ": no step boundary within ", absl::FormatDuration(grace),
                                         " (--stop-grace), so it exits without a checkpoint\n");
    absl::SleepFor(grace);
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    _exit(128 + sig);
  }).detach();
}

constexpr char kUsage[] =
    "usage: yoke train JOB.yaml [--set path=value ...] [--resume CHECKPOINT]\n"
    "                  [--output text|json|events] [--log-level debug|info|warn|error]\n"
    "                  [--world-size N --rank R --replicas K\n"
    "                   --coordinator HOST:PORT --job-id ID --attempt A\n"
    "                   --gloo-hostname ADDR --rank-hosts W@ADDR,...\n"
    "                   --data-ports FIRST-LAST [--ps-incarnation K]]\n"
    "                  [--data-root DIR ... --checkpoint-root DIR ...]\n"
    "       yoke train --resume CHECKPOINT|DIR   (continue with the checkpoint's own\n"
    "                                           spec; DIR: its newest valid one)\n"
    "       yoke train --spec-file FILE|- [...]  (a serialized JobSpec, as the worker\n"
    "                                           daemon writes it; - reads stdin)\n"
    "       --resume-latest DIR  continue from the newest valid checkpoint in DIR, or\n"
    "                            from step 0 if DIR has none (the worker's retries)\n"
    "       --ps-incarnation K   a parameter-server job's replica restarted alone (K > 0):\n"
    "                            it rejoins its PS tasks and resumes its data\n";

// Set with --output events: failures are reported on stdout too.
yoke::worker::EventProgress* g_events = nullptr;

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "yoke train: %s\n", message.c_str());
  if (g_events) g_events->OnError(message);
  return code;
}
int Fail(const absl::Status& s, int code) { return Fail(std::string(s.message()), code); }

// What the user (or the job's log, through the worker) should read.
void Note(const std::string& line) {
  if (g_events != nullptr) {
    g_events->OnInfo(line);
  } else {
    std::fprintf(stderr, "yoke train: %s\n", line.c_str());
  }
}

// The checkpoint to resume from, in `*resume` ("" for none); an exit code
// when there is none to be had.
//
// --resume-latest DIR (a retry, from the worker daemon): the newest valid
// checkpoint in DIR if there is one, step 0 if DIR has none yet. Files that
// do not verify are passed over, each with a line in the log; a DIR whose
// every checkpoint is unreadable is an error, not a silent restart.
// --resume DIR: the newest checkpoint in DIR that verifies.
std::optional<int> ResolveResume(const yoke::worker::TrainerArgs& args, std::string* resume) {
  *resume = args.resume;
  if (!args.resume_latest.empty()) {
    std::vector<std::string> skipped;
    auto newest = yoke::engine::NewestValidCheckpoint(args.resume_latest, &skipped);
    for (const std::string& s : skipped) Note(absl::StrCat("skipping checkpoint ", s));
    if (newest.ok()) {
      *resume = *std::move(newest);
    } else if (skipped.empty()) {
      Note(absl::StrCat("no checkpoint in ", args.resume_latest, " yet: starting from step 0"));
    } else {
      return Fail(absl::StrCat("--resume-latest: ", newest.status().message()), 2);
    }
  }
  std::error_code ec;
  if (!resume->empty() && std::filesystem::is_directory(*resume, ec)) {
    auto newest = yoke::engine::NewestValidCheckpoint(*resume);
    if (!newest.ok()) return Fail(absl::StrCat("--resume: ", newest.status().message()), 2);
    std::fprintf(stderr, "yoke train: resuming from %s, the newest valid checkpoint in %s\n",
                 newest->c_str(), resume->c_str());
    *resume = *std::move(newest);
  }
  return std::nullopt;
}

// The spec to train, in `*spec`: from --spec-file, the job file (with the
// --set overrides) or the checkpoint, checked; an exit code when it cannot
// be had.
std::optional<int> LoadSpec(const yoke::worker::TrainerArgs& args, const std::string& resume,
                            yoke::v1::JobSpec* spec) {
  if (!args.spec_file.empty()) {
    auto spec_or = yoke::common::ReadJobSpecFile(args.spec_file);
    if (!spec_or.ok()) return Fail(spec_or.status(), 2);
    *spec = *std::move(spec_or);
  } else if (!args.job_file.empty()) {
    auto spec_or = yoke::common::LoadJobSpecFile(args.job_file, args.overrides);
    if (!spec_or.ok()) return Fail(spec_or.status(), 2);
    *spec = *std::move(spec_or);
  } else {
    // The header alone (the file is verified as it streams past).
    auto header = yoke::engine::ReadCheckpointSlices(resume, {});
    if (!header.ok()) return Fail(header.status(), 2);
    *spec = header->spec();
    if (!args.overrides.empty()) {
      std::fprintf(stderr, "yoke train: --set needs a job file (got only --resume)\n");
      return 2;
    }
  }
  if (args.spec_file.empty()) {
    absl::Status valid = yoke::common::ValidateJobSpec(*spec);
    if (!valid.ok()) return Fail(valid, 2);
  }
  // The worker's copy of the coordinator's roots, checked again here, where
  // the files are: a symlink made on this machine cannot lead out of them.
  if (absl::Status s =
          yoke::common::ValidateJobPaths(*spec, args.data_roots, args.checkpoint_roots);
      !s.ok()) {
    return Fail(s, 2);
  }
  return std::nullopt;
}

// A CUDA job in a trainer without the CUDA backend: the CUDA build of the
// trainer, yoke-trainer-cuda, sits beside this one (CMake builds both when
// YOKE_WITH_CUDA is on). It is a separate program so that yoke-trainer loads
// on machines without NVIDIA's libraries. Runs it in this process, with the
// same arguments (the worker keeps its pid); returns an exit code only when
// it cannot.
std::optional<int> MaybeExecCudaTrainer(const yoke::v1::JobSpec& spec, char** argv) {
  if (spec.distribution().device() != "cuda") return std::nullopt;
  if (yoke::engine::BackendFor(yoke::engine::Device::CUDA(0)).ok()) return std::nullopt;
  const std::string path = yoke::common::SelfDir() + "/yoke-trainer-cuda";
  if (::access(path.c_str(), X_OK) != 0) {
    return Fail(
        absl::StrCat("distribution.device: 'cuda' needs the CUDA build of the trainer, ", path,
                     ", which is not there (CMake builds it when YOKE_WITH_CUDA is "
                     "on and the CUDA toolkit is found; see docs/gpu.md)"),
        2);
  }
  ::execv(path.c_str(), argv);
  return Fail(absl::StrCat("cannot run ", path, ": ", std::strerror(errno)), 2);
}

// Trains `spec` with `options` to the end (or to SIGINT/SIGTERM); returns
// the exit code.
int Train(const yoke::v1::JobSpec& spec, yoke::worker::TrainerOptions options,
          const std::string& output, yoke::worker::EventProgress* events) {
  FILE* human = output == "text" ? stdout : stderr;
  yoke::worker::ConsoleProgress console(human, isatty(fileno(human)) != 0);
  yoke::worker::TeeProgress tee(&console, events);
  options.progress = output == "events" ? static_cast<yoke::worker::ProgressSink*>(&tee) : &console;
  auto trainer_or = yoke::worker::Trainer::Create(spec, options);
  if (!trainer_or.ok()) {
    // Running out of memory is a training failure (1), not bad input (2).
    return Fail(trainer_or.status(),
                trainer_or.status().code() == absl::StatusCode::kResourceExhausted ? 1 : 2);
  }
  std::unique_ptr<yoke::worker::Trainer> trainer = *std::move(trainer_or);

  g_trainer.store(trainer.get());
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto result = trainer->Run();
  g_trainer.store(nullptr);
  // Bad input found while training (a corrupt image under on_bad_image:
  // fail) is INVALID_ARGUMENT: exit 2, which the coordinator never retries,
  // since a retry would read the same file. Everything else is 1.
  if (!result.ok()) {
    return Fail(result.status(),
                result.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }
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

}  // namespace

int main(int argc, char** argv) {
  yoke::worker::TrainerArgs args;
  yoke::common::FlagParser flags("yoke train", kUsage);
  yoke::worker::DeclareTrainerFlags(&flags, &args);
  std::vector<std::string> positional;
  if (auto code = flags.ParseOrExitCode(yoke::common::ArgsOf(argc, argv), &positional)) {
    return *code;
  }
  if (positional.size() > 1) {
    return flags.UsageError(stderr, absl::StrCat("more than one job file ('", positional[0], "', '",
                                                 positional[1], "')"));
  }
  if (!positional.empty()) args.job_file = positional[0];
  yoke::worker::EventProgress events(stdout);
  // Only a valid --output can be "events": an invalid one is reported as
  // plain text.
  if (args.output == "events") g_events = &events;
  absl::StatusOr<yoke::worker::TrainerMainOptions> built = yoke::worker::BuildTrainerOptions(args);
  if (!built.ok() && yoke::worker::IsNoJob(built.status())) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (!built.ok()) return Fail(built.status(), 2);
  if (built->data_ports.has_value()) yoke::collective::SetListenPortRange(*built->data_ports);
  yoke::common::InitLogging("yoke-trainer", args.log_level);

  std::string resume;
  if (auto code = ResolveResume(args, &resume)) return *code;
  yoke::v1::JobSpec spec;
  if (auto code = LoadSpec(args, resume, &spec)) return *code;
  if (auto code = MaybeExecCudaTrainer(spec, argv)) return *code;
  // All ranks in this process: they rendezvous in memory.
  yoke::collective::InMemoryStore local_store;
  yoke::worker::TrainerOptions options = built->trainer;
  options.resume = resume;
  if (built->local_rendezvous) options.store = &local_store;
  StartStopWatchdog(args.stop_grace);
  return Train(spec, options, args.output, &events);
}
