// What clients call on the Coordinator (coordinator/coordinator_jobs.cc),
// through its public API with a fake clock
// (coordinator/testing/coordinator_fixture.h): submission and its spec,
// data, fleet and memory checks, cancel, the worker list, and waiting on a
// job or its logs.
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/coordinator_fixture.h"
#include "gtest/gtest.h"

namespace yoke::server::coordinator_testing {
namespace {

// Per-submitter quotas on waiting jobs (issue 30): the submit past one is
// RESOURCE_EXHAUSTED naming it and the submitter, other submitters go on,
// and a job that leaves PENDING (cancelled, or placed) frees its place.
TEST_F(CoordinatorTest, PendingJobQuotaIsPerSubmitterAndFreedWhenAJobLeavesPending) {
  max_pending_jobs_ = 2;
  Restart();
  auto a1 = coord_->Submit(Spec(), 0, "alice");
  auto a2 = coord_->Submit(Spec(), 0, "alice");
  ASSERT_TRUE(a1.ok()) << a1.status();
  ASSERT_TRUE(a2.ok()) << a2.status();
  auto a3 = coord_->Submit(Spec(), 0, "alice");
  ASSERT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted) << a3.status();
  EXPECT_NE(a3.status().message().find("max_pending_jobs_per_submitter"), std::string::npos)
      << a3.status();
  EXPECT_NE(a3.status().message().find("'alice' already has 2 jobs"), std::string::npos)
      << a3.status();
  EXPECT_EQ(coord_->List(JobListQuery())->jobs.size(), 2u);  // nothing stored for it

  EXPECT_TRUE(coord_->Submit(Spec(), 0, "bob").ok());
  ASSERT_TRUE(coord_->Cancel(*a1).ok());
  auto a4 = coord_->Submit(Spec(), 0, "alice");
  ASSERT_TRUE(a4.ok()) << a4.status();

