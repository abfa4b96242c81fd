// The HBM working table's operations on the GPU (docs/gpu.md): keys/s of insert, find
// (key -> row), gather (find + the row's embedding copied out) and accumulate (find + dim
// atomic adds of a gradient), and the bytes/s gather and accumulate achieve beside a
// device-to-device cudaMemcpy measured in the same run (the attainable memory bandwidth).
// One JSON line per table size; without a GPU one line saying why.
//
//   gpu_bench [--keys N,...] [--probes N] [--dim D] [--reps R]
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpu/trainer.h"
#include "util/parse.h"

#if defined(CTRBOX_WITH_CUDA)
#include "gpu/cuda_backend.h"
#endif

int main(int argc, char** argv) {
  std::vector<uint64_t> sizes = {1u << 20, 16u << 20, 64u << 20};
  uint64_t probes = 32u << 20, dim = 16, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    uint64_t v = 0;
    if (flag == "--keys") {
      sizes.clear();
      for (std::string_view part : ctrbox::Split(value, ',')) {
        if (!ctrbox::ParseUint64(part, &v)) return std::fprintf(stderr, "bad --keys\n"), 2;
        sizes.push_back(v);
      }
    } else if (ctrbox::ParseUint64(value, &v) && flag == "--probes") {
      probes = v;
    } else if (ctrbox::ParseUint64(value, &v) && flag == "--dim") {
      dim = v;
    } else if (ctrbox::ParseUint64(value, &v) && flag == "--reps") {
      reps = v;
    } else {
      std::fprintf(stderr, "usage: gpu_bench [--keys N,...] [--probes N] [--dim D] [--reps R]\n");
      return 2;
    }
  }
  std::string why;
  if (ctrbox::CudaDeviceCount(&why) == 0) {
    std::printf("%s\n", nlohmann::json{{"bench", "gpu_table"}, {"skipped", why}}.dump().c_str());
    return 0;
  }
#if defined(CTRBOX_WITH_CUDA)
  for (uint64_t n : sizes) {
    auto r =
        ctrbox::CudaIndexBenchmark(n, probes, static_cast<uint32_t>(dim), static_cast<int>(reps));
    if (!r.ok()) {
      std::fprintf(stderr, "gpu_bench: %s\n", r.status().ToString().c_str());
      return 1;
    }
    nlohmann::json j = {{"bench", "gpu_table"},
                        {"device", r->device},
                        {"keys", n},
                        {"probes", probes},
                        {"dim", dim},
                        {"reps", reps},
                        {"insert_keys_per_s", r->insert_keys_per_s},
                        {"find_keys_per_s", r->find_keys_per_s},
                        {"gather_keys_per_s", r->gather_keys_per_s},
                        {"accumulate_keys_per_s", r->accumulate_keys_per_s},
                        {"gather_bytes_per_s", r->gather_bytes_per_s},
                        {"accumulate_bytes_per_s", r->accumulate_bytes_per_s},
                        {"memcpy_bytes_per_s", r->copy_bytes_per_s},
                        {"gather_vs_memcpy", r->gather_bytes_per_s / r->copy_bytes_per_s},
                        {"accumulate_vs_memcpy", r->accumulate_bytes_per_s / r->copy_bytes_per_s}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
#endif
  return 0;
}
