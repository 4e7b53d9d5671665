#include "trainer/main_options.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace yoke::worker {
namespace {

constexpr char kNoJob[] = "no job file, --spec-file or --resume";

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The checks of the ranks and of where they rendezvous.
absl::Status CheckPlacement(const TrainerArgs& a) {
  if (a.world_size < 1)
    return Invalid(absl::StrCat("--world-size: must be >= 1, got ", a.world_size));
  if (a.replicas < 1) return Invalid(absl::StrCat("--replicas: must be >= 1, got ", a.replicas));
  if (a.rank + a.replicas > a.world_size) {
    return Invalid(absl::StrCat("--rank: ranks ", a.rank, "..", a.rank + a.replicas - 1,
                                " (--rank, ", "--replicas ", a.replicas, ") must be in [0, ",
                                a.world_size, ")"));
  }
  return absl::OkStatus();
}

// The checks of what to train: a job file, a spec file or a checkpoint.
absl::Status CheckJob(const TrainerArgs& a) {
  if (!a.spec_file.empty() && !a.job_file.empty()) {
    return Invalid(absl::StrCat("give a job file ('", a.job_file, "') or --spec-file ('",
                                a.spec_file, "'), not both"));
  }
  if (!a.spec_file.empty() && !a.overrides.empty()) {
    return Invalid("--set needs a YAML job file; --spec-file takes the spec as it is");
  }
  if (a.job_file.empty() && a.spec_file.empty() && a.resume.empty()) {
    return absl::FailedPreconditionError(kNoJob);
  }
  if (!a.resume.empty() && !a.resume_latest.empty()) {
    return Invalid("give --resume or --resume-latest, not both");
  }
  if (!a.resume_latest.empty() && a.job_file.empty() && a.spec_file.empty()) {
    return Invalid("--resume-latest needs a job file or --spec-file");
  }
  return absl::OkStatus();
}

}  // namespace

void DeclareTrainerFlags(common::FlagParser* parser, TrainerArgs* a) {
  // Ranks and counts: non-negative here, their relations checked by
  // BuildTrainerOptions.
  constexpr int kMaxCount = 1 << 30;
  parser->Strings("--set", &a->overrides)
      .String("--resume", &a->resume)
      .String("--resume-latest", &a->resume_latest)
      .String("--spec-file", &a->spec_file)
      .String("--output,-o", &a->output)
      .String("--log-level", &a->log_level)
      .Int("--rank", &a->rank, 0, kMaxCount)
      .Int("--world-size", &a->world_size, 0, kMaxCount)
      .Int("--replicas", &a->replicas, 0, kMaxCount)
      .Int("--attempt", &a->attempt, 0, kMaxCount)
      .Int("--ps-incarnation", &a->ps_incarnation, 0, kMaxCount)
      .String("--coordinator", &a->coordinator)
      .String("--job-id", &a->job_id)
      .String("--gloo-hostname", &a->gloo_hostname)
      .String("--rank-hosts", &a->rank_hosts)
      .String("--data-ports", &a->data_ports)
      .Strings("--data-root", &a->data_roots)
      .Strings("--checkpoint-root", &a->checkpoint_roots)
      .Duration("--stop-grace", &a->stop_grace, absl::ZeroDuration(),
                "a duration of 0 or more such as 8s");
}

absl::StatusOr<TrainerMainOptions> BuildTrainerOptions(const TrainerArgs& args) {
  const TrainerArgs& a = args;
  if (a.output != "text" && a.output != "json" && a.output != "events") {
    return Invalid(absl::StrCat("--output must be text, json or events, got '", a.output, "'"));
  }
  if (absl::Status s = CheckPlacement(a); !s.ok()) return s;
  TrainerMainOptions o;
  if (!a.data_ports.empty()) {
    absl::StatusOr<common::PortRange> range = common::ParsePortRange(a.data_ports);
    if (!range.ok()) return Invalid(absl::StrCat("--data-ports: ", range.status().message()));
    o.data_ports = *range;
  }
  if (a.world_size > 1 && a.replicas < a.world_size &&
      (a.coordinator.empty() || a.job_id.empty())) {
    return Invalid(absl::StrCat("--world-size ", a.world_size, " with ranks in other processes ",
                                "needs --coordinator HOST:PORT and --job-id to rendezvous"));
  }
  if (absl::Status s = CheckJob(a); !s.ok()) return s;
  o.args = a;
  o.trainer.spec_validated = true;  // by yoke-trainer, or where it was submitted (--spec-file)
  o.trainer.world_size = a.world_size;
  o.trainer.first_rank = a.rank;
  o.trainer.num_replicas = a.replicas;
  o.local_rendezvous = a.world_size > 1 && a.coordinator.empty();
  o.trainer.coordinator = a.coordinator;
  o.trainer.job_id = a.job_id;
  o.trainer.attempt = a.attempt;
  o.trainer.ps_incarnation = a.ps_incarnation;
  o.trainer.hostname = a.gloo_hostname;
  if (!a.rank_hosts.empty()) o.trainer.rank_hosts = absl::StrSplit(a.rank_hosts, ',');
  return o;
}

bool IsNoJob(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition && status.message() == kNoJob;
}

}  // namespace yoke::worker
