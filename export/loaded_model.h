// A model rebuilt from a checkpoint for inference: `yoke export` and
// `yoke predict` (export/model_main.cc) start from it.
//
// The checkpoint holds the job spec, the class names, the input shape and the
// class count (older files without the last two have data.train opened to
// learn them), and the parameters and batch-norm statistics. Nothing of the
// run's placement (world size, optimizer state, wall time) is used, so a
// checkpoint of a data-parallel job and one of a single-rank job with the same
// parameters load alike.
//
// Thread-safety: a LoadedModel is one model replica; not thread-safe.
#ifndef YOKE_EXPORT_LOADED_MODEL_H_
#define YOKE_EXPORT_LOADED_MODEL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/tensor.h"
#include "proto/yoke/v1/job.pb.h"
#include "proto/yoke/v1/metrics.pb.h"

namespace yoke::exporter {

struct LoadedModel {
  std::string path;  // the checkpoint file
  int64_t step = 0;  // optimizer steps the checkpoint was taken after
  v1::JobSpec spec;
  std::vector<std::string> class_names;  // label order; empty when unnamed
  engine::Shape input_shape;             // per example: (H, W, C) or (features)
  int num_classes = 0;
  // The last epoch the training run completed before the checkpoint, if any
  // (its test accuracy is what `yoke predict` on data.test reproduces).
  std::optional<v1::EpochResult> last_epoch;
  // The model's layers, a zoo entry expanded, each with its name filled in
  // (the engine's default "<type>_<index>" where the spec gave none).
  std::vector<v1::LayerSpec> layers;
  std::unique_ptr<engine::Model> model;  // on the CPU, parameters restored

  // The parameter or state buffer "<layer>/<param>" (e.g. "conv_1/kernel",
  // "bn1/running_mean"); NOT_FOUND naming it when the model has none.
  absl::StatusOr<engine::Tensor> Find(const std::string& name) const;
};

// Reads and verifies `checkpoint` (a file, or a directory: its newest valid
// checkpoint) and rebuilds its model. Errors: the checkpoint reader's, an
// invalid spec (INVALID_ARGUMENT), tensors that do not fit the model.
absl::StatusOr<LoadedModel> LoadModel(const std::string& checkpoint);

}  // namespace yoke::exporter

#endif  // YOKE_EXPORT_LOADED_MODEL_H_
