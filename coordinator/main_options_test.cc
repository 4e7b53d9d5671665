#include "coordinator/main_options.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

using ::testing::ElementsAre;

// An environment for the builder: only these variables are set.
common::EnvLookup Env(std::map<std::string, std::string> vars = {}) {
  return [vars](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

// A config file holding `yaml`, removed at the end of the test.
class ConfigFile {
 public:
  explicit ConfigFile(const std::string& yaml) {
    char tmpl[] = "/tmp/yoke_coordinator_options_test_XXXXXX";
    int fd = ::mkstemp(tmpl);
    ::close(fd);
    path_ = tmpl;
    std::ofstream(path_) << yaml;
  }
  ~ConfigFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Parses `args` as yoke-coordinator's flags and builds the config.
absl::StatusOr<v1::CoordinatorConfig> Build(const std::vector<std::string>& args,
                                            const common::EnvLookup& env = Env()) {
  common::FlagParser parser("yoke-coordinator", "usage\n");
  CoordinatorFlags flags(&parser);
  auto parsed = parser.Parse(args);
  if (!parsed.ok()) return parsed.status();
  return BuildCoordinatorConfig(flags, env);
}

TEST(CoordinatorOptionsTest, Defaults) {
  auto cfg = Build({"--insecure"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->listen(), "127.0.0.1:7070");
  EXPECT_EQ(cfg->store_path(), "yoke-coordinator.db");
  EXPECT_EQ(cfg->heartbeat_deadline_ms(), 10000);
  EXPECT_EQ(cfg->log_level(), "info");
  EXPECT_EQ(cfg->http_listen(), "");  // the gRPC port + 1, chosen when serving
  EXPECT_TRUE(cfg->insecure());
  EXPECT_EQ(cfg->tls_dir(), "");
  EXPECT_EQ(cfg->data_roots_size(), 0);
  EXPECT_EQ(cfg->max_pending_jobs_per_submitter(), 100);
  EXPECT_EQ(cfg->max_pending_spec_bytes_per_submitter(), 16 << 20);
  EXPECT_EQ(cfg->max_submits_per_minute_per_submitter(), 120);
  EXPECT_EQ(cfg->max_running_devices_per_submitter(), 0);
  EXPECT_EQ(cfg->default_max_run_seconds(), 0);
}

TEST(CoordinatorOptionsTest, QuotasFromTheFileMinusOneForNoLimit) {
  ConfigFile file("max_pending_jobs_per_submitter: 7\nmax_pending_spec_bytes_per_submitter: -1\n");
  auto cfg = Build({"--config", file.path(), "--insecure"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->max_pending_jobs_per_submitter(), 7);
  EXPECT_EQ(cfg->max_pending_spec_bytes_per_submitter(), -1);

  ConfigFile bad("max_pending_jobs_per_submitter: -2\n");
  cfg = Build({"--config", bad.path(), "--insecure"});
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cfg.status().message(),
            "max_pending_jobs_per_submitter: must be > 0, or -1 for no limit, got -2");

  ConfigFile more(
      "max_submits_per_minute_per_submitter: -1\nmax_running_devices_per_submitter: 8\n"
      "default_max_run_seconds: 86400\n");
  cfg = Build({"--config", more.path(), "--insecure"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->max_submits_per_minute_per_submitter(), -1);
  EXPECT_EQ(cfg->max_running_devices_per_submitter(), 8);
  EXPECT_EQ(cfg->default_max_run_seconds(), 86400);
  ConfigFile negative("default_max_run_seconds: -1\n");
  cfg = Build({"--config", negative.path(), "--insecure"});
  EXPECT_EQ(cfg.status().message(),
            "default_max_run_seconds: must be > 0, or 0 for no limit, got -1");
}

TEST(CoordinatorOptionsTest, TheFilesValues) {
  ConfigFile file(
      "listen: 0.0.0.0:7000\nstore_path: /var/lib/yoke.db\nheartbeat_deadline_ms: 3000\n"
      "data_roots: [/data]\ncheckpoint_roots: [/ckpt]\nlog_level: debug\ntls_dir: /tls\n"
      "http_listen: 'off'\n");
  auto cfg = Build({"--config", file.path()});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->listen(), "0.0.0.0:7000");
  EXPECT_EQ(cfg->store_path(), "/var/lib/yoke.db");
  EXPECT_EQ(cfg->heartbeat_deadline_ms(), 3000);
  EXPECT_THAT(cfg->data_roots(), ElementsAre("/data"));
  EXPECT_THAT(cfg->checkpoint_roots(), ElementsAre("/ckpt"));
  EXPECT_EQ(cfg->log_level(), "debug");
  EXPECT_EQ(cfg->tls_dir(), "/tls");
  EXPECT_EQ(cfg->http_listen(), "off");
}

TEST(CoordinatorOptionsTest, FlagsOverrideTheFile) {
  ConfigFile file(
      "listen: 0.0.0.0:7000\nstore_path: /var/lib/yoke.db\nheartbeat_deadline_ms: 3000\n"
      "data_roots: [/data, /more]\ncheckpoint_roots: [/ckpt]\nlog_level: debug\n"
      "tls_dir: /tls\nhttp_listen: 'off'\n");
  auto cfg = Build({"--config", file.path(), "--listen", "127.0.0.1:0", "--store", "x.db",
                    "--heartbeat-deadline", "500ms", "--data-root", "/d2", "--log-level", "warn",
                    "--tls-dir", "/tls2", "--http-listen", "127.0.0.1:9"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->listen(), "127.0.0.1:0");
  EXPECT_EQ(cfg->store_path(), "x.db");
  EXPECT_EQ(cfg->heartbeat_deadline_ms(), 500);
  EXPECT_THAT(cfg->data_roots(), ElementsAre("/d2"));          // replaced, not appended
  EXPECT_THAT(cfg->checkpoint_roots(), ElementsAre("/ckpt"));  // no flag: the file's
  EXPECT_EQ(cfg->log_level(), "warn");
  EXPECT_EQ(cfg->tls_dir(), "/tls2");
  EXPECT_EQ(cfg->http_listen(), "127.0.0.1:9");
}

TEST(CoordinatorOptionsTest, TlsDirFromTheEnvironmentOnlyWhenNothingElseChose) {
  auto cfg = Build({}, Env({{"YOKE_TLS_DIR", "/env-tls"}}));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->tls_dir(), "/env-tls");
  cfg = Build({"--tls-dir", "/flag-tls"}, Env({{"YOKE_TLS_DIR", "/env-tls"}}));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->tls_dir(), "/flag-tls");
  cfg = Build({"--insecure"}, Env({{"YOKE_TLS_DIR", "/env-tls"}}));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->tls_dir(), "");
  EXPECT_TRUE(cfg->insecure());
}

TEST(CoordinatorOptionsTest, ConfigFileErrorsKeepTheirCodeAndSpelling) {
  auto cfg = Build({"--config", "/nonexistent/coordinator.yaml", "--insecure"});
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cfg.status().message(),
            "NOT_FOUND: /nonexistent/coordinator.yaml: cannot open config file: No such file or "
            "directory");
  ConfigFile file("listen: a:1\nbogus: 2\n");
  cfg = Build({"--config", file.path(), "--insecure"});
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cfg.status().message()),
              ::testing::StartsWith("INVALID_ARGUMENT: " + file.path() + ": "));
  EXPECT_THAT(std::string(cfg.status().message()), ::testing::HasSubstr("bogus"));
}

