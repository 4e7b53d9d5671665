// yoke: the command-line front end.
//
//   yoke train JOB.yaml [--set path=value ...] [--resume CKPT] [--output json]
//   yoke validate JOB.yaml [--set path=value ...] [--data] [--output yaml]
//   yoke export CHECKPOINT --format onnx -o MODEL.onnx   (runs yoke-model)
//   yoke predict CHECKPOINT [--data JOB.yaml|FOLDER]      (runs yoke-model)
//   yoke submit | jobs | get | watch | logs | cancel | workers   (commands.h)
//   yoke up | down                                               (local_cluster.h)
//   yoke version
//
// The client depends only on proto/, common/ and the small rooms above it
// (config, jobspec, security, net, telemetry; see docs/architecture.md), so
// `train` runs the trainer binary `yoke-trainer`, found next to this one,
// rather than linking the engine; `export` and `predict` run yoke-model the
// same way; likewise `up` runs yoke-coordinator and yoke-worker from the same
// directory.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/local_cluster.h"
#include "client/security_commands.h"
#include "common/flags.h"
#include "common/omp_env.h"
#include "common/self_dir.h"
#include "common/version.h"
#include "config/config.h"
#include "jobspec/job_data_check.h"
#include "jobspec/job_validate.h"

namespace {

const char kUsage[] =
    "usage: yoke <command> [args]\n"
    "\n"
    "single process:\n"
    "  train JOB.yaml [--set path=value ...] [--resume CKPT] [--output text|json]\n"
    "                      train a job in this process (no daemons)\n"
    "  validate JOB.yaml [--set path=value ...] [--data] [--output yaml]\n"
    "                      check a job file; --data also checks the data files it names\n"
    "                      on this machine; print the effective spec with --output yaml\n"
    "  export CHECKPOINT --format onnx -o MODEL.onnx [--batch N] [--softmax]\n"
    "                      write the checkpoint's model as ONNX (docs/export.md)\n"
    "  predict CHECKPOINT [--data JOB.yaml|FOLDER] [--top-k K] [-o FILE.csv]\n"
    "                      the model's top classes for a data set, and its accuracy\n"
    "  version             print the version\n"
    "\n"
    "cluster:\n";

void PrintUsage(FILE* f) {
  std::fputs(kUsage, f);
  std::fputs(yoke::client::kClusterCommandsUsage, f);
  std::fputs("\nlocal cluster:\n", f);
  std::fputs(yoke::client::kUpDownUsage, f);
  std::fputs("\nsecurity:\n", f);
  std::fputs(yoke::client::kSecurityCommandsUsage, f);
}

using yoke::common::SelfDir;

// Replaces this process with `binary`, found beside this one, given
// `first` (when not empty) and then argv[2..]. Returns 2 when it cannot.
int ExecBeside(const char* command, const std::string& binary, const char* first, int argc,
               char** argv) {
  std::string path = SelfDir() + "/" + binary;
  if (::access(path.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "yoke %s: cannot find %s at %s\n", command, binary.c_str(), path.c_str());
    return 2;
  }
  std::vector<char*> args;
  args.push_back(const_cast<char*>(path.c_str()));
  if (first != nullptr) args.push_back(const_cast<char*>(first));
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  // Before exec: libgomp reads its wait policy when the program loads.
  if (std::optional<std::string> spin = yoke::common::TrainerOmpSpinEnv()) {
    const size_t eq = spin->find('=');
    ::setenv(spin->substr(0, eq).c_str(), spin->substr(eq + 1).c_str(), 1);
  }
  ::execv(path.c_str(), args.data());
  std::fprintf(stderr, "yoke %s: cannot run %s: %s\n", command, path.c_str(), std::strerror(errno));
  return 2;
}

int Validate(int argc, char** argv) {
  std::string output;
  bool data = false;
  std::vector<std::string> overrides, files;
  yoke::common::FlagParser parser(
      "yoke validate",
      "usage: yoke validate JOB.yaml [--set path=value ...] [--data] [--output yaml]\n"
      "  --data   also open the data the job names, as the trainer would, on this\n"
      "           machine: image_folder roots are listed (an unreadable root, no class\n"
      "           folder or an empty one is an error), idx/cifar10/csv files must be\n"
      "           readable; nothing is decoded and no cache file is written\n");
  parser.Strings("--set", &overrides).String("--output,-o", &output).Bool("--data", &data);
  if (auto code = parser.ParseOrExitCode(yoke::common::ArgsOf(argc - 1, argv + 1), &files)) {
    return *code;
  }
  if (files.size() > 1) {
    std::fprintf(stderr, "yoke validate: unexpected argument '%s'\n", files[1].c_str());
    return 2;
  }
  if (files.empty()) {
    std::fputs(parser.usage().c_str(), stderr);
    return 2;
  }
  const std::string& file = files[0];
  auto spec = yoke::common::LoadJobSpecFile(file, overrides);
  absl::Status s = spec.ok() ? yoke::common::ValidateJobSpec(*spec) : spec.status();
  if (!s.ok()) {
    std::fprintf(stderr, "yoke validate: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // The data only after the spec: its paths are known good by then.
  std::vector<std::string> checked;
  if (data) {
    auto lines = yoke::common::CheckJobData(*spec, yoke::common::DataCheck::kAll);
    if (!lines.ok()) {
      std::fprintf(stderr, "yoke validate: %s\n", std::string(lines.status().message()).c_str());
      return 2;
    }
    checked = *std::move(lines);
  }
  // The report goes to stderr with --output yaml, so stdout stays YAML.
  FILE* report = output == "yaml" ? stderr : stdout;
  for (const std::string& line : checked) std::fprintf(report, "%s\n", line.c_str());
  if (output == "yaml") {
    std::printf("%s\n", yoke::common::JobSpecToYaml(*spec).c_str());
  } else {
    std::printf("%s: valid (%s)\n", file.c_str(),
                data ? "spec and data" : "spec only; --data also checks the data files");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "train") return ExecBeside("train", "yoke-trainer", nullptr, argc, argv);
  // Export and prediction need the engine, which yoke-model links.
  if (cmd == "export") return ExecBeside("export", "yoke-model", "export", argc, argv);
  if (cmd == "predict") return ExecBeside("predict", "yoke-model", "predict", argc, argv);
  if (cmd == "validate") return Validate(argc, argv);
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (yoke::client::IsClusterCommand(cmd))
    return yoke::client::RunClusterCommand(cmd, rest, stdout, stderr);
  if (cmd == "up") return yoke::client::RunUp(rest, stdout, stderr);
  if (cmd == "down") return yoke::client::RunDown(rest, stdout, stderr);
  if (cmd == "certs") return yoke::client::RunCerts(rest, stdout, stderr);
  if (cmd == "token") return yoke::client::RunToken(rest, stdout, stderr);
  if (cmd == "version" || cmd == "--version") {
    std::printf("yoke %s\n", yoke::common::kYokeVersion);
    return 0;
  }
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    PrintUsage(stdout);
    return 0;
  }
  std::fprintf(stderr, "yoke: unknown command '%s'\n\n", cmd.c_str());
  PrintUsage(stderr);
  return 2;
}
