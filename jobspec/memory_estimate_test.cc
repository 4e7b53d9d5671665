#include "jobspec/memory_estimate.h"

#include "config/config.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

v1::JobSpec Spec(const std::string& yaml) {
  auto s = LoadJobSpecString(yaml, {});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Counted by hand: sgd without momentum keeps a parameter and its gradient
// (8 bytes); an activation and its gradient take 8 bytes per example.
TEST(MemoryEstimateTest, CountsParametersAndActivationsOfEachLayer) {
  const MemoryEstimate e = EstimateReplicaMemory(Spec(R"(
model: {layers: [{dense: {units: 100}}, {relu: {}}, {dense: {units: 10}, name: out}]}
training: {batch_size: 8, optimizer: {type: sgd, lr: 0.1}}
)"));
  // dense 100: (100 x 1 + 100) params x 8 + 100 x 8 examples x 8 = 1600 + 6400
  // relu:      100 x 8 x 8 = 6400
  // out:       (10 x 100 + 10) x 8 + 10 x 8 x 8 = 8080 + 640
  EXPECT_DOUBLE_EQ(e.bytes, 8000 + 6400 + 8720);
  EXPECT_EQ(e.largest_layer, "model.layers[2] (out)");
  EXPECT_DOUBLE_EQ(e.largest_layer_bytes, 8720);
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

TEST(MemoryEstimateTest, ZooModelsAreNotEstimated) {
  EXPECT_EQ(EstimateReplicaMemory(Spec("model: {zoo: resnet50}")).bytes, 0);
}

TEST(MemoryEstimateTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(8.0 * (1 << 30)), "8.0 GiB");
  EXPECT_EQ(FormatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(FormatBytes(2048), "2 KiB");
}

}  // namespace
}  // namespace yoke::common
