#include "telemetry/tensorboard.h"

#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/read_file.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/tensorboard.pb.h"

namespace yoke::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace tb = ::yoke::tensorboard;

double Seconds(absl::Time t) { return absl::FDivDuration(t - absl::UnixEpoch(), absl::Seconds(1)); }

std::string TempDir(const std::string& name) {
  const auto p = std::filesystem::path(testing::TempDir()) / name;
  std::filesystem::remove_all(p);
  return p.string();
}

std::string Slurp(const std::string& path) {
  auto bytes = ReadRegularFile(path, 1ull << 30, "event file");
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

// Reads an event file back: framing, both CRCs, then each Event.
std::vector<tb::Event> ReadEvents(const std::string& path) {
  auto records = ParseTfRecords(Slurp(path), path);
  EXPECT_TRUE(records.ok()) << records.status();
  std::vector<tb::Event> events;
  if (!records.ok()) return events;
  for (const std::string& r : *records) {
    tb::Event e;
    EXPECT_TRUE(e.ParseFromString(r));
    events.push_back(e);
  }
  return events;
}

// --- CRC-32C ---

TEST(Crc32cTest, KnownVectorsOnBothPaths) {
  const std::string digits = "123456789";
  const std::string zeros(32, '\0');
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32cPortable(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32cPortable(ones.data(), ones.size()), 0x62A8AB43u);  // RFC 3720 B.4
  EXPECT_EQ(Crc32cPortable("", 0), 0u);
  EXPECT_EQ(Crc32c(digits.data(), digits.size()), 0xE3069283u);
  if (!Crc32cHardwareAvailable()) GTEST_SKIP() << "no SSE4.2 on this CPU: portable path only";
  EXPECT_EQ(Crc32cHardware(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(Crc32cHardware(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32cHardware(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32cHardware("", 0), 0u);
}

TEST(Crc32cTest, PathsAgreeOnARandomBufferAtEveryAlignmentAndSplit) {
  std::mt19937_64 rng(11);
  std::string buf(1 << 20, '\0');
  for (char& c : buf) c = static_cast<char>(rng());
  const uint32_t whole = Crc32cPortable(buf.data(), buf.size());
  // Extending: the CRC of a prefix continued over the rest is the whole's.
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{4097}, buf.size()}) {
    EXPECT_EQ(
        Crc32cPortable(buf.data() + split, buf.size() - split, Crc32cPortable(buf.data(), split)),
        whole)
        << "split " << split;
  }
  if (!Crc32cHardwareAvailable()) GTEST_SKIP() << "no SSE4.2 on this CPU: portable path only";
  EXPECT_EQ(Crc32cHardware(buf.data(), buf.size()), whole);
  for (size_t off = 0; off < 16; ++off) {
    for (size_t len :
         {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{1000}}) {
      EXPECT_EQ(Crc32cHardware(buf.data() + off, len), Crc32cPortable(buf.data() + off, len))
          << "offset " << off << " length " << len;
    }
  }
  EXPECT_EQ(Crc32cHardware(buf.data() + 3, 5000, 0x12345678u),
            Crc32cPortable(buf.data() + 3, 5000, 0x12345678u));
}

TEST(Crc32cTest, MaskRoundTrips) {
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xffffffffu}) EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(c)), c);
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
}

// --- TFRecord framing ---

TEST(TfRecordTest, FramingIsLengthCrcDataCrc) {
  const std::string rec = FrameTfRecord("abc");
  ASSERT_EQ(rec.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(rec.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  const uint32_t len_crc = MaskCrc32c(Crc32c(rec.data(), 8));
  const uint32_t data_crc = MaskCrc32c(Crc32c("abc", 3));
  std::string want_len_crc, want_data_crc;
  for (int i = 0; i < 4; ++i) {
    want_len_crc.push_back(static_cast<char>(len_crc >> (8 * i)));
    want_data_crc.push_back(static_cast<char>(data_crc >> (8 * i)));
  }
  EXPECT_EQ(rec.substr(8, 4), want_len_crc);
  EXPECT_EQ(rec.substr(12, 3), "abc");
  EXPECT_EQ(rec.substr(15, 4), want_data_crc);
  auto parsed = ParseTfRecords(rec + FrameTfRecord("") + FrameTfRecord("xyz"), "f");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(*parsed, ::testing::ElementsAre("abc", "", "xyz"));
}

TEST(TfRecordTest, EveryCorruptedByteIsDetected) {
  const std::string good = FrameTfRecord("hello") + FrameTfRecord("world!");
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x20;
    auto parsed = ParseTfRecords(bad, "/x/events");
    ASSERT_FALSE(parsed.ok()) << "byte " << i;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(parsed.status().message()), StartsWith("/x/events: record at byte"));
  }
  auto cut = ParseTfRecords(good.substr(0, good.size() - 1), "f");
  EXPECT_THAT(std::string(cut.status().message()), HasSubstr("cut short"));
}

// --- EventFileWriter ---

