#include "worker/main_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/self_dir.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "security/certs.h"
#include "worker/memory_cgroup.h"

namespace yoke::worker {
namespace {

using ::testing::HasSubstr;

common::EnvLookup Env(std::map<std::string, std::string> vars = {}) {
  return [vars](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

class WorkerOptionsTest : public ::testing::Test {
 protected:
  WorkerOptionsTest() {
    // An executable stand-in for yoke-trainer.
    trainer_ = tmp_.File("yoke-trainer");
    std::ofstream(trainer_) << "#!/bin/sh\n";
    ::chmod(trainer_.c_str(), 0755);
  }

  // Parses `args` as yoke-worker's flags and builds the options.
  absl::StatusOr<WorkerMainOptions> Build(const std::vector<std::string>& args,
                                          const common::EnvLookup& env = Env()) {
    common::FlagParser parser("yoke-worker", "usage\n");
    WorkerFlags flags(&parser);
    auto parsed = parser.Parse(args);
    if (!parsed.ok()) return parsed.status();
    return BuildWorkerOptions(flags, env);
  }
  // The flags every test needs to get past the checks: plaintext, the
  // stand-in trainer and a work dir in the temp dir.
  std::vector<std::string> Basic(std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"--insecure", "--trainer", trainer_, "--work-dir",
                                     tmp_.File("work")};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  std::string File(const std::string& name, const std::string& text) {
    std::ofstream(tmp_.File(name)) << text;
    return tmp_.File(name);
  }

  common::TempDir tmp_{"yoke_worker_options_test"};
  std::string trainer_;
};

TEST_F(WorkerOptionsTest, Defaults) {
  auto o = Build(Basic());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.coordinator(), "127.0.0.1:7070");
  EXPECT_EQ(o->config.cpu_replicas(), 1);
  EXPECT_EQ(o->config.log_level(), "info");
  EXPECT_EQ(o->config.heartbeat_interval_ms(), 1000);
  EXPECT_EQ(o->config.stop_grace_ms(), 10000);
  EXPECT_EQ(o->config.advertise_address(), "");
  EXPECT_EQ(o->config.data_ports(), "");
  EXPECT_EQ(o->config.metrics_listen(), "");
  EXPECT_TRUE(o->discover_cuda);
  // The machine's memory (or this process's cgroup limit) less a reserve.
  const int64_t visible = VisibleMemoryBytes();
  EXPECT_EQ(o->config.memory_limit_bytes(), DefaultMemoryLimit(visible));
  EXPECT_GT(o->config.memory_limit_bytes(), visible / 2);
  EXPECT_LT(o->config.memory_limit_bytes(), visible);
  EXPECT_EQ(o->tls_ca_path, "");
  EXPECT_EQ(o->work_dir, tmp_.File("work"));
  EXPECT_TRUE(std::filesystem::is_directory(o->work_dir));
}

TEST_F(WorkerOptionsTest, DefaultWorkDirAndTrainer) {
  const std::string cwd = std::filesystem::current_path().string();
  ASSERT_EQ(::chdir(tmp_.path().c_str()), 0);
  auto o = Build({"--insecure"});
  ASSERT_EQ(::chdir(cwd.c_str()), 0);
  // yoke-trainer beside this program: there when the build made it.
  const std::string trainer = common::SelfDir() + "/yoke-trainer";
  if (!o.ok()) {
    EXPECT_EQ(o.status().message(), "trainer_path: cannot execute " + trainer + " (set --trainer)");
    return;
  }
  EXPECT_EQ(o->config.trainer_path(), trainer);
  EXPECT_EQ(o->config.work_dir(), "yoke-work");
  EXPECT_EQ(o->work_dir, tmp_.File("yoke-work"));
  EXPECT_TRUE(std::filesystem::is_directory(tmp_.File("yoke-work")));
}

TEST_F(WorkerOptionsTest, TheFilesValues) {
  std::string cfg = File("w.yaml",
                         "coordinator: 10.0.0.1:7070\ncpu_replicas: 3\nheartbeat_interval_ms: 200\n"
                         "stop_grace_ms: 2500\nlog_level: debug\nadvertise_address: 10.0.0.2\n"
                         "data_ports: 41000-41009\nmetrics_listen: 127.0.0.1:0\ninsecure: true\n"
                         "memory_limit_bytes: 3221225472\n"
                         "trainer_path: " +
                             trainer_ + "\nwork_dir: " + tmp_.File("wd") + "\n");
  auto o = Build({"--config", cfg});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.coordinator(), "10.0.0.1:7070");
  EXPECT_EQ(o->config.cpu_replicas(), 3);
  EXPECT_EQ(o->config.heartbeat_interval_ms(), 200);
  EXPECT_EQ(o->config.stop_grace_ms(), 2500);
  EXPECT_EQ(o->config.log_level(), "debug");
  EXPECT_EQ(o->config.advertise_address(), "10.0.0.2");
  EXPECT_EQ(o->config.data_ports(), "41000-41009");
  EXPECT_EQ(o->config.metrics_listen(), "127.0.0.1:0");
  EXPECT_EQ(o->config.trainer_path(), trainer_);
  EXPECT_EQ(o->config.memory_limit_bytes(), int64_t{3} << 30);
  EXPECT_EQ(o->work_dir, tmp_.File("wd"));
}

TEST_F(WorkerOptionsTest, FlagsOverTheEnvironmentOverTheFile) {
  std::string cfg = File("w.yaml",
                         "coordinator: 10.0.0.1:7070\ncpu_replicas: 3\nstop_grace_ms: 2500\n"
                         "advertise_address: 10.0.0.2\ndata_ports: 41000-41009\n"
                         "log_level: debug\nmemory_limit_bytes: 3221225472\n");
  const auto env =
      Env({{"YOKE_ADVERTISE_ADDRESS", "10.0.0.3"}, {"YOKE_DATA_PORTS", "42000-42009"}});
  auto o = Build(Basic({"--config", cfg}), env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.advertise_address(), "10.0.0.3");
  EXPECT_EQ(o->config.data_ports(), "42000-42009");
  EXPECT_EQ(o->config.coordinator(), "10.0.0.1:7070");
  EXPECT_EQ(o->config.memory_limit_bytes(), int64_t{3} << 30);

  o = Build(Basic({"--config",
                   cfg,
                   "--coordinator",
                   "10.9.9.9:1",
                   "--cpu-replicas",
                   "5",
                   "--stop-grace",
                   "1s",
                   "--heartbeat-interval",
                   "300ms",
                   "--log-level",
                   "warn",
                   "--advertise-address",
                   "10.0.0.4",
                   "--data-ports",
                   "43000-43009",
                   "--metrics-listen",
                   "off",
                   "--no-cuda",
                   "--memory-limit",
                   "1.5GiB"}),
            env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.coordinator(), "10.9.9.9:1");
  EXPECT_EQ(o->config.cpu_replicas(), 5);
  EXPECT_EQ(o->config.stop_grace_ms(), 1000);
  EXPECT_EQ(o->config.heartbeat_interval_ms(), 300);
  EXPECT_EQ(o->config.log_level(), "warn");
  EXPECT_EQ(o->config.advertise_address(), "10.0.0.4");
  EXPECT_EQ(o->config.data_ports(), "43000-43009");
  EXPECT_EQ(o->config.metrics_listen(), "off");
  EXPECT_EQ(o->config.memory_limit_bytes(), int64_t{3} << 29);
  EXPECT_FALSE(o->discover_cuda);
}

TEST_F(WorkerOptionsTest, ZeroGivenOnTheCommandLineIsKept) {
  std::string cfg = File("w.yaml", "cpu_replicas: 0\nstop_grace_ms: 0\n");
  auto o = Build(Basic({"--config", cfg}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.cpu_replicas(), 1);  // 0 in the file: the default
  EXPECT_EQ(o->config.stop_grace_ms(), 10000);
  o = Build(Basic({"--config", cfg, "--cpu-replicas", "0", "--stop-grace", "0"}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.cpu_replicas(), 0);  // a GPU-only worker
  EXPECT_EQ(o->config.stop_grace_ms(), 0);
}

TEST_F(WorkerOptionsTest, ConfigFileErrors) {
  auto o = Build(Basic({"--config", tmp_.File("missing.yaml")}));
  EXPECT_EQ(o.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(o.status().message(),
            tmp_.File("missing.yaml") + ": cannot open config file: No such file or directory");
  std::string bad = File("bad.yaml", "cpu_replica: 2\n");
  o = Build(Basic({"--config", bad}));
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("cpu_replica: unknown field"));
}

TEST_F(WorkerOptionsTest, TlsMustBeChosenOnce) {
  auto o = Build({"--trainer", trainer_, "--work-dir", tmp_.File("work")});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o.status().message(),
            "no TLS credentials: pass --tls-dir DIR (ca.crt, tls.crt, tls.key from `yoke certs "
            "issue --role worker --name ID`), or --insecure for development");
  o = Build(Basic({"--tls-dir", "/tls"}));
  EXPECT_EQ(o.status().message(), "--tls-dir and --insecure: choose one");
}

TEST_F(WorkerOptionsTest, TlsCredentialsAreReadFromTheDirectory) {
  // Unreadable: from the environment too, when no flag chose.
  auto o = Build({"--trainer", trainer_}, Env({{"YOKE_TLS_DIR", tmp_.File("no-tls")}}));
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()),
              ::testing::StartsWith("tls_dir: " + tmp_.File("no-tls")));

