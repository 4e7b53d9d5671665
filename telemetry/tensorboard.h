// EventFileWriter: writes TensorBoard event files (scalars and text) without
// TensorFlow or TensorBoard's own code.
//
// An event file is a sequence of TFRecord records, each framed as
//   uint64 length (little-endian)
//   uint32 masked CRC-32C of those 8 length bytes
//   `length` bytes of data: one serialized Event
//     (yoke.tensorboard.Event, proto/yoke/v1/tensorboard.proto)
//   uint32 masked CRC-32C of the data
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, all little-
// endian. The first record is an Event with file_version "brain.Event:2";
// every later one carries one summary value at a step. docs/tensorboard.md
// describes the format and how TensorBoard reads it.
//
// The file is named events.out.tfevents.<unix seconds>.<hostname>.<pid>
// (TensorBoard only reads files whose names contain "tfevents"), with ".1",
// ".2", ... appended if that name already exists, in the directory given to
// Create(), which is created if missing.
//
// Writes are buffered in memory and reach the OS when the buffer passes
// kBufferBytes, on Flush(), on Close() and in the destructor. No call aborts:
// every error is an absl::Status that names the file. After the first failed
// write (disk full, file too large, I/O error) the writer is broken: it
// writes nothing more and every later call returns that first error, so the
// file never holds a record after a torn one.
//
// Thread-safety: none; one thread (or external locking) per writer.
#ifndef YOKE_TELEMETRY_TENSORBOARD_H_
#define YOKE_TELEMETRY_TENSORBOARD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"

namespace yoke::common {

class EventFileWriter {
 public:
  // Data buffered before it is written to the OS without a Flush().
  static constexpr size_t kBufferBytes = 64 << 10;

  // Creates `dir` (and its parents) if needed and a new event file in it,
  // holding the file_version record (buffered until the first flush).
  // `clock` gives each event's wall_time and the file name's seconds; it must
  // outlive the writer.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir, const Clock* clock = RealClock::Get());

  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;
  // Flushes and closes; an error here is logged, not raised (call Close()
  // first to see it).
  ~EventFileWriter();

  // A scalar for TensorBoard's scalars dashboard: Summary.Value.simple_value.
  absl::Status WriteScalar(const std::string& tag, int64_t step, float value);

  // Markdown for TensorBoard's text dashboard: a DT_STRING scalar tensor with
  // plugin_name "text", as tensorboard.summary.text writes it.
  absl::Status WriteText(const std::string& tag, int64_t step, const std::string& markdown);

  // Hands everything buffered to the OS (write(2); no fsync).
  absl::Status Flush();

  // Flushes and closes the file; later writes fail. Idempotent.
  absl::Status Close();

  // The event file's full path.
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, int fd, const Clock* clock);
  // Frames one serialized Event as a record and appends it to the buffer.
  absl::Status Append(const std::string& event);

  const std::string path_;
  int fd_;
  const Clock* const clock_;
  std::string buffer_;
  absl::Status error_;  // the first failure; sticky
};

// --- The pieces, exposed for tests and readers. ---

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes, extending
// `crc` (the CRC of the bytes before; 0 for none). Crc32c() uses the SSE4.2
// crc32 instruction when the CPU has it (cpuid), else Crc32cPortable().
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// Table-driven, slicing-by-8; any CPU.
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);
// The SSE4.2 path; only call it when Crc32cHardwareAvailable().
uint32_t Crc32cHardware(const void* data, size_t n, uint32_t crc = 0);
// Whether this is x86-64 and cpuid reports SSE4.2.
bool Crc32cHardwareAvailable();

// The TFRecord mask, and its inverse.
uint32_t MaskCrc32c(uint32_t crc);
uint32_t UnmaskCrc32c(uint32_t masked);

// `data` framed as one TFRecord record.
std::string FrameTfRecord(std::string_view data);

// Splits a whole TFRecord file into its records' data, checking both CRCs of
// every record. Errors (DATA_LOSS) name `path` and the byte offset of the
// bad record: a length or data CRC mismatch, or a record cut short.
absl::StatusOr<std::vector<std::string>> ParseTfRecords(std::string_view bytes,
                                                        const std::string& path);

}  // namespace yoke::common

#endif  // YOKE_TELEMETRY_TENSORBOARD_H_
