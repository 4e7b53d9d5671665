#include "common/omp_env.h"

#include <cstdlib>

namespace yoke::common {

std::optional<std::string> TrainerOmpSpinEnv() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return std::nullopt;
  }
  return "GOMP_SPINCOUNT=" + std::to_string(kTrainerGompSpinCount);
}

}  // namespace yoke::common
