// `yoke train` of a job with distribution.device: cuda, end to end through
// the real binaries: yoke execs yoke-trainer, which runs the CUDA build of
// the trainer (yoke-trainer-cuda) in its place.
//   - On a machine without a usable GPU (CI) the job fails with exit 2 and
//     cudart's reason; on one with a GPU it trains, and the result says it
//     ran on cuda with a finite loss.
//   - A yoke-trainer without its CUDA build beside it says what is missing,
//     with exit 2.
//   - A CUDA job on several GPUs is refused before anything runs.
#include <filesystem>
#include <fstream>
#include <string>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

constexpr char kJob[] = R"(name: cuda-e2e
model: {zoo: mlp, hidden: [16]}
data:
  train: {format: synthetic, num_examples: 64, shape: [8], num_classes: 3}
training:
  epochs: 2
  batch_size: 16
  optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
  clip_grad_norm: 5
distribution: {device: cuda}
)";

std::string WriteJob(const common::TempDir& dir) {
  const std::string path = dir.path() + "/job.yaml";
  std::ofstream(path) << kJob;
  return path;
}

bool HaveCudaTrainer() { return std::filesystem::exists(BinDir() + "/yoke-trainer-cuda"); }

TEST(CudaTrainTest, TrainsOnAGpuOrSaysWhyNot) {
  common::TempDir dir("yoke_cuda_e2e");
  RunResult r = Sh(BinDir() + "/yoke train " + WriteJob(dir) + " --output json 2>&1");
  if (!HaveCudaTrainer()) {
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("needs the CUDA build of the trainer"), std::string::npos) << r.out;
    return;
  }
  if (r.exit_code == 0) {  // a GPU machine
    EXPECT_NE(r.out.find("\"device\": \"cuda\""), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
    return;
  }
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("distribution.device: 'cuda': no usable GPU: cudaGetDeviceCount"),
            std::string::npos)
      << r.out;
}

TEST(CudaTrainTest, WithoutTheCudaBuildBesideItTheTrainerSaysSo) {
  common::TempDir dir("yoke_cuda_e2e");
  const std::string lone = dir.path() + "/yoke-trainer";
  std::filesystem::copy_file(BinDir() + "/yoke-trainer", lone);
  RunResult r = Sh(lone + " " + WriteJob(dir) + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("distribution.device: 'cuda' needs the CUDA build of the trainer, " +
                       dir.path() + "/yoke-trainer-cuda, which is not there"),
            std::string::npos)
      << r.out;
}

TEST(CudaTrainTest, SeveralGpusAreRefusedAtValidation) {
  common::TempDir dir("yoke_cuda_e2e");
  RunResult r = Sh(BinDir() + "/yoke train " + WriteJob(dir) +
                   " --set distribution.devices_per_worker=2 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("distribution.device: 'cuda' trains on one GPU for now"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace yoke::e2e
