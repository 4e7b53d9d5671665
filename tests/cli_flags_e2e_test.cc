// The command lines of the shipped binaries behave alike (common/flags.h):
// --help prints the usage and exits 0, an unknown flag is
// "PROGRAM: unknown flag '...'" with exit 2, and --flag=value is the same
// flag as --flag value. yoke-trainer is covered by trainer/ tests.
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

struct Program {
  std::string binary;  // beside the test
  std::string args;    // before the flag under test (a subcommand)
  std::string name;    // how its messages start
};

const Program kPrograms[] = {
    {"yoke", "", "yoke"},
    {"yoke", "validate", "yoke validate"},
    {"yoke", "submit", "yoke submit"},
    {"yoke", "up", "yoke up"},
    {"yoke", "down", "yoke down"},
    {"yoke-coordinator", "", "yoke-coordinator"},
    {"yoke-worker", "", "yoke-worker"},
    // Run by yoke-model, which `yoke` execs.
    {"yoke", "export", "yoke export"},
    {"yoke", "predict", "yoke predict"},
};

std::string Command(const Program& p, const std::string& rest) {
  return BinDir() + "/" + p.binary + (p.args.empty() ? "" : " " + p.args) + " " + rest;
}

TEST(CliFlagsTest, HelpPrintsTheUsageOnStdoutAndExitsZero) {
  for (const Program& p : kPrograms) {
    RunResult r = Sh(Command(p, "--help") + " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << p.name;
    EXPECT_EQ(r.out.rfind("usage: ", 0), 0u) << p.name << ": " << r.out;
  }
}

TEST(CliFlagsTest, AnUnknownFlagIsNamedTheSameWayEverywhere) {
  for (const Program& p : kPrograms) {
    if (p.args.empty() && p.binary == "yoke") continue;  // `yoke --bogus` is an unknown command
    RunResult r = Sh(Command(p, "--bogus=1") + " 2>&1 >/dev/null");
    EXPECT_EQ(r.exit_code, 2) << p.name;
    EXPECT_EQ(r.out.rfind(p.name + ": unknown flag '--bogus'\nusage: ", 0), 0u)
        << p.name << ": " << r.out;
  }
}

TEST(CliFlagsTest, EqualsFormIsTheSameFlag) {
  const Program& coordinator = kPrograms[5];
  RunResult r = Sh(Command(coordinator, "--heartbeat-deadline=0"), true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("yoke-coordinator: --heartbeat-deadline: expected a duration > 0"),
            std::string::npos)
      << r.out;
  const Program& worker = kPrograms[6];
  r = Sh(Command(worker, "--cpu-replicas=many"), true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("yoke-worker: --cpu-replicas: expected an integer in [0, 1024], got "
                       "'many'"),
            std::string::npos)
      << r.out;

  // Repeated --set accumulate, in either form.
  r = Sh(BinDir() + "/yoke validate " + Config("fashion_mnist_mlp.yaml") +
         " --set=training.epochs=2 --set training.batch_size=16 -o yaml");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("epochs: 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch_size: 16\n"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace yoke::e2e
