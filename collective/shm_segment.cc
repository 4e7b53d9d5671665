#include "collective/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace yoke::collective::shm {
namespace {

constexpr uint64_t kMagic = 0x31484d53454b4f59ull;  // "YOKESHM1"

size_t SegmentBytes(int local, int64_t chunk) {
  return Segment::DataOffset() + static_cast<size_t>(local + 1) * chunk * sizeof(float);
}

std::string RandomToken() {
  unsigned char bytes[16] = {};
  std::ifstream f("/dev/urandom", std::ios::binary);
  f.read(reinterpret_cast<char*>(bytes), sizeof(bytes));
  if (!f) {
    // Unlikely; still unique enough with the pid and the clock, and O_EXCL
    // catches a collision.
    const uint64_t a = static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull;
    const uint64_t b = static_cast<uint64_t>(absl::GetCurrentTimeNanos());
    std::memcpy(bytes, &a, 8);
    std::memcpy(bytes + 8, &b, 8);
  }
  std::string hex;
  for (unsigned char c : bytes) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return hex;
}

absl::Status Errno(const char* what, const std::string& name) {
  return absl::UnavailableError(absl::StrCat("shm: ", what, name, ": ", std::strerror(errno),
                                             " (YOKE_SHM=0 turns the shared-memory path off)"));
}

absl::Status ShmKeyMissing(const absl::Status& s, int leader) {
  return absl::Status(s.code(), absl::StrCat("shm: the name of the segment from local leader rank ",
                                             leader, ": ", s.message()));
}

}  // namespace

void WakePeers(Header* h) {
  h->wake_word.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0) {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->wake_word), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
  }
}

void SleepUnless(Header* h, absl::FunctionRef<bool()> ready) {
  h->sleepers.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t word = h->wake_word.load(std::memory_order_seq_cst);
  if (!ready()) {
    const timespec two_ms{0, 2000000};
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->wake_word), FUTEX_WAIT, word, &two_ms,
              nullptr, 0);
  }
  h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

uint64_t PidNamespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

bool ProcessAlive(int pid) {
  // Plain open and read into the stack: waits call this every 100 ms, and a
  // pipeline's steady state allocates nothing (shm_transport.h).
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char stat[512];
  const ssize_t n = ::read(fd, stat, sizeof(stat) - 1);
  ::close(fd);
  if (n <= 0) return false;
  // "pid (comm) S ...": the state follows the last ')'; comm may hold any
  // byte, but is at most 16 of them, so the state is within the buffer.
  const char* end = stat + n;
  const char* close = nullptr;
  for (const char* c = stat; c < end; ++c) {
    if (*c == ')') close = c;
  }
  if (close == nullptr || close + 2 >= end) return true;
  const char state = close[2];
  return state != 'Z' && state != 'X';
}

Segment::~Segment() {
  Unlink();
  if (base_ != nullptr && !leak_) ::munmap(base_, bytes_);
}

absl::Status Segment::Create(const std::string& name, int local, int64_t chunk) {
  name_ = name;
  bytes_ = SegmentBytes(local, chunk);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("shm_open(O_CREAT) ", name);
  owner_ = true;
  // Reserve the pages now: tmpfs would otherwise let the mapping succeed
  // and raise SIGBUS at the first write past a full /dev/shm.
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
  if (err != 0) {
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "shm: cannot reserve ", bytes_, " bytes for ", name, " in /dev/shm: ", std::strerror(err),
        " (a bigger /dev/shm, or YOKE_SHM=0 for plain Gloo)"));
  }
  absl::Status s = Map(fd, name);
  if (!s.ok()) return s;
  Header* h = header();
  h->magic = kMagic;
  h->local_size = local;
  h->chunk_elems = chunk;
  return absl::OkStatus();
}

