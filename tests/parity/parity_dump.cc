// yoke_parity_dump: trains a job with the real Trainer for its first steps
// and streams, on stdout, everything tests/parity/torch_parity.py needs to
// replay the same steps in PyTorch and compare them one by one.
//
//   yoke_parity_dump JOB.yaml [--set path=value ...]
//
// Run it with training.max_steps set; the job runs in one process (one
// replica), so each step's gradients are the batch mean.
//
// Stream (little-endian):
//   one line of JSON: {"params": [{"name", "shape"}...], "total": P,
//                      "optimizer": {...}, "steps": S}
//   P float32: the initial parameters, entries in declaration order, each
//              row-major in Yoke's layout (dense kernel (in, out), conv
//              kernel (out, kh, kw, in))
//   then per step:
//     int64 n, n int64 dataset indices of the batch,
//     float64 mean loss of the batch,
//     P float32 gradients (the batch mean),
//     P float32 parameters after the optimizer step,
//     int32 k, then k times: int32 name length, the name (the optimizer's
//     state array: "momentum", "exp_avg", "exp_avg_sq"), P float32 values,
//     and last int64 the optimizer's step count;
//   and at the end one line of JSON: the run's v1::TrainResult.
// Exit status 0, or 2 with the reason on stderr.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flags.h"
#include "config/config.h"
#include "engine/param_set.h"
#include "google/protobuf/util/json_util.h"
#include "trainer/trainer.h"

namespace {

constexpr char kUsage[] =
    "usage: yoke_parity_dump JOB.yaml [--set path=value ...]\n"
    "Streams a job's first steps (initial parameters, then per step the batch's\n"
    "indices, mean loss, gradients and updated parameters) on stdout, for\n"
    "tests/parity/torch_parity.py.\n";

void WriteAll(const void* p, size_t bytes) {
  if (std::fwrite(p, 1, bytes, stdout) != bytes) {
    std::fprintf(stderr, "yoke_parity_dump: write to stdout failed\n");
    std::exit(1);
  }
}

// Entries without their alignment padding, in declaration order.
void WriteEntries(const yoke::engine::ParamSet& ps, const yoke::engine::Tensor& flat) {
  const float* base = flat.data<float>();
  for (const auto& e : ps.entries()) {
    WriteAll(base + e.offset, sizeof(float) * yoke::engine::NumElements(e.shape));
  }
}

int Fail(const std::string& why) {
  std::fprintf(stderr, "yoke_parity_dump: %s\n", why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> sets, positional;
  yoke::common::FlagParser parser("yoke_parity_dump", kUsage);
  parser.Strings("--set", &sets);
  if (auto code = parser.ParseOrExitCode(yoke::common::ArgsOf(argc, argv), &positional)) {
    return *code;
  }
  if (positional.size() != 1) return parser.UsageError(stderr, "expected one JOB.yaml");
  auto spec = yoke::common::LoadJobSpecFile(positional[0], sets);
  if (!spec.ok()) return Fail(spec.status().ToString());
  if (spec->training().max_steps() <= 0) {
    return Fail("set training.max_steps: this tool streams every step");
  }

  yoke::worker::TrainerOptions options;
  options.on_step = [](const yoke::worker::TrainerOptions::StepRecord& r) {
    const int64_t n = static_cast<int64_t>(r.indices->size());
    WriteAll(&n, sizeof(n));
    WriteAll(r.indices->data(), sizeof(int64_t) * r.indices->size());
    WriteAll(&r.mean_loss, sizeof(r.mean_loss));
    WriteEntries(*r.params, r.params->flat_grads());
    WriteEntries(*r.params, r.params->flat_values());
    const auto state = r.optimizer->State();
    const auto k = static_cast<int32_t>(state.size());
    WriteAll(&k, sizeof(k));
    for (const auto& [name, values] : state) {
      const auto len = static_cast<int32_t>(name.size());
      WriteAll(&len, sizeof(len));
      WriteAll(name.data(), name.size());
      WriteEntries(*r.params, values);
    }
    const int64_t count = r.optimizer->step_count();
    WriteAll(&count, sizeof(count));
  };
  auto trainer = yoke::worker::Trainer::Create(*spec, options);
  if (!trainer.ok()) return Fail(trainer.status().ToString());

  const yoke::engine::ParamSet& ps = (*trainer)->model().params();
  std::vector<std::string> entries;
  for (const auto& e : ps.entries()) {
    entries.push_back(
        absl::StrCat("{\"name\":\"", e.name, "\",\"shape\":[", absl::StrJoin(e.shape, ","), "]}"));
  }
  std::string optimizer;
  (void)google::protobuf::util::MessageToJsonString(spec->training().optimizer(), &optimizer);
  const std::string header = absl::StrCat(
      "{\"params\":[", absl::StrJoin(entries, ","), "],\"total\":", ps.num_parameters(),
      ",\"optimizer\":", optimizer, ",\"steps\":", spec->training().max_steps(), "}\n");
  WriteAll(header.data(), header.size());
  WriteEntries(ps, ps.flat_values());

  auto result = (*trainer)->Run();
  if (!result.ok()) return Fail(result.status().ToString());
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(*result, &json);
  json += "\n";
  WriteAll(json.data(), json.size());
  std::fflush(stdout);
  return 0;
}
