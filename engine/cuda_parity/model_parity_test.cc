// Model parity and steady-state invariants (`make gpu-check` stage 4): a
// zoo model trained on CUDA against the same model trained by the CPU
// engine, from the same initial parameters on the same synthetic batches.
//   - ResNet-20 (CIFAR shape), 30 steps of SGD with momentum, fp32: the loss
//     within 1e-4 relative of the CPU's for the first 10 steps, the
//     parameters within 1e-3 relative L2 at step 30;
//   - the CNN (Fashion-MNIST shape, max pool and dropout), 10 steps, Adam;
//   - a checkpoint file written from the GPU model at step 15 and read into
//     a fresh CPU model and a fresh GPU model: both continue to step 30,
//     the CPU one within the tolerance above, the GPU one bit for bit;
//   - a second GPU run from the same start is bit for bit the first;
//   - after step 2, no step allocates device memory, and each step waits on
//     the device at most once (the loss read back).
//
// gpu-labelled: skips without a CUDA device (the CPU self-test runs the same
// code CPU against CPU, YOKE_PARITY_SELF_TEST=1).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "engine/checkpoint.h"
#include "engine/cuda_parity/parity_util.h"
#include "engine/device_backend.h"
#include "engine/kernels/cuda/device_context.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace yoke::engine::parity {
namespace {

struct Recipe {
  std::string name, zoo, optimizer;
  Shape input;  // per example
  int classes;
  int64_t batch;
};

// One replica: model, loss and optimizer on one device.
struct Replica {
  std::unique_ptr<Model> model;
  std::unique_ptr<Loss> loss;
  std::unique_ptr<Optimizer> opt;
  Device device;
};

void Make(const Recipe& r, Device device, Replica* out) {
  v1::ModelSpec spec;
  spec.set_zoo(r.zoo);
  auto model = Model::Create(spec, r.input, r.classes, device);
  ASSERT_TRUE(model.ok()) << model.status();
  out->model = *std::move(model);
  out->model->params().Initialize(42);
  auto loss = CreateLoss("softmax_cross_entropy", 0.0f, device);
  ASSERT_TRUE(loss.ok()) << loss.status();
  out->loss = *std::move(loss);
  v1::OptimizerSpec os;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(r.optimizer, &os));
  auto opt = CreateOptimizer(os, &out->model->params());
  ASSERT_TRUE(opt.ok()) << opt.status();
  out->opt = *std::move(opt);
  out->device = device;
}

// Step `step` (0-based) of the recipe's synthetic data: the same batch for
// every device.
struct Batch {
  Tensor x, y;
};
Batch HostBatch(const Recipe& r, int step) {
  Shape s = r.input;
  s.insert(s.begin(), r.batch);
  return {RandomHost(s, 1000 + step), RandomLabels(r.batch, r.classes, 2000 + step)};
}

// One training step; returns the loss sum.
double Step(Replica* rep, const Recipe& r, int step) {
  Batch b = HostBatch(r, step);
  Tensor x = rep->device.is_cpu() ? b.x : ToDevice(b.x);
  Tensor y = rep->device.is_cpu() ? b.y : ToDevice(b.y);
  LayerContext ctx;
  ctx.seed = 5;
  ctx.step = step;
  auto logits = rep->model->Forward(x, ctx);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return NAN;
  auto dz = Tensor::Allocate(logits->shape(), DType::kF32, rep->device, "dlogits");
  EXPECT_TRUE(dz.ok());
  auto res = rep->loss->Compute(*logits, y, 1.0f / static_cast<float>(r.batch), &*dz);
  EXPECT_TRUE(res.ok()) << res.status();
  if (!res.ok()) return NAN;
  absl::Status s = rep->model->Backward(*dz, ctx);
  EXPECT_TRUE(s.ok()) << s;
  s = rep->opt->Step(0.05f);
  EXPECT_TRUE(s.ok()) << s;
  return res->loss_sum;
}

Tensor HostCopy(const Tensor& t) { return t.device().is_cpu() ? t : ToHost(t); }

// The model's parameters, state and optimizer state as checkpoint tensors.
NamedTensors Snapshot(const Replica& rep) {
  NamedTensors t = {{"values", HostCopy(rep.model->params().flat_values())}};
  if (rep.model->params().flat_state().defined()) {
    t.push_back({"state", HostCopy(rep.model->params().flat_state())});
  }
  for (const auto& [name, tensor] : rep.opt->State()) t.push_back({name, HostCopy(tensor)});
  return t;
}

