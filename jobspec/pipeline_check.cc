#include "jobspec/pipeline_check.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/quote.h"

namespace yoke::common {

namespace {

int64_t Ranks(const v1::DistributionSpec& d) {
  return static_cast<int64_t>(std::max(d.workers(), 1)) * std::max(d.devices_per_worker(), 1);
}

// The pipeline's own fields.
void CheckFields(const v1::PipelineSpec& p, std::vector<std::string>* errors) {
  const std::string f = "distribution.pipeline";
  if (p.stages() < 2 || p.stages() > kMaxPipelineStages) {
    errors->push_back(absl::StrCat(f, ".stages: must be in [2, ", kMaxPipelineStages, "], got ",
                                   p.stages(),
                                   p.stages() == 1 ? " (one stage holds the whole model: leave "
                                                     "distribution.pipeline out)"
                                                   : ""));
  }
  if (p.micro_batches() < 0 || p.micro_batches() > kMaxPipelineMicroBatches) {
    errors->push_back(absl::StrCat(f, ".micro_batches: must be in [1, ", kMaxPipelineMicroBatches,
                                   "] (0: 4 x stages), got ", p.micro_batches()));
  }
  if (!p.schedule().empty() && p.schedule() != "1f1b" && p.schedule() != "gpipe") {
    errors->push_back(absl::StrCat(f, ".schedule: unknown schedule ", Quote(p.schedule(), 40),
                                   " (known: 1f1b, gpipe)"));
  }
  if (p.boundaries_size() > 0 && p.stages() >= 2 && p.boundaries_size() != p.stages() - 1) {
    errors->push_back(absl::StrCat(f, ".boundaries: one layer name per stage after the first (",
                                   p.stages() - 1, " for ", p.stages(), " stages), got ",
                                   p.boundaries_size()));
  }
  std::set<std::string> seen;
  for (int i = 0; i < p.boundaries_size(); ++i) {
    const std::string& b = p.boundaries(i);
    if (b.empty()) {
      errors->push_back(absl::StrCat(f, ".boundaries[", i, "]: empty layer name"));
    } else if (!seen.insert(b).second) {
      errors->push_back(absl::StrCat(f, ".boundaries[", i, "]: ", Quote(b, 60),
                                     " is named twice (each stage starts at its own layer)"));
    }
  }
}

// How the ranks form pipelines, and what a pipeline's step cannot do.
void CheckJob(const v1::JobSpec& spec, std::vector<std::string>* errors) {
  const v1::DistributionSpec& d = spec.distribution();
  const v1::PipelineSpec& p = d.pipeline();
  const std::string f = "distribution.pipeline";
  const int64_t ranks = Ranks(d);
  if (p.stages() >= 2 && ranks % p.stages() != 0) {
    errors->push_back(absl::StrCat(f, ".stages: the job's ", ranks,
                                   " ranks (distribution.workers x devices_per_worker) must be "
                                   "a multiple of the stages (",
                                   p.stages(),
                                   "): each data-parallel pipeline has one rank per stage"));
  }
  if (d.device() == "cuda") {
    errors->push_back(absl::StrCat(f, ": runs on distribution.device 'cpu' only for now"));
  }
  const v1::TrainingSpec& t = spec.training();
  if (t.accumulation_steps() > 1) {
    errors->push_back(
        absl::StrCat("training.accumulation_steps: a pipeline accumulates over its micro-batches (",
                     f, ".micro_batches); leave accumulation_steps out"));
  }
  if (t.recompute()) {
    errors->push_back(
        "training.recompute: not with distribution.pipeline (a stage keeps several "
        "micro-batches' activations in flight); use one or the other");
  }
  if (t.recompute_batch_norm()) {
    errors->push_back(
        "training.recompute_batch_norm: not with distribution.pipeline (a stage keeps several "
        "micro-batches' statistics in flight); use one or the other");
  }
  if (d.sync_batch_norm()) {
    errors->push_back(absl::StrCat(
        "distribution.sync_batch_norm: not supported with ", f,
        " (a stage's batch statistics cover one micro-batch, and its replicas would have to "
        "agree on every one)"));
  }
}

}  // namespace

int64_t DataParallelReplicas(const v1::JobSpec& spec) {
  const v1::DistributionSpec& d = spec.distribution();
  const int64_t ranks = Ranks(d);
  if (!d.has_pipeline() || d.pipeline().stages() < 2) return ranks;
  return std::max<int64_t>(ranks / d.pipeline().stages(), 1);
}

int PipelineMicroBatches(const v1::PipelineSpec& p) {
  return p.micro_batches() > 0 ? p.micro_batches() : 4 * std::max(p.stages(), 1);
}

std::vector<std::string> PipelineSpecErrors(const v1::JobSpec& spec) {
  std::vector<std::string> errors;
  if (!spec.distribution().has_pipeline()) return errors;
  CheckFields(spec.distribution().pipeline(), &errors);
  CheckJob(spec, &errors);
  return errors;
}

}  // namespace yoke::common
