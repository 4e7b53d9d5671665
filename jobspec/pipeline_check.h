// The rules of distribution.pipeline that the spec alone decides: its own
// fields, how the job's ranks form pipelines, and the training options a
// pipeline cannot honour. Where the layers of a stage boundary are, and
// whether a cut there is legal, needs the model's layer graph: the trainer
// checks that as it builds its stage (engine::Model::CreateStage).
//
// Thread-safety: pure functions.
#ifndef YOKE_JOBSPEC_PIPELINE_CHECK_H_
#define YOKE_JOBSPEC_PIPELINE_CHECK_H_

#include <string>
#include <vector>

#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

inline constexpr int kMaxPipelineStages = 64;
inline constexpr int kMaxPipelineMicroBatches = 1024;

// The job's data-parallel replicas: pipelines when the spec has one (ranks /
// stages, at least 1), else its ranks (workers x devices_per_worker).
int64_t DataParallelReplicas(const v1::JobSpec& spec);

// The micro-batches per step: distribution.pipeline.micro_batches, or 4 x
// stages when it is 0.
int PipelineMicroBatches(const v1::PipelineSpec& p);

// Every violation of the pipeline's rules, each naming its field; empty
// without distribution.pipeline.
std::vector<std::string> PipelineSpecErrors(const v1::JobSpec& spec);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_PIPELINE_CHECK_H_
