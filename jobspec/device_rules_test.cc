// The rules of distribution.device and training.precision (job_validate.cc):
// a CUDA job trains on one GPU, without gradient accumulation, and only fp32
// is implemented on either device. Each refusal names the field and why.
#include <string>
#include <vector>

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_validate.h"

namespace yoke::common {
namespace {

using testing::HasSubstr;

const char kJob[] = R"(
model: {zoo: mlp}
data:
  train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 100}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

absl::Status Validate(const std::vector<std::string>& overrides) {
  auto spec = LoadJobSpecString(kJob, overrides, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? ValidateJobSpec(*spec) : spec.status();
}

TEST(DeviceRulesTest, OneGpuIsAccepted) {
  for (const auto& o : std::vector<std::vector<std::string>>{
           {"distribution.device=cuda"},
           {"distribution={workers: 1, devices_per_worker: 1, device: cuda}"},
           {"distribution.device=cuda", "training.accumulation_steps=1", "training.precision=fp32",
            "training.clip_grad_norm=1"},
           {"training.precision=fp32"},
           {"distribution.device=cuda", "training.precision=tf32"},
           {"training.precision=bf16"},
           {"training.precision=bf16", "training.recompute=true"},
           {"training.precision=bf16", "training.recompute_batch_norm=true"}}) {
    absl::Status s = Validate(o);
    EXPECT_TRUE(s.ok()) << testing::PrintToString(o) << ": " << s;
  }
}

struct Refusal {
  std::vector<std::string> overrides;
  std::string expected;
};

TEST(DeviceRulesTest, WhatCannotRunIsRefusedWithTheReason) {
  const Refusal refusals[] = {
      {{"distribution.device=cuda", "distribution.devices_per_worker=2"},
       "distribution.device: 'cuda' trains on one GPU for now (distribution.workers and "
       "devices_per_worker at most 1, got 0 and 2): several GPU replicas need the NCCL "
       "gradient reducer"},
      {{"distribution.device=cuda", "distribution.workers=3"}, "got 3 and 0"},
      {{"distribution.device=cuda", "training.accumulation_steps=2"},
       "training.accumulation_steps: above 1 is not supported on distribution.device 'cuda' yet"},
      {{"training.precision=fp64"},
       "training.precision: unknown precision 'fp64' (known: fp32, tf32, bf16, fp16)"},
      {{"training.precision=bf16", "distribution.device=cuda"},
       "training.precision: 'bf16' is not implemented yet on cuda (fp32 everywhere, bf16 on "
       "the cpu, tf32 on cuda;"},
      {{"training.precision=fp16"}, "training.precision: 'fp16' is not implemented yet on cpu"},
      {{"training.precision=tf32"},
       "training.precision: 'tf32' is a GPU precision (tensor cores reading fp32 at TF32); use "
       "it with distribution.device: cuda"},
      {{"distribution.device=tpu"}, "distribution.device: unknown device 'tpu' (known: cpu, cuda)"},
      {{"distribution.device=cuda", "training.recompute=true"},
       "training.recompute: the CUDA engine does not recompute activations yet"},
      {{"distribution.device=cuda", "training.recompute_batch_norm=true"},
       "training.recompute_batch_norm: the CUDA engine does not recompute activations yet"},
      {{"training.recompute=true", "training.recompute_batch_norm=true"},
       "training.recompute_batch_norm: not with training.recompute"},
  };
  for (const Refusal& r : refusals) {
    absl::Status s = Validate(r.overrides);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << testing::PrintToString(r.overrides);
    EXPECT_THAT(std::string(s.message()), HasSubstr(r.expected))
        << testing::PrintToString(r.overrides);
  }
}

}  // namespace
}  // namespace yoke::common
