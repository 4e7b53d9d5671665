#include "jobspec/job_validate.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using testing::HasSubstr;

// A small valid job on each model form; the cases below break one rule each
// through a --set override.
const char kZooJob[] = R"(
model: {zoo: mlp}
data:
  train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 100}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

const char kLayersJob[] = R"(
model:
  layers:
    - flatten
    - {name: d1, dense: {units: 4}}
    - relu
    - {name: d2, dense: {units: 4}, inputs: [d1]}
    - {name: sum, add: {}, inputs: [d2, relu_2]}
    - dense: {units: 10}
data:
  train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 100}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

v1::JobSpec Load(const std::string& yaml, const std::vector<std::string>& overrides) {
  auto s = LoadJobSpecString(yaml, overrides, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : v1::JobSpec();
}

struct Case {
  const char* base;                    // kZooJob or kLayersJob
  std::vector<std::string> overrides;  // what breaks the job
  std::string expected;                // a substring of the error
};

void PrintTo(const Case& c, std::ostream* os) { *os << testing::PrintToString(c.overrides); }

class ValidateRejects : public testing::TestWithParam<Case> {};

TEST_P(ValidateRejects, NamesFieldAndValue) {
  const Case& c = GetParam();
  v1::JobSpec spec = Load(c.base, c.overrides);
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
      << "accepted with " << testing::PrintToString(c.overrides);
  EXPECT_THAT(std::string(s.message()), HasSubstr(c.expected));
}

const Case kCases[] = {
    // ---- model
    {kZooJob,
     {"model={}"},
     "model: set zoo (one of cnn, mlp, resnet18, resnet20, resnet32, resnet34, resnet44, resnet50, "
     "resnet56)"},
    {kZooJob,
     {"model.zoo=resnet51"},
     "model.zoo: unknown model 'resnet51' (known: cnn, mlp, resnet18, resnet20, resnet32, "
     "resnet34, resnet44, resnet50, resnet56)"},
    {kZooJob, {"model.layers=[relu]"}, "model: set either zoo or layers, not both"},
    {kZooJob, {"model.hidden=[256, 0]"}, "model.hidden[1]: must be > 0, got 0"},
    {kZooJob, {"model.hidden=[-3]"}, "model.hidden[0]: must be > 0, got -3"},
    {kZooJob, {"model.zoo=cnn", "model.hidden=[3]"}, "model.hidden: not used"},
    {kZooJob, {"model.dropout=1"}, "model.dropout: must be in [0, 1), got 1"},
    {kZooJob, {"model.dropout=-0.25"}, "model.dropout: must be in [0, 1), got -0.25"},
    {kZooJob, {"model.zoo=resnet18", "model.dropout=0.5"}, "model.dropout: not used"},
    {kZooJob, {"model.zoo=resnet18", "model.width=-1"}, "model.width: must be >= 0, got -1"},
    {kZooJob, {"model.width=16"}, "model.width: not used"},
    // ---- layers
    {kLayersJob, {"model.layers[0]={name: x}"}, "model.layers[0]: no layer kind set (one of dense"},
    {kLayersJob,
     {"model.layers[1].dense.units=0"},
     "model.layers[1].dense.units: must be > 0, got 0"},
    {kLayersJob,
     {"model.layers[0]={conv2d: {filters: 0, kernel: 3}}"},
     "model.layers[0].conv2d.filters: must be > 0, got 0"},
    {kLayersJob,
     {"model.layers[0]={conv2d: {filters: 8, kernel: -1}}"},
     "model.layers[0].conv2d.kernel: must be > 0, got -1"},
    {kLayersJob,
     {"model.layers[0]={conv2d: {filters: 8, kernel: 3, stride: -2}}"},
     "model.layers[0].conv2d.stride: must be >= 0, got -2"},
    {kLayersJob,
     {"model.layers[0]={conv2d: {filters: 8, kernel: 3, padding: full}}"},
     "model.layers[0].conv2d.padding: unknown padding 'full' (known: same, valid)"},
    {kLayersJob,
     {"model.layers[0]={max_pool2d: {size: -1}}"},
     "model.layers[0].max_pool2d.size: must be >= 0, got -1"},
    {kLayersJob,
     {"model.layers[0]={avg_pool2d: {stride: -1}}"},
     "model.layers[0].avg_pool2d.stride: must be >= 0, got -1"},
    {kLayersJob,
     {"model.layers[0]={max_pool2d: {padding: SAME}}"},
     "model.layers[0].max_pool2d.padding: unknown padding 'SAME'"},
    {kLayersJob,
     {"model.layers[0]={dropout: {rate: 1}}"},
     "model.layers[0].dropout.rate: must be in [0, 1), got 1"},
    {kLayersJob,
     {"model.layers[0]={batch_norm: {momentum: 1.5}}"},
     "model.layers[0].batch_norm.momentum: must be in [0, 1], got 1.5"},
    {kLayersJob,
     {"model.layers[0]={batch_norm: {epsilon: -1e-5}}"},
     "model.layers[0].batch_norm.epsilon: must be finite and >= 0, got -1e-05"},
    {kLayersJob,
     {"model.layers[0]={leaky_relu: {alpha: .nan}}"},
     "model.layers[0].leaky_relu.alpha: must be finite"},
    {kLayersJob,
     {"model.layers[3].name=d1"},
     "model.layers[3].name: 'd1' is already used by an earlier layer"},
    {kLayersJob,
     {"model.layers[1].name=relu_2"},
     "model.layers[2].name: 'relu_2' is already used by an earlier layer (it is this "
     "layer's default name)"},
    {kLayersJob, {"model.layers[1].name=input"}, "model.layers[1].name: 'input' is reserved"},
    {kLayersJob,
     {"model.layers[3].inputs=[sum]"},
     "model.layers[3].inputs[0]: no earlier layer named 'sum'"},
    {kLayersJob,
     {"model.layers[3].inputs=[d2]"},
     "model.layers[3].inputs[0]: no earlier layer named 'd2'"},
    {kLayersJob,
     {"model.layers[4].inputs=[d2]"},
     "model.layers[4].inputs: add needs at least 2 inputs, got 1"},
    {kLayersJob,
     {"model.layers[2]={relu: {}, inputs: [d1, input]}"},
     "model.layers[2].inputs: relu takes 1 input, got 2"},
    // ---- data
    {kZooJob, {"data={}"}, "data.train: required"},
    {kZooJob,
     {"data.train.format="},
     "data.train.format: required (one of idx, cifar10, csv, image_folder, synthetic)"},
    {kZooJob,
     {"data.train.format=png"},
     "data.train.format: unknown format 'png' (known: idx, cifar10, csv, image_folder, synthetic)"},
    {kZooJob,
     {"data.train={format: image_folder, image_size: [28, 28]}"},
     "data.train.root: required by format 'image_folder'"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d}"},
     "data.train.image_size: format 'image_folder' needs [height, width], got 0 values"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 0]}"},
     "data.train.image_size[1]: must be > 0, got 0"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], channels: 2}"},
     "data.train.channels: must be 1 (grayscale) or 3 (RGB), got 2"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], crop: middle}"},
     "data.train.crop: unknown crop 'middle' (known: none, center, random)"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], crop: random}"},
     "data.train.crop_size: crop 'random' needs [height, width], got 0 values"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], crop: center, "
      "crop_size: [24, 30]}"},
     "data.train.crop_size[1]: must be <= image_size[1] (28), got 30"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], crop_size: [2, 2]}"},
     "data.train.crop_size: not used without crop: center or random"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], validation_split: 0.2}"},
     "data.train.subset: required (one of training, validation)"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], validation_split: 1}"},
     "data.train.validation_split: must be in [0, 1), got 1"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], subset: training}"},
     "data.train.subset: not used without validation_split > 0"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], on_bad_image: ignore}"},
     "data.train.on_bad_image: unknown on_bad_image 'ignore' (known: fail, skip)"},
    {kZooJob,
     {"data.train.root=/d"},
     "data.train.root: not used by format 'synthetic' (only image_folder)"},
    {kZooJob,
     {"data.train.cache=true"},
     "data.train.cache: not used by format 'synthetic' (only image_folder)"},
    {kZooJob,
     {"data.train.cache_file=/c/x"},
     "data.train.cache_file: not used by format 'synthetic' (only image_folder)"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], cache: true, "
      "cache_file: /c/x}"},
     "data.train.cache_file: set cache (memory) or cache_file, not both"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [28, 28], cache_file: /c/x}",
      "data.test={format: image_folder, root: /d, image_size: [28, 28], cache_file: /c/./x}"},
     "data.test.cache_file: '/c/./x' is data.train's cache file too"},
    {kZooJob,
     {"data.train={format: idx, labels: /l}"},
     "data.train.images: required by format 'idx'"},
    {kZooJob,
     {"data.train={format: idx, images: /i}"},
     "data.train.labels: required by format 'idx'"},
    {kZooJob,
     {"data.train={format: idx, images: /i, labels: /l, files: [/f]}"},
     "data.train.files: not used by format 'idx'"},
    {kZooJob,
     {"data.train={format: idx, images: /i, labels: /l, shape: [28, 28]}"},
     "data.train.shape: not used by format 'idx'"},
    {kZooJob,
     {"data.train={format: cifar10}"},
     "data.train.files: format 'cifar10' needs at least one"},
    {kZooJob,
     {"data.train={format: cifar10, files: [/a, '']}"},
     "data.train.files[1]: must not be empty"},
    {kZooJob,
     {"data.train={format: cifar10, files: [/a], images: /i}"},
     "data.train.images: not used by format 'cifar10'"},
    {kZooJob,
     {"data.train={format: csv, files: [/a, /b]}"},
     "data.train.files: format 'csv' needs exactly 1 file, got 2"},
    {kZooJob,
     {"data.train={format: csv, files: [/a], label_column: -2}"},
     "data.train.label_column: must be >= -1 (-1 = last column), got -2"},
    {kZooJob,
     {"data.train={format: cifar10, files: [/a], header: true}"},
     "data.train.header: not used by format 'cifar10'"},
    {kZooJob,
     {"data.train.shape=[]"},
     "data.train.shape: needs 1 to 3 dimensions (H, W, C), got 0"},
    {kZooJob, {"data.train.shape=[1, 2, 3, 4]"}, "data.train.shape: needs 1 to 3 dimensions"},
    {kZooJob, {"data.train.shape=[28, 0, 1]"}, "data.train.shape[1]: must be > 0, got 0"},
    {kZooJob, {"data.train.num_classes=1"}, "data.train.num_classes: must be >= 2, got 1"},
    {kZooJob, {"data.train.num_examples=0"}, "data.train.num_examples: must be > 0, got 0"},
    {kZooJob, {"data.train.files=[/a]"}, "data.train.files: not used by format 'synthetic'"},
    {kZooJob,
     {"data.test={format: idx, images: /i}"},
     "data.test.labels: required by format 'idx'"},
    {kZooJob,
     {"data.test={format: synthetic, shape: [28, 28, 1], num_classes: 0, num_examples: 5}"},
     "data.test.num_classes: must be >= 2, got 0"},
    {kZooJob,
     {"data.test={format: cifar10, files: [/a], num_examples: -1}"},
     "data.test.num_examples: must be >= 0, got -1"},
    {kZooJob,
     {"data.transform.divisor=-255"},
     "data.transform.divisor: must be finite and >= 0, got -255"},
    {kZooJob,
     {"data.transform.std=[0.5, 0]"},
     "data.transform.std[1]: must be finite and > 0, got 0"},
    {kZooJob,
     {"data.transform.mean=[0.5, 0.5]", "data.transform.std=[0.25]"},
     "data.transform.std: has 1 entries but data.transform.mean has 2"},
    {kZooJob, {"data.transform.mean=[.inf]"}, "data.transform.mean[0]: must be finite"},
    {kZooJob,
     {"data.transform.random_crop_padding=-4"},
     "data.transform.random_crop_padding: must be >= 0, got -4"},
    {kZooJob, {"data.prefetch=-1"}, "data.prefetch: must be >= 0, got -1"},
    // ---- training
    {kZooJob, {"training={}"}, "training.epochs: must be > 0, got 0"},
    {kZooJob, {"training.epochs=-1"}, "training.epochs: must be > 0, got -1"},
    {kZooJob, {"training.batch_size=-64"}, "training.batch_size: must be > 0, got -64"},
    {kZooJob,
     {"training.loss=hinge"},
     "training.loss: unknown loss 'hinge' (known: softmax_cross_entropy, mse)"},
    {kZooJob, {"training={epochs: 1, batch_size: 8}"}, "training.optimizer: required"},
    {kZooJob,
     {"training.optimizer.type=rmsprop"},
     "training.optimizer.type: unknown optimizer 'rmsprop' (known: sgd, adam, adamw)"},
    {kZooJob,
     {"training.optimizer.type="},
     "training.optimizer.type: required (one of sgd, adam, adamw)"},
    {kZooJob, {"training.optimizer.lr=0"}, "training.optimizer.lr: must be finite and > 0, got 0"},
    {kZooJob,
     {"training.optimizer.lr=-0.1"},
     "training.optimizer.lr: must be finite and > 0, got -0.1"},
    {kZooJob,
     {"training.optimizer.lr=.inf"},
     "training.optimizer.lr: must be finite and > 0, got inf"},
    {kZooJob,
     {"training.optimizer.lr=.nan"},
     "training.optimizer.lr: must be finite and > 0, got nan"},
    {kZooJob,
     {"training.optimizer.momentum=1"},
     "training.optimizer.momentum: must be in [0, 1), got 1"},
    {kZooJob,
     {"training.optimizer.momentum=-0.5"},
     "training.optimizer.momentum: must be in [0, 1), got -0.5"},
    {kZooJob,
     {"training.optimizer.nesterov=true"},
     "training.optimizer.nesterov: needs momentum > 0, got momentum 0"},
    {kZooJob,
     {"training.optimizer.weight_decay=-1e-4"},
     "training.optimizer.weight_decay: must be finite and >= 0, got -0.0001"},
    {kZooJob,
     {"training.optimizer.type=adam", "training.optimizer.beta1=1"},
     "training.optimizer.beta1: must be in [0, 1), got 1"},
    {kZooJob,
     {"training.optimizer.type=adamw", "training.optimizer.beta2=-0.1"},
     "training.optimizer.beta2: must be in [0, 1), got -0.1"},
    {kZooJob,
     {"training.optimizer.type=adam", "training.optimizer.epsilon=-1"},
     "training.optimizer.epsilon: must be finite and >= 0, got -1"},
    {kZooJob, {"training.optimizer.beta1=0.9"}, "training.optimizer.beta1: not used by sgd"},
    {kZooJob,
     {"training.optimizer.type=adam", "training.optimizer.momentum=0.9"},
     "training.optimizer.momentum: not used by adam"},
    {kZooJob,
     {"training.schedule.type=linear"},
     "training.schedule.type: unknown schedule 'linear' (known: constant, step, cosine)"},
    {kZooJob,
     {"training.schedule.warmup_steps=-10"},
     "training.schedule.warmup_steps: must be >= 0, got -10"},
    {kZooJob, {"training.schedule.type=step"}, "training.schedule.step_size: must be > 0, got 0"},
    {kZooJob,
     {"training.schedule={type: step, step_size: 10, gamma: 1.5}"},
     "training.schedule.gamma: must be in (0, 1] (0 = default 0.1), got 1.5"},
    {kZooJob,
     {"training.schedule={type: step, step_size: 10, gamma: -0.5}"},
     "training.schedule.gamma: must be in (0, 1]"},
    {kZooJob,
     {"training.schedule={type: cosine, step_size: 10}"},
     "training.schedule.step_size: not used"},
    {kZooJob, {"training.schedule={min_lr: 0.01}"}, "training.schedule.min_lr: not used"},
    {kZooJob,
     {"training.schedule={type: cosine, min_lr: -0.01}"},
     "training.schedule.min_lr: must be finite and >= 0, got -0.01"},
    {kZooJob,
     {"training.schedule={type: cosine, min_lr: 0.5}"},
     "training.schedule.min_lr: must be below training.optimizer.lr (0.1), got 0.5"},
    {kZooJob, {"training.max_steps=-1"}, "training.max_steps: must be >= 0, got -1"},
    {kZooJob, {"training.eval_batch_size=-1"}, "training.eval_batch_size: must be >= 0, got -1"},
    {kZooJob, {"training.log_every_steps=-1"}, "training.log_every_steps: must be >= 0, got -1"},
    {kZooJob, {"training.threads=-2"}, "training.threads: must be >= 0, got -2"},
    {kZooJob,
     {"training.threads=2147483647"},
     "training.threads: at most 1024 (the trainer caps it at the worker's cores), got 2147483647"},
    // ---- placement, checkpoints, restarts
    {kZooJob, {"distribution.workers=-1"}, "distribution.workers: must be >= 0, got -1"},
    {kZooJob,
     {"distribution.devices_per_worker=-1"},
     "distribution.devices_per_worker: must be >= 0, got -1"},
    {kZooJob,
     {"distribution.device=tpu"},
     "distribution.device: unknown device 'tpu' (known: cpu, cuda)"},
    {kZooJob,
     {"distribution={workers: 3, devices_per_worker: 4}"},
     "training.batch_size: the global batch (8) must be at least the number of replicas (12"},
    {kZooJob,
     {"distribution.bucket_cap_mb=-1"},
     "distribution.bucket_cap_mb: must be finite and >= 0, got -1"},
    {kZooJob,
     {"distribution.first_bucket_mb=-0.5"},
     "distribution.first_bucket_mb: must be finite and >= 0, got -0.5"},
    {kZooJob,
     {"distribution.gradient_compression=int8"},
     "distribution.gradient_compression: unknown compression 'int8' (known: none, fp16, bf16)"},
    {kZooJob,
     {"distribution.collective_timeout_s=-3"},
     "distribution.collective_timeout_s: must be >= 0, got -3"},
    {kZooJob,
     {"checkpoint={dir: /c, every_steps: -5}"},
     "checkpoint.every_steps: must be >= 0, got -5"},
    {kZooJob, {"checkpoint={dir: /c, keep: -1}"}, "checkpoint.keep: must be >= 0, got -1"},
    {kZooJob, {"checkpoint.keep=2"}, "checkpoint.dir: required when"},
    {kZooJob, {"restart.max_restarts=-1"}, "restart.max_restarts: must be >= 0, got -1"},
    {kZooJob,
     {"data.train={format: synthetic, shape: [8, 8, 1], num_classes: 2, num_examples: 8}",
      "data.test={format: synthetic, shape: [8, 6, 1], num_classes: 2, num_examples: 8}"},
     "data.test.shape: [8, 6, 1] must equal data.train.shape [8, 8, 1]: the model is built for "
     "one example shape"},
    {kZooJob,
     {"model={zoo: resnet18}",
      "data.train={format: synthetic, shape: [16, 16], num_classes: 2, num_examples: 8}"},
     "model.zoo: resnet18 needs an image input (H, W, C), got (16, 16) (data.train.shape [16, "
     "16])"},
    {kZooJob, {"max_run_seconds=-5"}, "max_run_seconds: must be >= 0, got -5"},
    // ---- training options: accumulation, clipping, smoothing, early stopping
    {kZooJob,
     {"training.accumulation_steps=-2"},
     "training.accumulation_steps: must be >= 0, got -2"},
    {kZooJob,
     {"training.accumulation_steps=3"},
     "training.accumulation_steps: training.batch_size (8, the global batch of one optimizer "
     "step) must be divisible by it, got 3"},
    {kZooJob,
     {"training.accumulation_steps=4", "distribution.workers=4"},
     "training.accumulation_steps: a micro-batch of training.batch_size / 4 = 2 samples leaves "
     "some of the 4 replicas without samples"},
    {kZooJob,
     {"training.accumulation_steps=2", "distribution.sync_batch_norm=true"},
     "training.accumulation_steps: not supported with distribution.sync_batch_norm"},
    {kZooJob,
     {"training.clip_grad_norm=-1"},
     "training.clip_grad_norm: must be finite and >= 0, got -1"},
    {kZooJob, {"training.label_smoothing=1"}, "training.label_smoothing: must be in [0, 1), got 1"},
    {kZooJob,
     {"training.label_smoothing=-0.1"},
     "training.label_smoothing: must be in [0, 1), got -0.1"},
    {kZooJob,
     {"training.loss=mse", "training.label_smoothing=0.1"},
     "training.label_smoothing: not used by loss 'mse'"},
    {kZooJob,
     {"training.early_stopping={monitor: val_loss, patience: 2}"},
     "training.early_stopping.monitor: unknown metric 'val_loss' (known: validation_loss, "
     "validation_accuracy, test_loss, test_accuracy)"},
    {kZooJob,
     {"training.early_stopping={monitor: test_loss, patience: 2}"},
     "training.early_stopping.monitor: 'test_loss' needs data.test"},
    {kZooJob,
     {"training.early_stopping={monitor: validation_accuracy, patience: 2}"},
     "training.early_stopping.monitor: 'validation_accuracy' needs a validation set: set "
     "data.validation_split"},
    {kZooJob,
     {"data.validation_split=0.1", "training.early_stopping={monitor: validation_loss}"},
     "training.early_stopping.patience: must be > 0, got 0"},
    {kZooJob,
     {"data.validation_split=0.1",
      "training.early_stopping={monitor: validation_loss, patience: 1, min_delta: -1}"},
     "training.early_stopping.min_delta: must be finite and >= 0, got -1"},
    {kZooJob,
     {"training.early_stopping={patience: 3}"},
     "training.early_stopping.patience: not used without a monitor"},
    {kZooJob,
     {"checkpoint={dir: /c, keep_best: true}"},
     "checkpoint.keep_best: needs training.early_stopping.monitor"},
    {kZooJob,
     {"data.validation_split=0.1",
      "training.early_stopping={monitor: validation_loss, patience: 1}",
      "checkpoint.keep_best=true"},
     "checkpoint.keep_best: needs checkpoint.dir"},
    // ---- validation split
    {kZooJob, {"data.validation_split=1"}, "data.validation_split: must be in [0, 1), got 1"},
    {kZooJob, {"data.validation_split=-0.2"}, "data.validation_split: must be in [0, 1), got -0.2"},
    {kZooJob,
     {"data.train={format: image_folder, root: /d, image_size: [8, 8], validation_split: 0.2, "
      "subset: training}",
      "data.validation_split=0.1"},
     "data.validation_split: cannot be combined with data.train.validation_split"},
};

