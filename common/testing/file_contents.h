// FileContents: everything written so far to a seekable stdio stream, such
// as a std::tmpfile() handed to code that prints to a FILE* (the CLI
// commands, the progress views), so that tests can read what it printed.
//
// Thread-safety: as the stream; call it when no one else writes to `f`.
#ifndef YOKE_COMMON_TESTING_FILE_CONTENTS_H_
#define YOKE_COMMON_TESTING_FILE_CONTENTS_H_

#include <cstdio>
#include <string>

namespace yoke::common {

// Flushes `f` and returns its contents from the start. Leaves the position
// at the end, so later writes append.
inline std::string FileContents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

}  // namespace yoke::common

#endif  // YOKE_COMMON_TESTING_FILE_CONTENTS_H_
