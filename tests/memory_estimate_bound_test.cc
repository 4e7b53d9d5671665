// The submit-time memory estimate (jobspec/memory_estimate.h) is a lower
// bound the coordinator can trust: for every zoo model, several batch sizes
// and each optimizer's state, a training step in the real engine holds at
// least as much memory as the estimate says (its model part; the sampler's
// share is the data pipeline's, not the engine's). Measured with the CPU
// allocator's count of the bytes it has handed out, after one step: the
// parameters, gradients and optimizer state, every activation kept for
// backward and the planned gradient buffers (engine/model.h). The estimate
// must also stay close: a bound far below the real need would let jobs
// through that cannot fit.
#include <cstdio>
#include <memory>
#include <string>

#include "config/config.h"
#include "engine/allocator.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"
#include "gtest/gtest.h"
#include "jobspec/memory_estimate.h"

namespace yoke {
namespace {

struct Case {
  std::string name;
  std::string model;  // the spec's model: line
  std::vector<int64_t> shape;
  int classes;
};

std::string ShapeYaml(const std::vector<int64_t>& s) {
  std::string out;
  for (int64_t d : s) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return out;
}

// The bytes one training step of `spec` holds in the engine once it is done.
int64_t MeasuredBytes(const v1::JobSpec& spec, const Case& c) {
  engine::Allocator* a = engine::CpuAllocator();
  const int64_t before = static_cast<int64_t>(a->in_use_bytes());
  const int64_t n = spec.training().batch_size();
  int64_t held = -1;
  {
    auto model = engine::Model::Create(spec.model(), engine::Shape(c.shape.begin(), c.shape.end()),
                                       c.classes);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return -1;
    if (spec.training().recompute()) {
      EXPECT_TRUE((*model)->SetRecompute(true).ok());
    }
    if (spec.training().recompute_batch_norm()) {
      EXPECT_TRUE((*model)->SetRecomputeBatchNorm(true).ok());
    }
    (*model)->params().Initialize(1);
    auto opt = engine::CreateOptimizer(spec.training().optimizer(), &(*model)->params());
    EXPECT_TRUE(opt.ok()) << opt.status();
    auto loss = engine::CreateLoss("softmax_cross_entropy");
    engine::Shape xs{n};
    xs.insert(xs.end(), c.shape.begin(), c.shape.end());
    engine::Tensor x = engine::Tensor::Zeros(xs);
    engine::Tensor y = engine::Tensor::Zeros({n}, engine::DType::kI32);
    engine::LayerContext ctx;
    auto logits = (*model)->Forward(x, ctx);
    EXPECT_TRUE(logits.ok()) << logits.status();
    engine::Tensor dlogits = engine::Tensor::Zeros(logits->shape());
    EXPECT_TRUE((*loss)->Compute(*logits, y, 1.0f / n, &dlogits).ok());
    EXPECT_TRUE((*model)->Backward(dlogits, ctx).ok());
    EXPECT_TRUE((*opt)->Step(0.01f, 1.0f).ok());
    held = static_cast<int64_t>(a->in_use_bytes()) - before;
  }
  return held;
}

TEST(MemoryEstimateBound, NeverAboveWhatTheEngineHolds) {
  const std::vector<Case> cases = {
      {"mlp", "{zoo: mlp}", {28, 28, 1}, 10},
      {"cnn", "{zoo: cnn}", {28, 28, 1}, 10},
      {"cnn_rgb", "{zoo: cnn}", {32, 32, 3}, 10},
      {"resnet20", "{zoo: resnet20}", {32, 32, 3}, 10},
      {"resnet18_narrow", "{zoo: resnet18, width: 8}", {64, 64, 3}, 100},
      {"resnet50_narrow", "{zoo: resnet50, width: 4}", {32, 32, 3}, 10},
      {"layers",
       "{layers: [flatten, {dense: {units: 64}}, relu, {dense: {units: 10}}]}",
       {8, 8, 1},
       10},
  };
  const char* optimizers[] = {"{type: sgd, lr: 0.1}", "{type: sgd, lr: 0.1, momentum: 0.9}",
                              "{type: adam, lr: 0.001}"};
  for (const Case& c : cases) {
    for (const int batch : {1, 16, 64}) {
      for (const char* opt : optimizers) {
        // What a Forward keeps: every output, the segments' last outputs, or
        // all but batch norm's.
        for (const std::string keep : {"", "recompute", "recompute_batch_norm"}) {
          const std::string yaml =
              "model: " + c.model + "\ndata: {train: {format: synthetic, shape: [" +
              ShapeYaml(c.shape) + "], num_classes: " + std::to_string(c.classes) +
              ", num_examples: 64}}\ntraining: {batch_size: " + std::to_string(batch) +
              ", optimizer: " + opt + (keep.empty() ? "" : ", " + keep + ": true") + "}\n";
          auto spec = common::LoadJobSpecString(yaml, {});
          ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << yaml;
          const common::MemoryEstimate e = common::EstimateReplicaMemory(*spec);
          const double estimate = e.bytes - e.data_bytes;
          const int64_t held = MeasuredBytes(*spec, c);
          SCOPED_TRACE(c.name + " batch " + std::to_string(batch) + " " + opt + " " + keep);
          ASSERT_GT(held, 0);
          EXPECT_LE(estimate, static_cast<double>(held))
              << "the estimate (" << common::FormatBytes(estimate)
              << ") is above what the engine holds (" << common::FormatBytes(held) << ")";
          // Close enough to refuse what cannot fit: within a factor of 3.
          EXPECT_GE(estimate * 3, static_cast<double>(held))
              << "the estimate (" << common::FormatBytes(estimate) << ") is far below "
              << common::FormatBytes(held);
          std::printf("%-16s batch %3d %-38s %-20s estimate %10.0f held %10lld (%.2f)\n",
                      c.name.c_str(), batch, opt, keep.c_str(), estimate,
                      static_cast<long long>(held), estimate / held);
        }
      }
    }
  }
}

}  // namespace
}  // namespace yoke
