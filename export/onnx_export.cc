#include "export/onnx_export.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/kernels/cpu/padding.h"
#include "engine/registry.h"
#include "export/onnx_metadata.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace yoke::exporter {

namespace {

// A value of the graph: its ONNX name and its per-example shape in Yoke's
// layout. Values of rank 3 per example are NCHW in the graph.
struct Value {
  std::string name;
  engine::Shape shape;
};

class GraphBuilder {
 public:
  GraphBuilder(const LoadedModel& m, onnx::GraphProto* g) : m_(m), g_(g) {}

  // A node `op` reading `inputs`, writing one output called `out`.
  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::string& out) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(out);
    return n;
  }
  static void Ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void Int(onnx::NodeProto* n, const std::string& name, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void Float(onnx::NodeProto* n, const std::string& name, float v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  // A float32 initializer called `name` holding `values` with `dims`.
  void Initializer(const std::string& name, const std::vector<int64_t>& dims,
                   const std::vector<float>& values) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(values.data(), values.size() * sizeof(float));
  }
  // The model's parameter "<layer>/<param>" as an initializer of that name.
  absl::StatusOr<std::string> Param(const std::string& layer, const std::string& param,
                                    const std::vector<int64_t>& dims) {
    const std::string name = absl::StrCat(layer, "/", param);
    ASSIGN_OR_RETURN(engine::Tensor t, m_.Find(name));
    const float* p = t.data<float>();
    Initializer(name, dims, std::vector<float>(p, p + t.numel()));
    return name;
  }

  absl::StatusOr<Value> Layer(const v1::LayerSpec& l, const std::vector<Value>& in);

 private:
  absl::StatusOr<Value> Dense(const v1::LayerSpec& l, const Value& x);
  absl::StatusOr<Value> Conv(const v1::LayerSpec& l, const Value& x);
  absl::StatusOr<Value> Pool(const v1::LayerSpec& l, const Value& x, bool max);
  absl::StatusOr<Value> BatchNorm(const v1::LayerSpec& l, const Value& x);
  Value Gelu(const std::string& out, const Value& x);

  const LoadedModel& m_;
  onnx::GraphProto* g_;
};

absl::Status ExpectRank(const v1::LayerSpec& l, const Value& x, size_t rank) {
  if (x.shape.size() == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("layer ", l.name(), " (", engine::LayerKindName(l),
                                                 "): expects rank ", rank, ", got ",
                                                 engine::ShapeString(x.shape)));
}

absl::StatusOr<Value> GraphBuilder::Dense(const v1::LayerSpec& l, const Value& x) {
  RETURN_IF_ERROR(ExpectRank(l, x, 1));
  const int64_t units = l.dense().units();
  ASSIGN_OR_RETURN(std::string w, Param(l.name(), "kernel", {x.shape[0], units}));
  std::vector<std::string> ins = {x.name, w};
  if (!l.dense().no_bias()) {
    ASSIGN_OR_RETURN(std::string b, Param(l.name(), "bias", {units}));
    ins.push_back(b);
  }
  Node("Gemm", ins, l.name());  // Y = X W + b: Yoke's kernel is (in, units)
  return Value{l.name(), {units}};
}

absl::StatusOr<Value> GraphBuilder::Conv(const v1::LayerSpec& l, const Value& x) {
  RETURN_IF_ERROR(ExpectRank(l, x, 3));
  const v1::Conv2dSpec& c = l.conv2d();
  const int64_t k = c.kernel(), f = c.filters(), ch = x.shape[2];
  const int64_t stride = c.stride() == 0 ? 1 : c.stride();
  const bool same = c.padding() != "valid";
  const auto ph = engine::cpu::ComputePadding(x.shape[0], k, stride, same);
  const auto pw = engine::cpu::ComputePadding(x.shape[1], k, stride, same);
  // Yoke keeps (filters, kh, kw, C); ONNX's Conv takes (filters, C, kh, kw).
  ASSIGN_OR_RETURN(engine::Tensor t, m_.Find(l.name() + "/kernel"));
  const float* src = t.data<float>();
  std::vector<float> w(static_cast<size_t>(f * ch * k * k));
  for (int64_t o = 0; o < f; ++o) {
    for (int64_t i = 0; i < k * k; ++i) {
      for (int64_t j = 0; j < ch; ++j) w[(o * ch + j) * k * k + i] = src[(o * k * k + i) * ch + j];
    }
  }
  const std::string wname = l.name() + "/kernel";
  Initializer(wname, {f, ch, k, k}, w);
  std::vector<std::string> ins = {x.name, wname};
  if (!c.no_bias()) {
    ASSIGN_OR_RETURN(std::string b, Param(l.name(), "bias", {f}));
    ins.push_back(b);
  }
  onnx::NodeProto* n = Node("Conv", ins, l.name());
  Ints(n, "kernel_shape", {k, k});
  Ints(n, "strides", {stride, stride});
  Ints(n, "pads", {ph.before, pw.before, ph.after, pw.after});
  return Value{l.name(), {ph.out, pw.out, f}};
}

