// ResNet zoo entries (He et al. 2015), laid out as torchvision builds them,
// expressed as a named layer graph with `add` layers for the residual joins.
//
//   stem      >= 64x64 inputs: conv7x7/2 -> bn -> relu -> maxpool3x3/2 (same)
//             smaller (CIFAR): conv3x3/1 -> bn -> relu
//   stages    widths w, 2w, 4w, 8w (w = model.width, default 64); the first
//             block of stages 2-4 downsamples with a stride-2 conv, and its
//             shortcut becomes conv1x1/2 -> bn (also whenever the channel
//             count changes)
//   basic     (18, 34) conv3x3 -> bn -> relu -> conv3x3 -> bn, + shortcut, relu
//   bottleneck (50) conv1x1 -> bn -> relu -> conv3x3 -> bn -> relu
//             -> conv1x1 (4x channels) -> bn, + shortcut, relu (stride on
//             the 3x3, "ResNet v1.5")
//   head      global_avg_pool -> dense(K)
// The CIFAR ResNets of the same paper (section 4.2: resnet20, 32, 44, 56,
// depth 6n + 2) have the small stem on every input, three stages of n basic
// blocks with widths w, 2w, 4w (w default 16), and the same head. Their
// shortcuts that change shape are conv1x1/2 -> bn (the paper's option B)
// rather than option A's zero-padded identity: about 1% more parameters, and
// every shortcut is then an ordinary layer.
// Convolutions feeding a batch_norm have no bias; all use "same" padding.
// Layer names follow torchvision ("layer2.0.downsample.conv").
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/zoo/model_zoo.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine {
namespace {

// Appends layers, each reading the named inputs (or the previous layer).
class GraphBuilder {
 public:
  // Returns the new layer's name.
  std::string Conv(const std::string& name, const std::string& in, int filters, int kernel,
                   int stride) {
    v1::LayerSpec l = Start(name, {in});
    auto* c = l.mutable_conv2d();
    c->set_filters(filters);
    c->set_kernel(kernel);
    c->set_stride(stride);
    c->set_padding("same");
    c->set_no_bias(true);  // the batch_norm after it has the shift
    return Push(l);
  }
  std::string Bn(const std::string& name, const std::string& in) {
    v1::LayerSpec l = Start(name, {in});
    l.mutable_batch_norm();
    return Push(l);
  }
  std::string Relu(const std::string& name, const std::string& in) {
    v1::LayerSpec l = Start(name, {in});
    l.mutable_relu();
    return Push(l);
  }
  std::string MaxPool(const std::string& name, const std::string& in, int size, int stride) {
    v1::LayerSpec l = Start(name, {in});
    auto* p = l.mutable_max_pool2d();
    p->set_size(size);
    p->set_stride(stride);
    p->set_padding("same");
    return Push(l);
  }
  std::string Add(const std::string& name, const std::string& a, const std::string& b) {
    v1::LayerSpec l = Start(name, {a, b});
    l.mutable_add();
    return Push(l);
  }
  std::string GlobalAvgPool(const std::string& name, const std::string& in) {
    v1::LayerSpec l = Start(name, {in});
    l.mutable_global_avg_pool();
    return Push(l);
  }
  std::string Dense(const std::string& name, const std::string& in, int units) {
    v1::LayerSpec l = Start(name, {in});
    l.mutable_dense()->set_units(units);
    return Push(l);
  }
  // conv -> bn -> relu (the relu skipped when `relu` is false).
  std::string ConvBn(const std::string& prefix, const std::string& suffix, const std::string& in,
                     int filters, int kernel, int stride, bool relu) {
    std::string x = Conv(prefix + "conv" + suffix, in, filters, kernel, stride);
    x = Bn(prefix + "bn" + suffix, x);
    return relu ? Relu(prefix + "relu" + suffix, x) : x;
  }

  std::vector<v1::LayerSpec> Take() { return std::move(layers_); }

 private:
  static v1::LayerSpec Start(const std::string& name, const std::vector<std::string>& inputs) {
    v1::LayerSpec l;
    l.set_name(name);
    for (const std::string& in : inputs) l.add_inputs(in);
    return l;
  }
  std::string Push(const v1::LayerSpec& l) {
    layers_.push_back(l);
    return l.name();
  }
  std::vector<v1::LayerSpec> layers_;
};

}  // namespace

absl::StatusOr<std::vector<v1::LayerSpec>> ResNet(const v1::ModelSpec& spec, const ZooShape& in,
                                                  int k, int depth) {
  const std::string zoo = absl::StrCat("resnet", depth);
  if (in.size() != 3 || in[0] <= 0 || in[1] <= 0 || in[2] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.zoo: ", zoo, " needs an image input (H, W, C), got ", ZooShapeString(in)));
  }
  if (spec.width() < 0 || spec.width() > kMaxZooWidth) {
    return absl::InvalidArgumentError(absl::StrCat("model.width: must be > 0 and at most ",
                                                   kMaxZooWidth, " (or unset for 64), got ",
                                                   spec.width()));
  }
  std::vector<int> blocks;
  bool bottleneck = false;
  bool cifar = false;  // three stages, small stem, width 16
  switch (depth) {
    case 18:
      blocks = {2, 2, 2, 2};
      break;
    case 34:
      blocks = {3, 4, 6, 3};
      break;
    case 50:
      blocks = {3, 4, 6, 3};
      bottleneck = true;
      break;
    case 20:
    case 32:
    case 44:
    case 56: {
      const int n = (depth - 2) / 6;
      blocks = {n, n, n};
      cifar = true;
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("model.zoo: no ResNet of depth ", depth,
                                                     " (known: 18, 20, 32, 34, 44, 50, 56)"));
  }
  const int width = spec.width() == 0 ? (cifar ? 16 : 64) : spec.width();
  const int expansion = bottleneck ? 4 : 1;

  GraphBuilder g;
  std::string x;
  if (!cifar && in[0] >= 64 && in[1] >= 64) {
    x = g.ConvBn("", "1", "input", width, 7, 2, true);
    x = g.MaxPool("maxpool", x, 3, 2);
  } else {
    x = g.ConvBn("", "1", "input", width, 3, 1, true);
  }
  int channels = width;
  for (int stage = 0; stage < static_cast<int>(blocks.size()); ++stage) {
    const int planes = width << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const std::string p = absl::StrCat("layer", stage + 1, ".", b, ".");
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      const int out = planes * expansion;
      std::string y;
      if (bottleneck) {
        y = g.ConvBn(p, "1", x, planes, 1, 1, true);
        y = g.ConvBn(p, "2", y, planes, 3, stride, true);
        y = g.ConvBn(p, "3", y, out, 1, 1, false);
      } else {
        y = g.ConvBn(p, "1", x, planes, 3, stride, true);
        y = g.ConvBn(p, "2", y, planes, 3, 1, false);
      }
      std::string shortcut = x;
      if (stride != 1 || channels != out) {
        shortcut = g.Conv(p + "downsample.conv", x, out, 1, stride);
        shortcut = g.Bn(p + "downsample.bn", shortcut);
      }
      x = g.Relu(p + "relu", g.Add(p + "add", y, shortcut));
      channels = out;
    }
  }
  x = g.GlobalAvgPool("avgpool", x);
  g.Dense("fc", x, k);
  return g.Take();
}

}  // namespace yoke::engine
