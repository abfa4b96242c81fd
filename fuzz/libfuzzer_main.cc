// The libFuzzer entry point of one target, chosen at compile time (fuzz/CMakeLists.txt builds
// one binary per target: fuzz_<name>).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ctrbox::CTRBOX_FUZZ_TARGET(data, size);
}
