// The coordinator's request handlers fed arbitrary protos, as a hostile
// client past authentication could send them: each input is a sequence of
// requests (1 byte picks the method, 2 bytes give the length, then the
// serialized request); unparsable ones are skipped. Every call must return
// a response or an error, never crash, and the coordinator keeps state
// across the calls of one input (so Heartbeats can refer to jobs that a
// SubmitJob in the same input created).
#include <cstdint>
#include <memory>

#include "common/testing/fake_clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace yoke;
  common::FakeClock clock;
  server::InMemoryJobStore store;
  server::CoordinatorOptions options;
  auto coord = server::Coordinator::Create(&store, &clock, options);
  if (!coord.ok()) __builtin_trap();
  server::Coordinator& c = **coord;
  size_t i = 0;
  while (i + 3 <= size) {
    const uint8_t method = data[i];
    const size_t len = std::min<size_t>(size - i - 3, data[i + 1] | (data[i + 2] << 8));
    const uint8_t* body = data + i + 3;
    i += 3 + len;
    switch (method % 5) {
      case 0: {
        v1::SubmitJobRequest req;
        if (req.ParseFromArray(body, static_cast<int>(len))) {
          (void)c.Submit(req.spec(), req.priority(), "fuzz");
        }
        break;
      }
      case 1: {
        v1::RegisterWorkerRequest req;
        if (req.ParseFromArray(body, static_cast<int>(len))) (void)c.RegisterWorker(req);
        break;
      }
      case 2: {
        v1::HeartbeatRequest req;
        if (req.ParseFromArray(body, static_cast<int>(len))) (void)c.Heartbeat(req);
        break;
      }
      case 3: {
        server::JobListQuery q;
        q.page_size = len;
        (void)c.List(q);
        (void)c.ListWorkers();
        break;
      }
      default:
        clock.Advance(absl::Seconds(len % 30));
        (void)c.Cancel("job-000001");
        break;
    }
  }
  return 0;
}