absl::StatusOr<Value> GraphBuilder::Pool(const v1::LayerSpec& l, const Value& x, bool max) {
  RETURN_IF_ERROR(ExpectRank(l, x, 3));
  const v1::Pool2dSpec& p = max ? l.max_pool2d() : l.avg_pool2d();
  const int64_t size = p.size() == 0 ? 2 : p.size();
  const int64_t stride = p.stride() == 0 ? size : p.stride();
  const bool same = p.padding() == "same";
  const auto ph = engine::cpu::ComputePadding(x.shape[0], size, stride, same);
  const auto pw = engine::cpu::ComputePadding(x.shape[1], size, stride, same);
  onnx::NodeProto* n = Node(max ? "MaxPool" : "AveragePool", {x.name}, l.name());
  Ints(n, "kernel_shape", {size, size});
  Ints(n, "strides", {stride, stride});
  Ints(n, "pads", {ph.before, pw.before, ph.after, pw.after});
  // Yoke's average divides by the window's cells inside the image.
  if (!max) Int(n, "count_include_pad", 0);
  return Value{l.name(), {ph.out, pw.out, x.shape[2]}};
}

absl::StatusOr<Value> GraphBuilder::BatchNorm(const v1::LayerSpec& l, const Value& x) {
  if (x.shape.size() != 1 && x.shape.size() != 3) RETURN_IF_ERROR(ExpectRank(l, x, 3));
  const int64_t c = x.shape.back();
  std::vector<std::string> ins = {x.name};
  for (const char* p : {"gamma", "beta", "running_mean", "running_var"}) {
    ASSIGN_OR_RETURN(std::string name, Param(l.name(), p, {c}));
    ins.push_back(name);
  }
  // Inference mode (training_mode 0, the default): the running statistics.
  onnx::NodeProto* n = Node("BatchNormalization", ins, l.name());
  Float(n, "epsilon", l.batch_norm().epsilon() == 0 ? 1e-5f : l.batch_norm().epsilon());
  return Value{l.name(), x.shape};
}

// GELU as Yoke computes it, 0.5 x (1 + erf(x / sqrt 2)), from operators of
// opset 13 (ONNX's own Gelu arrived with opset 20).
Value GraphBuilder::Gelu(const std::string& out, const Value& x) {
  const std::string c = out + "/inv_sqrt2", one = out + "/one", half = out + "/half";
  Initializer(c, {}, {0.70710678118654752f});
  Initializer(one, {}, {1.0f});
  Initializer(half, {}, {0.5f});
  Node("Mul", {x.name, c}, out + "/scaled");
  Node("Erf", {out + "/scaled"}, out + "/erf");
  Node("Add", {out + "/erf", one}, out + "/cdf2");
  Node("Mul", {x.name, out + "/cdf2"}, out + "/x_cdf2");
  Node("Mul", {out + "/x_cdf2", half}, out);
  return Value{out, x.shape};
}

