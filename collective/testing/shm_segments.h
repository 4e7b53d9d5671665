// Test helper: the shared-memory collective's segments that exist now.
// Header-only, for collective/*_test.cc.
#ifndef YOKE_COLLECTIVE_TESTING_SHM_SEGMENTS_H_
#define YOKE_COLLECTIVE_TESTING_SHM_SEGMENTS_H_

#include <dirent.h>

#include <set>
#include <string>

#include "absl/strings/match.h"

namespace yoke::collective::testing {

// The names of the "yoke-shm-*" files in /dev/shm: a test compares the set
// before and after a job to show that every segment it made was removed.
inline std::set<std::string> ShmSegments() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (absl::StartsWith(e->d_name, "yoke-shm-")) names.insert(e->d_name);
    }
    closedir(d);
  }
  return names;
}

}  // namespace yoke::collective::testing

#endif  // YOKE_COLLECTIVE_TESTING_SHM_SEGMENTS_H_
