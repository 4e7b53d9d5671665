// The metadata_props of an exported ONNX model: what to feed it and what it
// returns (docs/export.md lists every key).
//
// Thread-safety: a pure function of its arguments.
#ifndef YOKE_EXPORT_ONNX_METADATA_H_
#define YOKE_EXPORT_ONNX_METADATA_H_

#include <string>
#include <vector>

#include "export/loaded_model.h"
#include "third_party/onnx/onnx.pb.h"

namespace yoke::exporter {

// Adds the yoke.* metadata of `m` to `model`, and its doc_string.
void AddMetadata(const LoadedModel& m, bool softmax, onnx::ModelProto* model);

// `s` as a JSON string literal (quoted, escaped).
std::string JsonString(const std::string& s);

}  // namespace yoke::exporter

#endif  // YOKE_EXPORT_ONNX_METADATA_H_
