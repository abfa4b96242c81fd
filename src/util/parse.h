// Strict parsing of numbers and sizes from text. Every function returns false (and leaves
// *out unspecified) unless the whole input is one well-formed value.
#ifndef CTRBOX_UTIL_PARSE_H_
#define CTRBOX_UTIL_PARSE_H_

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ctrbox {

bool ParseInt64(std::string_view s, int64_t* out);
bool ParseUint64(std::string_view s, uint64_t* out);
// A finite decimal or scientific number ("3", "-0.5", "1e-3"); a leading '+' is allowed.
bool ParseDouble(std::string_view s, double* out);
bool ParseFloat(std::string_view s, float* out);
// "true"/"false"/"1"/"0"/"yes"/"no".
bool ParseBool(std::string_view s, bool* out);
// A byte size: a number with an optional unit B, KB, MB, GB, TB (powers of 1024; KiB etc.
// also accepted), e.g. "512MB", "1.5GB", "4096".
bool ParseBytes(std::string_view s, uint64_t* out);
// Human-readable bytes, e.g. "1.50 GiB".
std::string FormatBytes(uint64_t bytes);
// Splits on `sep`, keeping empty fields.
std::vector<std::string_view> Split(std::string_view s, char sep);
std::string_view Trim(std::string_view s);

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_PARSE_H_