  auto ca = common::CreateCa("test", absl::Hours(1));
  ASSERT_TRUE(ca.ok()) << ca.status();
  common::IssueOptions io;
  io.role = common::Role::kWorker;
  io.name = "w-1";
  ASSERT_TRUE(common::IssueCredentialsDir(*ca, io, tmp_.File("w-1")).ok());
  o = Build(
      {"--trainer", trainer_, "--work-dir", tmp_.File("work"), "--tls-dir", tmp_.File("w-1")});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->tls_ca_path, tmp_.File("w-1") + "/ca.crt");
  EXPECT_EQ(o->tls.ca_pem, ca->cert_pem);
  EXPECT_FALSE(o->tls.leaf.key_pem.empty());
}

TEST_F(WorkerOptionsTest, NegativeCpuReplicasInTheFile) {
  std::string cfg = File("w.yaml", "cpu_replicas: -2\n");
  auto o = Build(Basic({"--config", cfg}));
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o.status().message(), "cpu_replicas: must be >= 0, got -2");
}

TEST_F(WorkerOptionsTest, BadMemoryLimitsNameTheFlagOrTheField) {
  for (const char* bad : {"lots", "8", "-1GiB", "63MiB", "8 GiBs", "1e9", ""}) {
    auto o = Build(Basic({"--memory-limit", bad}));
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(o.status().message(),
              absl::StrCat("--memory-limit: expected a size of at least 64MiB such as 48GiB (a "
                           "plain number is bytes), got '",
                           bad, "'"));
  }
  auto o = Build(Basic({"--memory-limit", "64MiB"}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.memory_limit_bytes(), int64_t{64} << 20);
  for (const char* bad : {"-5", "1048576"}) {
    std::string cfg = File("w.yaml", absl::StrCat("memory_limit_bytes: ", bad, "\n"));
    o = Build(Basic({"--config", cfg}));
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(o.status().message(),
              absl::StrCat("memory_limit_bytes: must be at least 67108864 (64 MiB), got ", bad));
  }
}

TEST_F(WorkerOptionsTest, TheTrainerMustBeExecutable) {
  std::string not_exec = File("not-exec", "x");
  auto o = Build({"--insecure", "--trainer", not_exec, "--work-dir", tmp_.File("work")});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o.status().message(), "trainer_path: cannot execute " + not_exec + " (set --trainer)");
  EXPECT_FALSE(std::filesystem::exists(tmp_.File("work")));  // checked before it is made
}

TEST_F(WorkerOptionsTest, AWorkDirThatCannotBeMade) {
  std::string file = File("a-file", "x");
  auto o = Build({"--insecure", "--trainer", trainer_, "--work-dir", file + "/work"});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()),
              ::testing::StartsWith("work_dir: cannot create " + file + "/work: "));
}

}  // namespace
}  // namespace yoke::worker
