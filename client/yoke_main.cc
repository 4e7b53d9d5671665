// yoke: the command-line front end.
//
//   yoke train JOB.yaml [--set path=value ...] [--resume CKPT] [--output json]
//   yoke validate JOB.yaml [--set path=value ...] [--output yaml]
//   yoke version
//
// The client depends only on proto/ and common/ (see ARCHITECTURE.md), so
// `train` runs the trainer binary `yoke-trainer`, found next to this one,
// rather than linking the engine. The control-plane commands (submit, watch,
// logs, cancel, jobs, workers, up) arrive with the coordinator.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/job_validate.h"

namespace {

const char kUsage[] =
    "usage: yoke <command> [args]\n"
    "\n"
    "commands:\n"
    "  train JOB.yaml [--set path=value ...] [--resume CKPT] [--output text|json]\n"
    "                      train a job in this process (no daemons)\n"
    "  validate JOB.yaml [--set path=value ...] [--output yaml]\n"
    "                      check a job file; print the effective spec with --output yaml\n"
    "  version             print the version\n"
    "\n"
    "The cluster commands (submit, watch, logs, cancel, jobs, workers, up) need the\n"
    "coordinator, which this build does not include yet.\n";

std::string SelfDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

int Train(int argc, char** argv) {
  std::string trainer = SelfDir() + "/yoke-trainer";
  if (::access(trainer.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "yoke train: cannot find the trainer binary at %s\n",
                 trainer.c_str());
    return 2;
  }
  std::vector<char*> args;
  args.push_back(const_cast<char*>(trainer.c_str()));
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(trainer.c_str(), args.data());
  std::fprintf(stderr, "yoke train: cannot run %s: %s\n", trainer.c_str(),
               std::strerror(errno));
  return 2;
}

int Validate(int argc, char** argv) {
  std::string file, output;
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if ((a == "--output" || a == "-o") && i + 1 < argc) {
      output = argv[++i];
    } else if (!a.empty() && a[0] != '-' && file.empty()) {
      file = a;
    } else {
      std::fprintf(stderr, "yoke validate: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (file.empty()) {
    std::fputs("usage: yoke validate JOB.yaml [--set path=value ...] [--output yaml]\n",
               stderr);
    return 2;
  }
  auto spec = yoke::LoadJobSpecFile(file, overrides);
  absl::Status s = spec.ok() ? yoke::ValidateJobSpec(*spec) : spec.status();
  if (!s.ok()) {
    std::fprintf(stderr, "yoke validate: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (output == "yaml") {
    std::printf("%s\n", yoke::JobSpecToYaml(*spec).c_str());
  } else {
    std::printf("%s: valid\n", file.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "train") return Train(argc, argv);
  if (cmd == "validate") return Validate(argc, argv);
  if (cmd == "version" || cmd == "--version") {
    std::puts("yoke 0.1.0");
    return 0;
  }
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "yoke: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
  return 2;
}
