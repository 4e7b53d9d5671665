// The model zoo: named architectures expanded into plain LayerSpec lists.
//
//   mlp       flatten -> [dense(h) -> relu]* -> dense(K); hidden default 256,128
//   cnn       conv5x5x32 -> relu -> maxpool2 -> conv5x5x64 -> relu -> maxpool2
//             -> flatten -> dense 1024 -> relu -> [dropout] -> dense(K)
//   resnet18  basic blocks [2,2,2,2];  resnet34: [3,4,6,3]
//   resnet50  bottleneck blocks [3,4,6,3]
//   resnet20, 32, 44, 56: the CIFAR ResNets (depth 6n + 2): 3x3 stem, three
//             stages of n basic blocks at 16/32/64 channels (model.width
//             scales them), global average pool, dense(K)
// ResNets use the ImageNet stem (7x7/2 conv + 3x3/2 max pool) for inputs of at
// least 64x64 and a 3x3/1 stem without pooling for small images (CIFAR size).
#ifndef YOKE_ENGINE_ZOO_MODEL_ZOO_H_
#define YOKE_ENGINE_ZOO_MODEL_ZOO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/names/engine_names.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine {

// A per-example input shape (H, W, C): the same type as engine/tensor.h's
// Shape, which this folder does not include (job validation links the zoo
// without the engine, to estimate a zoo model's memory at submit).
using ZooShape = std::vector<int64_t>;

// The largest model.width a ResNet takes: its widest layer has 32x the width
// in channels, which must stay far inside an int. Job validation refuses a
// wider one at submit with the same bound.
inline constexpr int kMaxZooWidth = 1 << 16;

// "(28, 28, 1)", as engine::ShapeString writes a shape.
std::string ZooShapeString(const ZooShape& shape);

// Expands spec.zoo() for per-example input (H, W, C) and `num_classes`.
// Builds exactly the names of kZooModels (engine/names/engine_names.h, whose
// ZooNames() this header re-exports). INVALID_ARGUMENT for any other name
// (listing the known ones) or an input shape the architecture cannot take.
absl::StatusOr<std::vector<v1::LayerSpec>> ExpandZoo(const v1::ModelSpec& spec,
                                                     const ZooShape& input_shape, int num_classes);

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_ZOO_MODEL_ZOO_H_
