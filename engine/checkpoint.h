// Checkpoint files: parameters, optimizer state, data position, RNG seed, step.
//
// Layout (little-endian; see docs/checkpoint_format.md):
//   magic    8 bytes  "YOKECKPT"
//   version  u32      kCheckpointVersion
//   hdr_len  u32      length of the serialized CheckpointHeader
//   header   hdr_len  v1::CheckpointHeader (protobuf)
//   data     ...      tensor bytes, at the offsets the header records
//   crc32    u32      zlib crc32 of every byte before it
//
// Writes are atomic: the file is written to "<path>.tmp", fsynced, renamed
// over `path`, and the directory is fsynced, so a crash leaves either the old
// file or the new one, never a torn one. Readers reject a wrong magic, an
// unknown version, a truncated file or a checksum mismatch with
// DATA_LOSS / INVALID_ARGUMENT naming the file, and never crash.
//
// Thread-safety: free functions; callers serialise writes to one path.
#ifndef YOKE_ENGINE_CHECKPOINT_H_
#define YOKE_ENGINE_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tensor.h"
#include "proto/yoke/v1/checkpoint.pb.h"

namespace yoke::engine {

inline constexpr char kCheckpointMagic[8] = {'Y', 'O', 'K', 'E', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 1;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct Checkpoint {
  v1::CheckpointHeader header;  // tensors[] describes `tensors`
  NamedTensors tensors;         // CPU tensors, in file order

  // The tensor called `name`, or null.
  const Tensor* Find(const std::string& name) const;
};

// Writes `header` (its `tensors` field is filled here) and `tensors` (CPU)
// atomically to `path`. Errors: INTERNAL/UNAVAILABLE naming the path and errno.
absl::Status WriteCheckpoint(const std::string& path, v1::CheckpointHeader header,
                             const NamedTensors& tensors);

// A tensor of a checkpoint written piece by piece (CheckpointWriter).
struct TensorDecl {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

// Writes a checkpoint whose tensors arrive in pieces, as a pipeline's stages
// gather them chunk by chunk to the rank that writes: the header first (at
// Open), then the data section's bytes in file order (Append), then the
// checksum and the atomic rename (Finish). The file is the one
// WriteCheckpoint would write for the same tensors. A writer destroyed
// before Finish removes its temporary file and leaves `path` untouched.
class CheckpointWriter {
 public:
  // `tensors` declares every tensor, in file order.
  static absl::StatusOr<std::unique_ptr<CheckpointWriter>> Open(
      const std::string& path, v1::CheckpointHeader header, const std::vector<TensorDecl>& tensors);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The next `bytes` of the data section. INVALID_ARGUMENT past its end.
  absl::Status Append(const void* data, size_t bytes);
  // FAILED_PRECONDITION, naming the shortfall, unless every declared byte
  // was appended; then makes the file durable and renames it into place.
  absl::Status Finish();

 private:
  CheckpointWriter() = default;
  absl::Status Put(const void* data, size_t n);
  std::string path_, tmp_;
  int fd_ = -1;
  uint32_t crc_ = 0;
  uint64_t data_bytes_ = 0, appended_ = 0;
};

// Part of a tensor to read: `dst` (a CPU tensor of the file's dtype)
// receives dst.numel() elements of tensor `name`, from element `first` on.
struct TensorSlice {
  std::string name;
  int64_t first = 0;
  Tensor dst;
};

// Reads `path` front to back, verifying it as ReadCheckpoint does, and
// copies each slice into its `dst`; holds a few MiB of the file at a time,
// not the whole, so a pipeline stage resumes its share of a model larger
// than its memory. Returns the header. A slice that names no tensor of the
// file, has another dtype or runs past its tensor's end is
// INVALID_ARGUMENT naming it; a corrupt file is DATA_LOSS, and then the
// slices' contents are unspecified.
absl::StatusOr<v1::CheckpointHeader> ReadCheckpointSlices(const std::string& path,
                                                          const std::vector<TensorSlice>& slices);

// Reads and verifies a checkpoint file. Anything but a regular file (a
// directory, a FIFO, /dev/zero) is INVALID_ARGUMENT; at most the file's size
// at open is read.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// Checkpoints in a directory are named "ckpt-<step, 10 digits>.yoke".
std::string CheckpointPath(const std::string& dir, int64_t step);
// The newest checkpoint in `dir` (highest step), NOT_FOUND if there is none.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);
// The newest checkpoint in `dir` that reads and verifies (older ones are
// tried when the newest is torn or corrupt), each read as a stream
// (ReadCheckpointSlices), never whole; NOT_FOUND naming the directory,
// and the newest file's problem, if there is none. Each newer file passed
// over is appended to `skipped`, when given, as "PATH: PROBLEM".
absl::StatusOr<std::string> NewestValidCheckpoint(const std::string& dir,
                                                  std::vector<std::string>* skipped = nullptr);
// Deletes all but the newest `keep` checkpoints in `dir` (keep <= 0: none deleted).
absl::Status PruneCheckpoints(const std::string& dir, int keep);

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_CHECKPOINT_H_
