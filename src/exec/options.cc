#include "exec/options.h"

namespace ctrbox {

bool ParseGemmPrecision(std::string_view name, GemmPrecision* out) {
  if (name == "fp32") {
    *out = GemmPrecision::kFp32;
  } else if (name == "tf32") {
    *out = GemmPrecision::kTf32;
  } else if (name == "bf16") {
    *out = GemmPrecision::kBf16;
  } else {
    return false;
  }
  return true;
}

std::string_view GemmPrecisionName(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::kFp32:
      return "fp32";
    case GemmPrecision::kTf32:
      return "tf32";
    case GemmPrecision::kBf16:
      return "bf16";
  }
  return "?";
}

bool ParseScatterMode(std::string_view name, ScatterMode* out) {
  if (name == "segment") {
    *out = ScatterMode::kSegment;
  } else if (name == "atomic") {
    *out = ScatterMode::kAtomic;
  } else {
    return false;
  }
  return true;
}

std::string_view ScatterModeName(ScatterMode m) {
  return m == ScatterMode::kSegment ? "segment" : "atomic";
}

}  // namespace ctrbox
