#include "jobspec/memory_estimate.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/shapes/layer_shapes.h"
#include "engine/zoo/model_zoo.h"
#include "jobspec/pipeline_check.h"
#include "jobspec/ps_check.h"
#include "ps/shard_map.h"

namespace yoke::common {
namespace {

// What is known of a layer's output per example: channels (features for a
// flat tensor) and the spatial size; unknown sizes stay 1 (a lower bound).
struct Dims {
  double channels = 1;
  double spatial = 1;  // height x width
};

// The shape of one training example where the spec fixes it without a file
// header: synthetic (and csv) data by `shape`; cifar10 by its format (32x32
// RGB); an image_folder by its resize (`image_size`), or its crop when it
// crops, and `channels` (default RGB); idx by `idx_shape`, its images file's
// header where the caller could read it (IdxImageShape), else empty.
std::vector<int64_t> KnownInput(const v1::DatasetSpec& train,
                                const std::vector<int64_t>& idx_shape) {
  if (train.format() == "idx") return idx_shape;
  if ((train.format() == "synthetic" || train.format() == "csv") && train.shape_size() > 0) {
    return {train.shape().begin(), train.shape().end()};
  }
  if (train.format() == "cifar10") return {32, 32, 3};
  if (train.format() == "image_folder" && train.image_size_size() == 2) {
    const bool crops = !train.crop().empty() && train.crop() != "none";
    const auto& hw = crops && train.crop_size_size() == 2 ? train.crop_size() : train.image_size();
    return {hw[0], hw[1], train.channels() > 0 ? train.channels() : 3};
  }
  return {};
}

int OptimizerCopies(const v1::OptimizerSpec& o) {
  if (o.type() == "adam" || o.type() == "adamw") return 2;
  return o.momentum() > 0 ? 1 : 0;
}

// A zoo model's layers, expanded by the engine's own zoo code for the
// smallest input and class count the spec allows: the synthetic shape when
// the spec gives one, else 4x4x1 (the smallest image the cnn takes; a ResNet
// then gets its small stem, which has fewer parameters than the large one),
// and the spec's class count, else 2. Empty if the zoo refuses the spec (the
// validation reports why).
std::vector<v1::LayerSpec> ZooLayers(const v1::JobSpec& spec,
                                     const std::vector<int64_t>& idx_shape) {
  const v1::DatasetSpec& train = spec.data().train();
  const int64_t classes = train.num_classes() >= 2 ? train.num_classes() : 2;
  std::vector<engine::ZooShape> inputs;
  if (const std::vector<int64_t> known = KnownInput(train, idx_shape); !known.empty()) {
    inputs.emplace_back(known.begin(), known.end());
  }
  inputs.push_back({4, 4, 1});
  for (const engine::ZooShape& in : inputs) {
    auto layers = engine::ExpandZoo(spec.model(), in, static_cast<int>(classes));
    if (layers.ok()) return *std::move(layers);
  }
  return {};
}

// Each layer's parameters and output elements per example from the exact
// shapes engine/shapes resolves for a known input (synthetic data), or
// nothing when the list does not resolve (validation says why) or the input
// is unknown.
struct LayerCost {
  double params = 0;
  double outputs = 0;
};
template <typename List>  // a std::vector or a RepeatedPtrField of LayerSpec
std::vector<LayerCost> ExactCosts(const v1::JobSpec& spec, const List& layers,
                                  const std::vector<int64_t>& idx_shape) {
  const std::vector<int64_t> known = KnownInput(spec.data().train(), idx_shape);
  if (known.empty()) return {};
  const engine::shapes::LayerShape input(known.begin(), known.end());
  // Any class count: the shapes do not depend on it.
  auto plan = engine::shapes::PlanLayers(layers, "model.layers", input, /*num_classes=*/-1);
  if (!plan.ok()) return {};
  std::vector<LayerCost> costs;
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    const v1::LayerSpec& l = layers[i];
    const int first = plan->inputs[i].empty() ? -1 : plan->inputs[i][0];
    const engine::shapes::LayerShape& in = first < 0 ? input : plan->shapes[first];
    LayerCost c;
    c.outputs = static_cast<double>(engine::shapes::Elements(plan->shapes[i]));
    const double channels = in.empty() ? 1.0 : static_cast<double>(in.back());
    if (l.has_dense()) {
      const double units = l.dense().units();
      c.params = units * static_cast<double>(engine::shapes::Elements(in)) +
                 (l.dense().no_bias() ? 0 : units);
    } else if (l.has_conv2d()) {
      const double filters = l.conv2d().filters(), k = l.conv2d().kernel();
      c.params = filters * channels * k * k + (l.conv2d().no_bias() ? 0 : filters);
    } else if (l.has_batch_norm()) {
      c.params = 2 * channels;  // plus running statistics, not trained
    }
    costs.push_back(c);
  }
  return costs;
}

// What the CPU engine's fusions (engine/model.cc, FuseActivations) mean for
// memory, from the layer graph alone: the layers whose output it never
// allocates. A ReLU whose input is a convolution, a batch norm or a residual
// add read by nothing else is applied by that layer, in its buffer. A convolution of the model
// input whose ReLU feeds only a 2x2, stride-2, unpadded max pool writes the
// pool's output directly, so neither it nor the ReLU has a full-size buffer
// (the engine does this for one input channel; elsewhere it allocates more,
// and the estimate stays a lower bound). Empty when the list does not
// resolve as a graph (validation says why).
// training.recompute (engine/model.h): the engine keeps only the output of
// each segment's last layer (the segments end where the model could be cut
// into pipeline stages) and pools the others, the pool holding at least the
// largest of them. `act[i]`: layer i's output bytes (0 for a shared one).
double RecomputedActivations(const std::vector<std::vector<int>>& graph,
                             const std::vector<bool>& shared, const std::vector<double>& act) {
  const int n = static_cast<int>(graph.size());
  // The layer whose buffer holds layer i's output (a shared ReLU: its input's).
  auto holder = [&](int i) {
    while (i >= 0 && shared[i] && graph[i].size() == 1) i = graph[i][0];
    return i;
  };
  std::vector<int> last = engine::shapes::CutPoints(graph);  // each segment's end
  last.push_back(n);
  std::vector<bool> kept(n, false);
  for (int b : last) {
    const int h = holder(b - 1);
    if (h >= 0) kept[h] = true;
  }
  double total = 0, largest_pooled = 0;
  for (int i = 0; i < n; ++i) {
    if (kept[i]) {
      total += act[i];
    } else {
      largest_pooled = std::max(largest_pooled, act[i]);
    }
  }
  return total + largest_pooled;
}

// How many layers read each layer's output.
std::vector<int> Consumers(const std::vector<std::vector<int>>& inputs) {
  std::vector<int> consumers(inputs.size(), 0);
  for (const std::vector<int>& in : inputs) {
    for (int src : in) {
      if (src >= 0) consumers[src]++;
    }
  }
  return consumers;
}

template <typename List>
std::vector<bool> SharedOutputs(const List& layers, std::vector<std::vector<int>>* inputs) {
  auto plan = engine::shapes::PlanLayers(layers, "model.layers", std::nullopt, -1);
  if (!plan.ok()) return {};
  *inputs = plan->inputs;
  const int n = static_cast<int>(layers.size());
  const std::vector<int> consumers = Consumers(plan->inputs);
  auto only_input = [&](int i) { return plan->inputs[i].size() == 1 ? plan->inputs[i][0] : -2; };
  auto consumer_of = [&](int j) {
    for (int i = j + 1; i < n; ++i) {
      for (int src : plan->inputs[i]) {
        if (src == j) return i;
      }
    }
    return -1;
  };
  std::vector<bool> shared(n, false);
  for (int r = 0; r < n; ++r) {
    const int conv = only_input(r);
    if (!layers[r].has_relu() || conv < 0 || consumers[conv] != 1 ||
        !(layers[conv].has_conv2d() || layers[conv].has_batch_norm() || layers[conv].has_add())) {
      continue;
    }
    shared[r] = true;
    if (!layers[conv].has_conv2d()) continue;
    const int pool = consumers[r] == 1 ? consumer_of(r) : -1;
    if (pool < 0 || !layers[pool].has_max_pool2d() || only_input(conv) != -1) continue;
    const v1::Pool2dSpec& p = layers[pool].max_pool2d();
    const int size = p.size() > 0 ? p.size() : 2;
    const int stride = p.stride() > 0 ? p.stride() : size;
    if (size == 2 && stride == 2 && (p.padding().empty() || p.padding() == "valid")) {
      shared[conv] = true;
    }
  }
  return shared;
}

// The residual joins whose training output takes over an input's buffer
// (engine Model::ShareJoinBuffers): an add of two inputs, one of which feeds
// only it, owns its buffer and is a layer whose backward never reads its
// output (batch norm, a convolution, another add). Without recomputation.
template <typename List>
std::vector<bool> JoinsOverAnInput(const List& layers, const std::vector<std::vector<int>>& inputs,
                                   const std::vector<bool>& shared) {
  const int n = static_cast<int>(layers.size());
  std::vector<bool> joins(n, false);
  if (static_cast<int>(inputs.size()) != n || static_cast<int>(shared.size()) != n) return joins;
  const std::vector<int> consumers = Consumers(inputs);
  for (int i = 0; i < n; ++i) {
    if (!layers[i].has_add() || inputs[i].size() != 2) continue;
    for (int src : inputs[i]) {
      if (src < 0 || consumers[src] != 1 || shared[src]) continue;
      const v1::LayerSpec& l = layers[src];
      if (l.has_batch_norm() || l.has_conv2d() || l.has_add()) joins[i] = true;
    }
  }
  return joins;
}

// One layer's parameters and output shape where the input's shape is not
// known: every size the spec leaves open taken as 1.
double BoundLayer(const v1::LayerSpec& l, const Dims& in, Dims* out) {
  double params = 0;
  switch (l.kind_case()) {
    case v1::LayerSpec::kDense: {
      const double units = std::max(0, l.dense().units());
      params = units * (in.channels * in.spatial) + (l.dense().no_bias() ? 0 : units);
      *out = {units, 1};
      break;
    }
    case v1::LayerSpec::kConv2D: {
      const v1::Conv2dSpec& c = l.conv2d();
      const double filters = std::max(0, c.filters());
      const double k = std::max(0, c.kernel());
      params = filters * in.channels * k * k + (c.no_bias() ? 0 : filters);
      const double stride = std::max(1, c.stride());
      *out = {filters, std::max(1.0, in.spatial / (stride * stride))};
      break;
    }
    case v1::LayerSpec::kMaxPool2D:
    case v1::LayerSpec::kAvgPool2D: {
      const v1::Pool2dSpec& p = l.has_max_pool2d() ? l.max_pool2d() : l.avg_pool2d();
      const double stride = p.stride() > 0 ? p.stride() : (p.size() > 0 ? p.size() : 2);
      out->spatial = std::max(1.0, in.spatial / (stride * stride));
      break;
    }
    case v1::LayerSpec::kGlobalAvgPool:
      out->spatial = 1;
      break;
    case v1::LayerSpec::kBatchNorm:
      params = 2 * in.channels;  // plus running statistics, not trained
      break;
    case v1::LayerSpec::kFlatten:
      *out = {in.channels * in.spatial, 1};
      break;
    default:  // elementwise layers keep the shape
      break;
  }
  return params;
}

// The largest stage's layers, for a pipeline of pp.stages(). At explicit
// boundaries each stage is counted as its layers are (with its largest
// activation gradient); where the trainer balances the split itself, the
// largest stage holds at least an even share of the layers, and at least
// the largest layer: a lower bound either way.
template <typename LayerAt>
double StageBytes(const v1::PipelineSpec& pp, int num_layers, const LayerAt& layer,
                  const std::vector<double>& layer_bytes, const std::vector<double>& grad_outputs,
                  double per_activation) {
  std::vector<int> starts = {0};
  for (const std::string& b : pp.boundaries()) {
    int at = -1;
    for (int i = starts.back() + 1; i < num_layers && at < 0; ++i) {
      if (layer(i).name() == b) at = i;
    }
    if (at < 0) break;  // unknown or out of order: the trainer says which
    starts.push_back(at);
  }
  if (static_cast<int>(starts.size()) == pp.stages()) {
    starts.push_back(num_layers);
    double largest = 0;
    for (size_t s = 0; s + 1 < starts.size(); ++s) {
      double bytes = 0, grad = 0;
      for (int i = starts[s]; i < starts[s + 1]; ++i) {
        bytes += layer_bytes[i];
        grad = std::max(grad, grad_outputs[i]);
      }
      largest = std::max(largest, bytes + grad * per_activation);
    }
    return largest;
  }
  double total = 0, largest_layer = 0;
  for (double b : layer_bytes) {
    total += b;
    largest_layer = std::max(largest_layer, b);
  }
  return std::max(total / pp.stages(), largest_layer);
}

// The sampler keeps each epoch's permutation of the training set, 8 bytes
// an example (data/sampler.cc); a synthetic set has exactly num_examples.
double SamplerBytes(const v1::DatasetSpec& train) {
  const bool known = train.format() == "synthetic" && train.num_examples() > 0;
  return known ? 8.0 * static_cast<double>(train.num_examples()) : 0;
}

}  // namespace

