#include "jobspec/memory_estimate.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "engine/zoo/model_zoo.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

v1::JobSpec Spec(const std::string& yaml) {
  auto s = LoadJobSpecString(yaml, {});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Counted by hand: sgd without momentum keeps a parameter and its gradient
// (8 bytes); an activation takes 4 bytes per example, and the largest
// activation's gradient 4 more (the gradients share memory by liveness).
TEST(MemoryEstimateTest, CountsParametersAndActivationsOfEachLayer) {
  const MemoryEstimate e = EstimateReplicaMemory(Spec(R"(
model: {layers: [{dense: {units: 100}}, {relu: {}}, {dense: {units: 10}, name: out}]}
training: {batch_size: 8, optimizer: {type: sgd, lr: 0.1}}
)"));
  // dense 100: (100 x 1 + 100) params x 8 + 100 x 8 examples x 4 = 1600 + 3200
  // relu:      100 x 8 x 4 = 3200
  // out:       (10 x 100 + 10) x 8 + 10 x 8 x 4 = 8080 + 320
  // the largest gradient: 100 x 8 x 4 = 3200
  EXPECT_DOUBLE_EQ(e.bytes, 4800 + 3200 + 8400 + 3200);
  EXPECT_EQ(e.largest_layer, "model.layers[2] (out)");
  EXPECT_DOUBLE_EQ(e.largest_layer_bytes, 8400);
}

// A synthetic set says the input's shape: each layer is counted at its real
// size (engine/shapes), not from a 1x1x1 input.
TEST(MemoryEstimateTest, AKnownInputCountsEachLayerAtItsShape) {
  const MemoryEstimate e = EstimateReplicaMemory(Spec(R"(
model: {layers: [flatten, {dense: {units: 10}}]}
data: {train: {format: synthetic, shape: [4, 4, 3], num_classes: 10, num_examples: 1}}
training: {batch_size: 8, optimizer: {type: sgd, lr: 0.1}}
)"));
  // sampler: 8; flatten: 48 x 8 examples x 4 = 1536;
  // dense: (10 x 48 + 10) x 8 + 10 x 8 x 4 = 3920 + 320; the largest
  // gradient, dense's: 320 (the engine gives the flatten before the first
  // layer with parameters no gradient buffer)
  EXPECT_DOUBLE_EQ(e.bytes, 8 + 1536 + 4240 + 320);
  EXPECT_EQ(e.largest_layer, "model.layers[1]");
}

// The CPU engine's fusions allocate no output for a ReLU its convolution
// applies, nor for a first convolution that writes its 2x2 max pool's
// output: the estimate leaves both out, so it stays a lower bound.
// Formats whose example shape the spec fixes without a file header count
// as a synthetic set of that shape: an image_folder at its resize (or its
// crop) and channels, cifar10 at 32x32x3. An idx file's shape is in its
// header: with the shape the caller read from it, it counts as a synthetic
// set of that shape; without, it stays at the 1x1x1 lower bound.
TEST(MemoryEstimateTest, ImageFoldersAndCifarCountAtTheShapeTheSpecFixes) {
  auto at = [](const std::string& train, const std::string& model,
               const std::vector<int64_t>& idx_shape = {}) {
    return EstimateReplicaMemory(Spec("model: " + model + "\ndata: {train: " + train +
                                      "}\ntraining: {batch_size: 16, optimizer: {type: sgd, "
                                      "lr: 0.1, momentum: 0.9}}\n"),
                                 idx_shape)
        .bytes;
  };
  const std::string resnet = "{zoo: resnet50}";
  const double synthetic224 = at("{format: synthetic, shape: [224, 224, 3]}", resnet);
  EXPECT_DOUBLE_EQ(at("{format: image_folder, root: /d, image_size: [224, 224]}", resnet),
                   synthetic224);
  EXPECT_DOUBLE_EQ(at("{format: image_folder, root: /d, image_size: [256, 256], crop: center, "
                      "crop_size: [224, 224]}",
                      resnet),
                   synthetic224);
  const std::string cnn =
      "{layers: [{conv2d: {filters: 8, kernel: 3}}, relu, flatten, "
      "{dense: {units: 10}}]}";
  EXPECT_DOUBLE_EQ(at("{format: image_folder, root: /d, image_size: [20, 30], channels: 1}", cnn),
                   at("{format: synthetic, shape: [20, 30, 1]}", cnn));
  EXPECT_DOUBLE_EQ(at("{format: cifar10, files: [/d/data_batch_1.bin]}", cnn),
                   at("{format: synthetic, shape: [32, 32, 3]}", cnn));
  // ResNet-50 at 224, batch 16, needs gigabytes; on an unknown (idx)
  // input it is counted from 1x1x1: little beyond its parameters.
  EXPECT_GT(synthetic224, 1e9);
  EXPECT_LT(at("{format: idx, images: /i.gz, labels: /l.gz}", resnet), synthetic224 / 5);
  // With its header's 224x224x1 (an idx file holds one channel).
  EXPECT_DOUBLE_EQ(at("{format: idx, images: /i.gz, labels: /l.gz}", resnet, {224, 224, 1}),
                   at("{format: synthetic, shape: [224, 224, 1]}", resnet));
  EXPECT_DOUBLE_EQ(at("{format: idx, images: /i.gz, labels: /l.gz}", cnn, {28, 28, 1}),
                   at("{format: synthetic, shape: [28, 28, 1]}", cnn));
  // A shape given for another format changes nothing.
  EXPECT_DOUBLE_EQ(at("{format: cifar10, files: [/d/data_batch_1.bin]}", cnn, {28, 28, 1}),
                   at("{format: synthetic, shape: [32, 32, 3]}", cnn));
}

TEST(MemoryEstimateTest, OutputsTheFusionsNeverAllocateAreNotCounted) {
  const MemoryEstimate e = EstimateReplicaMemory(Spec(R"(
model: {layers: [{conv2d: {filters: 2, kernel: 3}}, relu, {max_pool2d: {}}, flatten,
                 {dense: {units: 10}}]}
data: {train: {format: synthetic, shape: [4, 4, 1], num_classes: 10, num_examples: 1}}
training: {batch_size: 1, optimizer: {type: sgd, lr: 0.1}}
)"));
  // sampler: 8; conv: (2 x 9 + 2) x 8 = 160, its 4x4x2 output written into
  // the pool's; relu: in the conv's buffer; pool: 2x2x2 x 4 = 32; flatten:
  // 32; dense: (10 x 8 + 10) x 8 + 10 x 4 = 720 + 40; the largest gradient
  // kept, dense's: 40
  EXPECT_DOUBLE_EQ(e.bytes, 8 + 160 + 32 + 32 + 760 + 40);
  // A second convolution's ReLU is still applied in place, but that
  // convolution (not reading the input) keeps its own output.
  const MemoryEstimate two = EstimateReplicaMemory(Spec(R"(
model: {layers: [{conv2d: {filters: 1, kernel: 1, no_bias: true}}, {conv2d: {filters: 2, kernel: 3}},
                 relu, {max_pool2d: {}}, flatten, {dense: {units: 10}}]}
data: {train: {format: synthetic, shape: [4, 4, 1], num_classes: 10, num_examples: 1}}
training: {batch_size: 1, optimizer: {type: sgd, lr: 0.1}}
)"));
  // + the 1x1 conv: 1 x 8 + 4x4x1 x 4 = 72; the 3x3 conv's output now
  // counted: 4x4x2 x 4 = 128, and the largest gradient is its: 128
  EXPECT_DOUBLE_EQ(two.bytes, 8 + 72 + 160 + 128 + 32 + 32 + 760 + 128);
}

// A pipeline's replica holds one stage, for one micro-batch: the first
// test's model (19,600 bytes on one rank) in 2 stages of 2 micro-batches.
TEST(MemoryEstimateTest, APipelineReplicaCountsItsLargestStageAtTheMicroBatch) {
  const std::string job = R"(
model: {layers: [{dense: {units: 100}}, {relu: {}}, {dense: {units: 10}, name: out}]}
training: {batch_size: 8, optimizer: {type: sgd, lr: 0.1}}
distribution: {workers: 2, pipeline: {stages: 2, micro_batches: 2)";
  const MemoryEstimate at = EstimateReplicaMemory(Spec(job + ", boundaries: [out]}}"));
  // 4 examples a micro-batch. Stage 1: dense 100 (1600 + 100 x 4 x 4),
  // relu 1600, its largest gradient 1600: 6400. Stage 2: out (8080 + 160)
  // and its gradient 160: 8400, the larger.
  EXPECT_DOUBLE_EQ(at.bytes, 8400);
  EXPECT_EQ(at.stages, 2);
  // Split by the trainer: at least half the layers' 13,040, and at least
  // the largest layer's 8,240.
  const MemoryEstimate balanced = EstimateReplicaMemory(Spec(job + "}}"));
  EXPECT_DOUBLE_EQ(balanced.bytes, 8240);
  // Two pipelines of 2 stages: 8 examples over 2 pipelines and 2
  // micro-batches is 2 each.
  const MemoryEstimate two = EstimateReplicaMemory(
      Spec(absl::StrCat(job, ", boundaries: [out]}, devices_per_worker: 2}")));
  EXPECT_DOUBLE_EQ(two.bytes, 8080 + 80 + 80);
}

TEST(MemoryEstimateTest, AdamKeepsTwoMoreCopiesAndReplicasSplitTheBatch) {
  const std::string model = "model: {layers: [{dense: {units: 10}}, {dense: {units: 10}}]}\n";
  const double sgd = EstimateReplicaMemory(
                         Spec(model + "training: {batch_size: 4, optimizer: {type: sgd, lr: 1}}"))
                         .bytes;
  const double adam = EstimateReplicaMemory(
                          Spec(model + "training: {batch_size: 4, optimizer: {type: adam, lr: 1}}"))
                          .bytes;
  // 20 + 110 parameters, two more fp32 copies each.
  EXPECT_DOUBLE_EQ(adam - sgd, 130 * 8);
  const double split = EstimateReplicaMemory(
                           Spec(model + "training: {batch_size: 8, optimizer: {type: sgd, lr: 1}}\n"
                                        "distribution: {workers: 2}"))
                           .bytes;
  EXPECT_DOUBLE_EQ(split, sgd) << "8 examples over 2 replicas is 4 each";
}

TEST(MemoryEstimateTest, AGiantLayerDominates) {
  const MemoryEstimate e = EstimateReplicaMemory(Spec(R"(
model: {layers: [{dense: {units: 1000000000}}, {dense: {units: 10}}]}
training: {batch_size: 64, optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}
)"));
  EXPECT_GT(e.bytes, 5e11);
  EXPECT_EQ(e.largest_layer, "model.layers[0]");  // 10^9 outputs x 64 examples
}

// A zoo model counts exactly as the same network written out as layers.
TEST(MemoryEstimateTest, AZooModelCountsAsItsOwnLayers) {
  const std::string rest = R"(
data: {train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 100}}
training: {batch_size: 64, optimizer: {type: adam, lr: 0.001}}
)";
  for (const std::string zoo : {"mlp", "cnn", "resnet20", "resnet50"}) {
    const v1::JobSpec spec = Spec("model: {zoo: " + zoo + "}" + rest);
    auto layers = engine::ExpandZoo(spec.model(), {28, 28, 1}, 10);
    ASSERT_TRUE(layers.ok()) << layers.status();
    v1::JobSpec written = spec;
    written.mutable_model()->clear_zoo();
    for (const v1::LayerSpec& l : *layers) *written.mutable_model()->add_layers() = l;
    const MemoryEstimate z = EstimateReplicaMemory(spec);
    EXPECT_GT(z.bytes, 800.0) << zoo;  // the sampler's 800 bytes and more
    EXPECT_DOUBLE_EQ(z.bytes, EstimateReplicaMemory(written).bytes) << zoo;
  }
  // ResNet-50 with 10 classes holds about 23.5 million parameters; adam
  // keeps 4 floats of each.
  EXPECT_GT(EstimateReplicaMemory(Spec("model: {zoo: resnet50}" + rest)).bytes, 23e6 * 16);
}

// What an authenticated submitter could send past the old check: the zoo
// MLP with giant hidden layers or class counts, a giant batch, a synthetic
// set whose permutation alone fills a worker.
TEST(MemoryEstimateTest, GiantZooModelsBatchesAndDataSetsAreCounted) {
  const std::string data =
      "data: {train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: "
      "100}}\n";
  const MemoryEstimate hidden =
      EstimateReplicaMemory(Spec("model: {zoo: mlp, hidden: [1000000, 1000000]}\n" + data));
  EXPECT_GT(hidden.bytes, 1e12 * 8);  // 10^12 weights, each with its gradient
  EXPECT_EQ(hidden.largest_layer, "model.zoo mlp: layer [3]");
  const MemoryEstimate classes = EstimateReplicaMemory(
      Spec("model: {zoo: mlp}\n"
           "data: {train: {format: synthetic, shape: [28, 28, 1], num_classes: 2147483647, "
           "num_examples: 100}}\n"));
  EXPECT_GT(classes.bytes, 128 * 2147483647.0 * 8);
  const MemoryEstimate batch = EstimateReplicaMemory(
      Spec("model: {zoo: mlp}\n" + data + "training: {batch_size: 1000000000}\n"));
  EXPECT_GT(batch.bytes, 1e9 * 8 * 256);  // the first hidden layer's output alone
  const MemoryEstimate examples = EstimateReplicaMemory(
      Spec("model: {zoo: mlp}\n"
           "data: {train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, "
           "num_examples: 1000000000}}\n"));
  EXPECT_DOUBLE_EQ(examples.data_bytes, 8e9);
  EXPECT_GT(examples.bytes, 8e9);
}

// A PS task, counted by hand: its shard (the whole model's 1,210 values:
// under the 256 KiB minimum one PS task holds it) as values and gradients,
// plus the optimizer's copies, the pushes held from all workers but the
// last (none under async) and an answer per worker. No model of its own.
TEST(MemoryEstimateTest, APsTaskHoldsItsShardAndTheWorkersPushes) {
  const std::string model =
      "model: {layers: [{dense: {units: 100}}, {relu: {}}, {dense: {units: 10}}]}\n";
  auto spec = [&](const std::string& opt, const std::string& dist) {
    return Spec(model + "training: {batch_size: 8, optimizer: " + opt + "}\n" + dist);
  };
  const v1::JobSpec plain = spec("{type: sgd, lr: 0.1}", "distribution: {workers: 2}");
  const MemoryEstimate e = EstimateReplicaMemory(plain);
  EXPECT_DOUBLE_EQ(e.parameters, 1210);
  EXPECT_DOUBLE_EQ(EstimatePsTaskMemory(plain, e), 0) << "not a PS job";
  const std::string ps =
      "distribution: {workers: 2, strategy: parameter_server, "
      "parameter_servers: 1";
  const v1::JobSpec sync = spec("{type: sgd, lr: 0.1}", ps + "}");
  // 1,210 x (values and gradients 2 + held 1 + answers 2)
  EXPECT_DOUBLE_EQ(EstimatePsTaskMemory(sync, EstimateReplicaMemory(sync)), 4.0 * 1210 * 5);
  const v1::JobSpec async = spec("{type: sgd, lr: 0.1}", ps + ", consistency: async}");
  EXPECT_DOUBLE_EQ(EstimatePsTaskMemory(async, EstimateReplicaMemory(async)), 4.0 * 1210 * 4);
  const v1::JobSpec adam = spec("{type: adam, lr: 0.1}",
                                "distribution: {workers: 2, devices_per_worker: 2, strategy: "
                                "parameter_server, parameter_servers: 1, consistency: bounded, "
                                "max_staleness: 1}");
  // 4 workers: held 3, answers 4, Adam 2 more copies of the shard.
  EXPECT_DOUBLE_EQ(EstimatePsTaskMemory(adam, EstimateReplicaMemory(adam)),
                   4.0 * 1210 * (2 + 2 + 3 + 4));
}

// A model of 2 x 256 KiB and more is split: each PS task holds half.
TEST(MemoryEstimateTest, PsTasksSplitALargeModelIntoShards) {
  const std::string model =
      "model: {layers: [{dense: {units: 200000}}, {dense: {units: 1}}]}\n"
      "training: {batch_size: 8, optimizer: {type: sgd, lr: 0.1}}\n";
  const v1::JobSpec one = Spec(model +
                               "distribution: {workers: 2, strategy: parameter_server, "
                               "parameter_servers: 1}");
  const v1::JobSpec two = Spec(model +
                               "distribution: {workers: 2, strategy: parameter_server, "
                               "parameter_servers: 2}");
  const MemoryEstimate e = EstimateReplicaMemory(one);
  EXPECT_DOUBLE_EQ(e.parameters, 600001);
  EXPECT_DOUBLE_EQ(EstimatePsTaskMemory(one, e), 4.0 * 600001.0 * 5);
  // 600,001 floats in 2 shards: the larger has 300,001.
  EXPECT_DOUBLE_EQ(EstimatePsTaskMemory(two, e), 4.0 * 300001.0 * 5);
}

TEST(MemoryEstimateTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(8.0 * (1 << 30)), "8.0 GiB");
  EXPECT_EQ(FormatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(FormatBytes(2048), "2 KiB");
}

}  // namespace
}  // namespace yoke::common
