#include "jobspec/model_input_check.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/zoo/model_zoo.h"

namespace yoke::common {

absl::Status CheckModelForKnownInput(const v1::JobSpec& spec) {
  const v1::DatasetSpec& train = spec.data().train();
  if (train.format() != "synthetic") return absl::OkStatus();
  int classes = train.num_classes();
  if (spec.data().has_test() && spec.data().test().format() == "synthetic") {
    const v1::DatasetSpec& test = spec.data().test();
    if (!std::equal(train.shape().begin(), train.shape().end(), test.shape().begin(),
                    test.shape().end())) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.test.shape: [", absl::StrJoin(test.shape(), ", "),
                       "] must equal data.train.shape [", absl::StrJoin(train.shape(), ", "),
                       "]: the model is built for one example shape"));
    }
    classes = std::max(classes, test.num_classes());
  }
  if (spec.model().zoo().empty()) return absl::OkStatus();
  const engine::ZooShape input(train.shape().begin(), train.shape().end());
  auto layers = engine::ExpandZoo(spec.model(), input, classes);
  if (layers.ok()) return absl::OkStatus();
  // The zoo's message names model.zoo already.
  return absl::InvalidArgumentError(absl::StrCat(layers.status().message(), " (data.train.shape [",
                                                 absl::StrJoin(train.shape(), ", "), "])"));
}

}  // namespace yoke::common
