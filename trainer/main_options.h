// yoke-trainer's command line, checked and turned into the options it
// trains with (trainer_main.cc has the program's documentation).
//
// Thread-safety: DeclareTrainerFlags' parser writes its TrainerArgs while
// parsing (not thread-safe); BuildTrainerOptions is a pure function.
#ifndef YOKE_TRAINER_MAIN_OPTIONS_H_
#define YOKE_TRAINER_MAIN_OPTIONS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/port_range.h"
#include "trainer/trainer.h"

namespace yoke::worker {

// yoke-trainer's arguments as given, with their defaults.
struct TrainerArgs {
  std::string job_file;  // the positional argument; "" for none
  std::string spec_file, resume, resume_latest;
  std::string output = "text", log_level = "warn";
  std::string coordinator, job_id, gloo_hostname = "127.0.0.1", rank_hosts, data_ports;
  int rank = 0, world_size = 1, replicas = 1, attempt = 0;
  // --ps-incarnation: TrainerOptions::ps_incarnation (a PS job's replica
  // restarted alone by the worker daemon).
  int ps_incarnation = 0;
  std::vector<std::string> overrides, data_roots, checkpoint_roots;
  // --stop-grace: how long after SIGINT/SIGTERM the trainer waits for the
  // step boundary where it stops (and checkpoints) before it exits anyway;
  // zero: as long as that takes.
  absl::Duration stop_grace = absl::ZeroDuration();
};

// Declares yoke-trainer's flags on `parser`, bound to `args` (which must
// outlive the parser): --set, --resume, --resume-latest, --spec-file,
// --output/-o, --log-level, --rank, --world-size, --replicas, --attempt,
// --ps-incarnation (integers in [0, 2^30]), --coordinator, --job-id, --gloo-hostname,
// --rank-hosts, --data-ports, --data-root, --checkpoint-root and
// --stop-grace (a duration, 0 or more). The job
// file is the positional argument: the caller sets args->job_file.
void DeclareTrainerFlags(common::FlagParser* parser, TrainerArgs* args);

struct TrainerMainOptions {
  TrainerArgs args;
  // --data-ports, parsed: the ports this process's Gloo listeners may take.
  std::optional<common::PortRange> data_ports;
  // The ranks' placement and rendezvous (world_size, first_rank,
  // num_replicas, coordinator, job_id, attempt, hostname, rank_hosts) and
  // spec_validated; resume, progress and store are the caller's.
  TrainerOptions trainer;
  // world_size > 1 and no --coordinator: every rank runs in this process and
  // they rendezvous in memory (the caller gives trainer.store).
  bool local_rendezvous = false;
};

// Checks `args` and builds the options. Errors, checked in this order, are
// what yoke-trainer prints after "yoke train: " (exit 2):
//   --output not text, json or events; --world-size or --replicas < 1;
//   ranks beyond --world-size; a bad --data-ports; ranks in other processes
//   without --coordinator and --job-id; both a job file and --spec-file;
//   --set with --spec-file; no job at all (IsNoJob: the program prints its
//   usage instead); both --resume and --resume-latest; --resume-latest with
//   neither a job file nor --spec-file.
absl::StatusOr<TrainerMainOptions> BuildTrainerOptions(const TrainerArgs& args);

// True for BuildTrainerOptions' error when the arguments name no job file,
// --spec-file or --resume.
bool IsNoJob(const absl::Status& status);

}  // namespace yoke::worker

#endif  // YOKE_TRAINER_MAIN_OPTIONS_H_
