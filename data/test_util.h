// Helpers for data/ tests: a scratch directory and fixture writers, so tests
// build their input files at run time instead of checking binaries in.
// Header-only and used by *_test.cc files only.
#ifndef YOKE_DATA_TEST_UTIL_H_
#define YOKE_DATA_TEST_UTIL_H_

#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"

namespace yoke::data::testing {

// A fresh directory under $TMPDIR, removed on destruction (common/testing/temp_dir.h).
using common::TempDir;

// Overwriting a file by truncation makes ext4 flush it to disk on close
// (auto_da_alloc), which costs milliseconds per write; unlinking first keeps
// fixture writes in the page cache.
inline void Unlink(const std::string& path) { ::unlink(path.c_str()); }

inline bool WriteBytes(const std::string& path, const void* data, size_t n) {
  Unlink(path);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = n == 0 || std::fwrite(data, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}
inline bool WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  return WriteBytes(path, b.data(), b.size());
}
inline bool WriteText(const std::string& path, const std::string& s) {
  return WriteBytes(path, s.data(), s.size());
}

// Writes `b` gzip-compressed.
inline bool WriteGzip(const std::string& path, const std::vector<uint8_t>& b) {
  Unlink(path);
  gzFile g = gzopen(path.c_str(), "wb");
  if (g == nullptr) return false;
  const bool ok = b.empty() || gzwrite(g, b.data(), static_cast<unsigned>(b.size())) ==
                                   static_cast<int>(b.size());
  return gzclose(g) == Z_OK && ok;
}

// Decompresses a gzip file with zlib directly (independently of InputFile).
inline std::vector<uint8_t> Gunzip(const std::string& path) {
  std::vector<uint8_t> out;
  gzFile g = gzopen(path.c_str(), "rb");
  if (g == nullptr) return out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(g, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(g);
  return out;
}

inline void PutBigEndian32(std::vector<uint8_t>* b, uint32_t v) {
  b->push_back(static_cast<uint8_t>(v >> 24));
  b->push_back(static_cast<uint8_t>(v >> 16));
  b->push_back(static_cast<uint8_t>(v >> 8));
  b->push_back(static_cast<uint8_t>(v));
}

// An idx3-ubyte image file: header then `pixels` (count*rows*cols bytes,
// unless a test wants the header to lie).
inline std::vector<uint8_t> IdxImages(uint32_t count, uint32_t rows, uint32_t cols,
                                      const std::vector<uint8_t>& pixels,
                                      uint32_t magic = 0x00000803) {
  std::vector<uint8_t> b;
  PutBigEndian32(&b, magic);
  PutBigEndian32(&b, count);
  PutBigEndian32(&b, rows);
  PutBigEndian32(&b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

inline std::vector<uint8_t> IdxLabels(uint32_t count, const std::vector<uint8_t>& labels,
                                      uint32_t magic = 0x00000801) {
  std::vector<uint8_t> b;
  PutBigEndian32(&b, magic);
  PutBigEndian32(&b, count);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

}  // namespace yoke::data::testing

#endif  // YOKE_DATA_TEST_UTIL_H_
