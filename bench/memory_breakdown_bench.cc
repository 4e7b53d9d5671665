// memory_breakdown_bench: where a training step's memory goes, for one model
// and batch (issue 33's breakdown).
//
//   memory_breakdown_bench [--zoo resnet50] [--width 64] [--image 224]
//                          [--classes 1000] [--batch 16] [--optimizer momentum]
//                          [--precision fp32|bf16] [--recompute]
//                          [--recompute_batch_norm] [--profile_steps 0]
//
// One training step (forward, loss, backward, optimizer step) in the CPU
// engine, on random data. Each part is measured as the CPU allocator's bytes
// in use before and after the code that allocates it: the model (parameters,
// their gradients, batch-norm statistics), the optimizer's state, the first
// training forward (the activations kept for backward), the first backward
// (the activation gradients' planned buffers). Beside them: the model's own
// account of the same (Model::ActivationBytes, GradientBytes with and
// without the plan), the allocator's peak, and the process's peak resident
// memory; what the process holds beyond the allocator is oneDNN's scratchpads
// and workspaces, the libraries and the heap. The step is checked first: a
// finite loss and finite, non-zero gradients, or exit 1. The lower bound
// (parameters, gradients, optimizer state, activations, the largest
// activation gradient) is printed against the measured peak, and the
// layers with the largest saved outputs are listed. --precision bf16 runs
// the convolutions in bf16 (Model::UseBf16); their per-thread scratch is
// part of the backward's figure. --recompute keeps only the outputs between
// blocks (Model::SetRecompute); --recompute_batch_norm keeps batch norm's
// inputs, not its outputs (Model::SetRecomputeBatchNorm). --profile_steps N then times N more steps
// (after the measured one) and prints the forward and backward seconds per
// step of each layer type, the rest of the step (loss, optimizer), and the
// slowest layers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/rng.h"
#include "engine/allocator.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"

ABSL_FLAG(std::string, zoo, "resnet50", "zoo model");
ABSL_FLAG(int, width, 0, "the ResNets' stem width (0: the zoo's default)");
ABSL_FLAG(int, image, 224, "input height and width (3 channels)");
ABSL_FLAG(int, classes, 1000, "classes");
ABSL_FLAG(int64_t, batch, 16, "examples per step");
ABSL_FLAG(std::string, optimizer, "momentum", "sgd, momentum (sgd with 0.9) or adam");
ABSL_FLAG(std::string, precision, "fp32", "fp32, or bf16 (the convolutions in bf16)");
ABSL_FLAG(int, profile_steps, 0, "steps timed per layer type after the measured one");
ABSL_FLAG(bool, recompute, false, "recompute the blocks' activations in backward");
ABSL_FLAG(bool, recompute_batch_norm, false, "apply batch norm again in backward");

