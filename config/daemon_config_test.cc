#include "config/daemon_config.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/config.pb.h"

namespace yoke::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string WriteTemp(const std::string& text) {
  char tmpl[] = "/tmp/yoke_daemon_config_test_XXXXXX";
  int fd = ::mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  return tmpl;
}

TEST(LoadDaemonConfigTest, ReadsTheFieldsAndKeepsTheOthers) {
  std::string path = WriteTemp("listen: 0.0.0.0:7000\ndata_roots: [/data, /more]\n");
  v1::CoordinatorConfig cfg;
  cfg.set_store_path("kept.db");
  ASSERT_TRUE(LoadDaemonConfig(path, &cfg).ok());
  EXPECT_EQ(cfg.listen(), "0.0.0.0:7000");
  ASSERT_EQ(cfg.data_roots_size(), 2);
  EXPECT_EQ(cfg.data_roots(1), "/more");
  EXPECT_EQ(cfg.store_path(), "kept.db");
  ::unlink(path.c_str());
}

TEST(LoadDaemonConfigTest, ErrorsNameTheFile) {
  v1::WorkerConfig cfg;
  absl::Status s = LoadDaemonConfig("/nonexistent/worker.yaml", &cfg);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "/nonexistent/worker.yaml: cannot open config file: No such file or directory");

  std::string path = WriteTemp("coordinator: a:1\ncpu_replica: 2\n");
  s = LoadDaemonConfig(path, &cfg);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith(path + ": "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("cpu_replica: unknown field"));
  ::unlink(path.c_str());

  path = WriteTemp("coordinator: [a\n");
  s = LoadDaemonConfig(path, &cfg);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith(path + ":"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("YAML syntax error"));
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace yoke::common
