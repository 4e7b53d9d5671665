#include "worker/memory_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace yoke::worker {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// A cgroup file's whole text ("" when it cannot be read).
std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first integer in a cgroup file, or -1 ("max" and unreadable files).
int64_t ReadInt(const std::string& path) {
  int64_t v = -1;
  std::string text(absl::StripAsciiWhitespace(ReadText(path)));
  if (!absl::SimpleAtoi(text, &v)) return -1;
  return v;
}

// The value of `key` in a flat-keyed file ("oom_kill 3\n..."), or -1.
int64_t ReadKey(const std::string& path, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(ReadText(path), '\n')) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t v = 0;
    if (kv.size() == 2 && kv[0] == key && absl::SimpleAtoi(kv[1], &v)) return v;
  }
  return -1;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Writes `text` to the cgroup file `path` in one write, as the kernel
// wants; returns 0 or the errno.
int WriteErrno(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, text.data(), text.size());
  int e = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  ::close(fd);
  return e;
}

absl::Status WriteError(const std::string& path, const std::string& text, int e) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot write '", text, "' to ", path, ": ", std::strerror(e)));
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  const int e = WriteErrno(path, text);
  return e == 0 ? absl::OkStatus() : WriteError(path, text, e);
}

// Undoes mountinfo's octal escapes ("\040" for a space).
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const absl::string_view d = s.substr(i + 1, 3);
      if (std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>((d[0] - '0') * 64 + (d[1] - '0') * 8 + (d[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

struct Mount {
  std::string root;   // the directory of the hierarchy mounted here
  std::string point;  // where
  std::string type;   // "cgroup2", "cgroup"
  std::vector<std::string> options;
};

std::vector<Mount> CgroupMounts(const std::string& mountinfo) {
  std::vector<Mount> out;
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    // ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS
    std::vector<absl::string_view> halves = absl::StrSplit(line, absl::MaxSplits(" - ", 1));
    if (halves.size() != 2) continue;
    std::vector<absl::string_view> a = absl::StrSplit(halves[0], ' ', absl::SkipEmpty());
    std::vector<absl::string_view> b = absl::StrSplit(halves[1], ' ', absl::SkipEmpty());
    if (a.size() < 5 || b.size() < 3 || (b[0] != "cgroup" && b[0] != "cgroup2")) continue;
    Mount m{Unescape(a[3]), Unescape(a[4]), std::string(b[0]), {}};
    for (absl::string_view o : absl::StrSplit(b[2], ',')) m.options.emplace_back(o);
    out.push_back(std::move(m));
  }
  return out;
}

// MOUNT/PATH for the cgroup `path` (from /proc/self/cgroup) of a hierarchy
// whose directory `root` is mounted at `point`.
std::string DirIn(const Mount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/" && absl::StartsWith(path, m.root) &&
      (path.size() == m.root.size() || path[m.root.size()] == '/')) {
    rel = path.substr(m.root.size());
  }
  std::string dir = m.point;
  if (!rel.empty() && rel != "/") dir += rel;
  return dir;
}

bool Lists(const std::string& text, absl::string_view word) {
  for (absl::string_view w : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (w == word) return true;
  }
  return false;
}

std::string Errno(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

}  // namespace

int64_t DefaultMemoryLimit(int64_t visible) {
  if (visible <= 0) return 0;
  int64_t reserve = std::clamp(visible / 10, 512 * kMiB, 4 * kGiB);
  reserve = std::min(reserve, visible / 2);
  return visible - reserve;
}

int64_t ReplicaShare(int64_t limit, int replicas) {
  return replicas > 0 ? limit / replicas : limit;
}

bool KilledForMemory(const CgroupMemoryStats& stats, bool sigkill) {
  if (stats.oom_kills >= 0) return stats.oom_kills > 0;
  // No counter (kernels before 4.13): a SIGKILL after the usage reached the
  // limit. (memory.failcnt can stay 0 when reclaim kept up until the kill.)
  const bool at_limit = stats.limit_hits > 0 ||
                        (stats.limit_bytes > 0 && stats.peak_bytes >= stats.limit_bytes - 4096);
  return sigkill && at_limit;
}

absl::StatusOr<CgroupLocation> LocateMemoryCgroup(const std::string& mountinfo,
                                                  const std::string& proc_self_cgroup) {
  std::string v2_path, v1_path;
  bool has_v1 = false;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) v2_path = std::string(f[2]);
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "memory") {
        has_v1 = true;
        v1_path = std::string(f[2]);
      }
    }
  }
  const std::vector<Mount> mounts = CgroupMounts(mountinfo);
  std::string v2_note = "no cgroup2 hierarchy is mounted";
  for (const Mount& m : mounts) {
    if (m.type != "cgroup2" || v2_path.empty()) continue;
    const std::string dir = DirIn(m, v2_path);
    if (Lists(ReadText(dir + "/cgroup.controllers"), "memory")) {
      return CgroupLocation{CgroupVersion::kV2, m.point, dir};
    }
    v2_note = absl::StrCat("the cgroup2 hierarchy at ", m.point,
                           " does not offer the memory controller to ", dir);
  }
  for (const Mount& m : mounts) {
    if (m.type != "cgroup" || !has_v1) continue;
    if (std::find(m.options.begin(), m.options.end(), "memory") == m.options.end()) continue;
    const std::string dir = DirIn(m, v1_path);
    if (!Exists(dir)) {
      return absl::NotFoundError(
          absl::StrCat(v2_note, ", and this process's cgroup v1 memory cgroup ", dir,
                       " is not visible (a mount of another cgroup namespace?)"));
    }
    return CgroupLocation{CgroupVersion::kV1, m.point, dir};
  }
  return absl::NotFoundError(
      absl::StrCat(v2_note, ", and no cgroup v1 memory controller is mounted"));
}

