// Helpers for the benchmarks: medians and JSON-line output.
#ifndef CTRBOX_BENCH_BENCH_UTIL_H_
#define CTRBOX_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/blas.h"
#include "util/sys.h"

namespace ctrbox::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Prints one JSON line with the machine facts every line carries.
inline void Emit(nlohmann::json j) {
  j["cpus"] = NumCpus();
  j["blas_core"] = blas::CoreName();
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace ctrbox::bench

#endif  // CTRBOX_BENCH_BENCH_UTIL_H_
