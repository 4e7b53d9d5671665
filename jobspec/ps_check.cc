#include "jobspec/ps_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/quote.h"

namespace yoke::common {

namespace {

constexpr char kStrategy[] = "parameter_server";

// The strategy's own fields.
void CheckPsFields(const v1::DistributionSpec& d, std::vector<std::string>* errors) {
  if (d.parameter_servers() < 1 || d.parameter_servers() > kMaxParameterServers) {
    errors->push_back(absl::StrCat("distribution.parameter_servers: must be in [1, ",
                                   kMaxParameterServers, "] with distribution.strategy ", kStrategy,
                                   ", got ", d.parameter_servers()));
  }
  const std::string& c = d.consistency();
  if (!c.empty() && c != "sync" && c != "async" && c != "bounded") {
    errors->push_back(absl::StrCat("distribution.consistency: unknown consistency ", Quote(c, 40),
                                   " (known: sync, async, bounded)"));
  }
  if (d.max_staleness() < 0 || d.max_staleness() > kMaxStaleness) {
    errors->push_back(absl::StrCat("distribution.max_staleness: must be in [0, ", kMaxStaleness,
                                   "], got ", d.max_staleness()));
  } else if (d.max_staleness() > 0 && c != "bounded") {
    errors->push_back(
        absl::StrCat("distribution.max_staleness: counts only with distribution.consistency "
                     "bounded (got ",
                     c.empty() ? "the default, sync" : Quote(c, 40), ")"));
  }
}

// What a parameter-server job cannot do (yet), each with why.
void CheckPsJob(const v1::JobSpec& spec, std::vector<std::string>* errors) {
  const v1::DistributionSpec& d = spec.distribution();
  const std::string with = absl::StrCat(" with distribution.strategy ", kStrategy);
  if (d.has_pipeline()) {
    errors->push_back(absl::StrCat("distribution.pipeline: not", with,
                                   " (a job splits its work one way: parameter servers or a "
                                   "pipeline)"));
  }
  if (d.device() == "cuda") {
    errors->push_back(absl::StrCat("distribution.device: 'cpu' only", with, " for now"));
  }
  if (d.sync_batch_norm()) {
    errors->push_back(
        absl::StrCat("distribution.sync_batch_norm: not supported", with,
                     " (the workers do not step together under async or bounded consistency)"));
  }
  if (!d.gradient_compression().empty() && d.gradient_compression() != "none") {
    errors->push_back(absl::StrCat("distribution.gradient_compression: only 'none'", with,
                                   " (pushes travel in fp32)"));
  }
  if (spec.training().clip_grad_norm() > 0) {
    errors->push_back(absl::StrCat("training.clip_grad_norm: not supported", with,
                                   " (the global norm spans every PS task's shard)"));
  }
}

}  // namespace

bool IsParameterServerJob(const v1::JobSpec& spec) {
  return spec.distribution().strategy() == kStrategy;
}

int ParameterServerTasks(const v1::JobSpec& spec) {
  return IsParameterServerJob(spec) ? std::max(spec.distribution().parameter_servers(), 0) : 0;
}

bool RestartsReplicasAlone(const v1::JobSpec& spec) {
  const v1::DistributionSpec& d = spec.distribution();
  return IsParameterServerJob(spec) && (d.consistency() == "async" || d.consistency() == "bounded");
}

std::vector<std::string> ParameterServerSpecErrors(const v1::JobSpec& spec) {
  std::vector<std::string> errors;
  const v1::DistributionSpec& d = spec.distribution();
  const std::string& s = d.strategy();
  if (!s.empty() && s != "allreduce" && s != kStrategy) {
    errors.push_back(absl::StrCat("distribution.strategy: unknown strategy ", Quote(s, 40),
                                  " (known: allreduce, parameter_server)"));
    return errors;
  }
  if (!IsParameterServerJob(spec)) {
    const char* field = d.parameter_servers() != 0 ? "parameter_servers"
                        : !d.consistency().empty() ? "consistency"
                        : d.max_staleness() != 0   ? "max_staleness"
                                                   : nullptr;
    if (field != nullptr) {
      errors.push_back(
          absl::StrCat("distribution.", field, ": only with distribution.strategy ", kStrategy));
    }
    return errors;
  }
  CheckPsFields(d, &errors);
  CheckPsJob(spec, &errors);
  return errors;
}

std::vector<PsShare> PsShares(int workers, int per_worker, int ps_tasks) {
  std::vector<PsShare> shares;
  int rank = 0;
  for (int i = 0; i < workers; ++i) {
    // PS tasks i, i + workers, i + 2 workers, ...
    const int mine = ps_tasks > i ? (ps_tasks - i + workers - 1) / workers : 0;
    shares.push_back({rank, per_worker + mine});
    rank += per_worker + mine;
  }
  return shares;
}

RankRole RoleOfRank(int rank, int workers, int per_worker, int ps_tasks) {
  const std::vector<PsShare> shares = PsShares(workers, per_worker, ps_tasks);
  for (int i = 0; i < workers; ++i) {
    const int at = rank - shares[i].first_rank;  // within share i
    if (at < 0 || at >= shares[i].num_ranks) continue;
    if (at < per_worker) return {false, i * per_worker + at};
    return {true, i + (at - per_worker) * workers};  // PS tasks i, i + workers, ...
  }
  return {true, rank - workers * per_worker};  // past the layout: not a rank of the job
}

}  // namespace yoke::common
