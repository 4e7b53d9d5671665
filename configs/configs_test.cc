// Loads and validates every example job in configs/*.yaml, and builds what
// the trainer builds from each (datasets, transform, model, loss, optimizer,
// schedule), so an example can never drift out of step with the loader, the
// validation rules, the installed datasets or the engine.
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/open_dataset.h"
#include "data/pipeline.h"
#include "data/transforms.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "jobspec/job_validate.h"
#include "jobspec/path_confinement.h"

namespace yoke::common {
namespace {

namespace fs = std::filesystem;

// The source tree: ctest and .bazelrc set YOKE_SOURCE_DIR.
std::string SourceDir() {
  const char* src = std::getenv("YOKE_SOURCE_DIR");
  return src ? src : ".";
}

std::string ConfigsDir() { return SourceDir() + "/configs"; }

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
                                            "fashion_mnist_residual.yaml", "resnet_synthetic.yaml",
                                            "cifar10_resnet18.yaml"}));
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

// Where scripts/install-deps.sh puts the datasets (dataset-fashion-mnist).
constexpr char kInstalledData[] = "/usr/share/datasets/";

std::vector<std::string> DatasetFiles(const v1::DatasetSpec& d) {
  std::vector<std::string> out(d.files().begin(), d.files().end());
  if (!d.images().empty()) out.push_back(d.images());
  if (!d.labels().empty()) out.push_back(d.labels());
  return out;
}

// A file an example names is either installed by install-deps (under
// kInstalledData) or a template path the user fills (the CIFAR one, under
// /data); the installed ones must be there.
TEST(ConfigsTest, InstalledDatasetFilesExist) {
  int installed = 0;
  for (const std::string& f : JobFiles()) {
    SCOPED_TRACE(f);
    auto spec = LoadJobSpecFile(f, {});
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (const v1::DatasetSpec* d : {&spec->data().train(), &spec->data().test()}) {
      for (const std::string& path : DatasetFiles(*d)) {
        if (path.rfind(kInstalledData, 0) != 0) continue;
        ++installed;
        EXPECT_TRUE(fs::is_regular_file(path))
            << path << " is missing: run scripts/install-deps.sh (dataset-fashion-mnist)";
      }
    }
  }
  // The Fashion-MNIST examples name their train and test images and labels.
  EXPECT_GE(installed, 4);
}

// Writes a stand-in for each CIFAR-10 binary batch file `d` names that does
// not exist (two records of label + 32x32x3 bytes each) into `dir`, and
// points `d` at it. Other formats need no stand-in: their files are installed.
void StandInForMissingCifar(const std::string& dir, v1::DatasetSpec* d) {
  if (d->format() != "cifar10") return;
  for (int i = 0; i < d->files_size(); ++i) {
    if (fs::exists(d->files(i))) continue;
    const std::string path =
        dir + "/" + std::to_string(i) + "_" + fs::path(d->files(i)).filename().string();
    std::string bytes;
    for (int r = 0; r < 2; ++r) {
      bytes.push_back(static_cast<char>((i + r) % 10));
      bytes.append(32 * 32 * 3, static_cast<char>(40 * r + i));
    }
    std::ofstream(path, std::ios::binary) << bytes;
    d->set_files(i, path);
  }
}