int64_t VisibleMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  int64_t visible = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
  auto where = LocateMemoryCgroup(ReadText("/proc/self/mountinfo"), ReadText("/proc/self/cgroup"));
  if (!where.ok()) return visible;
  // A limit on any ancestor holds this process too.
  const char* file =
      where->version == CgroupVersion::kV2 ? "/memory.max" : "/memory.limit_in_bytes";
  for (std::string dir = where->dir; absl::StartsWith(dir, where->mount);
       dir = dir.substr(0, dir.rfind('/'))) {
    const int64_t limit = ReadInt(dir + file);
    if (limit > 0 && (visible <= 0 || limit < visible)) visible = limit;
    if (dir == where->mount) break;
  }
  return visible;
}

absl::StatusOr<std::unique_ptr<MemoryCgroups>> MemoryCgroups::Open() {
  auto where = LocateMemoryCgroup(ReadText("/proc/self/mountinfo"), ReadText("/proc/self/cgroup"));
  if (!where.ok()) return where.status();
  return OpenAt(*std::move(where));
}

absl::StatusOr<std::unique_ptr<MemoryCgroups>> MemoryCgroups::OpenAt(CgroupLocation where) {
  std::unique_ptr<MemoryCgroups> m(new MemoryCgroups(std::move(where)));
  if (m->version() == CgroupVersion::kV2) {
    if (absl::Status s = m->EnableV2Controller(); !s.ok()) return s;
  }
  m->RemoveStale();
  // Prove that a child can be made and limited here before relying on it.
  auto probe = m->Create(64 * kMiB);
  if (!probe.ok()) return probe.status();
  if (!(*probe)->Remove()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove the test cgroup ", (*probe)->dir()));
  }
  return m;
}

void MemoryCgroups::RemoveStale() {
  DIR* d = ::opendir(dir().c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, "yoke-trainer-")) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(0, name.find('-')), &pid) || pid <= 0) continue;
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    stale.push_back(absl::StrCat(dir(), "/", e->d_name));
  }
  ::closedir(d);
  // rmdir fails (EBUSY) on a cgroup that still holds a process.
  for (const std::string& c : stale) {
    if (::rmdir(c.c_str()) == 0) ++stale_removed_;
  }
}

