// The YAML job-spec loader and the validator on arbitrary text: any input
// must give a spec or an error, never a crash, a hang or a huge allocation.
//
// And issue 30's invariant: a spec the validator accepts is never refused by
// the trainer's own checks (exit 2), since the coordinator validates at submit
// and the trainer must never be the first to say no. The trainer's checks
// (Trainer::Create: the datasets, the model built for their shapes, the loss,
// the optimizer and the schedule) run on every accepted spec they can run on
// here: synthetic data (other formats read files the trainer checks), cpu (a
// cuda job is refused at submit unless a worker has GPUs), and a replica
// smaller than 64 MiB by the coordinator's own estimate, so no input makes
// the fuzzer allocate much. Running out of memory is not a refusal (exit 1).
//
// Zoo models and written-out `layers:` lists alike: the shape rules of a list
// (a kernel larger than its input, a last layer that does not output one
// logit per class, an output no layer reads) live in engine/shapes/, which
// both the validator and the engine's layers run.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/config.h"
#include "jobspec/job_validate.h"
#include "jobspec/memory_estimate.h"
#include "trainer/trainer.h"

namespace {

bool Synthetic(const yoke::v1::DatasetSpec& d) { return d.format() == "synthetic"; }

void CheckTheTrainerAgrees(yoke::v1::JobSpec spec) {
  if (spec.distribution().device() == "cuda") return;
  if (!Synthetic(spec.data().train())) return;
  if (spec.data().has_test() && !Synthetic(spec.data().test())) return;
  if (yoke::common::EstimateReplicaMemory(spec).bytes > 64.0 * (1 << 20)) return;
  // What Create writes rather than checks: no directories on this machine.
  spec.mutable_checkpoint()->clear_dir();
  spec.mutable_training()->set_threads(1);
  yoke::worker::TrainerOptions options;
  options.spec_validated = true;
  auto trainer = yoke::worker::Trainer::Create(spec, options);
  if (trainer.ok() || trainer.status().code() == absl::StatusCode::kResourceExhausted) return;
  std::fprintf(stderr, "the validator accepted a spec the trainer refuses: %s\n%s\n",
               trainer.status().ToString().c_str(), spec.DebugString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = yoke::common::LoadJobSpecString(text, {}, "fuzz.yaml");
  if (!spec.ok() || !yoke::common::ValidateJobSpec(*spec).ok()) return 0;
  CheckTheTrainerAgrees(*std::move(spec));
  return 0;
}
