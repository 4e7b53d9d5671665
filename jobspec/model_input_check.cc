#include "jobspec/model_input_check.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/shapes/layer_shapes.h"
#include "engine/zoo/model_zoo.h"

namespace yoke::common {

absl::Status CheckModelForKnownInput(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  const v1::DatasetSpec& train = spec.data().train();
  if (train.format() != "synthetic") {
    // The input's shape is the dataset's: only the graph can be checked.
    if (model.zoo().empty()) {
      const std::vector<v1::LayerSpec> layers(model.layers().begin(), model.layers().end());
      return engine::shapes::PlanLayers(layers, "model.layers", std::nullopt, 0).status();
    }
    return absl::OkStatus();
  }
  const std::string shape_text =
      absl::StrCat("data.train.shape [", absl::StrJoin(train.shape(), ", "), "]");
  int classes = train.num_classes();
  if (spec.data().has_test() && spec.data().test().format() == "synthetic") {
    const v1::DatasetSpec& test = spec.data().test();
    if (!std::equal(train.shape().begin(), train.shape().end(), test.shape().begin(),
                    test.shape().end())) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.test.shape: [", absl::StrJoin(test.shape(), ", "), "] must equal ",
                       shape_text, ": the model is built for one example shape"));
    }
    classes = std::max(classes, test.num_classes());
  }
  const engine::shapes::LayerShape input(train.shape().begin(), train.shape().end());
  std::vector<v1::LayerSpec> layers(model.layers().begin(), model.layers().end());
  std::string path = "model.layers";
  if (!model.zoo().empty()) {
    auto zoo = engine::ExpandZoo(model, input, classes);
    // The zoo's message names model.zoo already.
    if (!zoo.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(zoo.status().message(), " (", shape_text, ")"));
    }
    layers = *std::move(zoo);
    path = absl::StrCat("model.zoo(", model.zoo(), ").layers");
  }
  // The list's rules, as Model::Create applies them in the trainer.
  auto plan = engine::shapes::PlanLayers(layers, path, input, classes);
  if (plan.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(plan.status().message(), " (", shape_text, ")"));
}

}  // namespace yoke::common
