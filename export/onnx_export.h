// ONNX export of a checkpoint's model (docs/export.md).
//
// The graph computes what Yoke's evaluation computes: batch norm with its
// running statistics, dropout as the identity. Its input "input" is the
// preprocessed example batch in Yoke's layout, (N, H, W, C) or (N, features),
// float32; its output is "logits" (N, classes), or "probabilities" with
// `softmax`. Images are transposed once to NCHW after the input, the layout
// ONNX's Conv and pooling operators take, and back before a flatten, so the
// dense layers read features in Yoke's order. The metadata (metadata_props)
// says the layout, the preprocessing and the class names.
//
// The file depends only on the model, its parameters and statistics, the
// data settings that say what to feed, the class names and the step: two
// checkpoints that agree on these export to the same bytes, whatever the
// number of replicas that wrote them.
//
// Thread-safety: pure functions of their arguments.
#ifndef YOKE_EXPORT_ONNX_EXPORT_H_
#define YOKE_EXPORT_ONNX_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "export/loaded_model.h"
#include "third_party/onnx/onnx.pb.h"

namespace yoke::exporter {

// ONNX opset 17 and IR version 8: see docs/export.md for why.
inline constexpr int64_t kOnnxOpset = 17;
inline constexpr int64_t kOnnxIrVersion = 8;

struct OnnxOptions {
  int64_t batch = 0;     // a fixed batch size; 0: dynamic ("N")
  bool softmax = false;  // output probabilities instead of logits
};

// The ONNX model of `m`. INVALID_ARGUMENT for a layer on an input the export
// does not support (an input of rank 2 per example), naming the layer.
absl::StatusOr<onnx::ModelProto> ExportOnnx(const LoadedModel& m, const OnnxOptions& options);

// ExportOnnx, serialized deterministically and written to `path` (replaced
// atomically). INTERNAL naming the path when it cannot be written.
absl::Status WriteOnnx(const LoadedModel& m, const OnnxOptions& options, const std::string& path);

}  // namespace yoke::exporter

#endif  // YOKE_EXPORT_ONNX_EXPORT_H_