MemoryEstimate EstimateReplicaMemory(const v1::JobSpec& spec,
                                     const std::vector<int64_t>& idx_shape) {
  MemoryEstimate est;
  est.data_bytes = SamplerBytes(spec.data().train());
  est.bytes += est.data_bytes;
  const v1::ModelSpec& m = spec.model();
  std::vector<v1::LayerSpec> zoo;
  if (!m.zoo().empty()) {
    // Past the zoo builders' integer range: the validation refuses it.
    if (m.width() > engine::kMaxZooWidth) return est;
    zoo = ZooLayers(spec, idx_shape);
  }
  const int num_layers = m.zoo().empty() ? m.layers_size() : static_cast<int>(zoo.size());
  auto layer = [&](int i) -> const v1::LayerSpec& {
    return m.zoo().empty() ? m.layers(i) : zoo[i];
  };
  const std::string where =
      m.zoo().empty() ? "model.layers" : absl::StrCat("model.zoo ", m.zoo(), ": layer ");
  const int replicas = std::max(1, spec.distribution().workers()) *
                       std::max(1, spec.distribution().devices_per_worker());
  // A pipeline's stage runs one micro-batch at a time: its batch over the
  // data-parallel pipelines and the micro-batches.
  const v1::PipelineSpec& pp = spec.distribution().pipeline();
  const bool piped = spec.distribution().has_pipeline() && pp.stages() > 1;
  const double share = piped ? static_cast<double>(DataParallelReplicas(spec)) *
                                   std::max(1, PipelineMicroBatches(pp))
                             : replicas;
  const double batch = std::max(1.0, static_cast<double>(spec.training().batch_size()) / share);
  // Parameters are stored with their gradient and the optimizer's copies.
  const double per_param = 4.0 * (2 + OptimizerCopies(spec.training().optimizer()));
  // Activations are kept for backward. Their gradients share memory by
  // liveness (engine/memory_plan.h), so only the largest counts, once.
  const double per_activation = 4.0 * batch;
  double largest_output = 0;

  // Exact shapes where the input is known; else the lower bound below.
  std::vector<LayerCost> exact;
  std::vector<std::vector<int>> graph;  // each layer's inputs (-1: the model input)
  std::vector<bool> shared;             // outputs the engine never allocates
  if (m.zoo().empty()) {
    exact = ExactCosts(spec, m.layers(), idx_shape);
    shared = SharedOutputs(m.layers(), &graph);
  } else {
    exact = ExactCosts(spec, zoo, idx_shape);
    shared = SharedOutputs(zoo, &graph);
  }
  const bool recompute = !piped && spec.training().recompute();
  // training.recompute_batch_norm (engine/model.h): batch norm's outputs go
  // to slots shared by liveness, at least the largest (some are kept: more).
  const bool reapply = !piped && !recompute && spec.training().recompute_batch_norm();
  double largest_reapplied = 0;
  std::vector<bool> joins;
  if (!recompute) {
    joins = m.zoo().empty() ? JoinsOverAnInput(m.layers(), graph, shared)
                            : JoinsOverAnInput(zoo, graph, shared);
  }
  // Which outputs get a gradient buffer: a layer with parameters, or one
  // reading a layer that has one (the engine skips the rest, such as a
  // flatten before the first dense layer).
  std::vector<bool> needs_grad(num_layers, graph.empty());
  std::vector<double> layer_bytes(num_layers, 0), grad_outputs(num_layers, 0);
  std::vector<double> param_bytes(num_layers, 0), act_bytes(num_layers, 0);

  std::map<std::string, Dims> outputs;  // by layer name, for explicit inputs
  Dims cur;                             // the previous layer's output
  outputs["input"] = cur;
  for (int i = 0; i < num_layers; ++i) {
    const v1::LayerSpec& l = layer(i);
    Dims in = cur;
    if (l.inputs_size() > 0) {
      auto it = outputs.find(l.inputs(0));
      in = it != outputs.end() ? it->second : Dims{};
    }
    Dims out = in;
    double params = BoundLayer(l, in, &out);
    double out_elements = out.channels * out.spatial;
    if (!exact.empty()) {
      params = exact[i].params;
      out_elements = exact[i].outputs;
    }
    const bool kept = shared.empty() || !shared[i];
    if (!graph.empty()) {
      needs_grad[i] = params > 0;
      for (int src : graph[i]) needs_grad[i] = needs_grad[i] || (src >= 0 && needs_grad[src]);
    }
    est.parameters += params;
    param_bytes[i] = params * per_param;
    const bool joined = !joins.empty() && joins[i];
    act_bytes[i] = kept && !joined ? out_elements * per_activation : 0;
    if (reapply && l.has_batch_norm()) {
      largest_reapplied = std::max(largest_reapplied, act_bytes[i]);
      act_bytes[i] = 0;
    }
    const double bytes = param_bytes[i] + act_bytes[i];
    layer_bytes[i] = bytes;
    if (kept && needs_grad[i]) grad_outputs[i] = out_elements;
    largest_output = std::max(largest_output, grad_outputs[i]);
    if (bytes > est.largest_layer_bytes) {
      est.largest_layer_bytes = bytes;
      est.largest_layer = l.name().empty() ? absl::StrCat(where, "[", i, "]")
                                           : absl::StrCat(where, "[", i, "] (", l.name(), ")");
    }
    cur = out;
    outputs[l.name().empty() ? absl::StrCat("layer_", i) : l.name()] = out;
  }
  if (recompute && graph.size() == layer_bytes.size() && shared.size() == layer_bytes.size()) {
    for (double b : param_bytes) est.bytes += b;
    est.bytes += RecomputedActivations(graph, shared, act_bytes);
    est.bytes += largest_output * per_activation;
    return est;
  }
  if (!piped) {
    for (double b : layer_bytes) est.bytes += b;
    est.bytes += largest_output * per_activation + largest_reapplied;
    return est;
  }
  est.stages = pp.stages();
  est.bytes += StageBytes(pp, num_layers, layer, layer_bytes, grad_outputs, per_activation);
  return est;
}

