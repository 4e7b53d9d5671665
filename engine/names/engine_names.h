// The names the engine's factories take from a job spec: model.zoo,
// training.optimizer.type and training.schedule.type. Each list is the one
// place its names are spelled: job validation (jobspec/) reads it without
// linking the engine, and the factories (engine/zoo/model_zoo.cc,
// engine/optim/optimizer.cc, engine/optim/schedule.cc) keep a builder table
// that a static_assert checks against it, name for name and in order
// (common/name_list.h). Adding a name means adding it here and a builder
// there; either alone does not compile.
//
// This library holds only these strings: no engine code.
//
// Thread-safety: constexpr data; the accessors build their vectors once and
// are safe from any thread.
#ifndef YOKE_ENGINE_NAMES_ENGINE_NAMES_H_
#define YOKE_ENGINE_NAMES_ENGINE_NAMES_H_

#include <string>
#include <string_view>
#include <vector>

namespace yoke::engine {

// model.zoo: the architectures of engine/zoo/model_zoo.h.
inline constexpr std::string_view kZooModels[] = {"cnn",      "mlp",      "resnet18",
                                                  "resnet20", "resnet32", "resnet34",
                                                  "resnet44", "resnet50", "resnet56"};

// training.optimizer.type: engine/optim/optimizer.h's CreateOptimizer.
inline constexpr std::string_view kOptimizers[] = {"sgd", "adam", "adamw"};

// training.schedule.type: engine/optim/schedule.h's CreateSchedule ("" is
// constant too).
inline constexpr std::string_view kSchedules[] = {"constant", "step", "cosine"};

// The lists above as strings, in the same order (the order error messages
// list them in).
const std::vector<std::string>& ZooNames();
const std::vector<std::string>& KnownOptimizers();
const std::vector<std::string>& KnownSchedules();

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_NAMES_ENGINE_NAMES_H_
