// The public API's model, loss and optimizer (include/yoke/).
#include <cmath>
#include <fstream>

#include "gtest/gtest.h"
#include "yoke/yoke.h"

namespace {

// Two examples of shape (2, 2, 1) and their labels.
yoke::Batch SmallBatch() {
  auto b = yoke::Batch::FromData({2, 2, 1}, {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 1.5f, 0.1f, -0.3f},
                                 {2, 0});
  EXPECT_TRUE(b.ok()) << b.status();
  return std::move(*b);
}

absl::StatusOr<double> LossOf(yoke::Model& model, const yoke::Batch& batch) {
  YOKE_ASSIGN_OR_RETURN(yoke::Tensor logits, model.Forward(batch));
  YOKE_ASSIGN_OR_RETURN(yoke::Loss loss, yoke::CrossEntropyLoss(logits, batch));
  return loss.value();
}

// Backward through the public API equals central finite differences of the
// mean loss, for every parameter of a small two-layer network.
TEST(ModelTest, GradientMatchesFiniteDifferences) {
  auto model = yoke::ModelBuilder().Flatten().Dense(5).Tanh().Dense(3).Build({2, 2, 1}, 3, 7);
  ASSERT_TRUE(model.ok()) << model.status();
  yoke::Batch batch = SmallBatch();
  auto logits = model->Forward(batch);
  ASSERT_TRUE(logits.ok()) << logits.status();
  auto loss = yoke::CrossEntropyLoss(*logits, batch);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(loss->Backward().ok());
  const std::vector<float> grad = model->Gradients();
  std::vector<float> params = model->Parameters();
  ASSERT_EQ(grad.size(), params.size());
  ASSERT_EQ(static_cast<int64_t>(params.size()), model->num_parameters());
  const float eps = 1e-2f;
  int nonzero = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> p = params;
    p[i] = params[i] + eps;
    ASSERT_TRUE(model->SetParameters(p).ok());
    const double up = *LossOf(*model, batch);
    p[i] = params[i] - eps;
    ASSERT_TRUE(model->SetParameters(p).ok());
    const double down = *LossOf(*model, batch);
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(grad[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << "parameter " << i;
    if (std::fabs(numeric) > 1e-3) ++nonzero;
  }
  EXPECT_GT(nonzero, static_cast<int>(params.size()) / 2);
}

// One SGD step moves the parameters by -lr * (the gradient's mean).
TEST(ModelTest, SgdStepAppliesTheMeanGradient) {
  auto model =
      yoke::Model::FromYaml("model: {layers: [flatten, {dense: {units: 3}}]}", {2, 2, 1}, 3, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  yoke::SgdOptions o;
  o.lr = 0.5f;
  auto opt = yoke::Optimizer::Sgd(*model, o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  yoke::Batch batch = SmallBatch();
  auto logits = model->Forward(batch);
  auto loss = yoke::CrossEntropyLoss(*logits, batch);
  ASSERT_TRUE(loss->Backward().ok());
  const std::vector<float> before = model->Parameters(), grad = model->Gradients();
  ASSERT_TRUE(opt->Step().ok());
  const std::vector<float> after = model->Parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_NEAR(after[i], before[i] - 0.5f * grad[i], 1e-6) << i;
  }
  EXPECT_EQ(opt->step_count(), 1);
  opt->ZeroGrad();
  for (float g : model->Gradients()) EXPECT_EQ(g, 0.0f);
}

// Backward with your own dlogits (the mean loss's) equals the loss's.
TEST(ModelTest, BackwardFromOwnDlogitsEqualsLossBackward) {
  auto model = yoke::Model::FromZoo("mlp", {2, 2, 1}, 3, 3);
  ASSERT_TRUE(model.ok()) << model.status();
  yoke::Batch batch = SmallBatch();
  auto logits = model->Forward(batch);
  auto loss = yoke::CrossEntropyLoss(*logits, batch);
  ASSERT_TRUE(loss->Backward().ok());
  const std::vector<float> via_loss = model->Gradients();
  ASSERT_TRUE(model->Forward(batch).ok());
  ASSERT_TRUE(model->Backward(loss->grad()).ok());
  const std::vector<float> via_dlogits = model->Gradients();
  ASSERT_EQ(via_loss.size(), via_dlogits.size());
  for (size_t i = 0; i < via_loss.size(); ++i) EXPECT_NEAR(via_loss[i], via_dlogits[i], 1e-6);
}

TEST(ModelTest, AdamAndAdamWLowerTheLoss) {
  for (bool decoupled : {false, true}) {
    auto model = yoke::ModelBuilder().Flatten().Dense(8).Relu().Dense(3).Build({2, 2, 1}, 3, 5);
    ASSERT_TRUE(model.ok()) << model.status();
    yoke::AdamOptions o;
    o.lr = 0.01f;
    o.weight_decay = 0.01f;
    auto opt = decoupled ? yoke::Optimizer::AdamW(*model, o) : yoke::Optimizer::Adam(*model, o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    yoke::Batch batch = SmallBatch();
    const double first = *LossOf(*model, batch);
    for (int i = 0; i < 50; ++i) {
      auto logits = model->Forward(batch);
      auto loss = yoke::CrossEntropyLoss(*logits, batch);
      ASSERT_TRUE(loss->Backward().ok());
      ASSERT_TRUE(opt->Step().ok());
    }
    EXPECT_LT(*LossOf(*model, batch), first * 0.5) << (decoupled ? "adamw" : "adam");
  }
}

TEST(ModelTest, ClearErrors) {
  // A bad spec names the layer.
  auto bad = yoke::ModelBuilder().Flatten().Dense(0).Dense(3).Build({2, 2, 1}, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers[1]"), std::string::npos) << bad.status();
  // An unknown zoo name lists the known ones.
  auto zoo = yoke::Model::FromZoo("resnet9000", {28, 28, 1}, 10);
  ASSERT_FALSE(zoo.ok());
  EXPECT_NE(zoo.status().message().find("mlp"), std::string::npos) << zoo.status();
  // A typo in the YAML names the field.
  auto typo = yoke::Model::FromYaml("model: {zooo: mlp}", {28, 28, 1}, 10);
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("zooo"), std::string::npos) << typo.status();
  EXPECT_EQ(yoke::Model::FromYaml("data: {}", {28, 28, 1}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(yoke::Model::FromYamlFile("/nonexistent/model.yaml", {28, 28, 1}, 10).status().code(),
            absl::StatusCode::kNotFound);
  // The wrong input shape.
  auto model = yoke::ModelBuilder().Flatten().Dense(3).Build({2, 2, 1}, 3);
  ASSERT_TRUE(model.ok());
  auto wrong = yoke::Batch::FromData({4, 1, 1}, std::vector<float>(4), {0});
  ASSERT_TRUE(wrong.ok());
  auto f = model->Forward(*wrong);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("(1, 4, 1, 1)"), std::string::npos) << f.status();
  // Backward after another Forward, and from logits of an eval pass.
  yoke::Batch batch = SmallBatch();
  auto logits = model->Forward(batch);
  auto loss = yoke::CrossEntropyLoss(*logits, batch);
  ASSERT_TRUE(model->Forward(batch).ok());
  EXPECT_EQ(loss->Backward().code(), absl::StatusCode::kFailedPrecondition);
  model->SetTraining(false);
  logits = model->Forward(batch);
  loss = yoke::CrossEntropyLoss(*logits, batch);
  EXPECT_EQ(loss->Backward().code(), absl::StatusCode::kFailedPrecondition);
  // Labels out of range, and an optimizer option out of range.
  auto out_of_range = yoke::CrossEntropyLoss(*logits, std::vector<int32_t>{0, 7});
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  yoke::SgdOptions sgd;
  sgd.momentum = 1.5f;
  auto opt = yoke::Optimizer::Sgd(*model, sgd);
  ASSERT_FALSE(opt.ok());
  EXPECT_NE(opt.status().message().find("momentum"), std::string::npos) << opt.status();
}

// The builder's YAML is a job's `model:` section that builds the same model.
TEST(ModelTest, BuilderYamlRoundTrips) {
  yoke::ModelBuilder b;
  b.Conv2d(4, 3).Relu().MaxPool2d().Flatten().Dropout(0.25f).Dense(10);
  auto direct = b.Build({8, 8, 1}, 10, 11);
  ASSERT_TRUE(direct.ok()) << direct.status();
  auto via_yaml = yoke::Model::FromYaml(b.ToYaml(), {8, 8, 1}, 10, 11);
  ASSERT_TRUE(via_yaml.ok()) << via_yaml.status() << "\n" << b.ToYaml();
  EXPECT_EQ(direct->Checksum(), via_yaml->Checksum());
  EXPECT_EQ(direct->Summary(), via_yaml->Summary());
}

}  // namespace
