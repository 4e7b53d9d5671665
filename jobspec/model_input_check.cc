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
      return engine::shapes::PlanLayers(model.layers(), "model.layers", std::nullopt, 0).status();
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
  // The list's rules, as Model::Create applies them in the trainer.
  absl::StatusOr<engine::shapes::LayerPlan> plan;
  if (model.zoo().empty()) {
    plan = engine::shapes::PlanLayers(model.layers(), "model.layers", input, classes);
  } else {
    auto zoo = engine::ExpandZoo(model, input, classes);
    // The zoo's message names model.zoo already.
    if (!zoo.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(zoo.status().message(), " (", shape_text, ")"));
    }
    plan = engine::shapes::PlanLayers(*zoo, absl::StrCat("model.zoo(", model.zoo(), ").layers"),
                                      input, classes);
  }
  if (plan.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(plan.status().message(), " (", shape_text, ")"));
}

}  // namespace yoke::common