INSTANTIATE_TEST_SUITE_P(Rules, ValidateRejects, testing::ValuesIn(kCases));

TEST(ValidateJobSpecTest, ValidJobsPass) {
  EXPECT_TRUE(ValidateJobSpec(Load(kZooJob, {})).ok()) << ValidateJobSpec(Load(kZooJob, {}));
  EXPECT_TRUE(ValidateJobSpec(Load(kLayersJob, {})).ok()) << ValidateJobSpec(Load(kLayersJob, {}));
  // The boundary values each rule allows.
  const std::vector<std::vector<std::string>> ok = {
      {"model.dropout=0.99", "model.hidden=[1]"},
      {"model.zoo=resnet34", "model.width=16"},
      {"training.optimizer={type: sgd, lr: 1e-6, momentum: 0.99, nesterov: true, weight_decay: 0}"},
      {"training.optimizer={type: adamw, lr: 3e-4, beta1: 0, beta2: 0.999, epsilon: 0, "
       "weight_decay: 0.01}"},
      {"training.schedule={type: step, step_size: 1, gamma: 1, warmup_steps: 0}"},
      {"training.schedule={type: step, step_size: 100}"},  // gamma 0 = default
      {"training.schedule={type: cosine, min_lr: 0.001}"},
      {"training.loss=mse", "training.max_steps=1", "training.threads=0"},
      {"distribution={workers: 2, devices_per_worker: 4, device: cpu}"},
      {"distribution={bucket_cap_mb: 0.5, first_bucket_mb: 0, gradient_compression: bf16, "
       "sync_batch_norm: true, collective_timeout_s: 5}"},
      {"distribution={bucket_cap_mb: 0, gradient_compression: none, collective_timeout_s: 0}"},
      {"checkpoint={dir: /c, every_steps: 0, keep: 0}"},
      {"data.train={format: csv, files: [/a.csv], label_column: -1, header: true}"},
      {"data.train={format: csv, files: [/a.csv], shape: [4], num_classes: 3}"},
      {"data.train={format: cifar10, files: [/a, /b], num_examples: 0}"},
      {"data.train.shape=[5]", "data.train.num_classes=2"},
      {"data.transform={divisor: 0, mean: [0.5, 0.5, 0.5], std: [1, 1, 1]}"},
      {"data.transform={mean: [0.5]}"},
      {"training.accumulation_steps=8", "training.clip_grad_norm=0"},
      {"training.accumulation_steps=4", "distribution.workers=2", "training.clip_grad_norm=1.5",
       "training.label_smoothing=0.1"},
      {"data.validation_split=0.5",
       "training.early_stopping={monitor: validation_accuracy, patience: 1, min_delta: 0}",
       "checkpoint={dir: /c, keep_best: true}"},
  };
  for (const auto& o : ok) {
    absl::Status s = ValidateJobSpec(Load(kZooJob, o));
    EXPECT_TRUE(s.ok()) << testing::PrintToString(o) << ": " << s;
  }
  const std::vector<std::vector<std::string>> ok_layers = {
      // Image layers before the flatten; the others where the relu `sum` reads was.
      {"model.layers=[{conv2d: {filters: 8, kernel: 3, stride: 0, padding: valid}}, flatten, "
       "{dense: {units: 10}}]"},
      {"model.layers=[{conv2d: {filters: 8, kernel: 1, padding: same}}, flatten, "
       "{dense: {units: 10}}]"},
      {"model.layers=[{max_pool2d: {size: 0, stride: 0, padding: same}}, flatten, "
       "{dense: {units: 10}}]"},
      {"model.layers[2]={name: relu_2, batch_norm: {momentum: 1, epsilon: 0}}"},
      {"model.layers[2]={name: relu_2, batch_norm: {momentum: 0}}"},
      {"model.layers[2]={name: relu_2, leaky_relu: {alpha: -0.5}}"},
      {"model.layers[2]={name: relu_2, dropout: {rate: 0}}"},
      {"model.layers[0]={flatten: {}, inputs: [input]}"},
      {"model.layers[3].inputs=[flatten_0]"},
      {"model.layers[4].inputs=[d2, d1, relu_2]"},
  };
  for (const auto& o : ok_layers) {
    absl::Status s = ValidateJobSpec(Load(kLayersJob, o));
    EXPECT_TRUE(s.ok()) << testing::PrintToString(o) << ": " << s;
  }
}

