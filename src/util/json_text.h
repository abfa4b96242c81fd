// JSON text for output: strings that are not valid UTF-8 (a file name, a quoted record) get
// U+FFFD for their bad bytes instead of an exception that would end the process.
#ifndef CTRBOX_UTIL_JSON_TEXT_H_
#define CTRBOX_UTIL_JSON_TEXT_H_

#include <nlohmann/json.hpp>
#include <string>

namespace ctrbox {

// j.dump(indent), never throwing on invalid UTF-8. Every JSON ctrbox writes goes through it.
inline std::string JsonText(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_JSON_TEXT_H_