// Builds, for every example, what the trainer builds before its first step
// (trainer/trainer.cc): the datasets, the transform for their example shape,
// the model for that shape and their number of classes, the loss, the
// optimizer and the schedule; then runs one test example through the model.
// Catches an example whose model does not fit its data (wrong head, a zoo
// network that cannot take the image size), whose transform does not match
// the channels, or whose training section the engine refuses.
TEST(ConfigsTest, EveryExampleBuildsForItsDataset) {
  std::string tmp = (fs::temp_directory_path() / "yoke_configs_test.XXXXXX").string();
  ASSERT_NE(mkdtemp(tmp.data()), nullptr);
  for (const std::string& f : JobFiles()) {
    SCOPED_TRACE(f);
    auto loaded = LoadJobSpecFile(f, {});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    v1::JobSpec spec = *loaded;
    StandInForMissingCifar(tmp, spec.mutable_data()->mutable_train());
    if (spec.data().has_test()) StandInForMissingCifar(tmp, spec.mutable_data()->mutable_test());
    auto train = data::OpenDataset(spec.data().train(), "data.train");
    ASSERT_TRUE(train.ok()) << train.status();
    std::shared_ptr<const data::Dataset> eval = std::move(train).value();
    const std::vector<int64_t> shape = eval->example_shape();
    int classes = eval->num_classes();
    const int64_t steps = (eval->size() + spec.training().batch_size() - 1) /
                          spec.training().batch_size() * spec.training().epochs();
    if (spec.data().has_test()) {
      auto test = data::OpenDataset(spec.data().test(), "data.test");
      ASSERT_TRUE(test.ok()) << test.status();
      EXPECT_EQ((*test)->example_shape(), shape);
      classes = std::max(classes, (*test)->num_classes());
      eval = std::move(test).value();
    }
    ASSERT_TRUE(data::Transform::Create(spec.data().transform(), shape, 1).ok())
        << data::Transform::Create(spec.data().transform(), shape, 1).status();

    auto model =
        engine::Model::Create(spec.model(), engine::Shape(shape.begin(), shape.end()), classes);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->output_shape(), (engine::Shape{classes}));
    EXPECT_GT((*model)->params().num_parameters(), 0);
    const v1::TrainingSpec& tr = spec.training();
    auto loss = engine::CreateLoss(tr.loss().empty() ? "softmax_cross_entropy" : tr.loss());
    EXPECT_TRUE(loss.ok()) << loss.status();
    auto opt = engine::CreateOptimizer(tr.optimizer(), &(*model)->params());
    EXPECT_TRUE(opt.ok()) << opt.status();
    auto schedule = engine::CreateSchedule(tr.schedule(), tr.optimizer().lr(), steps);
    EXPECT_TRUE(schedule.ok()) << schedule.status();

    // One transformed test example through the model in eval mode: finite
    // logits, one per class.
    (*model)->params().Initialize(tr.seed());
    data::SamplerOptions so;
    so.batch_size = 1;
    so.shuffle = false;
    auto pipe = data::Pipeline::Create(eval, so, spec.data().transform(), /*train=*/false,
                                       data::PipelineOptions());
    ASSERT_TRUE(pipe.ok()) << pipe.status();
    auto batch = (*pipe)->Next();
    ASSERT_TRUE(batch.ok() && batch->has_value());
    std::vector<int64_t> xs = (*batch)->x_shape();
    engine::Tensor x =
        engine::Tensor::Wrap((*batch)->x.data(), engine::Shape(xs.begin(), xs.end()));
    engine::LayerContext ctx;
    ctx.training = false;
    auto logits = (*model)->Forward(x, ctx);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_EQ(logits->shape(), (engine::Shape{1, classes}));
    for (int64_t i = 0; i < logits->numel(); ++i) {
      EXPECT_TRUE(std::isfinite(logits->data<float>()[i])) << "logit " << i;
    }
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

// The MLP example's header says it is the zoo MLP written out layer by
// layer: both must build the same parameters, entry by entry.
TEST(ConfigsTest, MlpExampleIsTheZooMlp) {
  v1::JobSpec s = Load("fashion_mnist_mlp.yaml");
  v1::ModelSpec zoo;
  zoo.set_zoo("mlp");
  zoo.add_hidden(256);
  zoo.add_hidden(128);
  auto written = engine::Model::Create(s.model(), {28, 28, 1}, 10);
  auto expanded = engine::Model::Create(zoo, {28, 28, 1}, 10);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  const auto& a = (*written)->params().entries();
  const auto& b = (*expanded)->params().entries();
  ASSERT_EQ(a.size(), b.size()) << (*written)->Summary() << "\nvs\n" << (*expanded)->Summary();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].shape, b[i].shape) << a[i].name;
  EXPECT_EQ((*written)->params().num_parameters(), (*expanded)->params().num_parameters());
}

// bench/train_vs_pytorch.sh compares Yoke on the MLP and CNN examples with
// bench/pytorch_train.py, which copies their recipes (its RECIPES table and
// --batch-size default; the script overrides only the epochs). A change to
// either side alone would make the benchmark compare different trainings.
TEST(ConfigsTest, FashionMnistExamplesMatchThePyTorchPeer) {
  std::ifstream in(SourceDir() + "/bench/pytorch_train.py");
  ASSERT_TRUE(in.good()) << "bench/pytorch_train.py not found";
  const std::string peer((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch batch;
  ASSERT_TRUE(std::regex_search(peer, batch,
                                std::regex(R"re("--batch-size", type=int, default=(\d+)\))re")));
  for (const std::string model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    v1::JobSpec s = Load("fashion_mnist_" + model + ".yaml");
    std::smatch recipe;
    ASSERT_TRUE(std::regex_search(
        peer, recipe,
        std::regex("\"" + model + R"re(": \{"lr": ([0-9.]+), "momentum": ([0-9.]+)\})re")));
    const v1::OptimizerSpec& o = s.training().optimizer();
    EXPECT_EQ(o.type(), "sgd");  // torch.optim.SGD, plain momentum
    EXPECT_FALSE(o.nesterov());
    EXPECT_EQ(o.weight_decay(), 0.0f);
    EXPECT_FLOAT_EQ(o.lr(), std::stof(recipe[1].str()));
    EXPECT_FLOAT_EQ(o.momentum(), std::stof(recipe[2].str()));
    EXPECT_EQ(s.training().batch_size(), std::stoll(batch[1].str()));
    EXPECT_THAT(s.training().loss(), testing::AnyOf("", "softmax_cross_entropy"));
    // The peer keeps the learning rate constant.
    EXPECT_THAT(s.training().schedule().type(), testing::AnyOf("", "constant"));
    EXPECT_EQ(s.training().schedule().warmup_steps(), 0);
  }
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
