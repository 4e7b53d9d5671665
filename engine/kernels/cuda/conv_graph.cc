// The one translation unit that includes the cuDNN frontend (conv_graph.h).
#include "engine/kernels/cuda/conv_graph.h"

#include <cudnn_frontend.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/shapes/layer_shapes.h"
#include "spdlog/spdlog.h"

namespace yoke::engine::cuda {

namespace fe = cudnn_frontend;

namespace {

// The tensors' uids in the variant pack: inputs a, b and the output.
constexpr int64_t kUidA = 1, kUidB = 2, kUidOut = 3;
// The largest workspace a plan may ask for.
constexpr int64_t kMaxWorkspaceBytes = int64_t{256} << 20;

auto Key(const ConvGeometry& g) {
  return std::make_tuple(g.n, g.h, g.w, g.c, g.k, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_top,
                         g.pad_bottom, g.pad_left, g.pad_right, g.oh, g.ow, g.tf32);
}

// cuDNN dims (N, C, H, W) and strides of a row-major NHWC buffer.
std::shared_ptr<fe::graph::Tensor_attributes> Nhwc(fe::graph::Graph& graph, const char* name,
                                                   int64_t uid, int64_t n, int64_t c, int64_t h,
                                                   int64_t w) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_data_type(fe::DataType_t::FLOAT)
                          .set_dim({n, c, h, w})
                          .set_stride({h * w * c, 1, w * c, c}));
}

// Marks `t` as the graph's output, NHWC unless its dims are left to cuDNN.
void SetOutput(const std::shared_ptr<fe::graph::Tensor_attributes>& t, const ConvGeometry& g,
               ConvPass pass) {
  t->set_output(true).set_uid(kUidOut).set_data_type(fe::DataType_t::FLOAT);
  if (pass == ConvPass::kBackwardData) {
    t->set_dim({g.n, g.c, g.h, g.w}).set_stride({g.h * g.w * g.c, 1, g.w * g.c, g.c});
  } else if (pass == ConvPass::kBackwardWeights) {
    t->set_dim({g.k, g.c, g.kh, g.kw}).set_stride({g.kh * g.kw * g.c, 1, g.kw * g.c, g.c});
  }
  // kForward: dims and (NHWC) strides inferred at validation.
}

absl::Status FeStatus(fe::error_t e, const std::string& what) {
  if (e.is_good()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuDNN frontend: ", what, " failed: ", e.get_message(),
                                          " (code ", static_cast<int>(e.get_code()), ")"));
}

}  // namespace

bool ConvGeometry::operator<(const ConvGeometry& o) const { return Key(*this) < Key(o); }

absl::StatusOr<ConvGeometry> GeometryForConv2d(const v1::Conv2dSpec& spec,
                                               const std::vector<int64_t>& input, int64_t n) {
  const shapes::Window win = shapes::Conv2dWindow(spec);
  absl::StatusOr<shapes::LayerShape> out = shapes::Conv2dOutput({input}, spec.filters(), win);
  if (!out.ok()) return out.status();
  const shapes::Padding1d ph = shapes::ComputePadding(input[0], win.size, win.stride, win.same);
  const shapes::Padding1d pw = shapes::ComputePadding(input[1], win.size, win.stride, win.same);
  ConvGeometry g;
  g.n = n, g.h = input[0], g.w = input[1], g.c = input[2];
  g.k = spec.filters(), g.kh = g.kw = win.size;
  g.stride_h = g.stride_w = win.stride;
  g.pad_top = ph.before, g.pad_bottom = ph.after;
  g.pad_left = pw.before, g.pad_right = pw.after;
  g.oh = ph.out, g.ow = pw.out;
  return g;
}

bool Asymmetric(const ConvGeometry& g) {
  return g.pad_bottom != g.pad_top || g.pad_right != g.pad_left;
}

ConvGeometry SymmetricOnPaddedInput(const ConvGeometry& g) {
  ConvGeometry s = g;
  s.h = g.h + g.pad_bottom - g.pad_top;
  s.w = g.w + g.pad_right - g.pad_left;
  s.pad_bottom = g.pad_top;
  s.pad_right = g.pad_left;
  return s;
}