absl::StatusOr<Value> GraphBuilder::Layer(const v1::LayerSpec& l, const std::vector<Value>& in) {
  const std::string kind = engine::LayerKindName(l);
  const Value& x = in[0];
  const std::string& out = l.name();
  if (kind == "dense") return Dense(l, x);
  if (kind == "conv2d") return Conv(l, x);
  if (kind == "max_pool2d" || kind == "avg_pool2d") return Pool(l, x, kind == "max_pool2d");
  if (kind == "batch_norm") return BatchNorm(l, x);
  if (kind == "dropout") return x;  // the identity in inference
  if (kind == "gelu") return Gelu(out, x);
  if (kind == "global_avg_pool") {
    RETURN_IF_ERROR(ExpectRank(l, x, 3));
    Node("GlobalAveragePool", {x.name}, out + "/nc11");
    Int(Node("Flatten", {out + "/nc11"}, out), "axis", 1);
    return Value{out, {x.shape[2]}};
  }
  if (kind == "flatten") {
    if (x.shape.size() == 1) return x;
    RETURN_IF_ERROR(ExpectRank(l, x, 3));
    // Back to NHWC first, so the features come in Yoke's (h, w, c) order.
    Ints(Node("Transpose", {x.name}, out + "/nhwc"), "perm", {0, 2, 3, 1});
    Int(Node("Flatten", {out + "/nhwc"}, out), "axis", 1);
    return Value{out, {engine::NumElements(x.shape)}};
  }
  if (kind == "add") {
    std::vector<std::string> names;
    for (const Value& v : in) names.push_back(v.name);
    Node(in.size() == 2 ? "Add" : "Sum", names, out);
    return Value{out, x.shape};
  }
  if (kind == "softmax") {
    // Over Yoke's last axis: the channels, axis 1 of NCHW.
    Int(Node("Softmax", {x.name}, out), "axis", x.shape.size() == 3 ? 1 : -1);
    return Value{out, x.shape};
  }
  if (kind == "leaky_relu") {
    const float a = l.leaky_relu().alpha() == 0 ? 0.01f : l.leaky_relu().alpha();
    Float(Node("LeakyRelu", {x.name}, out), "alpha", a);
    return Value{out, x.shape};
  }
  static const std::map<std::string, std::string> kUnary = {
      {"relu", "Relu"}, {"sigmoid", "Sigmoid"}, {"tanh", "Tanh"}};
  if (auto it = kUnary.find(kind); it != kUnary.end()) {
    Node(it->second, {x.name}, out);
    return Value{out, x.shape};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("layer ", out, ": no ONNX export for '", kind, "' layers"));
}

void AddInputOutput(onnx::ValueInfoProto* v, int64_t batch, const engine::Shape& shape) {
  onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto::Dimension* n = t->mutable_shape()->add_dim();
  if (batch > 0) {
    n->set_dim_value(batch);
  } else {
    n->set_dim_param("N");
  }
  for (int64_t d : shape) t->mutable_shape()->add_dim()->set_dim_value(d);
}

}  // namespace

absl::StatusOr<onnx::ModelProto> ExportOnnx(const LoadedModel& m, const OnnxOptions& options) {
  if (m.input_shape.size() != 1 && m.input_shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX export takes inputs of shape (H, W, C) or (features), not ",
                     engine::ShapeString(m.input_shape)));
  }
  onnx::ModelProto model;
  model.set_ir_version(kOnnxIrVersion);
  model.set_producer_name("yoke");
  model.set_producer_version("0.1.0");
  model.set_model_version(m.step);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name(m.spec.model().zoo().empty() ? "yoke_model" : "yoke_" + m.spec.model().zoo());
  AddInputOutput(g->add_input(), options.batch, m.input_shape);
  g->mutable_input(0)->set_name("input");
  GraphBuilder b(m, g);
  Value input{"input", m.input_shape};
  if (m.input_shape.size() == 3) {
    GraphBuilder::Ints(b.Node("Transpose", {"input"}, "input/nchw"), "perm", {0, 3, 1, 2});
    input.name = "input/nchw";
  }
  std::map<std::string, Value> by_name;
  Value last = input;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const v1::LayerSpec& l = m.layers[i];
    std::vector<Value> in;
    if (l.inputs().empty()) {
      in.push_back(last);
    } else {
      for (const std::string& name : l.inputs())
        in.push_back(name == "input" ? input : by_name[name]);
    }
    ASSIGN_OR_RETURN(last, b.Layer(l, in));
    by_name[l.name()] = last;
  }
  const std::string out = options.softmax ? "probabilities" : "logits";
  if (options.softmax) {
    GraphBuilder::Int(b.Node("Softmax", {last.name}, out), "axis", -1);
  } else {
    b.Node("Identity", {last.name}, out);
  }
  AddInputOutput(g->add_output(), options.batch, {m.num_classes});
  g->mutable_output(0)->set_name(out);
  AddMetadata(m, options.softmax, &model);
  return model;
}

absl::Status WriteOnnx(const LoadedModel& m, const OnnxOptions& options, const std::string& path) {
  ASSIGN_OR_RETURN(onnx::ModelProto model, ExportOnnx(m, options));
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream s(&bytes);
    google::protobuf::io::CodedOutputStream coded(&s);
    coded.SetSerializationDeterministic(true);
    if (!model.SerializeToCodedStream(&coded)) {
      return absl::InternalError("cannot serialize the ONNX model");
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", path));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace yoke::exporter
