#include "config/daemon_config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/config.pb.h"

namespace yoke::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Writes `text` to `name` in `dir` and returns its path.
std::string WriteTemp(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.File(name);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  return path;
}

TEST(LoadDaemonConfigTest, ReadsTheFieldsAndKeepsTheOthers) {
  const TempDir tmp("yoke_daemon_config_test");  // removed with its files at the end
  std::string path =
      WriteTemp(tmp, "coordinator.yaml", "listen: 0.0.0.0:7000\ndata_roots: [/data, /more]\n");
  v1::CoordinatorConfig cfg;
  cfg.set_store_path("kept.db");
  ASSERT_TRUE(LoadDaemonConfig(path, &cfg).ok());
  EXPECT_EQ(cfg.listen(), "0.0.0.0:7000");
  ASSERT_EQ(cfg.data_roots_size(), 2);
  EXPECT_EQ(cfg.data_roots(1), "/more");
  EXPECT_EQ(cfg.store_path(), "kept.db");
}

TEST(LoadDaemonConfigTest, ErrorsNameTheFile) {
  v1::WorkerConfig cfg;
  absl::Status s = LoadDaemonConfig("/nonexistent/worker.yaml", &cfg);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "/nonexistent/worker.yaml: cannot open config file: No such file or directory");

  const TempDir tmp("yoke_daemon_config_test");  // removed with its files at the end
  std::string path = WriteTemp(tmp, "unknown_field.yaml", "coordinator: a:1\ncpu_replica: 2\n");
  s = LoadDaemonConfig(path, &cfg);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith(path + ": "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("cpu_replica: unknown field"));

  path = WriteTemp(tmp, "bad_syntax.yaml", "coordinator: [a\n");
  s = LoadDaemonConfig(path, &cfg);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith(path + ":"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("YAML syntax error"));
}

// A coordinator-like command line: the flags ConfigFlags binds.
struct CoordinatorLike {
  FlagParser parser{"prog", "usage: prog\n"};
  ConfigFlags flags{&parser, v1::CoordinatorConfig::descriptor()};
  CoordinatorLike() {
    flags.String("--listen", "listen")
        .Strings("--data-root", "data_roots")
        .Switch("--insecure", "insecure")
        .Milliseconds("--heartbeat-deadline", "heartbeat_deadline_ms", absl::Nanoseconds(1),
                      "a duration > 0");
  }
};

v1::CoordinatorConfig FileConfig() {
  v1::CoordinatorConfig cfg;
  cfg.set_listen("file:1");
  cfg.add_data_roots("/file-a");
  cfg.add_data_roots("/file-b");
  cfg.set_insecure(true);
  cfg.set_heartbeat_deadline_ms(4000);
  cfg.set_store_path("file.db");
  return cfg;
}

TEST(ConfigFlagsTest, FlagsGivenOverrideTheFileAndTheOthersLeaveIt) {
  CoordinatorLike c;
  ASSERT_TRUE(c.parser
                  .Parse({"--listen", "flag:2", "--data-root=/f1", "--data-root", "/f2",
                          "--heartbeat-deadline", "2s"})
                  .ok());
  v1::CoordinatorConfig cfg = FileConfig();
  c.flags.Overlay(&cfg);
  EXPECT_EQ(cfg.listen(), "flag:2");
  // A repeated flag replaces the file's whole list.
  EXPECT_THAT(cfg.data_roots(), ElementsAre("/f1", "/f2"));
  EXPECT_EQ(cfg.heartbeat_deadline_ms(), 2000);
  EXPECT_TRUE(cfg.insecure());             // no flag: the file's
  EXPECT_EQ(cfg.store_path(), "file.db");  // no flag bound at all
  EXPECT_TRUE(c.flags.Given("listen"));
  EXPECT_TRUE(c.flags.Given("data_roots"));
  EXPECT_FALSE(c.flags.Given("insecure"));
  EXPECT_FALSE(c.flags.Given("store_path"));
}

TEST(ConfigFlagsTest, NothingGivenLeavesTheFileAsItIs) {
  CoordinatorLike c;
  ASSERT_TRUE(c.parser.Parse({}).ok());
  v1::CoordinatorConfig cfg = FileConfig();
  c.flags.Overlay(&cfg);
  EXPECT_EQ(cfg.DebugString(), FileConfig().DebugString());
}

