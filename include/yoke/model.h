// yoke::Model: a network built from a spec or layer by layer, with forward
// and backward for custom training loops.
//
//   ASSIGN_OR_RETURN(yoke::Model model,
//                    yoke::ModelBuilder().Flatten().Dense(256).Relu().Dense(10)
//                        .Build({28, 28, 1}, 10, /*seed=*/1));
//   ASSIGN_OR_RETURN(yoke::Tensor logits, model.Forward(batch));
//
// Gradients. Backward() (usually via Loss::Backward) OVERWRITES the
// gradients; it does not add to them as PyTorch's does. What the gradient
// buffer means is tracked with it: after Backward it is the mean over the
// batch's samples; after DistributedContext::AllreduceGradients it is the
// mean over every rank's samples of the step (the exact global mean, however
// the samples were spread). Optimizer::Step() applies that mean.
//
// Train / eval mode: Forward runs in training mode (dropout active, batch
// norm on batch statistics, its running statistics updated) unless
// SetTraining(false) was called; Evaluate() switches to eval mode for its
// pass and back.
//
// Thread-safety: a Model is one replica; not thread-safe. Move-only; the
// Optimizer and Loss objects made from it keep its internals alive.
#ifndef YOKE_MODEL_H_
#define YOKE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "yoke/tensor.h"

namespace yoke {

class Batch;
class ModelBuilder;

class Model {
 public:
  // From YAML text holding a job spec's `model:` section (the rest of the
  // document, if any, is ignored), e.g. "model: {zoo: mlp, hidden: [256]}".
  // `input_shape` is one example's shape, (H, W, C) for images;
  // `num_classes` the number of logits. Parameters are initialised from
  // `seed`, as a job with training.seed does. INVALID_ARGUMENT with the field
  // path for a bad spec ("model.layers[3] (conv2d_3): ..."), and for a spec
  // with no `model:` section.
  static absl::StatusOr<Model> FromYaml(const std::string& yaml,
                                        const std::vector<int64_t>& input_shape, int num_classes,
                                        uint64_t seed = 0);
  // As FromYaml, reading the file at `path` (NOT_FOUND naming it if missing).
  static absl::StatusOr<Model> FromYamlFile(const std::string& path,
                                            const std::vector<int64_t>& input_shape,
                                            int num_classes, uint64_t seed = 0);
  // A zoo architecture by name: "mlp", "cnn", "resnet18", ... (see
  // ZooNames()). INVALID_ARGUMENT listing the known names otherwise.
  static absl::StatusOr<Model> FromZoo(const std::string& name,
                                       const std::vector<int64_t>& input_shape, int num_classes,
                                       uint64_t seed = 0);
  static std::vector<std::string> ZooNames();

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // batch's examples (n, input_shape...) -> logits (n, num_classes).
  // INVALID_ARGUMENT if the batch's example shape is not the model's or the
  // batch is empty.
  absl::StatusOr<Tensor> Forward(const Batch& batch);
  // The same on raw values: `x` holds n examples of input_shape, row-major.
  absl::StatusOr<Tensor> Forward(const Tensor& x);

  // Backpropagates `dlogits` (n, num_classes), d(loss)/d(logits) of a loss
  // that is a SUM over the n samples of the last Forward, and records the
  // gradients as that sum's gradient over n samples (so they read as the
  // mean). Loss::Backward calls this; use it directly for a loss of your
  // own. FAILED_PRECONDITION if the last Forward was not in training mode or
  // shapes disagree.
  absl::Status Backward(const Tensor& dlogits);

  // Training (default) or evaluation mode for Forward.
  void SetTraining(bool training);
  bool training() const;

  const std::vector<int64_t>& input_shape() const;
  int num_classes() const;
  // Number of trainable scalars.
  int64_t num_parameters() const;
  // One line per layer: name, type, output shape, parameter count.
  std::string Summary() const;

  // Every trainable parameter, concatenated in declaration order (copies).
  std::vector<float> Parameters() const;
  // Overwrites them from `values` (the layout of Parameters());
  // INVALID_ARGUMENT on a size mismatch.
  absl::Status SetParameters(const std::vector<float>& values);
  // The current gradient, as the mean described in the header comment, in
  // the layout of Parameters() (copies).
  std::vector<float> Gradients() const;
  // FNV-1a over the bytes of the parameters and state buffers (batch-norm
  // running statistics): equal on two ranks iff the bytes are equal.
  uint64_t Checksum() const;

  // The library's internals; not part of the API.
  struct Impl;
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  friend class ModelBuilder;
  explicit Model(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Builds a sequential model layer by layer; each layer reads the previous
// one. The calls only record; Build() checks everything and reports the
// first bad layer by index ("model.layers[2] (dense_2): units must be > 0").
class ModelBuilder {
 public:
  ModelBuilder();
  ~ModelBuilder();
  ModelBuilder(const ModelBuilder&);
  ModelBuilder& operator=(const ModelBuilder&);

  ModelBuilder& Dense(int units, bool bias = true);
  // padding: "same" or "valid".
  ModelBuilder& Conv2d(int filters, int kernel, int stride = 1, const std::string& padding = "same",
                       bool bias = true);
  ModelBuilder& MaxPool2d(int size = 2, int stride = 0);  // stride 0: = size
  ModelBuilder& AvgPool2d(int size = 2, int stride = 0);
  ModelBuilder& GlobalAvgPool();
  ModelBuilder& BatchNorm(float momentum = 0.1f, float epsilon = 1e-5f);
  ModelBuilder& Dropout(float rate);
  ModelBuilder& Flatten();
  ModelBuilder& Relu();
  ModelBuilder& LeakyRelu(float alpha = 0.01f);
  ModelBuilder& Sigmoid();
  ModelBuilder& Tanh();
  ModelBuilder& Gelu();

  // The layers as a job spec's `model:` section (YAML), e.g. to print or to
  // put into a job file.
  std::string ToYaml() const;
  // The last layer must output `num_classes` values per example.
  absl::StatusOr<Model> Build(const std::vector<int64_t>& input_shape, int num_classes,
                              uint64_t seed = 0) const;

 private:
  struct Spec;
  std::unique_ptr<Spec> spec_;
};

}  // namespace yoke

#endif  // YOKE_MODEL_H_