namespace yoke::engine {
namespace {

double MiB(double bytes) { return bytes / (1 << 20); }

// VmHWM or VmRSS of this process, in bytes (0 if unreadable).
double ProcBytes(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// What the training Forward keeps, for the header line.
const char* KeepLabel() {
  if (absl::GetFlag(FLAGS_recompute)) return ", recompute";
  return absl::GetFlag(FLAGS_recompute_batch_norm) ? ", recompute_batch_norm" : "";
}

// --precision, --recompute and --recompute_batch_norm on `model`; false (the reason on stderr) if
// the model refuses one.
bool Configure(Model& model) {
  if (absl::GetFlag(FLAGS_precision) == "bf16") {
    auto layers = model.UseBf16(true);
    if (!layers.ok()) {
      std::fprintf(stderr, "memory_breakdown_bench: %s\n", layers.status().ToString().c_str());
      return false;
    }
  } else if (absl::GetFlag(FLAGS_precision) != "fp32") {
    std::fprintf(stderr, "memory_breakdown_bench: --precision fp32 or bf16\n");
    return false;
  }
  if (absl::GetFlag(FLAGS_recompute)) {
    auto segments = model.SetRecompute(true);
    if (!segments.ok()) {
      std::fprintf(stderr, "memory_breakdown_bench: %s\n", segments.status().ToString().c_str());
      return false;
    }
  }
  if (absl::GetFlag(FLAGS_recompute_batch_norm)) {
    auto outputs = model.SetRecomputeBatchNorm(true);
    if (!outputs.ok()) {
      std::fprintf(stderr, "memory_breakdown_bench: %s\n", outputs.status().ToString().c_str());
      return false;
    }
  }
  return true;
}

// --profile_steps: `steps` more steps of `model` on (x, y), timed per layer
// type and per layer. False (with the reason on stderr) if a step fails.
bool Profile(Model& model, Optimizer& opt, Loss& loss, const Tensor& x, const Tensor& y,
             int steps) {
  const int64_t n = x.dim(0);
  LayerContext ctx;
  Tensor dlogits;
  model.set_profiling(true);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    auto out = model.Forward(x, ctx);
    if (out.ok() && !dlogits.defined()) dlogits = Tensor::Empty(out->shape());
    if (!out.ok() || !loss.Compute(*out, y, 1.0f / n, &dlogits).ok() ||
        !model.Backward(dlogits, ctx).ok() || !opt.Step(0.01f, 1.0f).ok()) {
      std::fprintf(stderr, "memory_breakdown_bench: a profiled step failed\n");
      return false;
    }
  }
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::map<std::string, std::pair<double, double>> by_type;
  double layers_s = 0;
  for (const Model::LayerTime& t : model.layer_times()) {
    by_type[t.type].first += t.forward_s / steps;
    by_type[t.type].second += t.backward_s / steps;
    layers_s += (t.forward_s + t.backward_s) / steps;
  }
  std::printf("  time per step over %d steps: %.3f s (%.2f samples/s)\n", steps, total,
              static_cast<double>(n) / total);
  std::printf("    %-24s %10s %10s %8s\n", "layer type", "forward s", "backward s", "share");
  for (const auto& [type, fb] : by_type) {
    std::printf("    %-24s %10.4f %10.4f %7.1f%%\n", type.c_str(), fb.first, fb.second,
                100 * (fb.first + fb.second) / total);
  }
  std::printf("    %-24s %21.4f %7.1f%%\n", "the rest (loss, optimizer)", total - layers_s,
              100 * (total - layers_s) / total);
  std::vector<Model::LayerTime> slowest = model.layer_times();
  std::sort(slowest.begin(), slowest.end(),
            [](const Model::LayerTime& p, const Model::LayerTime& q) {
              return p.forward_s + p.backward_s > q.forward_s + q.backward_s;
            });
  std::printf("  slowest layers (forward s, backward s per step):\n");
  for (size_t i = 0; i < std::min<size_t>(12, slowest.size()); ++i) {
    std::printf("    %-28s %-18s %8.4f %8.4f\n", slowest[i].name.c_str(), slowest[i].type.c_str(),
                slowest[i].forward_s / steps, slowest[i].backward_s / steps);
  }
  return true;
}

int Run() {
  const int64_t n = absl::GetFlag(FLAGS_batch);
  const int image = absl::GetFlag(FLAGS_image);
  v1::ModelSpec spec;
  spec.set_zoo(absl::GetFlag(FLAGS_zoo));
  if (absl::GetFlag(FLAGS_width) > 0) spec.set_width(absl::GetFlag(FLAGS_width));
  v1::OptimizerSpec opt_spec;
  const std::string opt_name = absl::GetFlag(FLAGS_optimizer);
  opt_spec.set_type(opt_name == "adam" ? "adam" : "sgd");
  opt_spec.set_lr(opt_name == "adam" ? 0.001f : 0.01f);
  if (opt_name == "momentum") opt_spec.set_momentum(0.9f);

  Allocator* a = CpuAllocator();
  const double rss0 = ProcBytes("VmRSS");
  auto in_use = [&] { return static_cast<double>(a->in_use_bytes()); };
  const double u0 = in_use();
  auto model_or = Model::Create(spec, {image, image, 3}, absl::GetFlag(FLAGS_classes));
  if (!model_or.ok()) {
    std::fprintf(stderr, "memory_breakdown_bench: %s\n", model_or.status().ToString().c_str());
    return 1;
  }
  Model& model = **model_or;
  if (!Configure(model)) return 1;
  model.params().Initialize(1);
  const double u_model = in_use();
  auto opt = CreateOptimizer(opt_spec, &model.params());
  if (!opt.ok()) {
    std::fprintf(stderr, "memory_breakdown_bench: %s\n", opt.status().ToString().c_str());
    return 1;
  }
  const double u_opt = in_use();
  Tensor x = Tensor::Empty({n, image, image, 3});
  Tensor y = Tensor::Empty({n}, DType::kI32);
  common::Philox rng(3, 1);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 2 * rng.NextFloat() - 1;
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  auto loss = CreateLoss("softmax_cross_entropy").value();
  LayerContext ctx;
  const double u_data = in_use();
  auto logits = model.Forward(x, ctx);
  if (!logits.ok()) {
    std::fprintf(stderr, "memory_breakdown_bench: %s\n", logits.status().ToString().c_str());
    return 1;
  }
  const double u_fwd = in_use();
  Tensor dlogits = Tensor::Empty(logits->shape());
  auto r = loss->Compute(*logits, y, 1.0f / n, &dlogits);
  const double u_loss = in_use();
  absl::Status b = model.Backward(dlogits, ctx);
  const double u_bwd = in_use();
  absl::Status st = (*opt)->Step(0.01f, 1.0f);
  if (!r.ok() || !b.ok() || !st.ok() || !std::isfinite(r->loss_sum)) {
    std::fprintf(stderr, "memory_breakdown_bench: the step failed or its loss is not finite\n");
    return 1;
  }
  // Checked: finite gradients, not all zero.
  const Tensor& g = model.params().flat_grads();
  double norm = 0;
  for (int64_t i = 0; i < g.numel(); ++i) norm += double(g.data<float>()[i]) * g.data<float>()[i];
  if (!std::isfinite(norm) || norm == 0) {
    std::fprintf(stderr, "memory_breakdown_bench: the gradients are zero or not finite\n");
    return 1;
  }
  const double u_end = in_use(), peak = static_cast<double>(a->peak_bytes());
  const double hwm = ProcBytes("VmHWM");

  const double values = static_cast<double>(model.params().flat_values().numel()) * 4;
  const double state = static_cast<double>(model.params().flat_state().numel()) * 4;
  const double act_plan = static_cast<double>(model.ActivationBytes(n));
  const double grad_plan = static_cast<double>(model.GradientBytes(n, true));
  const double grad_plain = static_cast<double>(model.GradientBytes(n, false));
  std::printf("memory_breakdown_bench: %s%s, %dx%dx3, %d classes, batch %lld, %s, %s%s\n",
              spec.zoo().c_str(),
              spec.width() > 0 ? (" width " + std::to_string(spec.width())).c_str() : "", image,
              image, absl::GetFlag(FLAGS_classes), static_cast<long long>(n), opt_name.c_str(),
              absl::GetFlag(FLAGS_precision).c_str(), KeepLabel());
  std::printf("  %-44s %10s %10s\n", "part (allocator bytes in use, measured)", "MiB",
              "model says");
  std::printf("  %-44s %10.1f %10.1f\n", "parameters", MiB(values), MiB(values));
  std::printf("  %-44s %10.1f %10.1f\n", "their gradients", MiB(values), MiB(values));
  std::printf("  %-44s %10.1f %10.1f\n", "batch-norm running statistics", MiB(state), MiB(state));
  std::printf("  %-44s %10.1f %10s\n", "  (the model, measured: the three above)",
              MiB(u_model - u0), "");
  std::printf("  %-44s %10.1f %10s\n", "optimizer state", MiB(u_opt - u_model), "");
  std::printf("  %-44s %10.1f %10s\n", "input batch and labels", MiB(u_data - u_opt), "");
  std::printf("  %-44s %10.1f %10.1f\n", "activations kept for backward (first forward)",
              MiB(u_fwd - u_data), MiB(act_plan));
  std::printf("  %-44s %10.1f %10s\n", "loss gradient", MiB(u_loss - u_fwd), "");
  std::printf("  %-44s %10.1f %10.1f\n", "activation gradients (planned; first backward)",
              MiB(u_bwd - u_loss), MiB(grad_plan));
  std::printf("  %-44s %10s %10.1f\n", "  (a gradient buffer per layer would take)", "",
              MiB(grad_plain));
  std::printf("  %-44s %10.1f\n", "allocator: in use after the step", MiB(u_end));
  std::printf("  %-44s %10.1f\n", "allocator: peak", MiB(peak));
  std::printf("  %-44s %10.1f\n", "process: resident before the model", MiB(rss0));
  std::printf("  %-44s %10.1f\n", "process: peak resident (VmHWM)", MiB(hwm));
  std::printf("  %-44s %10.1f\n", "beyond the allocator (oneDNN, heap, libraries)",
              MiB(hwm - rss0 - peak));
  double largest_grad = 0;
  std::vector<Model::LayerBytes> layers = model.ActivationBreakdown(n);
  for (const auto& l : layers) largest_grad = std::max(largest_grad, double(l.bytes));
  const double bound = 2 * values + (u_opt - u_model) + act_plan + largest_grad;
  std::printf(
      "  lower bound (parameters, gradients, optimizer state, activations, the largest\n"
      "  activation gradient) %.1f MiB: %.2f of the allocator's peak, %.2f of the\n"
      "  process's growth\n",
      MiB(bound), bound / peak, bound / (hwm - rss0));
  std::sort(
      layers.begin(), layers.end(),
      [](const Model::LayerBytes& p, const Model::LayerBytes& q) { return p.bytes > q.bytes; });
  std::printf("  largest saved outputs:\n");
  for (size_t i = 0; i < std::min<size_t>(8, layers.size()); ++i) {
    std::printf("    %-28s %-18s %8.1f MiB\n", layers[i].name.c_str(), layers[i].type.c_str(),
                MiB(layers[i].bytes));
  }
  const int steps = absl::GetFlag(FLAGS_profile_steps);
  if (steps > 0 && !Profile(model, **opt, *loss, x, y, steps)) return 1;
  return 0;
}

}  // namespace
}  // namespace yoke::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::engine::Run();
}
