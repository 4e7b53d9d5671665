// ps_test_worker: one parameter-server worker as a process of its own, for
// ps/runtime/rejoin_test.cc, which kills it with SIGKILL and starts its next
// incarnation. It links to the PS tasks through a FileStore directory and
// pushes a gradient of `samples` in every element with `samples` samples, so
// every update it causes moves each value by exactly -lr.
//
//   --store_dir DIR    the FileStore the PS tasks use
//   --worker W --incarnation N
//   --floats F --ps_tasks P --min_shard_bytes B   the shard map's inputs
//   --pushes N         leave after N steps; -1: never
//   --step_ms MS       sleep between steps
//   --start_step S     incarnation 0's first data step (the attempt's)
//   --report FILE      written after every step: "<clock> <steps pushed>
//                      <join clock> <values[0] after the join> <next data
//                      step> <data step at the join>" (atomically)
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "collective/file_store.h"
#include "ps/runtime/links.h"
#include "ps/runtime/ps_client.h"
#include "ps/shard_map.h"

ABSL_FLAG(std::string, store_dir, "", "the FileStore directory");
ABSL_FLAG(int, worker, 0, "the worker's number");
ABSL_FLAG(int64_t, incarnation, 0, "the worker's incarnation");
ABSL_FLAG(int64_t, floats, 1000, "parameters in the model");
ABSL_FLAG(int, ps_tasks, 1, "PS tasks");
ABSL_FLAG(int64_t, min_shard_bytes, 256 << 10, "the shard map's minimum shard");
ABSL_FLAG(int64_t, pushes, -1, "leave after this many steps; -1: never");
ABSL_FLAG(int, step_ms, 2, "sleep between steps");
ABSL_FLAG(std::string, report, "", "progress file");
ABSL_FLAG(int64_t, start_step, 0, "incarnation 0's first data step");

namespace yoke::ps {
namespace {

void Report(const std::string& path, const std::string& line) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << line << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

int Run() {
  auto store = collective::FileStore::Open(absl::GetFlag(FLAGS_store_dir));
  if (!store.ok()) return std::fprintf(stderr, "%s\n", store.status().ToString().c_str()), 2;
  const int worker = absl::GetFlag(FLAGS_worker);
  const int64_t incarnation = absl::GetFlag(FLAGS_incarnation);
  const int64_t floats = absl::GetFlag(FLAGS_floats);
  auto map =
      BuildShardMap(floats, absl::GetFlag(FLAGS_ps_tasks), absl::GetFlag(FLAGS_min_shard_bytes));
  if (!map.ok()) return std::fprintf(stderr, "%s\n", map.status().ToString().c_str()), 2;
  auto links = ConnectWorkerLinks(store->get(), worker, incarnation, *map,
                                  [](int) { return collective::GlooOptions(); });
  if (!links.ok()) return std::fprintf(stderr, "%s\n", links.status().ToString().c_str()), 1;
  auto client = PsClient::Create(*links, worker, *map, absl::Seconds(60));
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.status().ToString().c_str()), 1;
  std::vector<float> values(floats, 0.0f);
  constexpr int64_t kSamples = 4;
  const std::vector<float> grads(floats, static_cast<float>(kSamples));
  if (incarnation > 0) {
    absl::Status st = (*client)->Rejoin(values.data());
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  } else {
    absl::Status st = (*client)->StartAt(absl::GetFlag(FLAGS_start_step));
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 2;
  }
  const int64_t join_step = (*client)->data_step();
  const int64_t join_clock = (*client)->clock();
  const float joined = values[0];
  const std::string report = absl::GetFlag(FLAGS_report);
  const int64_t pushes = absl::GetFlag(FLAGS_pushes);
  while (pushes < 0 || (*client)->stats().pushes < pushes) {
    absl::Status st = (*client)->PushPull(grads.data(), values.data(), kSamples);
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
    if (!report.empty()) {
      Report(report,
             absl::StrFormat("%d %d %d %.9g %d %d", (*client)->clock(), (*client)->stats().pushes,
                             join_clock, joined, (*client)->data_step(), join_step));
    }
    absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_step_ms)));
  }
  absl::Status st = (*client)->Leave();
  if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  return 0;
}

}  // namespace
}  // namespace yoke::ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::ps::Run();
}
