// Host checks of the cuDNN convolution graphs (conv_graph.h), no device
// needed: for every conv2d of every zoo model, at batch 1 and 4, the
// forward, backward-data and backward-weights graphs the CUDA layer builds
// pass the frontend's validate(); the forward output cuDNN infers from the
// paddings is the CPU layer's shape, NHWC; and the paddings are
// TensorFlow's "same" split (odd row/column at the bottom/right).
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/conv_graph.h"
#include "engine/names/engine_names.h"
#include "engine/shapes/layer_shapes.h"
#include "engine/zoo/model_zoo.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

struct ZooConv {
  std::string where;  // "resnet18 (224, 224, 3) conv2d_0"
  v1::Conv2dSpec spec;
  std::vector<int64_t> input, output;  // per example, as PlanLayers gives them
};

// Every conv2d of zoo model `name` on per-example `input`.
std::vector<ZooConv> ZooConvs(const std::string& name, const std::vector<int64_t>& input) {
  v1::ModelSpec model;
  model.set_zoo(name);
  absl::StatusOr<std::vector<v1::LayerSpec>> layers = ExpandZoo(model, input, 10);
  EXPECT_TRUE(layers.ok()) << name << ": " << layers.status();
  if (!layers.ok()) return {};
  absl::StatusOr<shapes::LayerPlan> plan = shapes::PlanLayers(*layers, "model.layers", input, 10);
  EXPECT_TRUE(plan.ok()) << name << ": " << plan.status();
  if (!plan.ok()) return {};
  std::vector<ZooConv> convs;
  for (size_t i = 0; i < layers->size(); ++i) {
    if (!(*layers)[i].has_conv2d()) continue;
    const int from = plan->inputs[i].at(0);
    convs.push_back({absl::StrCat(name, " ", shapes::ShapeText(input), " ", plan->names[i]),
                     (*layers)[i].conv2d(), from < 0 ? input : plan->shapes[from],
                     plan->shapes[i]});
  }
  return convs;
}

// TensorFlow's "same" split of one dimension, written out independently of
// engine/shapes: (before, after).
std::pair<int64_t, int64_t> TfSamePadding(int64_t in, int64_t window, int64_t stride) {
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + window - in, 0);
  return {total / 2, total - total / 2};
}

void CheckConv(const ZooConv& z, int64_t n) {
  SCOPED_TRACE(absl::StrCat(z.where, " batch ", n));
  absl::StatusOr<ConvGeometry> g = GeometryForConv2d(z.spec, z.input, n);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(std::vector<int64_t>({g->oh, g->ow, g->k}), z.output);
  const shapes::Window win = shapes::Conv2dWindow(z.spec);
  std::vector<int64_t> pre{0, 0}, post{0, 0};
  if (win.same) {
    std::tie(pre[0], post[0]) = TfSamePadding(z.input[0], win.size, win.stride);
    std::tie(pre[1], post[1]) = TfSamePadding(z.input[1], win.size, win.stride);
  }
  for (ConvPass pass : {ConvPass::kForward, ConvPass::kBackwardData, ConvPass::kBackwardWeights}) {
    absl::StatusOr<std::unique_ptr<ConvGraph>> graph = ConvGraph::Create(pass, *g);
    ASSERT_TRUE(graph.ok()) << "pass " << static_cast<int>(pass) << ": " << graph.status();
    EXPECT_EQ((*graph)->pre_padding(), pre);
    EXPECT_EQ((*graph)->post_padding(), post);
    std::vector<int64_t> dims, strides;
    switch (pass) {
      case ConvPass::kForward:
        dims = {n, g->k, g->oh, g->ow};
        strides = {g->oh * g->ow * g->k, 1, g->ow * g->k, g->k};
        break;
      case ConvPass::kBackwardData:
        dims = {n, g->c, g->h, g->w};
        strides = {g->h * g->w * g->c, 1, g->w * g->c, g->c};
        break;
      case ConvPass::kBackwardWeights:
        dims = {g->k, g->c, g->kh, g->kw};
        strides = {g->kh * g->kw * g->c, 1, g->kw * g->c, g->c};
        break;
    }
    EXPECT_EQ((*graph)->output_dims(), dims) << "pass " << static_cast<int>(pass);
    EXPECT_EQ((*graph)->output_strides(), strides) << "pass " << static_cast<int>(pass);
  }
}

TEST(ConvGraphHostTest, EveryZooConvolutionValidatesWithTheCpuGeometry) {
  const std::vector<std::vector<int64_t>> inputs = {{28, 28, 1}, {32, 32, 3}, {224, 224, 3}};
  int checked = 0, asymmetric = 0;
  std::set<std::string> seen;  // geometries already checked
  for (std::string_view name : kZooModels) {
    int convs = 0;
    for (const std::vector<int64_t>& input : inputs) {
      if (name != "cnn" && input[2] == 1) continue;    // ResNets: colour images
      if (name == "cnn" && input[0] == 224) continue;  // the CNN: small images
      for (const ZooConv& z : ZooConvs(std::string(name), input)) {
        ++convs;
        const std::string key = absl::StrCat(z.spec.ShortDebugString(), shapes::ShapeText(z.input));
        if (!seen.insert(key).second) continue;
        for (int64_t n : {1, 4}) CheckConv(z, n);
        const shapes::Window w = shapes::Conv2dWindow(z.spec);
        const shapes::Padding1d p = shapes::ComputePadding(z.input[0], w.size, w.stride, w.same);
        if (p.before != p.after) ++asymmetric;
        ++checked;
      }
    }
    if (name != "mlp") {
      EXPECT_GT(convs, 0) << name;
    }
  }
  std::printf("%d distinct convolutions checked, %d padded asymmetrically\n", checked, asymmetric);
  // The ImageNet stem and the strided 3x3s of ResNets pad asymmetrically.
  EXPECT_GT(asymmetric, 0);
  EXPECT_GT(checked, 10);
}

// Geometries the zoo lacks: "valid" windows that leave trailing rows no
// window reaches, strides that split an odd padding, non-square inputs, one
// channel, a kernel larger than the stride.
TEST(ConvGraphHostTest, OddGeometriesValidateWithTheCpuGeometry) {
  struct Case {
    int filters, kernel, stride;
    const char* padding;
    std::vector<int64_t> input;
  };
  const Case cases[] = {
      {3, 2, 2, "valid", {9, 7, 2}}, {5, 3, 3, "valid", {10, 11, 1}}, {4, 5, 3, "same", {7, 9, 3}},
      {2, 4, 2, "same", {6, 5, 1}},  {6, 1, 2, "same", {5, 5, 4}},    {1, 3, 1, "same", {1, 1, 1}},
      {7, 7, 2, "same", {13, 8, 3}}, {2, 5, 1, "valid", {5, 5, 2}},
  };
  for (const Case& c : cases) {
    ZooConv z;
    z.spec.set_filters(c.filters);
    z.spec.set_kernel(c.kernel);
    z.spec.set_stride(c.stride);
    z.spec.set_padding(c.padding);
    z.input = c.input;
    absl::StatusOr<shapes::LayerShape> out =
        shapes::Conv2dOutput({c.input}, c.filters, shapes::Conv2dWindow(z.spec));
    ASSERT_TRUE(out.ok()) << out.status();
    z.output = *out;
    z.where = z.spec.ShortDebugString() + " on " + shapes::ShapeText(c.input);
    for (int64_t n : {1, 3}) CheckConv(z, n);
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