TEST(ValidateJobSpecTest, MissingSections) {
  absl::Status s = ValidateJobSpec(v1::JobSpec());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model: required"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("data: required"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("training: required"));
}

TEST(ValidateJobSpecTest, ReportsEveryViolationJoined) {
  absl::Status s = ValidateJobSpec(
      Load(kZooJob, {"training.epochs=0", "training.batch_size=-64", "model.zoo=resnet51"}));
  EXPECT_EQ(std::string(s.message()),
            "model.zoo: unknown model 'resnet51' (known: cnn, mlp, resnet18, resnet20, resnet32, "
            "resnet34, resnet44, resnet50, resnet56); "
            "training.epochs: must be > 0, got 0; training.batch_size: must be > 0, got -64");
}

TEST(ValidateJobSpecTest, SpecOver1MiBIsRefusedWithItsSize) {
  v1::JobSpec spec = Load(kZooJob, {});
  spec.set_name(std::string(1 << 20, 'd'));  // a 4 MB name is refused by its size
  const absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("job spec: ", spec.ByteSizeLong(), " bytes serialized")));
  EXPECT_LT(s.message().size(), 200u);
}

TEST(ValidateJobSpecTest, NamesOver256CharactersAreRefusedAndNotEchoedWhole) {
  v1::JobSpec spec = Load(kZooJob, {});
  spec.set_name(std::string(256, 'n'));
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.set_name(std::string(400'000, 'n'));
  const absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("name: at most 256 characters, got 400000"));
  EXPECT_LT(s.message().size(), 300u);
}

TEST(ValidateJobSpecTest, NamesWithControlCharactersAreRefusedAndEscaped) {
  v1::JobSpec spec = Load(kZooJob, {});
  spec.set_name("Zürich run 3");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const std::string& bad : {std::string("innocent\x1b]0;owned\a\x1b[2J\x1b[H\0hidden", 32),
                                 std::string("two\nlines"), std::string("csi \xc2\x9b")}) {
    spec.set_name(bad);
    const absl::Status s = ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("name: control characters are not allowed"));
    EXPECT_FALSE(HasControlChar(s.message())) << s.message();
  }
}

