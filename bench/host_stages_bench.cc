// The host stages' per-pass work, alone, on 1..N threads (docs/pipeline.md, "Host stages that
// scale with cores"): for a pass of generated Criteo-like rows, the working set
// (BuildWorkingSet), the pass table's index (WorkingTable::Build) and the GPU plan
// (BuildHbmPlan, 1 GPU); then, on a GPU, the same keys deduplicated there (gpu_dedup). One
// JSON line per (part, threads) with the median seconds over --reps, examples/s, the µs per
// example per core and the speedup over 1 thread.
//
//   build/bench/host_stages_bench [--rows 262144] [--threads 1,2] [--reps 5] [--batch 2048]
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

#include "bench/bench_util.h"
#include "gpu/hbm_plan.h"
#include "gpu/trainer.h"
#include "io/synth.h"
#include "util/sys.h"
#include "util/thread_pool.h"
#include "working/working_set.h"
#include "working/working_table.h"

#if defined(CTRBOX_WITH_CUDA)
#include "gpu/cuda_backend.h"
#endif

namespace ctrbox::bench {
namespace {

// The same pass's keys deduplicated on the GPU (gpu/cuda_keys.cu), beside the host's working
// set on each thread count: whether a GPU working set would pay (issue 54). A "skipped" line
// without a GPU.
void GpuDedup(const Batch& pass, const WorkingSet& ws, int reps,
              const std::map<int, double>& host) {
  std::string why;
  if (CudaDeviceCount(&why) == 0) {
    Emit({{"bench", "host_stages"}, {"part", "gpu_dedup"}, {"skipped", why}});
    return;
  }
#if defined(CTRBOX_WITH_CUDA)
  std::vector<uint64_t> distinct(ws.keys.begin(), ws.keys.end());
  std::sort(distinct.begin(), distinct.end());
  auto r = CudaKeyDedupBenchmark(pass.keys, distinct, reps);
  if (!r.ok()) {
    Emit({{"bench", "host_stages"}, {"part", "gpu_dedup"}, {"error", r.status().ToString()}});
    return;
  }
  nlohmann::json over;
  for (const auto& [threads, seconds] : host)
    over[std::to_string(threads)] = seconds / r->total_seconds;
  Emit({{"bench", "host_stages"},
        {"part", "gpu_dedup"},
        {"device", r->device},
        {"key_uses", r->occurrences},
        {"keys", r->distinct},
        {"same_keys_as_host", r->same_keys_as_host},
        {"upload_seconds", r->upload_seconds},
        {"sort_seconds", r->sort_seconds},
        {"unique_seconds", r->unique_seconds},
        {"ids_seconds", r->ids_seconds},
        {"download_seconds", r->download_seconds},
        {"seconds_median", r->total_seconds},
        // the host's working set over the GPU's whole dedup, by host threads (> 1: the GPU
        // is faster, though it builds less: no per-minibatch lists)
        {"host_working_set_over_gpu", over}});
#else
  (void)pass;
  (void)ws;
  (void)reps;
  (void)host;
#endif
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

int Main(int argc, char** argv) {
  uint64_t rows = 262144;
  int reps = 5;
  uint32_t batch = 2048;
  std::string threads_list = "1,2";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--batch")) batch = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--threads")) threads_list = argv[i + 1];
  }
  SynthOptions so;
  so.format = DataFormat::kCriteo;
  SynthGenerator gen(so);
  Batch pass;
  gen.GenerateBatch(0, rows, &pass, nullptr);
  WorkingSet ws;
  BuildWorkingSet(pass, batch, nullptr, &ws);
  std::map<std::string, double> one_thread;
  std::map<int, double> working_set_seconds;  // by threads
  for (int threads : ParseList(threads_list)) {
    ThreadPool pool(threads);
    struct Part {
      std::string name;
      std::function<void()> run;
    };
    WorkingSet w;
    WorkingSetScratch scratch;  // as the read stage keeps it
    WorkingTable table;
    HbmPlan plan;
    const std::vector<Part> parts = {
        {"working_set", [&] { BuildWorkingSet(pass, batch, &pool, &w, &scratch); }},
        {"pass_table", [&] { table.Build(ws.keys, &pool); }},
        {"gpu_plan", [&] { BuildHbmPlan(pass, ws, 1, &pool, &plan); }},
    };
    for (const Part& part : parts) {
      std::vector<double> s;
      for (int r = 0; r <= reps; ++r) {  // the first run warms up (and sizes the buffers)
        Stopwatch clock;
        part.run();
        if (r > 0) s.push_back(clock.Seconds());
      }
      const double med = Median(s);
      if (threads == 1) one_thread[part.name] = med;
      if (part.name == "working_set") working_set_seconds[threads] = med;
      nlohmann::json j = {{"bench", "host_stages"},
                          {"part", part.name},
                          {"threads", threads},
                          {"rows", rows},
                          {"key_uses", pass.keys.size()},
                          {"keys", ws.keys.size()},
                          {"seconds_median", med},
                          {"examples_per_s", rows / med},
                          {"us_per_example_per_core", 1e6 * med * threads / rows}};
      if (one_thread.count(part.name)) j["speedup_over_1_thread"] = one_thread[part.name] / med;
      Emit(j);
    }
  }
  GpuDedup(pass, ws, reps, working_set_seconds);
  return 0;
}

}  // namespace
}  // namespace ctrbox::bench

int main(int argc, char** argv) { return ctrbox::bench::Main(argc, argv); }
