#include "coordinator/recorded_port.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace yoke::server {
namespace {

// A store path in a fresh directory, removed at the end of the test.
class StoreDir {
 public:
  StoreDir() {
    char tmpl[] = "/tmp/yoke_recorded_port_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~StoreDir() { std::filesystem::remove_all(dir_); }
  std::string store() const { return dir_ + "/coordinator.db"; }
  std::string dir() const { return dir_; }

 private:
  std::string dir_;
};

TEST(RecordedPortTest, OnlyPortZeroWithAStoreFileKeepsItsPort) {
  EXPECT_TRUE(KeepsItsPort("127.0.0.1:0", "/x/c.db"));
  EXPECT_TRUE(KeepsItsPort("[::]:0", "c.db"));
  EXPECT_FALSE(KeepsItsPort("127.0.0.1:7070", "/x/c.db"));
  EXPECT_FALSE(KeepsItsPort("127.0.0.1:00", "/x/c.db"));
  EXPECT_FALSE(KeepsItsPort("127.0.0.1:0", ":memory:"));
  EXPECT_FALSE(KeepsItsPort("127.0.0.1:0", ""));
  EXPECT_FALSE(KeepsItsPort("0", "/x/c.db"));
  EXPECT_EQ(RecordedPortPath("/x/c.db"), "/x/c.db.port");
}

TEST(RecordedPortTest, ARecordedPortIsTriedFirstOnPortZero) {
  StoreDir d;
  EXPECT_EQ(RecordedListen("127.0.0.1:0", d.store()), std::nullopt);  // no file yet
  ASSERT_TRUE(RecordPort(d.store(), 41234).ok());
  std::ifstream in(d.store() + ".port");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "41234\n");
  EXPECT_EQ(RecordedListen("127.0.0.1:0", d.store()), "127.0.0.1:41234");
  EXPECT_EQ(RecordedListen("[::]:0", d.store()), "[::]:41234");
  // An explicit port is never overridden; an in-memory store has no file.
  EXPECT_EQ(RecordedListen("127.0.0.1:7070", d.store()), std::nullopt);
  EXPECT_EQ(RecordedListen("127.0.0.1:0", ":memory:"), std::nullopt);
  // Recording again replaces the port, and leaves no temporary file.
  ASSERT_TRUE(RecordPort(d.store(), 41235).ok());
  EXPECT_EQ(RecordedListen("127.0.0.1:0", d.store()), "127.0.0.1:41235");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.dir())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(RecordedPortTest, AFileWithoutAPortIsIgnored) {
  StoreDir d;
  for (const char* text : {"", "abc\n", "0\n", "65536\n", "-1\n", "80x\n"}) {
    std::ofstream(d.store() + ".port") << text;
    EXPECT_EQ(RecordedListen("127.0.0.1:0", d.store()), std::nullopt) << text;
  }
  std::ofstream(d.store() + ".port") << " 8080 \n";
  EXPECT_EQ(RecordedListen("127.0.0.1:0", d.store()), "127.0.0.1:8080");
}

TEST(RecordedPortTest, AnUnwritableDirectoryIsAnErrorNamingTheFile) {
  absl::Status s = RecordPort("/nonexistent-dir/c.db", 7070);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("/nonexistent-dir/c.db.port"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace yoke::server
