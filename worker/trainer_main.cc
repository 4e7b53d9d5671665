// yoke-trainer: trains one job in this process.
//
//   yoke-trainer JOB.yaml [--set path=value ...] [--resume CKPT]
//                [--output text|json] [--log-level LEVEL]
//   yoke-trainer --resume CKPT [...]      (spec taken from the checkpoint)
//
// `yoke train` runs this binary. Human-readable progress goes to stdout (a
// redrawn bar on a terminal, log lines otherwise); with --output json it goes
// to stderr instead and stdout's last line is the TrainResult as one JSON
// object. Exit status: 0 on success, 2 for a bad command line, spec or input
// file, 1 when training fails, 130/143 when stopped by SIGINT/SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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
      "                  [--output text|json] [--log-level debug|info|warn|error]\n"
      "       yoke train --resume CHECKPOINT   (continue with the checkpoint's own spec)\n",
      f);
}

int Fail(const absl::Status& s, int code) {
  std::fprintf(stderr, "yoke train: %s\n", std::string(s.message()).c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string job_file, resume, output = "text", log_level = "warn";
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
  if (output != "text" && output != "json") {
    std::fprintf(stderr, "yoke train: --output must be text or json, got '%s'\n",
                 output.c_str());
    return 2;
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

  FILE* human = output == "json" ? stderr : stdout;
  yoke::ConsoleProgress progress(human, isatty(fileno(human)) != 0);
  yoke::TrainerOptions opts;
  opts.resume = resume;
  opts.progress = &progress;
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
