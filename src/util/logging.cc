#include "util/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace ctrbox {

void InitLogging(LogLevel level) {
  // A second call (the Python module's set_log_level) only changes the level.
  auto logger = spdlog::get("ctrbox");
  if (logger == nullptr) {
    logger = spdlog::stderr_logger_mt("ctrbox");
    logger->set_pattern("[%H:%M:%S.%e %^%l%$] %v");
  }
  switch (level) {
    case LogLevel::kDebug:
      logger->set_level(spdlog::level::debug);
      break;
    case LogLevel::kInfo:
      logger->set_level(spdlog::level::info);
      break;
    case LogLevel::kWarning:
      logger->set_level(spdlog::level::warn);
      break;
    case LogLevel::kError:
      logger->set_level(spdlog::level::err);
      break;
    case LogLevel::kOff:
      logger->set_level(spdlog::level::off);
      break;
  }
  spdlog::set_default_logger(logger);
}

}  // namespace ctrbox
