// The checkpoint reader on arbitrary bytes. Most inputs fail the magic or
// the checksum, so the input's first byte may ask for a valid header and a
// recomputed CRC around the rest, which lets the fuzzer reach the header
// parser and the tensor records.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>

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
  (void)yoke::engine::ReadCheckpoint(path);
  return 0;
}
