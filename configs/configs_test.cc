// Loads and validates every example job in configs/*.yaml, so an example can
// never drift out of step with the loader or the validation rules.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/job_validate.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

namespace fs = std::filesystem;

std::string ConfigsDir() {
  const char* src = std::getenv("YOKE_SOURCE_DIR");
  return std::string(src ? src : ".") + "/configs";
}

std::vector<std::string> JobFiles() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ConfigsDir(), ec)) {
    if (e.is_regular_file() && e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

v1::JobSpec Load(const std::string& name) {
  auto spec = LoadJobSpecFile(ConfigsDir() + "/" + name, {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

TEST(ConfigsTest, EveryJobFileLoadsAndValidates) {
  std::vector<std::string> files = JobFiles();
  std::vector<std::string> names;
  for (const std::string& f : files) names.push_back(fs::path(f).filename().string());
  EXPECT_THAT(names, testing::IsSupersetOf({"fashion_mnist_mlp.yaml", "fashion_mnist_cnn.yaml",
                                            "fashion_mnist_residual.yaml",
                                            "resnet_synthetic.yaml", "cifar10_resnet18.yaml"}));
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    auto spec = LoadJobSpecFile(f, {});
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
    // The datasets the examples name live under these roots on our machines
    // and in the container images.
    EXPECT_TRUE(ValidatePathsUnder(*spec, {"/usr/share/datasets", "/data"}).ok())
        << ValidatePathsUnder(*spec, {"/usr/share/datasets", "/data"});
    // What `yoke train --print-spec` shows must load back to the same job.
    auto again = LoadJobSpecString(JobSpecToYaml(*spec), {}, "round-trip");
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecToYaml(*spec);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*spec, *again));
    EXPECT_FALSE(spec->name().empty()) << "every example should carry a name";
  }
}

TEST(ConfigsTest, MlpExampleHasTheDocumentedRecipe) {
  v1::JobSpec s = Load("fashion_mnist_mlp.yaml");
  ASSERT_EQ(s.model().layers_size(), 6);
  EXPECT_TRUE(s.model().layers(0).has_flatten());
  EXPECT_EQ(s.model().layers(1).dense().units(), 256);
  EXPECT_TRUE(s.model().layers(2).has_relu());
  EXPECT_EQ(s.model().layers(3).dense().units(), 128);
  EXPECT_EQ(s.model().layers(5).dense().units(), 10);
  EXPECT_EQ(s.data().train().format(), "idx");
  EXPECT_EQ(s.data().train().images(),
            "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  EXPECT_EQ(s.data().test().labels(),
            "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(s.data().transform().divisor(), 255.0f);
  EXPECT_EQ(s.training().epochs(), 5);
  EXPECT_EQ(s.training().batch_size(), 64);
  EXPECT_EQ(s.training().seed(), 1u);
  EXPECT_EQ(s.training().loss(), "softmax_cross_entropy");
  EXPECT_EQ(s.training().optimizer().type(), "sgd");
  EXPECT_FLOAT_EQ(s.training().optimizer().lr(), 0.05f);
  EXPECT_FLOAT_EQ(s.training().optimizer().momentum(), 0.9f);
}

TEST(ConfigsTest, CnnExample) {
  v1::JobSpec s = Load("fashion_mnist_cnn.yaml");
  EXPECT_EQ(s.model().zoo(), "cnn");
  EXPECT_EQ(s.model().dropout(), 0.0f);
  EXPECT_EQ(s.training().batch_size(), 64);
  EXPECT_EQ(s.training().epochs(), 5);
  EXPECT_FLOAT_EQ(s.training().optimizer().lr(), 0.01f);
  EXPECT_FLOAT_EQ(s.training().optimizer().momentum(), 0.9f);
  EXPECT_EQ(s.data().transform().divisor(), 255.0f);
}

TEST(ConfigsTest, ResidualExampleIsAGraph) {
  v1::JobSpec s = Load("fashion_mnist_residual.yaml");
  int adds = 0;
  for (const v1::LayerSpec& l : s.model().layers()) {
    if (l.has_add()) {
      ++adds;
      EXPECT_EQ(l.inputs_size(), 2);
    }
  }
  EXPECT_EQ(adds, 1);
}

TEST(ConfigsTest, ResnetBenchmark) {
  v1::JobSpec s = Load("resnet_synthetic.yaml");
  EXPECT_EQ(s.model().zoo(), "resnet50");
  EXPECT_EQ(s.data().train().format(), "synthetic");
  EXPECT_THAT(s.data().train().shape(), testing::ElementsAre(224, 224, 3));
  EXPECT_EQ(s.data().train().num_classes(), 1000);
  EXPECT_EQ(s.data().train().num_examples(), 1280);
  EXPECT_EQ(s.training().batch_size(), 32);
  EXPECT_EQ(s.training().epochs(), 1);
  EXPECT_FLOAT_EQ(s.training().optimizer().lr(), 0.1f);
}

TEST(ConfigsTest, CifarTemplateNamesTheBinaryBatches) {
  v1::JobSpec s = Load("cifar10_resnet18.yaml");
  EXPECT_EQ(s.model().zoo(), "resnet18");
  EXPECT_EQ(s.data().train().files_size(), 5);
  EXPECT_EQ(s.data().test().files(0), "/data/cifar-10-batches-bin/test_batch.bin");
  EXPECT_EQ(s.data().transform().mean_size(), 3);
}

TEST(ConfigsTest, OverridesApplyToExamples) {
  auto s = LoadJobSpecFile(ConfigsDir() + "/fashion_mnist_mlp.yaml",
                           {"training.epochs=1", "model.layers[1].dense.units=32"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->training().epochs(), 1);
  EXPECT_EQ(s->model().layers(1).dense().units(), 32);
  EXPECT_TRUE(ValidateJobSpec(*s).ok());
}

}  // namespace
}  // namespace yoke::common
