#include "common/logging.h"

#include "spdlog/sinks/stdout_color_sinks.h"

namespace yoke::common {

void InitLogging(const std::string& name, const std::string& level) {
  auto logger = spdlog::get(name);
  if (!logger) logger = spdlog::stderr_color_mt(name);
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  logger->set_level(lvl);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
  spdlog::set_default_logger(logger);
}

}  // namespace yoke::common