absl::Status MemoryCgroups::EnableV2Controller() {
  const std::string control = dir() + "/cgroup.subtree_control";
  if (Lists(ReadText(control), "memory")) return absl::OkStatus();
  int e = WriteErrno(control, "+memory");
  if (e == 0) return absl::OkStatus();
  if (e != EBUSY) return WriteError(control, "+memory", e);
  // A cgroup with processes cannot hand a controller to its children (the
  // "no internal processes" rule): move this process into a leaf of its
  // own first. Other processes left beside it still keep it busy.
  const std::string leaf = dir() + "/yoke-worker";
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(Errno("cannot create " + leaf));
  }
  if (absl::Status s = WriteFile(leaf + "/cgroup.procs", absl::StrCat(::getpid())); !s.ok()) {
    return s;
  }
  e = WriteErrno(control, "+memory");
  if (e == 0) return absl::OkStatus();
  absl::Status s = WriteError(control, "+memory", e);
  if (e != EBUSY) return s;
  return absl::FailedPreconditionError(absl::StrCat(
      s.message(), " (other processes share the worker's cgroup ", dir(),
      "; run the worker in a cgroup of its own, e.g. a systemd unit with Delegate=yes)"));
}

std::string MemoryCgroups::Describe() const {
  return absl::StrCat(version() == CgroupVersion::kV2 ? "cgroup v2" : "cgroup v1",
                      " memory controller under ", dir());
}

absl::StatusOr<std::unique_ptr<TrainerCgroup>> MemoryCgroups::Create(int64_t limit_bytes) {
  if (limit_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("memory limit: must be > 0, got ", limit_bytes));
  }
  const std::string child =
      absl::StrCat(dir(), "/yoke-trainer-", ::getpid(), "-", next_.fetch_add(1) + 1);
  if (::mkdir(child.c_str(), 0755) != 0) {
    return absl::FailedPreconditionError(Errno("cannot create cgroup " + child));
  }
  auto fail = [&](const absl::Status& s) {
    ::rmdir(child.c_str());
    return s;
  };
  const bool v2 = version() == CgroupVersion::kV2;
  const std::string limit = absl::StrCat(limit_bytes);
  if (absl::Status s = WriteFile(child + (v2 ? "/memory.max" : "/memory.limit_in_bytes"), limit);
      !s.ok()) {
    return fail(s);
  }
  // Best effort: no swap beyond the share, and (v2) the OOM killer takes
  // the whole cgroup, so nothing the trainer started lives on half-killed.
  if (v2) {
    if (Exists(child + "/memory.swap.max")) (void)WriteFile(child + "/memory.swap.max", "0");
    (void)WriteFile(child + "/memory.oom.group", "1");
  } else if (Exists(child + "/memory.memsw.limit_in_bytes")) {
    (void)WriteFile(child + "/memory.memsw.limit_in_bytes", limit);
  }
  const std::string procs = child + "/cgroup.procs";
  int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fail(absl::FailedPreconditionError(Errno("cannot open " + procs)));
  return std::unique_ptr<TrainerCgroup>(new TrainerCgroup(version(), child, limit_bytes, fd));
}

TrainerCgroup::~TrainerCgroup() { Remove(); }

CgroupMemoryStats TrainerCgroup::Stats() const {
  CgroupMemoryStats s;
  if (version_ == CgroupVersion::kV2) {
    s.limit_bytes = ReadInt(dir_ + "/memory.max");
    s.peak_bytes = ReadInt(dir_ + "/memory.peak");
    s.limit_hits = ReadKey(dir_ + "/memory.events", "max");
    s.oom_kills = ReadKey(dir_ + "/memory.events", "oom_kill");
  } else {
    s.limit_bytes = ReadInt(dir_ + "/memory.limit_in_bytes");
    s.peak_bytes = ReadInt(dir_ + "/memory.max_usage_in_bytes");
    s.limit_hits = ReadInt(dir_ + "/memory.failcnt");
    s.oom_kills = ReadKey(dir_ + "/memory.oom_control", "oom_kill");
  }
  return s;
}

bool TrainerCgroup::Remove() {
  if (removed_) return true;
  if (procs_fd_ >= 0) ::close(procs_fd_);
  procs_fd_ = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  while (true) {
    if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) {
      removed_ = true;
      return true;
    }
    if (errno != EBUSY || absl::Now() >= deadline) break;
    // What escaped the trainer's process group (setsid) still runs here.
    for (absl::string_view p : absl::StrSplit(ReadText(dir_ + "/cgroup.procs"), '\n')) {
      int pid = 0;
      if (absl::SimpleAtoi(p, &pid) && pid > 0) ::kill(pid, SIGKILL);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  spdlog::warn("cannot remove the trainer's memory cgroup {}: {}", dir_, std::strerror(errno));
  return false;
}

}  // namespace yoke::worker
