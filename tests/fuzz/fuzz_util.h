// Helpers for the libFuzzer targets: the readers take paths, so each input
// is written to a file of this process's own and the reader opens it.
#ifndef YOKE_TESTS_FUZZ_FUZZ_UTIL_H_
#define YOKE_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace yoke::fuzz {

// Writes `data` to /tmp/yoke-fuzz-<pid>-<slot> and returns the path.
inline std::string WriteInput(const uint8_t* data, size_t size, int slot = 0) {
  const std::string path =
      "/tmp/yoke-fuzz-" + std::to_string(::getpid()) + "-" + std::to_string(slot);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace yoke::fuzz

#endif  // YOKE_TESTS_FUZZ_FUZZ_UTIL_H_
