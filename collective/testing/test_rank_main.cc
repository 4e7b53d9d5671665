// collective_test_rank: one rank of a multi-process collective test. It
// bootstraps a Gloo communicator through a real coordinator's Rendezvous API
// (CoordinatorStore), allreduces `--count` i64 elements (element i of rank r
// is r * 1000 + i) and checks the result exactly.
//
//   --mode=allreduce  exit 0 if the sum is right, 1 otherwise (with why)
//   --mode=hang       after the first allreduce, sleep forever (the test
//                     kills this process)
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "collective/coordinator_store.h"
#include "collective/gloo_communicator.h"

ABSL_FLAG(std::string, coordinator, "", "coordinator host:port");
ABSL_FLAG(std::string, job, "", "job id");
ABSL_FLAG(int, attempt, 1, "attempt");
ABSL_FLAG(int, rank, 0, "this rank");
ABSL_FLAG(int, size, 2, "number of ranks");
ABSL_FLAG(int64_t, count, 1000, "elements to allreduce");
ABSL_FLAG(std::string, mode, "allreduce", "allreduce or hang");

namespace yoke::collective {
namespace {

int Run() {
  const int rank = absl::GetFlag(FLAGS_rank), size = absl::GetFlag(FLAGS_size);
  const int64_t count = absl::GetFlag(FLAGS_count);
  CoordinatorStore store(absl::GetFlag(FLAGS_coordinator), absl::GetFlag(FLAGS_job),
                         absl::GetFlag(FLAGS_attempt));
  GlooOptions o;
  o.connect_timeout = absl::Seconds(30);
  auto comm = CreateGlooCommunicator(&store, rank, size, o);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  std::vector<int64_t> buf(count);
  for (int64_t i = 0; i < count; ++i) buf[i] = rank * 1000 + i;
  absl::Status s = (*comm)->Allreduce(Buffer{buf.data(), count, DataType::kI64}, {})->Wait();
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
