// Trainer: a pipeline job's checkpoints (docs/pipeline.md, "Checkpoints").
//
// A checkpoint of a pipeline job is the file a one-rank run of the same
// model writes: "params", "state" and each "optim/..." tensor hold the whole
// model's flat buffers. A stage's flat buffers are a contiguous part of the
// whole model's (ParamSet pads each entry alone, and a stage holds whole
// layers in order), so stage s's part starts after the sizes of stages
// 0..s-1, which ShareStageSizes learns from pipeline 0. Rank 0 writes the
// file while pipeline 0's other stages broadcast their parts to it in
// chunks; each stage resumes by reading only its part. The file therefore
// resumes onto the same split, another split, another number of stages, or
// no pipeline at all, and `yoke export` reads it as any other.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/checkpoint.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

namespace {

// Floats per broadcast chunk: 4 MiB, what a rank holds beyond its stage.
constexpr int64_t kGatherChunk = int64_t{1} << 20;

struct Part {
  std::string name;
  engine::Tensor t;    // this rank's, on the CPU
  bool state = false;  // sized by stage_state, else by stage_params
};

std::vector<Part> PartsOf(engine::Model& model, engine::Optimizer& optimizer) {
  std::vector<Part> parts = {{"params", model.params().flat_values(), false},
                             {"state", model.params().flat_state(), true}};
  for (auto& [name, t] : optimizer.State()) parts.push_back({"optim/" + name, t, false});
  return parts;
}

int64_t Sum(const std::vector<int64_t>& v, size_t end) {
  int64_t s = 0;
  for (size_t i = 0; i < end && i < v.size(); ++i) s += v[i];
  return s;
}

int64_t Numel(const engine::Tensor& t) { return t.defined() ? t.numel() : 0; }

}  // namespace

absl::Status Trainer::ShareStageSizes(Replica& r) {
  const int p = stages_;
  std::vector<int64_t> sizes(2 * p, 0);
  if (r.pipeline == 0) {
    sizes[2 * r.stage] = Numel(r.model->params().flat_values());
    sizes[2 * r.stage + 1] = Numel(r.model->params().flat_state());
  }
  collective::AllreduceOptions o;
  o.timeout = collective_timeout_;
  o.tag = "stage sizes";
  RETURN_IF_ERROR(
      r.comm
          ->Allreduce(collective::Buffer{sizes.data(), 2 * p, collective::DataType::kI64,
                                         collective::DeviceKind::kCpu, 0},
                      o)
          ->Wait());
  r.stage_params.assign(p, 0);
  r.stage_state.assign(p, 0);
  for (int s = 0; s < p; ++s) {
    r.stage_params[s] = sizes[2 * s];
    r.stage_state[s] = sizes[2 * s + 1];
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadStageSlices(Replica& r) {
  const std::string& path = pipeline_resume_;
  std::vector<Part> parts = PartsOf(*r.model, *r.optimizer);
  std::vector<engine::TensorSlice> slices;
  for (const Part& part : parts) {
    if (Numel(part.t) == 0) continue;
    const std::vector<int64_t>& sizes = part.state ? r.stage_state : r.stage_params;
    slices.push_back({part.name, Sum(sizes, r.stage), part.t});
  }
  ASSIGN_OR_RETURN(const v1::CheckpointHeader h, engine::ReadCheckpointSlices(path, slices));
  // Each part fits inside its tensor of the file (ReadCheckpointSlices
  // checked that); the file's tensors must also be exactly the model's.
  for (const Part& part : parts) {
    const int64_t whole = Sum(part.state ? r.stage_state : r.stage_params, stages_);
    int64_t held = -1;
    for (const v1::TensorRecord& rec : h.tensors()) {
      if (rec.name() == part.name) held = static_cast<int64_t>(rec.bytes() / sizeof(float));
    }
    if (held != whole && !(held < 0 && whole == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": '", part.name, "' holds ", std::max<int64_t>(held, 0),
          " values but this model needs ", whole, " (was it written for a different model?)"));
    }
  }
  r.optimizer->set_step_count(h.optimizer_step());
  return absl::OkStatus();
}

absl::Status Trainer::GatherCheckpoint(Replica& r, const std::string& path) {
  const bool writer = r.rank == 0;
  std::vector<Part> parts = PartsOf(*r.model, *r.optimizer);
  std::unique_ptr<engine::CheckpointWriter> out;
  // Rank 0 keeps going after a failed write, so that every rank's
  // broadcasts still line up; the failure is returned at the end.
  absl::Status write_status;
  if (writer) {
    std::vector<engine::TensorDecl> decls;
    for (const Part& part : parts) {
      const int64_t whole = Sum(part.state ? r.stage_state : r.stage_params, stages_);
      decls.push_back({part.name, engine::DType::kF32, {whole}});
    }
    auto w = engine::CheckpointWriter::Open(path, CheckpointHeaderNow(), decls);
    if (w.ok()) {
      out = std::move(*w);
    } else {
      write_status = w.status();
    }
  }
  auto append = [&](const float* data, int64_t n) {
    if (out && write_status.ok() && n > 0) {
      write_status = out->Append(data, static_cast<size_t>(n) * sizeof(float));
    }
  };
  std::vector<float> chunk;
  collective::Options o;
  o.timeout = collective_timeout_;
  o.tag = "checkpoint";
  for (const Part& part : parts) {
    const std::vector<int64_t>& sizes = part.state ? r.stage_state : r.stage_params;
    // Stage 0 of pipeline 0 is rank 0 itself.
    if (writer) append(Numel(part.t) > 0 ? part.t.data<float>() : nullptr, sizes[0]);
    for (int s = 1; s < stages_; ++s) {
      const bool mine = r.pipeline == 0 && r.stage == s;
      for (int64_t off = 0; off < sizes[s]; off += kGatherChunk) {
        const int64_t n = std::min(kGatherChunk, sizes[s] - off);
        chunk.resize(static_cast<size_t>(n));
        if (mine) std::copy_n(part.t.data<float>() + off, n, chunk.data());
        RETURN_IF_ERROR(
            r.comm
                ->Broadcast(collective::Buffer{chunk.data(), n, collective::DataType::kF32,
                                               collective::DeviceKind::kCpu, 0},
                            /*root=*/s, o)
                ->Wait());
        append(chunk.data(), n);
      }
    }
  }
  if (!writer) return absl::OkStatus();
  RETURN_IF_ERROR(write_status);
  return out->Finish();
}

}  // namespace yoke::worker