TEST(EventFileWriterTest, WritesEveryScalarAndTextBack) {
  FakeClock clock;
  const std::string dir = TempDir("tb_scalars") + "/run/a";  // parents created
  auto w = EventFileWriter::Create(dir, &clock);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string path = (*w)->path();
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_THAT(name, StartsWith(absl::StrCat("events.out.tfevents.",
                                            absl::ToUnixSeconds(clock.Now()), ".")));
  EXPECT_THAT(name, ::testing::EndsWith(absl::StrCat(".", ::getpid())));
  EXPECT_EQ(std::filesystem::path(path).parent_path().string(), dir);

  constexpr int kSteps = 20000;  // several buffers' worth
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE((*w)->WriteScalar("loss", step, step * 0.25f).ok());
    ASSERT_TRUE((*w)->WriteScalar("accuracy", step, 1.0f / (step + 1)).ok());
  }
  clock.Advance(absl::Seconds(1.5));
  ASSERT_TRUE((*w)->WriteText("config", 7, "# Job\n`lr: 0.1`").ok());
  ASSERT_TRUE((*w)->Flush().ok());

  const std::vector<tb::Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 1u + 2 * kSteps + 1);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), Seconds(clock.Now()) - 1.5);
  for (int step = 0; step < kSteps; ++step) {
    const tb::Event& loss = events[1 + 2 * step];
    const tb::Event& acc = events[2 + 2 * step];
    ASSERT_EQ(loss.step(), step);
    ASSERT_EQ(loss.summary().value_size(), 1);
    ASSERT_EQ(loss.summary().value(0).tag(), "loss");
    ASSERT_EQ(loss.summary().value(0).simple_value(), step * 0.25f);
    ASSERT_EQ(acc.step(), step);
    ASSERT_EQ(acc.summary().value(0).tag(), "accuracy");
    ASSERT_EQ(acc.summary().value(0).simple_value(), 1.0f / (step + 1));
  }
  const tb::Event& text = events.back();
  EXPECT_EQ(text.step(), 7);
  EXPECT_DOUBLE_EQ(text.wall_time(), Seconds(clock.Now()));
  const tb::Summary::Value& v = text.summary().value(0);
  EXPECT_EQ(v.tag(), "config");
  EXPECT_EQ(v.metadata().plugin_data().plugin_name(), "text");
  EXPECT_EQ(v.tensor().dtype(), tb::DT_STRING);
  EXPECT_TRUE(v.has_tensor());
  EXPECT_EQ(v.tensor().tensor_shape().dim_size(), 0);
  EXPECT_THAT(v.tensor().string_val(), ::testing::ElementsAre("# Job\n`lr: 0.1`"));
}

TEST(EventFileWriterTest, BuffersUntilFlushAndTheDestructorFlushes) {
  const std::string dir = TempDir("tb_buffer");
  std::string path;
  {
    auto w = EventFileWriter::Create(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    path = (*w)->path();
    ASSERT_TRUE((*w)->WriteScalar("x", 1, 2.0f).ok());
    EXPECT_EQ(std::filesystem::file_size(path), 0u);  // still buffered
    ASSERT_TRUE((*w)->Flush().ok());
    const auto flushed = std::filesystem::file_size(path);
    EXPECT_GT(flushed, 0u);
    ASSERT_TRUE((*w)->WriteScalar("x", 2, 3.0f).ok());
    EXPECT_EQ(std::filesystem::file_size(path), flushed);
  }
  const std::vector<tb::Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 3.0f);
}

TEST(EventFileWriterTest, TwoWritersInOneSecondGetTwoFiles) {
  FakeClock clock;
  const std::string dir = TempDir("tb_two");
  auto a = EventFileWriter::Create(dir, &clock);
  auto b = EventFileWriter::Create(dir, &clock);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*b)->path(), (*a)->path() + ".1");
}

TEST(EventFileWriterTest, CloseIsIdempotentAndLaterWritesFail) {
  auto w = EventFileWriter::Create(TempDir("tb_close"));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Close().ok());
  ASSERT_TRUE((*w)->Close().ok());
  const absl::Status s = (*w)->WriteScalar("x", 1, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr((*w)->path()));
}

TEST(EventFileWriterTest, AnUncreatableDirectoryIsAnErrorNamingIt) {
  const std::string file = TempDir("tb_not_a_dir");
  std::ofstream(file) << "x";
  auto w = EventFileWriter::Create(file + "/logs");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr(file + "/logs: cannot create"));
}

// A full disk, as RLIMIT_FSIZE makes it: write(2) fails with EFBIG (SIGXFSZ
// ignored), the error names the file, stays, and the file holds only whole
// records.
TEST(EventFileWriterTest, AFailedWriteIsAStickyErrorNamingTheFile) {
  auto w = EventFileWriter::Create(TempDir("tb_full"));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->WriteScalar("x", 0, 0.0f).ok());
  ASSERT_TRUE((*w)->Flush().ok());
  const auto before = std::filesystem::file_size((*w)->path());

  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = before + 1000;
  void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status s;
  for (int step = 1; step < 100000 && s.ok(); ++step) s = (*w)->WriteScalar("x", step, 1.0f);
  if (s.ok()) s = (*w)->Flush();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr((*w)->path() + ": cannot write"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("too large"));
  EXPECT_EQ((*w)->Flush(), s);
  EXPECT_EQ((*w)->WriteScalar("x", 1, 1.0f), s);
  EXPECT_EQ((*w)->Close(), s);
  // The limit cut a record: the reader says so at its offset, and every
  // record before it is whole.
  const std::string bytes = Slurp((*w)->path());
  EXPECT_EQ(bytes.size(), before + 1000);
  auto records = ParseTfRecords(bytes, "f");
  EXPECT_THAT(std::string(records.status().message()), HasSubstr("cut short"));
}

}  // namespace
}  // namespace yoke::common
