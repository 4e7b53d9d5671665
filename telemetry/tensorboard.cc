#include "telemetry/tensorboard.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/yoke/v1/tensorboard.pb.h"
#include "spdlog/spdlog.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace yoke::common {
namespace {

namespace tb = ::yoke::tensorboard;

constexpr uint32_t kCastagnoli = 0x82F63B78u;  // reflected
constexpr uint32_t kMaskDelta = 0xa282ead8u;
constexpr size_t kHeaderBytes = 8 + 4;  // length, masked CRC of the length
constexpr size_t kFooterBytes = 4;      // masked CRC of the data

// kTables[0] is the byte-at-a-time table; kTables[k][b] is the CRC of byte b
// followed by k zero bytes, so eight bytes fold in with eight lookups.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kCastagnoli : 0);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    }
  }
  return t;
}
constexpr Tables kTables = MakeTables();
static_assert(kTables[0][1] == 0xF26B8303u, "CRC-32C table");

// Little-endian loads and stores, whatever the host's byte order (compilers
// turn these loops into single moves on little-endian hosts).
uint64_t LoadLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void StoreLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

#if defined(__x86_64__)
bool CpuHasSse42() {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_SSE4_2) != 0;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const unsigned char* p, size_t n,
                                                       uint32_t crc) {
  uint64_t c = ~crc;
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n, ++p) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // x86 is little-endian
    c = _mm_crc32_u64(c, word);
  }
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
  return ~static_cast<uint32_t>(c);
}
#endif

// Event.wall_time: seconds since the Unix epoch, with the fraction.
double WallTime(const Clock& clock) {
  return absl::FDivDuration(clock.Now() - absl::UnixEpoch(), absl::Seconds(1));
}

std::string Errno(int err) { return std::strerror(err); }

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t w = LoadLe(p, 8) ^ c;
    c = kTables[7][w & 0xff] ^ kTables[6][(w >> 8) & 0xff] ^ kTables[5][(w >> 16) & 0xff] ^
        kTables[4][(w >> 24) & 0xff] ^ kTables[3][(w >> 32) & 0xff] ^ kTables[2][(w >> 40) & 0xff] ^
        kTables[1][(w >> 48) & 0xff] ^ kTables[0][w >> 56];
  }
  for (; n > 0; --n, ++p) c = kTables[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return ~c;
}

bool Crc32cHardwareAvailable() {
#if defined(__x86_64__)
  static const bool has = CpuHasSse42();
  return has;
#else
  return false;
#endif
}

uint32_t Crc32cHardware(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  return Crc32cSse42(static_cast<const unsigned char*>(data), n, crc);
#else
  return Crc32cPortable(data, n, crc);  // not reached: never available here
#endif
}

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  return Crc32cHardwareAvailable() ? Crc32cHardware(data, n, crc) : Crc32cPortable(data, n, crc);
}

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

