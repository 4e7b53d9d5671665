// collective_test_rank: one rank of a multi-process collective test. It
// bootstraps a Gloo communicator through a real coordinator's Rendezvous API
// (CoordinatorStore), allreduces `--count` i64 elements (element i of rank r
// is r * 1000 + i) and checks the result exactly.
//
//   --mode=allreduce  exit 0 if the sum is right, 1 otherwise (with why)
//   --mode=hang       after the first allreduce, sleep forever (the test
//                     kills this process)
//
// With --rank_hosts (comma-separated, one per rank) the communicator comes
// from CreateCommunicator, which takes the shared-memory path for ranks that
// share a host; --dtype=f32 then allreduces floats (the values are small
// integers, so the sum is exact), which is what that path carries.
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collective/coordinator_store.h"
#include "collective/gloo_communicator.h"
#include "collective/shm_communicator.h"

ABSL_FLAG(std::string, coordinator, "", "coordinator host:port");
ABSL_FLAG(std::string, job, "", "job id");
ABSL_FLAG(int, attempt, 1, "attempt");
ABSL_FLAG(int, rank, 0, "this rank");
ABSL_FLAG(int, size, 2, "number of ranks");
ABSL_FLAG(int64_t, count, 1000, "elements to allreduce");
ABSL_FLAG(std::string, mode, "allreduce", "allreduce or hang");
ABSL_FLAG(std::string, rank_hosts, "", "comma-separated host of each rank (shm path)");
ABSL_FLAG(std::string, dtype, "i64", "i64 or f32");

namespace yoke::collective {
namespace {

int Run() {
  const int rank = absl::GetFlag(FLAGS_rank), size = absl::GetFlag(FLAGS_size);
  const int64_t count = absl::GetFlag(FLAGS_count);
  CoordinatorStore store(absl::GetFlag(FLAGS_coordinator), absl::GetFlag(FLAGS_job),
                         absl::GetFlag(FLAGS_attempt));
  GlooOptions o;
  o.connect_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Communicator>> comm;
  if (const std::string hosts = absl::GetFlag(FLAGS_rank_hosts); !hosts.empty()) {
    o.rank_hosts = absl::StrSplit(hosts, ',');
    o.hostname = RankHost(o.rank_hosts[rank]);
    comm = CreateCommunicator(&store, rank, size, o);
  } else {
    comm = CreateGlooCommunicator(&store, rank, size, o);
  }
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  const bool f32 = absl::GetFlag(FLAGS_dtype) == "f32";
  std::vector<int64_t> buf(count);
  for (int64_t i = 0; i < count; ++i) buf[i] = rank * 1000 + i;
  std::vector<float> fbuf(buf.begin(), buf.end());
  absl::Status s = f32 ? (*comm)->Allreduce(Buffer{fbuf.data(), count, DataType::kF32}, {})->Wait()
                       : (*comm)->Allreduce(Buffer{buf.data(), count, DataType::kI64}, {})->Wait();
  if (f32) buf.assign(fbuf.begin(), fbuf.end());
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t want = 1000LL * size * (size - 1) / 2 + i * size;
    if (buf[i] != want) {
      std::fprintf(stderr, "rank %d: element %lld is %lld, want %lld\n", rank,
                   static_cast<long long>(i), static_cast<long long>(buf[i]),
                   static_cast<long long>(want));
      return 1;
    }
  }
  std::printf("rank %d ok\n", rank);
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_mode) == "hang") {
    while (true) absl::SleepFor(absl::Hours(1));
  }
  // As a trainer does before it exits (communicator.h).
  s = (*comm)->Leave(absl::Seconds(30));
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace yoke::collective

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::collective::Run();
}
