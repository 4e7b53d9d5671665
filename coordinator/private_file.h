// The coordinator's SQLite files are for its own user only.
//
// The job store holds every job's spec and owner, and the auth store token
// hashes and the rendezvous key. SQLite creates a database with mode 0644
// (less the umask), and gives its -wal, -shm and -journal files the mode of
// the database. So before SQLite opens a store, MakePrivate creates it 0600
// (or sets an existing one, made by an older coordinator, to 0600, with any
// companion files beside it): no moment passes with the file readable by
// others.
#ifndef YOKE_COORDINATOR_PRIVATE_FILE_H_
#define YOKE_COORDINATOR_PRIVATE_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace yoke::server {

// Creates `path` with mode 0600 if it does not exist, and sets it and its
// existing -wal, -shm and -journal files to 0600. ":memory:" and "" (SQLite's
// in-memory and temporary databases) are left alone. Fails naming the path
// when the file cannot be created or its mode set.
absl::Status MakePrivate(const std::string& path);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_PRIVATE_FILE_H_
