// The checkpoint reader on arbitrary bytes. Most inputs fail the magic or
// the checksum, so the input's first byte may ask for a valid header and a
// recomputed CRC around the rest, which lets the fuzzer reach the header
// parser and the tensor records. The streaming reader (ReadCheckpointSlices)
// reads the same bytes and must agree: both accept or both refuse, and the
// second half of the first tensor it copies equals the whole read's.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string bytes;
  if (data[0] & 1) {
    // "YOKECKPT", version 1, then the input as hdr_len + header + data.
    bytes.assign("YOKECKPT", 8);
    const uint32_t version = yoke::engine::kCheckpointVersion;
    bytes.append(reinterpret_cast<const char*>(&version), 4);
    bytes.append(reinterpret_cast<const char*>(data + 1), size - 1);
    const uint32_t crc =
        crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
    bytes.append(reinterpret_cast<const char*>(&crc), 4);
  } else {
    bytes.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  }
  const std::string path =
      yoke::fuzz::WriteInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const auto whole = yoke::engine::ReadCheckpoint(path);
  // The streaming reader on the same bytes: it must agree with the whole
  // read, and a slice it returns must hold the tensor's own elements.
  std::vector<yoke::engine::TensorSlice> slices;
  const yoke::engine::Tensor* first = nullptr;
  if (whole.ok() && !whole->tensors.empty()) {
    first = &whole->tensors[0].second;
    const int64_t n = first->numel();
    slices.push_back(
        {whole->tensors[0].first, n / 2, yoke::engine::Tensor::Empty({n - n / 2}, first->dtype())});
  }
  const auto streamed = yoke::engine::ReadCheckpointSlices(path, slices);
  if (streamed.ok() != whole.ok()) __builtin_trap();
  if (first != nullptr && first->numel() > 0) {
    const size_t es = first->bytes() / static_cast<size_t>(first->numel());
    if (std::memcmp(slices[0].dst.raw(),
                    static_cast<const char*>(first->raw()) + (first->numel() / 2) * es,
                    slices[0].dst.bytes()) != 0) {
      __builtin_trap();
    }
  }
  return 0;
}