TEST(ConfigFlagsTest, AnEmptyStringOrAFalseSwitchIsNotGiven) {
  CoordinatorLike c;
  ASSERT_TRUE(c.parser.Parse({"--listen", "x:1", "--listen", "", "--insecure=false"}).ok());
  v1::CoordinatorConfig cfg = FileConfig();
  c.flags.Overlay(&cfg);
  EXPECT_EQ(cfg.listen(), "file:1");
  EXPECT_TRUE(cfg.insecure());
  EXPECT_FALSE(c.flags.Given("listen"));

  CoordinatorLike d;
  ASSERT_TRUE(d.parser.Parse({"--insecure"}).ok());
  cfg.set_insecure(false);
  d.flags.Overlay(&cfg);
  EXPECT_TRUE(cfg.insecure());
}

TEST(ConfigFlagsTest, AnIntOrDurationGivenAsZeroIsGiven) {
  FlagParser parser("prog", "");
  ConfigFlags flags(&parser, v1::WorkerConfig::descriptor());
  flags.Int("--cpu-replicas", "cpu_replicas", 0, 1024)
      .Milliseconds("--stop-grace", "stop_grace_ms", absl::ZeroDuration(), "a duration");
  ASSERT_TRUE(parser.Parse({}).ok());
  EXPECT_FALSE(flags.Given("cpu_replicas"));
  EXPECT_FALSE(flags.Given("stop_grace_ms"));
  ASSERT_TRUE(parser.Parse({"--cpu-replicas=0", "--stop-grace", "0"}).ok());
  EXPECT_TRUE(flags.Given("cpu_replicas"));
  EXPECT_TRUE(flags.Given("stop_grace_ms"));
  v1::WorkerConfig cfg;
  cfg.set_cpu_replicas(3);
  cfg.set_stop_grace_ms(5000);
  flags.Overlay(&cfg);
  EXPECT_EQ(cfg.cpu_replicas(), 0);
  EXPECT_EQ(cfg.stop_grace_ms(), 0);
}

TEST(ConfigFlagsTest, ABytesFlagSetsItsInt64FieldOnlyWhenGiven) {
  FlagParser parser("prog", "");
  ConfigFlags flags(&parser, v1::WorkerConfig::descriptor());
  flags.Bytes("--memory-limit", "memory_limit_bytes", int64_t{1} << 20, "a size such as 8GiB");
  ASSERT_TRUE(parser.Parse({}).ok());
  v1::WorkerConfig cfg;
  cfg.set_memory_limit_bytes(12345678);
  flags.Overlay(&cfg);
  EXPECT_EQ(cfg.memory_limit_bytes(), 12345678);  // the file's
  auto r = parser.Parse({"--memory-limit", "1k"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--memory-limit: expected a size such as 8GiB, got '1k'");
  EXPECT_FALSE(flags.Given("memory_limit_bytes"));
  ASSERT_TRUE(parser.Parse({"--memory-limit=6GiB"}).ok());
  EXPECT_TRUE(flags.Given("memory_limit_bytes"));
  flags.Overlay(&cfg);
  EXPECT_EQ(cfg.memory_limit_bytes(), int64_t{6} << 30);
}

TEST(ConfigFlagsTest, ValuesAreCheckedByTheParserWithItsMessages) {
  FlagParser parser("prog", "");
  ConfigFlags flags(&parser, v1::WorkerConfig::descriptor());
  flags.Int("--cpu-replicas", "cpu_replicas", 0, 1024);
  auto r = parser.Parse({"--cpu-replicas", "many"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--cpu-replicas: expected an integer in [0, 1024], got 'many'");
  EXPECT_FALSE(flags.Given("cpu_replicas"));
}

TEST(ConfigFlagsDeathTest, AFieldOfAnotherTypeOrNoneIsAProgrammingError) {
  FlagParser parser("prog", "");
  ConfigFlags flags(&parser, v1::WorkerConfig::descriptor());
  EXPECT_DEATH(flags.String("--replicas", "cpu_replicas"), "no field 'cpu_replicas'");
  EXPECT_DEATH(flags.String("--bogus", "bogus"), "no field 'bogus'");
  EXPECT_DEATH(flags.Strings("--coordinator", "coordinator"), "no field 'coordinator'");
}

TEST(GetEnvTest, UnsetIsEmpty) {
  ::setenv("YOKE_DAEMON_CONFIG_TEST_VAR", "value", 1);
  EXPECT_EQ(GetEnv("YOKE_DAEMON_CONFIG_TEST_VAR"), "value");
  ::unsetenv("YOKE_DAEMON_CONFIG_TEST_VAR");
  EXPECT_EQ(GetEnv("YOKE_DAEMON_CONFIG_TEST_VAR"), "");
}

}  // namespace
}  // namespace yoke::common