TEST(ValidateJobSpecTest, LayerNamesWithControlCharactersAreRefused) {
  v1::JobSpec spec = Load(kLayersJob, {});
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_model()->mutable_layers(0)->set_name("fc\x1b[2J");
  const absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("model.layers[0].name: control characters are not allowed ('fc\\x1b[2J')"));
}

// The synthetic reader's bound (data/synthetic_dataset_test.cc tests the
// same two shapes), checked at submit so the trainer never refuses first.
TEST(ValidateJobSpecTest, SyntheticExamplesAreBoundedAsTheReaderBoundsThem) {
  EXPECT_TRUE(ValidateJobSpec(Load(kZooJob, {"data.train.shape=[1024, 1024, 1024]"})).ok());
  for (const char* shape : {"[1024, 1024, 1025]", "[65536, 65536, 4]"}) {
    const absl::Status s =
        ValidateJobSpec(Load(kZooJob, {std::string("data.train.shape=") + shape}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << shape;
    EXPECT_THAT(std::string(s.message()), HasSubstr("values per example, at most 1073741824"))
        << shape;
  }
}

TEST(ValidateJobSpecTest, UnknownValuesAreQuotedAtMost200Bytes) {
  const absl::Status s = ValidateJobSpec(Load(kZooJob, {"model.zoo=" + std::string(100000, 'z')}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("(+99800 bytes)"));
  EXPECT_LT(s.message().size(), 400u);
}

}  // namespace
}  // namespace yoke::common
