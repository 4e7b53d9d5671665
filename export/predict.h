// Prediction from a checkpoint: the model's evaluation outputs on a data set,
// computed as the trainer's evaluation computes them (same pipeline, same
// preprocessing, batch norm on its running statistics, no dropout). This is
// the reference `yoke export`'s ONNX files are checked against
// (tests/onnx_export_test.py).
//
// Thread-safety: Predict uses `m`'s model; one call at a time per model.
#ifndef YOKE_EXPORT_PREDICT_H_
#define YOKE_EXPORT_PREDICT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "export/loaded_model.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::exporter {

struct PredictOptions {
  // "": the checkpoint's data.test. A directory: an image folder (one folder
  // per class, or its classes unknown to the model), read with the image
  // settings the model was trained with. A file: a job spec (YAML) whose
  // data `split` is read.
  std::string data;
  std::string split = "test";  // test or train, for a job spec (or the checkpoint's)
  int64_t batch = 0;           // 0: training.eval_batch_size, else 500
  int64_t limit = 0;           // at most this many examples (0: all)
  bool keep_inputs = false;    // keep the preprocessed inputs (PredictResult::inputs)
};

struct PredictResult {
  std::string source;  // what was read, for messages
  int64_t n = 0;
  int classes = 0;
  std::vector<float> logits;    // (n, classes)
  std::vector<int32_t> labels;  // (n); -1 where the label is not one of the model's classes
  std::vector<float> inputs;    // (n, input_shape...) with keep_inputs
  int64_t labelled = 0;         // examples whose label is one of the model's classes
  int64_t correct = 0;          // of those, the ones whose top class is the label
};

// The data set `options` names, as a DatasetSpec, with the model's own
// image settings for a directory.
absl::StatusOr<v1::DatasetSpec> PredictDataset(const LoadedModel& m, const PredictOptions& options,
                                               std::string* source);

// Runs the model over the data set. Errors: the data set's (NOT_FOUND,
// INVALID_ARGUMENT naming the field), examples whose shape is not the
// model's input shape (INVALID_ARGUMENT).
absl::StatusOr<PredictResult> Predict(LoadedModel& m, const PredictOptions& options);

// The index of the first largest of row[0..k).
int ArgMax(const float* row, int k);

}  // namespace yoke::exporter

#endif  // YOKE_EXPORT_PREDICT_H_