struct ConvGraph::Impl {
  ConvPass pass;
  ConvGeometry geom;
  std::unique_ptr<fe::graph::Graph> graph;
  std::shared_ptr<fe::graph::Tensor_attributes> out;
  bool planned = false;
  bool deterministic = true;
  int64_t workspace_bytes = 0;

  // A fresh graph of the pass's convolution, validated.
  absl::Status MakeGraph();
  // Heuristics A then fallback, without the deselected engines, first plan
  // that builds.
  absl::Status BuildPlan(cudnnHandle_t handle, bool allow_nondeterministic);
};

absl::Status ConvGraph::Impl::MakeGraph() {
  const ConvGeometry& g = geom;
  graph = std::make_unique<fe::graph::Graph>();
  fe::graph::Graph& gr = *graph;
  gr.set_io_data_type(fe::DataType_t::FLOAT)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> pre{g.pad_top, g.pad_left}, post{g.pad_bottom, g.pad_right};
  const std::vector<int64_t> stride{g.stride_h, g.stride_w}, dilation{1, 1};
  auto filter = [&](int64_t uid) { return Nhwc(gr, "w", uid, g.k, g.c, g.kh, g.kw); };
  auto input = [&](int64_t uid) { return Nhwc(gr, "x", uid, g.n, g.c, g.h, g.w); };
  auto grad_out = [&](int64_t uid) { return Nhwc(gr, "dy", uid, g.n, g.k, g.oh, g.ow); };
  switch (pass) {
    case ConvPass::kForward:
      out = gr.conv_fprop(input(kUidA), filter(kUidB),
                          fe::graph::Conv_fprop_attributes()
                              .set_name("fprop")
                              .set_pre_padding(pre)
                              .set_post_padding(post)
                              .set_stride(stride)
                              .set_dilation(dilation));
      break;
    case ConvPass::kBackwardData:
      out = gr.conv_dgrad(grad_out(kUidA), filter(kUidB),
                          fe::graph::Conv_dgrad_attributes()
                              .set_name("dgrad")
                              .set_pre_padding(pre)
                              .set_post_padding(post)
                              .set_stride(stride)
                              .set_dilation(dilation));
      break;
    case ConvPass::kBackwardWeights:
      out = gr.conv_wgrad(grad_out(kUidA), input(kUidB),
                          fe::graph::Conv_wgrad_attributes()
                              .set_name("wgrad")
                              .set_pre_padding(pre)
                              .set_post_padding(post)
                              .set_stride(stride)
                              .set_dilation(dilation));
      break;
  }
  SetOutput(out, g, pass);
  return FeStatus(gr.validate(), "validate");
}