  // A 1-cpu worker takes the oldest waiting job, alice's second.
  const std::string w = Register(1);
  Beat(w);
  ASSERT_NE(Job(*a2).state(), v1::JOB_PENDING);
  EXPECT_TRUE(coord_->Submit(Spec(), 0, "alice").ok());
  EXPECT_EQ(coord_->Submit(Spec(), 0, "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(CoordinatorTest, PendingSpecBytesQuotaCountsTheSerializedSpecs) {
  const int64_t size = static_cast<int64_t>(Spec().ByteSizeLong());
  max_pending_spec_bytes_ = 2 * size + size / 2;  // two specs fit, not three
  Restart();
  ASSERT_TRUE(coord_->Submit(Spec(), 0, "alice").ok());
  ASSERT_TRUE(coord_->Submit(Spec(), 0, "alice").ok());
  auto third = coord_->Submit(Spec(), 0, "alice");
  ASSERT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_NE(third.status().message().find(absl::StrCat(
                "max_pending_spec_bytes_per_submitter: submitter 'alice' has 2 jobs waiting "
                "whose specs take ",
                2 * size, " bytes; this one's ", size)),
            std::string::npos)
      << third.status();
  // Unauthenticated callers share one quota, under a name that says so.
  ASSERT_TRUE(coord_->Submit(Spec(), 0).ok());
  ASSERT_TRUE(coord_->Submit(Spec(), 0).ok());
  auto anonymous = coord_->Submit(Spec(), 0);
  ASSERT_EQ(anonymous.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(anonymous.status().message().find("the unauthenticated submitter"), std::string::npos)
      << anonymous.status();
}

// The submit rate (issue 30): a bucket of a minute's worth per submitter,
// refilled evenly; refused calls count too, so a flood of bad specs is
// limited like a flood of good ones.
// A spec made from the caller's input (SubmitJobRequest.spec_yaml) is made
// only once the call is within the submit rate: a flood of costly YAML is
// refused unparsed.
TEST_F(CoordinatorTest, SubmitRateIsChargedBeforeTheSpecIsMade) {
  max_submits_per_minute_ = 1;
  Restart();
  int made = 0;
  auto make = [&]() -> absl::StatusOr<v1::JobSpec> {
    ++made;
    return Spec();
  };
  ASSERT_TRUE(coord_->Submit(make, 0, "alice").ok());
  EXPECT_EQ(made, 1);
  EXPECT_EQ(coord_->Submit(make, 0, "alice").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(made, 1);
  // A spec that cannot be made spends the call too, with its own error.
  clock_.Advance(absl::Minutes(1));
  auto bad = [&]() -> absl::StatusOr<v1::JobSpec> {
    ++made;
    return absl::InvalidArgumentError("spec_yaml:1:1: not YAML");
  };
  EXPECT_EQ(coord_->Submit(bad, 0, "alice").status().message(), "spec_yaml:1:1: not YAML");
  EXPECT_EQ(coord_->Submit(make, 0, "alice").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(made, 2);
}

TEST_F(CoordinatorTest, SubmitRateIsPerSubmitterAndRefillsEvenly) {
  max_submits_per_minute_ = 3;
  Restart();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(coord_->Submit(Spec(), 0, "alice").ok()) << i;
  auto fourth = coord_->Submit(Spec(), 0, "alice");
  ASSERT_EQ(fourth.status().code(), absl::StatusCode::kResourceExhausted) << fourth.status();
  EXPECT_EQ(fourth.status().message(),
            "max_submits_per_minute_per_submitter: submitter 'alice' made 3 submissions within "
            "the last minute, the coordinator's limit; try again in 20s");
  EXPECT_TRUE(coord_->Submit(Spec(), 0, "bob").ok());
  // 20 s refill one call; a bad spec spends it.
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(coord_->Submit(Spec({"training.batch_size=-4"}), 0, "alice").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord_->Submit(Spec(), 0, "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
  // A long pause refills the bucket to a minute's worth, no more.
  clock_.Advance(absl::Minutes(10));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(coord_->Submit(Spec(), 0, "alice").ok()) << i;
  EXPECT_EQ(coord_->Submit(Spec(), 0, "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
}

// Running devices per submitter (issue 30): too big a job is refused at
// submit; one that would pass the cap with the submitter's running jobs
// waits without blocking other submitters, and starts once one ends.
TEST_F(CoordinatorTest, RunningDeviceCapHoldsBackOnlyThatSubmittersJobs) {
  max_running_devices_ = 2;
  Restart();
  const std::string w = Register(4);
  auto huge = coord_->Submit(Spec({"distribution.devices_per_worker=3"}), 0, "alice");
  ASSERT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_EQ(huge.status().message(),
            "max_running_devices_per_submitter: this job needs 3 devices, more than the "
            "coordinator lets one submitter run at once (2)");
  auto first = coord_->Submit(Spec({"distribution.devices_per_worker=2"}), 0, "alice");
  auto second = coord_->Submit(Spec(), 0, "alice");
  auto bob = coord_->Submit(Spec(), 0, "bob");
  ASSERT_TRUE(first.ok() && second.ok() && bob.ok());
  EXPECT_EQ(Job(*first).state(), v1::JOB_SCHEDULED);
  EXPECT_EQ(Job(*second).state(), v1::JOB_PENDING);
  EXPECT_EQ(Job(*second).reason(),
            "needs 1 worker with 1 cpu device; held back: submitter 'alice' runs 2 devices, and 1 "
            "more would pass max_running_devices_per_submitter (2)");
  EXPECT_EQ(Job(*bob).state(), v1::JOB_SCHEDULED);  // submitted later, not blocked
  Beat(w, {Status(*first, 1, v1::AttemptStatus::EXITED)});
  EXPECT_EQ(Job(*first).state(), v1::JOB_SUCCEEDED);
  Beat(w);
  EXPECT_EQ(Job(*second).state(), v1::JOB_SCHEDULED) << Job(*second).reason();
}

// A job stopped at the run-time limit keeps its devices in its submitter's
// count until the worker reports its trainer exited: otherwise her next job
// would take a free device while the stopped one still holds its own, and a
// hostile submitter could run one device past the cap for good.
TEST_F(CoordinatorTest, AStoppingTrainersDevicesCountTowardTheCap) {
  max_running_devices_ = 1;
  default_max_run_seconds_ = 30;
  Restart();
  const std::string w = Register(3);
  auto first = coord_->Submit(Spec(), 0, "eve");
  auto next = coord_->Submit(Spec(), 0, "eve");
  ASSERT_TRUE(first.ok() && next.ok());
  Beat(w, {Status(*first, 1, v1::AttemptStatus::RUNNING)});
  EXPECT_EQ(Job(*next).state(), v1::JOB_PENDING);
  clock_.Advance(absl::Seconds(31));
  Beat(w, {Status(*first, 1, v1::AttemptStatus::RUNNING)});
  coord_->Tick();
  ASSERT_EQ(Job(*first).state(), v1::JOB_FAILED) << Job(*first).reason();
  // Told to stop, the trainer is still running: two devices are free, yet
  // Eve's next job waits.
  Beat(w, {Status(*first, 1, v1::AttemptStatus::RUNNING)});
  Beat(w, {Status(*first, 1, v1::AttemptStatus::RUNNING)});
  EXPECT_EQ(Job(*next).state(), v1::JOB_PENDING);
  EXPECT_EQ(Job(*next).reason(),
            "needs 1 worker with 1 cpu device; held back: submitter 'eve' runs 1 device, and 1 "
            "more would pass max_running_devices_per_submitter (1)");
  auto bob = coord_->Submit(Spec(), 0, "bob");
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(Job(*bob).state(), v1::JOB_SCHEDULED);
  v1::AttemptStatus exited = Status(*first, 1, v1::AttemptStatus::EXITED);
  exited.set_exit_code(143);
  Beat(w, {exited, Status(*bob, 1, v1::AttemptStatus::RUNNING)});
  Beat(w, {Status(*bob, 1, v1::AttemptStatus::RUNNING)});
  EXPECT_EQ(Job(*next).state(), v1::JOB_SCHEDULED) << Job(*next).reason();
}

TEST_F(CoordinatorTest, BadSpecsAreRejectedNamingTheFieldAndNothingIsStored) {
  auto bad = coord_->Submit(Spec({"training.batch_size=-4"}), 0);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("training.batch_size"), std::string::npos);

  data_roots_ = {"/data"};
  Restart();
  v1::JobSpec outside = Spec();
  v1::DatasetSpec* train = outside.mutable_data()->mutable_train();
  train->Clear();
  train->set_format("idx");
  train->set_images("/data/../etc/passwd");
  train->set_labels("/data/labels");
  auto rejected = coord_->Submit(outside, 0);
  ASSERT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument) << rejected.status();
  EXPECT_NE(rejected.status().message().find("data.train.images"), std::string::npos)
      << rejected.status();
  EXPECT_TRUE(coord_->List(JobListQuery())->jobs.empty());
  EXPECT_EQ(store_.writes(), 0);
}

// An image folder the coordinator can see is checked at submit, with the
// trainer's message naming the folder; one it cannot see is left to the
// trainer.
TEST_F(CoordinatorTest, AnEmptyClassFolderItCanSeeIsRefusedAtSubmit) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / "coordinator_image_folder";
  fs::remove_all(root);
  fs::create_directories(root / "cat");
  fs::create_directories(root / "dog");
  std::ofstream(root / "cat" / "1.png") << "listed only, never decoded";
  std::ofstream(root / "dog" / "notes.txt") << "no image";
  v1::JobSpec spec = Spec();
  v1::DatasetSpec* train = spec.mutable_data()->mutable_train();
  train->Clear();
  train->set_format("image_folder");
  train->set_root(root.string());
  train->add_image_size(4);
  train->add_image_size(4);
  auto refused = coord_->Submit(spec, 0);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("data.train: " + (root / "dog").string() +
                                            ": class folder 'dog' holds no .jpg"),
            std::string::npos)
      << refused.status();
  EXPECT_TRUE(coord_->List(JobListQuery())->jobs.empty());

  std::ofstream(root / "dog" / "2.JPG") << "x";
  EXPECT_TRUE(coord_->Submit(spec, 0).ok());
  // A root this machine does not have: the workers' business.
  train->set_root((root / "only-on-the-workers").string());
  EXPECT_TRUE(coord_->Submit(spec, 0).ok());
  fs::remove_all(root);
}

TEST_F(CoordinatorTest, JobThatCanNeverFitIsRefusedButAnEmptyFleetAccepts) {
  // No workers yet: accepted, pending with a reason.
  auto early = coord_->Submit(Spec({"distribution.workers=2"}), 0);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(Job(*early).state(), v1::JOB_PENDING);
  EXPECT_EQ(Job(*early).reason(),
            "needs 2 workers with 1 cpu device each; free: no worker has a free cpu device");
  Register(4);
  auto never = coord_->Submit(Spec({"distribution.devices_per_worker=5"}), 0);
  ASSERT_EQ(never.status().code(), absl::StatusCode::kFailedPrecondition) << never.status();
  EXPECT_NE(never.status().message().find("needs 1 worker with 5 cpu devices"), std::string::npos)
      << never.status();
}

TEST_F(CoordinatorTest, AJobNoWorkerHasTheMemoryForIsRefusedNamingTheLayer) {
  v1::RegisterWorkerRequest reg = Reg(2);
  for (v1::Device& d : *reg.mutable_devices()) d.set_memory_bytes(int64_t{8} << 30);
  ASSERT_TRUE(coord_->RegisterWorker(reg).ok());
  auto huge = coord_->Submit(
      Spec({"model={layers: [flatten, {dense: {units: 1000000}}, {dense: {units: 100000}, name: "
            "wide}, {dense: {units: 2}}]}"}),
      0);
  ASSERT_EQ(huge.status().code(), absl::StatusCode::kFailedPrecondition) << huge.status();
  const std::string msg(huge.status().message());
  EXPECT_NE(msg.find("the largest replica share is 8.0 GiB (a worker's --memory-limit over its "
                     "replicas)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("model.layers[2] (wide) alone needs"), std::string::npos) << msg;
  // Each CPU device is one replica's share of its worker's limit, so a job
  // that fits one share fits with a replica on each device...
  const std::string half =
      "model={layers: [flatten, {dense: {units: 30000000}}, {dense: {units: 2}}]}";
  EXPECT_TRUE(coord_->Submit(Spec({half, "distribution.devices_per_worker=2"}), 0).ok());
  // ...and one that needs more than a share does not, however many it asks for.
  auto over = coord_->Submit(Spec({half, "training.batch_size=4096"}), 0);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kFailedPrecondition) << over.status();
  EXPECT_TRUE(coord_->Submit(Spec(), 0).ok()) << "an ordinary job is unaffected";
}

// Model parallelism is for this: a model no replica share can hold whole
// is accepted split into stages that each fit, and refused, naming its
// stage, when its largest stage still does not.
TEST_F(CoordinatorTest, AModelTooBigForAReplicaIsAcceptedAsAPipelineOfStagesThatFit) {
  v1::RegisterWorkerRequest reg = Reg(2);
  for (v1::Device& d : *reg.mutable_devices()) d.set_memory_bytes(int64_t{1} << 30);
  ASSERT_TRUE(coord_->RegisterWorker(reg).ok());
  // Two dense layers of about 600 MiB each (parameters and gradients).
  const std::string model =
      "model={layers: [flatten, {dense: {units: 10000}}, {dense: {units: 8000}, name: b}, "
      "{dense: {units: 2}}]}";
  const std::vector<std::string> wide = {model,
                                         "data.train.format=synthetic",
                                         "data.train.shape=[8000]",
                                         "data.train.num_classes=2",
                                         "data.train.num_examples=64",
                                         "data.test.format=synthetic",
                                         "data.test.shape=[8000]",
                                         "data.test.num_classes=2",
                                         "data.test.num_examples=64",
                                         "training.batch_size=8"};
  auto whole = coord_->Submit(Spec(wide), 0);
  ASSERT_EQ(whole.status().code(), absl::StatusCode::kFailedPrecondition) << whole.status();
  std::vector<std::string> split = wide;
  split.push_back("distribution.devices_per_worker=2");
  split.push_back("distribution.pipeline={stages: 2, boundaries: [b]}");
  auto piped = coord_->Submit(Spec(split), 0);
  EXPECT_TRUE(piped.ok()) << piped.status();
  // At a boundary that leaves both layers in one stage, it does not fit.
  split.back() = "distribution.pipeline={stages: 2, boundaries: [layer_3]}";
  split.push_back(
      "model={layers: [flatten, {dense: {units: 10000}}, {dense: {units: 8000}}, "
      "{dense: {units: 2}, name: layer_3}]}");
  auto lopsided = coord_->Submit(Spec(split), 0);
  ASSERT_EQ(lopsided.status().code(), absl::StatusCode::kFailedPrecondition) << lopsided.status();
  EXPECT_NE(lopsided.status().message().find("memory: each replica (one stage of 2) needs"),
            std::string::npos)
      << lopsided.status();
}

// An idx training set whose images file the coordinator can read is
// counted at its real size (its 16-byte header gives 28x28x1): a first
// dense layer of 200,000 units then holds 157 M parameters, more than a
// 1 GiB share, and is refused. The same job naming a file only the workers
// hold (not here) is estimated at a 1x1x1 input and accepted, as before.
TEST_F(CoordinatorTest, AnIdxJobIsCountedAtTheShapeItsHeaderGives) {
  v1::RegisterWorkerRequest reg = Reg(2);
  for (v1::Device& d : *reg.mutable_devices()) d.set_memory_bytes(int64_t{1} << 30);
  ASSERT_TRUE(coord_->RegisterWorker(reg).ok());
  common::TempDir dir("yoke_idx_submit");
  std::string header;
  for (uint32_t w : {0x803u, 2u, 28u, 28u}) {
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<char>(w >> shift));
  }
  std::ofstream(dir.File("images"), std::ios::binary) << header << std::string(2 * 28 * 28, '\0');
  auto idx = [&](const std::string& images) {
    return Spec(
        {"model={layers: [flatten, {dense: {units: 200000}, name: wide}, "
         "{dense: {units: 2}}]}",
         "data.train={format: idx, images: " + images + ", labels: " + images + "}"});
  };
  auto refused = coord_->Submit(idx(dir.File("images")), 0);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("model.layers[1] (wide) alone needs"),
            std::string::npos)
      << refused.status();
  auto elsewhere = coord_->Submit(idx(dir.File("on-the-workers-only")), 0);
  EXPECT_TRUE(elsewhere.ok()) << elsewhere.status();
}

// A PS task holds its shard with every worker's pushes and answers: with 4 workers and 1 PS task it
// needs more than a 1 GiB share though each replica fits, and with 4 PS tasks, each a quarter of
// the shard, it fits.
TEST_F(CoordinatorTest, APsTaskThatCannotFitAShareIsRefusedAtSubmit) {
  v1::RegisterWorkerRequest reg = Reg(8);
  for (v1::Device& d : *reg.mutable_devices()) d.set_memory_bytes(int64_t{1} << 30);
  ASSERT_TRUE(coord_->RegisterWorker(reg).ok());
  // 40 million parameters: 160 MB of values, 320 MB with their gradients.
  const std::vector<std::string> job = {
      "model={layers: [{dense: {units: 20000}}, {dense: {units: 2}}]}", "data.train.shape=[2000]",
      "distribution={workers: 1, devices_per_worker: 4, strategy: parameter_server, "
      "parameter_servers: 1}"};
  auto one = coord_->Submit(Spec(job), 0);
  ASSERT_EQ(one.status().code(), absl::StatusCode::kFailedPrecondition) << one.status();
  EXPECT_NE(one.status().message().find("memory: each PS task needs at least 1.3 GiB"),
            std::string::npos)
      << one.status();
  std::vector<std::string> four = job;
  four.back() =
      "distribution={workers: 1, devices_per_worker: 4, strategy: parameter_server, "
      "parameter_servers: 4}";
  auto ok = coord_->Submit(Spec(four), 0);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// Zoo models are expanded and counted like written-out layers, and a
// synthetic set's shuffle order counts too: none of these reaches a trainer.
TEST_F(CoordinatorTest, GiantZooModelsAndDataSetsAreRefusedAtSubmit) {
  v1::RegisterWorkerRequest reg = Reg(2);
  for (v1::Device& d : *reg.mutable_devices()) d.set_memory_bytes(int64_t{8} << 30);
  ASSERT_TRUE(coord_->RegisterWorker(reg).ok());
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"model={zoo: mlp, hidden: [1000000, 1000000]}"},
           {"model={zoo: mlp}", "data.train.num_classes=2147483647"},
           {"model={zoo: mlp}", "training.batch_size=1000000000"},
           {"model={zoo: resnet50, width: 4096}"}}) {
    auto s = coord_->Submit(Spec(sets), 0);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << sets[0] << s.status();
    EXPECT_NE(s.status().message().find("model.zoo "), std::string::npos) << s.status();
  }
  auto data = coord_->Submit(Spec({"data.train.num_examples=2000000000"}), 0);
  ASSERT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition) << data.status();
  EXPECT_NE(data.status().message().find("the training set's shuffle order alone needs 14.9 GiB"),
            std::string::npos)
      << data.status();
  EXPECT_TRUE(coord_->Submit(Spec({"model={zoo: resnet50}"}), 0).ok())
      << "an ordinary ResNet-50 fits";
}

TEST_F(CoordinatorTest, CancelStopsTheTrainerAndHoldsDevicesUntilItIsGone) {
  const std::string w = Register(1);
  auto a = coord_->Submit(Spec(), 0);
  auto b = coord_->Submit(Spec(), 0);
  EXPECT_EQ(Job(*b).state(), v1::JOB_PENDING);
  Beat(w, {Status(*a, 1, v1::AttemptStatus::RUNNING)});
  auto cancelled = coord_->Cancel(*a);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_CANCELLED);
  EXPECT_EQ(cancelled->attempts(0).state(), v1::ATTEMPT_CANCELLED);
  EXPECT_EQ(store_.Get(*a)->state(), v1::JOB_CANCELLED);
  // Still running on the worker: not desired any more, and b must not start
  // on the same device yet.
  v1::HeartbeatResponse r = Beat(w, {Status(*a, 1, v1::AttemptStatus::RUNNING)});
  EXPECT_EQ(r.desired_size(), 0);
  EXPECT_EQ(Job(*b).state(), v1::JOB_PENDING);
  v1::AttemptStatus gone = Status(*a, 1, v1::AttemptStatus::EXITED);
  gone.set_exit_code(128 + 15);
  r = Beat(w, {gone});
  ASSERT_EQ(r.desired_size(), 1);
  EXPECT_EQ(r.desired(0).job_id(), *b);
  EXPECT_EQ(Job(*a).state(), v1::JOB_CANCELLED);  // the exit changes nothing
  // Cancelling again returns it unchanged; an unknown job is NOT_FOUND.
  EXPECT_EQ(coord_->Cancel(*a)->state(), v1::JOB_CANCELLED);
  EXPECT_EQ(coord_->Cancel("job-999999").status().code(), absl::StatusCode::kNotFound);
  // A pending job cancels at once.
  auto c = coord_->Submit(Spec(), 0);
  EXPECT_EQ(coord_->Cancel(*c)->state(), v1::JOB_CANCELLED);
}

TEST_F(CoordinatorTest, WatchersSeeChangesAndTheEnd) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec(), 0);
  auto first = coord_->WaitForJob(*id, 0, absl::ZeroDuration());
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->changed);
  EXPECT_EQ(first->job.state(), v1::JOB_SCHEDULED);
  auto idle = coord_->WaitForJob(*id, first->version, absl::Milliseconds(50));
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(idle->changed);

  std::thread finisher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    Beat(w, {Status(*id, 1, v1::AttemptStatus::EXITED)});
  });
  std::vector<v1::JobState> seen;
  uint64_t v = first->version;
  while (true) {
    auto s = coord_->WaitForJob(*id, v, absl::Seconds(10));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->changed);
    v = s->version;
    seen.push_back(s->job.state());
    if (IsTerminal(s->job.state())) break;
  }
  finisher.join();
  EXPECT_EQ(seen.back(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(coord_->WaitForJob("job-777777", 0, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  auto ended = coord_->WaitForLogs(*id, 0, absl::Seconds(10));
  ASSERT_TRUE(ended.ok());
  EXPECT_TRUE(*ended);
}

TEST_F(CoordinatorTest, ListWorkersShowsFreeDevicesAndRunningAttempts) {
  const std::string w = Register(2);
  auto id = coord_->Submit(Spec(), 0);
  std::vector<v1::Worker> ws = coord_->ListWorkers();
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_TRUE(ws[0].alive());
  EXPECT_EQ(ws[0].free_cpu(), 1);
  ASSERT_EQ(ws[0].running_size(), 1);
  EXPECT_EQ(ws[0].running(0), *id + "/1");
  clock_.Advance(absl::Seconds(11));
  coord_->Tick();
  ws = coord_->ListWorkers();
  EXPECT_FALSE(ws[0].alive());
  EXPECT_EQ(ws[0].reason(), "worker w-1 missed heartbeats for 10s");
}

}  // namespace
}  // namespace yoke::server::coordinator_testing
