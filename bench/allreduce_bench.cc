// allreduce_bench: Yoke's Gloo communicator, 2 ranks as 2 processes on
// loopback, bootstrapped through a real coordinator's Rendezvous API (as in
// a job). For each size it checks the result once (integer-valued floats,
// exact), warms up, then times `iters` allreduces one at a time (Allreduce +
// Wait) and reports the median latency, algbw = bytes / latency and busbw =
// algbw * 2(n-1)/n (nccl-tests' convention).
//
//   allreduce_bench [--ranks=2] [--min_bytes=1024] [--max_bytes=67108864]
//                   [--wire=f32|f16|bf16]
//
// Prints a header, then one line per size:
//   RESULT <bytes> <median_us> <algbw_GBps> <busbw_GBps>
//
// With --shm_count=N (e.g. 235146, the MLP's gradient) it instead compares
// the shared-memory path (shm_communicator.h, every rank on one host) with
// plain Gloo over loopback for one N-float allreduce, in the same processes:
// both results are checked against the exact sum first, then rounds of
// Allreduce + Wait alternate between the two (so drift on a shared machine
// hits both alike), and it prints
//   SHM <count> gloo_median_us <g> shm_median_us <s> speedup <g/s>
// bench/allreduce_vs_torch.sh runs this and the torch.distributed peer
// (bench/allreduce_torch.py) and prints the ratio per size.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/coordinator_store.h"
#include "collective/gloo_communicator.h"
#include "collective/shm_communicator.h"
#include "common/clock.h"
#include "coordinator/grpc_service.h"
#include "coordinator/job_store.h"

ABSL_FLAG(int, ranks, 2, "number of ranks (processes)");
ABSL_FLAG(int64_t, min_bytes, 1024, "smallest message");
ABSL_FLAG(int64_t, max_bytes, 64 << 20, "largest message (sizes go up by 4x)");
ABSL_FLAG(std::string, wire, "f32", "wire type: f32, f16 or bf16");
ABSL_FLAG(int64_t, ring_max_bytes, yoke::collective::GlooOptions{}.ring_max_bytes,
          "GlooOptions::ring_max_bytes (for tuning)");
ABSL_FLAG(int64_t, shm_count, 0,
          "compare shm and Gloo for one allreduce of this many floats (0: the size sweep)");
ABSL_FLAG(int, shm_iters, 400, "timed allreduces per path with --shm_count");
ABSL_FLAG(int, rank, -1, "internal: run as this rank");
ABSL_FLAG(std::string, coordinator, "", "internal: coordinator address");

namespace yoke::collective {
namespace {

// Iterations for a message of `bytes`: enough for a stable median, about
// 1-2 s per size on loopback.
int Iters(int64_t bytes) {
  if (bytes <= (64 << 10)) return 400;
  if (bytes <= (1 << 20)) return 100;
  if (bytes <= (4 << 20)) return 40;
  return 15;
}

// Checks one allreduce of `count` floats on `c` (integers below 17 * n:
// exact), then times `iters` of them; returns the latencies in us, or empty
// after printing why not.
std::vector<double> TimeAllreduce(Communicator& c, int rank, int n, int64_t count, int iters,
                                  bool check) {
  std::vector<float> buf(count);
  for (int64_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i + rank) % 17);
  absl::Status s;
  if (check) {
    s = c.Allreduce(Buffer{buf.data(), count}, {})->Wait();
    for (int64_t i = 0; s.ok() && i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>((i + r) % 17);
      if (buf[i] != want) {
        s = absl::InternalError(
            absl::StrCat("element ", i, " of ", count, " is ", buf[i], ", want ", want));
      }
    }
  }
  std::vector<double> us;
  for (int i = 0; s.ok() && i < iters; ++i) {
    const absl::Time t0 = absl::Now();
    s = c.Allreduce(Buffer{buf.data(), count}, {})->Wait();
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d (%s): %s\n", rank, c.backend(), s.ToString().c_str());
    return {};
  }
  return us;
}

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// --shm_count: shm against Gloo in the same processes.
int RunShmRank(int rank, int n) {
  CoordinatorStore base(absl::GetFlag(FLAGS_coordinator), "allreduce-bench", 1);
  PrefixStore gstore(&base, "gloo/"), sstore(&base, "shm/");
  GlooOptions go;
  auto gloo = CreateGlooCommunicator(&gstore, rank, n, go);
  GlooOptions so = go;
  so.rank_hosts.assign(n, "bench@127.0.0.1");
  auto shm = CreateCommunicator(&sstore, rank, n, so);
  if (!gloo.ok() || !shm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 (gloo.ok() ? shm.status() : gloo.status()).ToString().c_str());
    return 1;
  }
  const int64_t count = absl::GetFlag(FLAGS_shm_count);
  const int iters = absl::GetFlag(FLAGS_shm_iters);
  // Check and warm up both, then alternate rounds of 20.
  for (Communicator* c : {gloo->get(), shm->get()}) {
    if (TimeAllreduce(*c, rank, n, count, 20, /*check=*/true).empty()) return 1;
  }
  std::vector<double> g_us, s_us;
  for (int done = 0; done < iters; done += 20) {
    for (auto [c, out] : {std::pair{gloo->get(), &g_us}, std::pair{shm->get(), &s_us}}) {
      std::vector<double> us = TimeAllreduce(*c, rank, n, count, 20, /*check=*/false);
      if (us.empty()) return 1;
      out->insert(out->end(), us.begin(), us.end());
    }
  }
  if (rank == 0) {
    const double g = Median(g_us), s = Median(s_us);
    std::printf("SHM %lld gloo_median_us %.1f shm_median_us %.1f speedup %.2f\n",
                static_cast<long long>(count), g, s, g / s);
    std::fflush(stdout);
  }
  return (*gloo)->Barrier({})->Wait().ok() && (*shm)->Barrier({})->Wait().ok() ? 0 : 1;
}