void Restore(const Checkpoint& ckpt, int64_t steps, Replica* rep) {
  rep->model->params().flat_values().CopyFrom(*ckpt.Find("values"));
  if (const Tensor* s = ckpt.Find("state")) rep->model->params().flat_state().CopyFrom(*s);
  for (const auto& [name, tensor] : rep->opt->State()) tensor.CopyFrom(*ckpt.Find(name));
  rep->opt->set_step_count(steps);
}

// Device allocations and host waits so far (0 on the CPU of a self-test).
int64_t DeviceMallocs(Device d) {
  return d.is_cuda() ? (*cuda::ContextFor(d.index))->allocator()->stats().device_mallocs : 0;
}
int64_t Syncs(Device d) {
  return d.is_cuda() ? (*cuda::ContextFor(d.index))->synchronizations() : 0;
}

class ModelParityTest : public ::testing::TestWithParam<Recipe> {};

TEST_P(ModelParityTest, TrainsLikeTheCpu) {
  SKIP_UNLESS_PARITY_DEVICE();
  const Recipe& r = GetParam();
  // The CPU self-test only proves the harness: a few steps.
  const int steps = SelfTest() ? 4 : r.zoo == "resnet20" ? 30 : 10;
  const int half = steps / 2;
  Replica cpu, gpu, again;
  ASSERT_NO_FATAL_FAILURE(Make(r, Device::CPU(), &cpu));
  ASSERT_NO_FATAL_FAILURE(Make(r, Gpu(), &gpu));
  ASSERT_NO_FATAL_FAILURE(Make(r, Gpu(), &again));
  bool ok = true;
  common::TempDir dir("yoke_parity");
  const std::string path = dir.path() + "/gpu.yoke";
  int64_t mallocs_after_2 = 0, syncs_steady = 0;
  for (int step = 0; step < steps; ++step) {
    if (step == 2) mallocs_after_2 = DeviceMallocs(gpu.device);
    const int64_t s0 = Syncs(gpu.device);
    const double lg = Step(&gpu, r, step);
    if (step >= 2) syncs_steady = std::max(syncs_steady, Syncs(gpu.device) - s0);
    const double lc = Step(&cpu, r, step);
    if (step < 10) {
      Measure m;
      m.rel_l2 = std::fabs(lg - lc) / std::fabs(lc);
      m.max_abs = std::fabs(lg - lc);
      m.nonfinite = std::isfinite(lg) ? 0 : 1;
      ok &= Record(r.name, absl::StrCat("loss", step), m, 1e-4);
    }
    if (step + 1 == half) {
      v1::CheckpointHeader header;
      ASSERT_TRUE(WriteCheckpoint(path, header, Snapshot(gpu)).ok());
    }
  }
  ok &= Record(
      r.name, "params",
      Compare(HostCopy(gpu.model->params().flat_values()), cpu.model->params().flat_values()),
      1e-3);
  ok &= RecordCount(r.name, "mallocs_after_step2", DeviceMallocs(gpu.device) - mallocs_after_2, 0);
  ok &= RecordCount(r.name, "syncs_per_step", syncs_steady, 1);

  // A second GPU run from the same start: bit for bit.
  for (int step = 0; step < steps; ++step) Step(&again, r, step);
  ok &= Record(r.name, "gpu_repeat",
               Compare(HostCopy(again.model->params().flat_values()),
                       HostCopy(gpu.model->params().flat_values())),
               0);

  // The GPU checkpoint, resumed on the CPU and on the GPU.
  auto ckpt = ReadCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  Replica cpu2, gpu2;
  ASSERT_NO_FATAL_FAILURE(Make(r, Device::CPU(), &cpu2));
  ASSERT_NO_FATAL_FAILURE(Make(r, Gpu(), &gpu2));
  Restore(*ckpt, half, &cpu2);
  Restore(*ckpt, half, &gpu2);
  for (int step = half; step < steps; ++step) {
    Step(&cpu2, r, step);
    Step(&gpu2, r, step);
  }
  ok &=
      Record(r.name, "resume_on_cpu",
             Compare(cpu2.model->params().flat_values(), cpu.model->params().flat_values()), 1e-3);
  ok &= Record(r.name, "resume_on_gpu",
               Compare(HostCopy(gpu2.model->params().flat_values()),
                       HostCopy(gpu.model->params().flat_values())),
               0);
  EXPECT_TRUE(ok) << r.name << ": see the parity log for the measures";
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ModelParityTest,
    ::testing::Values(Recipe{"resnet20_sgd",
                             "resnet20",
                             "type: 'sgd' lr: 0.05 momentum: 0.9 weight_decay: 0.0005",
                             {32, 32, 3},
                             10,
                             8},
                      Recipe{"cnn_adam", "cnn", "type: 'adam' lr: 0.001", {28, 28, 1}, 10, 16}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace yoke::engine::parity
