// Logging: thin macros over spdlog, writing to standard error. Standard output is kept for
// results (the JSON line of train / eval / inspect, predictions).
#ifndef CTRBOX_UTIL_LOGGING_H_
#define CTRBOX_UTIL_LOGGING_H_

#include <spdlog/spdlog.h>

namespace ctrbox {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kOff };

// Sends log lines to standard error with a short prefix; `level` and above are shown.
// Called from main() (or when the Python module loads), and again to change the level;
// library code only logs.
void InitLogging(LogLevel level);

}  // namespace ctrbox

#define LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARNING(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

#endif  // CTRBOX_UTIL_LOGGING_H_