absl::Status Segment::Open(const std::string& name, int local, int64_t chunk) {
  name_ = name;
  bytes_ = SegmentBytes(local, chunk);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Errno("shm_open ", name);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes_) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shm: ", name, " has ", st.st_size, " bytes, want ", bytes_,
                     ": local ranks disagree on the shm settings"));
  }
  absl::Status s = Map(fd, name);
  if (!s.ok()) return s;
  if (header()->magic != kMagic || header()->local_size != local ||
      header()->chunk_elems != chunk) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shm: ", name, " was made for ", header()->local_size, " local ranks and chunks of ",
        header()->chunk_elems, ", this rank wants ", local, " and ", chunk));
  }
  return absl::OkStatus();
}

void Segment::Unlink() {
  if (owner_ && !unlinked_) ::shm_unlink(name_.c_str());
  unlinked_ = true;
}

absl::Status Segment::Map(int fd, const std::string& name) {
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return Errno("mmap ", name);
  base_ = p;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Segment>> MakeSegment(Store* store, const std::vector<int>& locals,
                                                     int me, int64_t chunk_elems,
                                                     absl::Duration connect_timeout,
                                                     const std::string& where) {
  const int L = static_cast<int>(locals.size());
  // The leader publishes "ok <name> <chunk_elems>", or "error <why>" so that
  // the others fail at once with its reason rather than at the timeout.
  auto seg = std::unique_ptr<Segment>();
  const std::string key = absl::StrCat("shm/", locals[0], "/segment");
  if (me == 0) {
    // A small /dev/shm (Docker's default is 64 MiB) gets smaller chunks, down
    // to 1/16 of the configured size, before it is an error.
    absl::Status s;
    int64_t chunk = chunk_elems;
    for (int tries = 0; tries < 5; ++tries, chunk = std::max<int64_t>(1, chunk / 2)) {
      seg = std::make_unique<Segment>();  // the previous try's unlinks itself
      s = seg->Create(absl::StrCat("/yoke-shm-", RandomToken()), L, chunk);
      if (s.code() != absl::StatusCode::kResourceExhausted) break;
    }
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
      store->Set(key, absl::StrCat("error ", s.message())).IgnoreError();
      return s;
    }
    if (chunk != chunk_elems) {
      spdlog::warn("{}: /dev/shm too small for chunks of {} floats; using {}", where, chunk_elems,
                   chunk);
    }
    if (s = store->Set(key, absl::StrCat("ok ", seg->name(), " ", chunk)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where, ": publishing the segment: ", s.message()));
    }
  } else {
    absl::StatusOr<std::string> v = store->Get(key, connect_timeout);
    if (!v.ok()) return ShmKeyMissing(v.status(), locals[0]);
    if (absl::StartsWith(*v, "error ")) {
      return absl::UnavailableError(absl::StrCat(where, ": local leader rank ", locals[0],
                                                 " could not make the segment: ", v->substr(6)));
    }
    std::vector<std::string> f = absl::StrSplit(*v, ' ');
    int64_t chunk = 0;
    if (f.size() != 3 || f[0] != "ok" || !absl::SimpleAtoi(f[2], &chunk) || chunk <= 0) {
      return absl::InternalError(
          absl::StrCat(where, ": bad segment record from rank ", locals[0], ": \"", *v, "\""));
    }
    seg = std::make_unique<Segment>();
    if (absl::Status s = seg->Open(f[1], L, chunk); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
    }
  }
  RankLine& line = seg->header()->ranks[me];
  line.pid.store(static_cast<int32_t>(::getpid()));
  line.rank.store(locals[me]);
  line.pid_ns.store(PidNamespace());
  seg->header()->attached.fetch_add(1);
  if (me == 0) {
    const absl::Time deadline = absl::Now() + connect_timeout;
    while (seg->header()->attached.load() < L) {
      if (absl::Now() >= deadline) {
        std::vector<int> missing;
        for (int j = 1; j < L; ++j) {
          if (seg->header()->ranks[j].pid.load() == 0) missing.push_back(locals[j]);
        }
        return absl::DeadlineExceededError(
            absl::StrCat(where, ": local ranks ", absl::StrJoin(missing, ","), " did not map ",
                         seg->name(), " within ", absl::FormatDuration(connect_timeout)));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    seg->Unlink();
  }
  return seg;
}

}  // namespace yoke::collective::shm