std::string FrameTfRecord(std::string_view data) {
  std::string out;
  out.reserve(kHeaderBytes + data.size() + kFooterBytes);
  StoreLe(data.size(), 8, &out);
  StoreLe(MaskCrc32c(Crc32c(out.data(), 8)), 4, &out);
  out.append(data);
  StoreLe(MaskCrc32c(Crc32c(data.data(), data.size())), 4, &out);
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseTfRecords(std::string_view bytes,
                                                        const std::string& path) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + pos;
    const size_t left = bytes.size() - pos;
    if (left < kHeaderBytes) {
      return absl::DataLossError(absl::StrCat(path, ": record at byte ", pos, " is cut short (",
                                              left, " bytes, the header needs 12)"));
    }
    if (UnmaskCrc32c(static_cast<uint32_t>(LoadLe(p + 8, 4))) != Crc32c(p, 8)) {
      return absl::DataLossError(
          absl::StrCat(path, ": record at byte ", pos, ": the length's CRC does not match"));
    }
    const uint64_t length = LoadLe(p, 8);
    if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {
      return absl::DataLossError(absl::StrCat(path, ": record at byte ", pos, " is cut short (",
                                              length, " bytes of data announced, ", left,
                                              " bytes left in the file)"));
    }
    const unsigned char* d = p + kHeaderBytes;
    if (UnmaskCrc32c(static_cast<uint32_t>(LoadLe(d + length, 4))) != Crc32c(d, length)) {
      return absl::DataLossError(
          absl::StrCat(path, ": record at byte ", pos, ": the data's CRC does not match"));
    }
    records.emplace_back(reinterpret_cast<const char*>(d), length);
    pos += kHeaderBytes + length + kFooterBytes;
  }
  return records;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir,
                                                                         const Clock* clock) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": cannot create the TensorBoard log directory: ", ec.message()));
  }
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::strcpy(host, "localhost");
  }
  for (char* h = host; *h != '\0'; ++h) {
    if (*h == '/') *h = '_';  // never a path separator in the file name
  }
  const std::string base = (std::filesystem::path(dir) /
                            absl::StrCat("events.out.tfevents.", absl::ToUnixSeconds(clock->Now()),
                                         ".", host, ".", ::getpid()))
                               .string();
  // O_EXCL: a second writer in the same second, host and process gets a
  // file of its own (".1", ".2", ...), never a share of the first's.
  for (int n = 0; n < 1000; ++n) {
    std::string path = n == 0 ? base : absl::StrCat(base, ".", n);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": cannot create the TensorBoard event file: ", Errno(errno)));
    }
    std::unique_ptr<EventFileWriter> w(new EventFileWriter(std::move(path), fd, clock));
    tb::Event event;
    event.set_wall_time(WallTime(*clock));
    event.set_file_version("brain.Event:2");
    const absl::Status s = w->Append(event.SerializeAsString());
    if (!s.ok()) return s;
    return w;
  }
  return absl::AlreadyExistsError(
      absl::StrCat(base, ": this event file and 999 numbered variants exist already"));
}

EventFileWriter::EventFileWriter(std::string path, int fd, const Clock* clock)
    : path_(std::move(path)), fd_(fd), clock_(clock) {}

EventFileWriter::~EventFileWriter() {
  if (fd_ < 0) return;  // closed: Close() reported any error
  const absl::Status s = Close();
  if (!s.ok()) spdlog::warn("TensorBoard event file not fully written: {}", s.ToString());
}

absl::Status EventFileWriter::WriteScalar(const std::string& tag, int64_t step, float value) {
  tb::Event event;
  event.set_wall_time(WallTime(*clock_));
  event.set_step(step);
  tb::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  return Append(event.SerializeAsString());
}

absl::Status EventFileWriter::WriteText(const std::string& tag, int64_t step,
                                        const std::string& markdown) {
  tb::Event event;
  event.set_wall_time(WallTime(*clock_));
  event.set_step(step);
  tb::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  // Empty content: the text plugin's TextPluginData at version 0.
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(tb::DT_STRING);
  t->mutable_tensor_shape();  // no dims: a scalar
  t->add_string_val(markdown);
  return Append(event.SerializeAsString());
}

absl::Status EventFileWriter::Append(const std::string& event) {
  if (!error_.ok()) return error_;
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": the TensorBoard event file is closed"));
  }
  buffer_ += FrameTfRecord(event);
  if (buffer_.size() >= kBufferBytes) return Flush();
  return absl::OkStatus();
}

absl::Status EventFileWriter::Flush() {
  if (!error_.ok()) return error_;
  size_t done = 0;
  while (done < buffer_.size() && fd_ >= 0) {
    const ssize_t r = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      error_ = absl::UnavailableError(
          absl::StrCat(path_, ": cannot write the TensorBoard event file: ", Errno(errno)));
      buffer_.clear();
      return error_;
    }
    done += static_cast<size_t>(r);
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status EventFileWriter::Close() {
  if (fd_ < 0) return error_;
  absl::Status s = Flush();
  if (::close(fd_) != 0 && s.ok()) {
    error_ = absl::UnavailableError(
        absl::StrCat(path_, ": cannot close the TensorBoard event file: ", Errno(errno)));
    s = error_;
  }
  fd_ = -1;
  return s;
}

}  // namespace yoke::common
