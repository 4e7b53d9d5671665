// Output size and padding of one spatial dimension of a window op (conv2d,
// max/avg pooling), with TensorFlow's "same" and "valid" conventions. The
// formula lives with the layers' other shape rules in
// engine/shapes/layer_shapes.h, which job validation shares; the kernels
// take it from there under this name.
#ifndef YOKE_ENGINE_KERNELS_CPU_PADDING_H_
#define YOKE_ENGINE_KERNELS_CPU_PADDING_H_

#include "engine/shapes/layer_shapes.h"

namespace yoke::engine::cpu {

using shapes::ComputePadding;
using shapes::Padding1d;

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_PADDING_H_