double EstimatePsTaskMemory(const v1::JobSpec& spec, const MemoryEstimate& replica) {
  const int tasks = ParameterServerTasks(spec);
  if (tasks <= 0 || replica.parameters < 1) return 0;
  // Past int64 floats the model is refused anyway; the map needs an int.
  const double total = std::min(replica.parameters, 1e18);
  const auto map = ps::BuildShardMap(static_cast<int64_t>(total), tasks);
  if (!map.ok()) return 0;
  double shard = 0;
  for (const ps::Shard& s : map->shards) shard = std::max(shard, static_cast<double>(s.count));
  const v1::DistributionSpec& d = spec.distribution();
  const double workers =
      static_cast<double>(std::max(1, d.workers()) * std::max(1, d.devices_per_worker()));
  const double held = d.consistency() == "async" ? 0 : workers - 1;
  const double copies = 2 + OptimizerCopies(spec.training().optimizer()) + held + workers;
  return 4.0 * shard * copies;
}

std::string FormatBytes(double bytes) {
  if (bytes >= (1ull << 30)) return absl::StrFormat("%.1f GiB", bytes / (1ull << 30));
  if (bytes >= (1ull << 20)) return absl::StrFormat("%.1f MiB", bytes / (1ull << 20));
  return absl::StrFormat("%.0f KiB", bytes / 1024);
}

}  // namespace yoke::common