absl::Status ConvGraph::Impl::BuildPlan(cudnnHandle_t handle, bool allow_nondeterministic) {
  fe::graph::Graph& gr = *graph;
  RETURN_IF_ERROR(FeStatus(gr.build_operation_graph(handle), "build_operation_graph"));
  RETURN_IF_ERROR(FeStatus(gr.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                           "create_execution_plans"));
  // fp32 stays fp32: no TF32 (tensor cores on fp32 inputs) unless asked
  // for, and never inputs down-converted to a narrower type.
  std::vector<fe::NumericalNote_t> barred{fe::NumericalNote_t::DOWN_CONVERT_INPUTS};
  if (!geom.tf32) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);
  if (!allow_nondeterministic) barred.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
  gr.deselect_numeric_notes(barred);
  gr.deselect_workspace_greater_than(kMaxWorkspaceBytes);
  RETURN_IF_ERROR(FeStatus(gr.check_support(), "check_support"));
  RETURN_IF_ERROR(
      FeStatus(gr.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans"));
  RETURN_IF_ERROR(FeStatus(gr.get_workspace_size(workspace_bytes), "get_workspace_size"));
  planned = true;
  deterministic = !allow_nondeterministic;
  return absl::OkStatus();
}

ConvGraph::ConvGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConvGraph::~ConvGraph() = default;

absl::StatusOr<std::unique_ptr<ConvGraph>> ConvGraph::Create(ConvPass pass, const ConvGeometry& g) {
  auto impl = std::make_unique<Impl>();
  impl->pass = pass;
  impl->geom = g;
  RETURN_IF_ERROR(impl->MakeGraph());
  if (pass == ConvPass::kForward) {
    // cuDNN infers the output from the paddings: it must be the buffer the
    // layer allocated (Yoke's shape rules, NHWC), or the kernel would write
    // past it.
    const std::vector<int64_t> dims{g.n, g.k, g.oh, g.ow};
    const std::vector<int64_t> strides{g.oh * g.ow * g.k, 1, g.ow * g.k, g.k};
    if (impl->out->get_dim() != dims || impl->out->get_stride() != strides) {
      return absl::InternalError(
          absl::StrCat("cuDNN infers a forward output of another shape than (", g.n, ", ", g.oh,
                       ", ", g.ow, ", ", g.k, ") for this convolution"));
    }
  }
  return std::unique_ptr<ConvGraph>(new ConvGraph(std::move(impl)));
}

bool ConvGraph::deterministic() const { return impl_->deterministic; }
std::vector<int64_t> ConvGraph::output_dims() const { return impl_->out->get_dim(); }
std::vector<int64_t> ConvGraph::output_strides() const { return impl_->out->get_stride(); }
std::vector<int64_t> ConvGraph::pre_padding() const {
  return {impl_->geom.pad_top, impl_->geom.pad_left};
}
std::vector<int64_t> ConvGraph::post_padding() const {
  return {impl_->geom.pad_bottom, impl_->geom.pad_right};
}

absl::Status ConvGraph::Execute(DeviceContext* ctx, const float* a, const float* b, float* out) {
  absl::StatusOr<cudnnHandle_t> handle = ctx->cudnn();
  if (!handle.ok()) return handle.status();
  if (!impl_->planned) {
    absl::Status strict = impl_->BuildPlan(*handle, false);
    if (!strict.ok()) {
      // No deterministic engine: take any fp32 one rather than fail, and say
      // so (runs are then not bit-for-bit repeatable).
      spdlog::warn(
          "cuDNN has no deterministic fp32 engine for conv pass {} on ({}, {}, {}, {}) with {} "
          "filters {}x{}/{}: {}; trying non-deterministic ones",
          static_cast<int>(impl_->pass), impl_->geom.n, impl_->geom.h, impl_->geom.w, impl_->geom.c,
          impl_->geom.k, impl_->geom.kh, impl_->geom.kw, impl_->geom.stride_h,
          std::string(strict.message()));
      RETURN_IF_ERROR(impl_->MakeGraph());
      absl::Status relaxed = impl_->BuildPlan(*handle, true);
      if (!relaxed.ok()) {
        return absl::InternalError(absl::StrCat(strict.message(), "; allowing non-deterministic ",
                                                "engines: ", relaxed.message()));
      }
    }
  }
  absl::StatusOr<void*> ws =
      ctx->Workspace(static_cast<size_t>(impl_->workspace_bytes), "cuDNN convolution");
  if (!ws.ok()) return ws.status();
  std::unordered_map<int64_t, void*> pack{
      {kUidA, const_cast<float*>(a)}, {kUidB, const_cast<float*>(b)}, {kUidOut, out}};
  return FeStatus(impl_->graph->execute(*handle, pack, *ws), "execute");
}

absl::StatusOr<ConvGraph*> ConvGraphFor(int device, ConvPass pass, const ConvGeometry& g) {
  static std::mutex mu;
  static auto* cache = new std::map<std::tuple<int, int, ConvGeometry>, std::unique_ptr<ConvGraph>>;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(device, static_cast<int>(pass), g);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<ConvGraph>> made = ConvGraph::Create(pass, g);
  if (!made.ok()) return made.status();
  ConvGraph* graph = made->get();
  (*cache)[key] = *std::move(made);
  return graph;
}

}  // namespace yoke::engine::cuda
