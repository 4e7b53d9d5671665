// FileStore: a Store over a directory that every rank can see (a local
// directory for ranks on one machine, or a shared file system).
//
// Each key is one file, named after the key with every byte outside
// [A-Za-z0-9._-] written as %XX, so keys with '/' stay flat in the directory.
// Set() writes the value to a temporary file in the same directory and
// renames it over the key's file: rename() is atomic within a file system,
// so a reader sees either no file or the whole value, never a partial one.
// Get() polls for the file (every 5 ms at first, backing off to 100 ms) until
// the timeout.
//
// Keys are never deleted, like every Store here: give each launch a fresh
// directory, or a rank may read a previous launch's stale keys.
//
// Thread-safety: thread-safe; several processes may share one directory.
#ifndef YOKE_COLLECTIVE_FILE_STORE_H_
#define YOKE_COLLECTIVE_FILE_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/store.h"

namespace yoke::collective {

class FileStore : public Store {
 public:
  // Creates `dir` (and its parents) if missing. INVALID_ARGUMENT for an empty
  // path; INTERNAL naming the directory if it cannot be created or is not a
  // writable directory.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(const std::string& dir);

  // INTERNAL naming the file on a write or rename failure.
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  // DEADLINE_EXCEEDED naming the key and the directory if the key's file
  // does not appear within `timeout`; INTERNAL if it exists but cannot be read.
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;

  const std::string& dir() const { return dir_; }
  // The file that holds `key` (for tests and messages).
  std::string PathOf(absl::string_view key) const;

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_FILE_STORE_H_