int RunRank(int rank, int n) {
  if (absl::GetFlag(FLAGS_shm_count) > 0) return RunShmRank(rank, n);
  CoordinatorStore store(absl::GetFlag(FLAGS_coordinator), "allreduce-bench", 1);
  GlooOptions go;
  go.ring_max_bytes = absl::GetFlag(FLAGS_ring_max_bytes);
  auto comm = CreateGlooCommunicator(&store, rank, n, go);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  Communicator& c = **comm;
  AllreduceOptions o;
  const std::string wire = absl::GetFlag(FLAGS_wire);
  o.wire = wire == "f16" ? DataType::kF16 : wire == "bf16" ? DataType::kBF16 : DataType::kF32;
  for (int64_t bytes = absl::GetFlag(FLAGS_min_bytes); bytes <= absl::GetFlag(FLAGS_max_bytes);
       bytes *= 4) {
    const int64_t count = bytes / 4;
    std::vector<float> buf(count);
    // Check once: sums of small integers are exact in every wire type.
    for (int64_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i + rank) % 17);
    absl::Status s = c.Allreduce(Buffer{buf.data(), count}, o)->Wait();
    for (int64_t i = 0; s.ok() && i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>((i + r) % 17);
      if (buf[i] != want) {
        s = absl::InternalError(
            absl::StrCat("element ", i, " of ", count, " is ", buf[i], ", want ", want));
      }
    }
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: check failed at %lld bytes: %s\n", rank,
                   static_cast<long long>(bytes), s.ToString().c_str());
      return 1;
    }
    const int iters = Iters(bytes);
    for (int i = 0; i < std::max(3, iters / 10); ++i)
      c.Allreduce(Buffer{buf.data(), count}, o)->Wait().IgnoreError();
    std::vector<double> us;
    for (int i = 0; i < iters; ++i) {
      const absl::Time t0 = absl::Now();
      s = c.Allreduce(Buffer{buf.data(), count}, o)->Wait();
      us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
        return 1;
      }
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    const double median = us[us.size() / 2];
    const double algbw = bytes / median / 1e3;  // GB/s
    const double busbw = algbw * 2.0 * (n - 1) / n;
    if (rank == 0) {
      std::printf("RESULT %lld %.1f %.3f %.3f\n", static_cast<long long>(bytes), median, algbw,
                  busbw);
      std::fflush(stdout);
    }
  }
  return c.Barrier({})->Wait().ok() ? 0 : 1;
}

int RunParent(const char* self) {
  const int n = absl::GetFlag(FLAGS_ranks);
  yoke::server::InMemoryJobStore jobs;
  auto coord = server::Coordinator::Create(&jobs, common::RealClock::Get(),
                                           yoke::server::CoordinatorOptions{});
  if (!coord.ok()) return 1;
  yoke::server::ServerOptions so;
  so.listen = "127.0.0.1:0";
  auto server = server::CoordinatorServer::Start(coord->get(), so);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  (*coord)->rendezvous()->Open("allreduce-bench", 1);
  if (absl::GetFlag(FLAGS_shm_count) > 0) {
    std::printf(
        "# yoke allreduce of %lld f32, %d ranks (processes) on one host: shared memory "
        "against gloo over loopback, %d timed each\n",
        static_cast<long long>(absl::GetFlag(FLAGS_shm_count)), n, absl::GetFlag(FLAGS_shm_iters));
  } else {
    std::printf("# yoke gloo allreduce, %d ranks (processes) on loopback, f32 buffers, wire %s\n",
                n, absl::GetFlag(FLAGS_wire).c_str());
  }
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {
        self,
        absl::StrCat("--rank=", r),
        absl::StrCat("--ranks=", n),
        absl::StrCat("--coordinator=", (*server)->address()),
        absl::StrCat("--min_bytes=", absl::GetFlag(FLAGS_min_bytes)),
        absl::StrCat("--max_bytes=", absl::GetFlag(FLAGS_max_bytes)),
        absl::StrCat("--wire=", absl::GetFlag(FLAGS_wire)),
        absl::StrCat("--ring_max_bytes=", absl::GetFlag(FLAGS_ring_max_bytes)),
        absl::StrCat("--shm_count=", absl::GetFlag(FLAGS_shm_count)),
        absl::StrCat("--shm_iters=", absl::GetFlag(FLAGS_shm_iters))};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

}  // namespace
}  // namespace yoke::collective

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rank = absl::GetFlag(FLAGS_rank);
  if (rank >= 0) return yoke::collective::RunRank(rank, absl::GetFlag(FLAGS_ranks));
  char self[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[len > 0 ? len : 0] = '\0';
  return yoke::collective::RunParent(self);
}