TEST(CoordinatorOptionsTest, TlsMustBeChosenOnce) {
  auto cfg = Build({});
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cfg.status().message(),
            "no TLS credentials: pass --tls-dir DIR (ca.crt, tls.crt, tls.key from `yoke certs "
            "issue --role coordinator`), or --insecure for development");
  cfg = Build({"--tls-dir", "/tls", "--insecure"});
  EXPECT_EQ(cfg.status().message(), "--tls-dir and --insecure: choose one");
  ConfigFile file("insecure: true\n");
  cfg = Build({"--config", file.path(), "--tls-dir", "/tls"});
  EXPECT_EQ(cfg.status().message(), "--tls-dir and --insecure: choose one");
}

TEST(CoordinatorOptionsTest, ANegativeHeartbeatDeadlineInTheFile) {
  ConfigFile file("heartbeat_deadline_ms: -5\n");
  auto cfg = Build({"--config", file.path(), "--insecure"});
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cfg.status().message(), "heartbeat_deadline_ms: must be > 0, got -5");
  // A flag over it wins.
  cfg = Build({"--config", file.path(), "--insecure", "--heartbeat-deadline", "1s"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->heartbeat_deadline_ms(), 1000);
}

TEST(CoordinatorOptionsTest, AListenAddressWithoutAPort) {
  auto cfg = Build({"--listen", "localhost", "--insecure"});
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cfg.status().message(), "listen: expected HOST:PORT, got 'localhost'");
}

TEST(CoordinatorOptionsTest, RootsMustBeAbsolute) {
  auto cfg = Build({"--insecure", "--data-root", "/ok", "--data-root", "rel"});
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cfg.status().message(),
            "INVALID_ARGUMENT: data_roots[1]: must be an absolute directory, got 'rel'");
  cfg = Build({"--insecure", "--checkpoint-root", ""});
  EXPECT_EQ(cfg.status().message(),
            "INVALID_ARGUMENT: checkpoint_roots[0]: must be an absolute directory, got ''");
  ConfigFile file("data_roots: [rel]\n");
  cfg = Build({"--config", file.path(), "--insecure", "--data-root", "/abs"});
  EXPECT_TRUE(cfg.ok()) << cfg.status();  // the flag replaced the file's list
}

TEST(CoordinatorOptionsTest, FlagValueErrorsComeFromTheParser) {
  auto cfg = Build({"--heartbeat-deadline", "0"});
  EXPECT_EQ(cfg.status().message(),
            "--heartbeat-deadline: expected a duration > 0 such as 10s, got '0'");
}

}  // namespace
}  // namespace yoke::server
