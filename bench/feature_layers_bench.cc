// The feature graph's layers on each executor (docs/features.md, "On a GPU"): the generated
// views' job graph (gen --format views) over the main view's chunks, extracted on the CPU
// (layered and sequential), on the emulated GPU, and on CUDA with one launch per layer (the
// fused meta-kernel) against one per operator. Prints one JSON line per executor: rows/s of
// the whole extraction and of the graph alone (medians of --reps), launches per chunk. Without
// a GPU the CUDA lines say why they were skipped.
//
//   feature_layers_bench [--rows 400000] [--reps 3] [--dir /tmp/ctrbox-feature-bench]
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "feature/extractor.h"
#include "feature/view_gen.h"
#include "io/reader.h"
#include "util/env.h"

namespace ctrbox {
namespace {

int Main(int argc, char** argv) {
  uint64_t rows = 400000;
  int reps = 3;
  std::string dir = "/tmp/ctrbox-feature-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::stoull(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
  }
  Env* env = Env::Posix();
  ViewGenOptions g;
  g.rows = rows;
  g.test_rows = 1;
  auto gen = GenerateViews(env, dir, g);
  if (!gen.ok()) {
    std::fprintf(stderr, "%s\n", gen.status().ToString().c_str());
    return 1;
  }
  std::string yaml;
  if (!ReadFileToString(env, dir + "/job.yaml", &yaml).ok()) return 1;
  auto plan = ParseFeatures(YAML::Load(yaml)["features"], dir + "/job.yaml");
  if (!plan.ok()) return 1;
  // The main view's chunks, read once.
  DataOptions main;
  main.paths = {dir + "/impressions.csv"};
  auto source = OpenTextChunks(env, main);
  if (!source.ok()) return 1;
  std::vector<TextChunk> chunks;
  while (true) {
    TextChunk c;
    bool eof = false;
    if (!(*source)->Next(&c, &eof).ok()) return 1;
    if (eof) break;
    chunks.push_back(std::move(c));
  }
  struct Run {
    const char* name;
    Schedule schedule;
    FeatureDevice device;
    bool fused;
  };
  const Run runs[] = {
      {"cpu layered", Schedule::kLayered, FeatureDevice::kCpu, true},
      {"cpu sequential", Schedule::kSequential, FeatureDevice::kCpu, true},
      {"emulated gpu, one launch per layer", Schedule::kLayered, FeatureDevice::kEmulatedGpu, true},
      {"cuda, one launch per layer", Schedule::kLayered, FeatureDevice::kCuda, true},
      {"cuda, one launch per operator", Schedule::kLayered, FeatureDevice::kCuda, false}};
  for (const Run& run : runs) {
    Extractor::Options o;
    o.schedule = run.schedule;
    o.device = run.device;
    o.fused = run.fused;
    auto x = Extractor::Open(env, *plan, main, o);
    if (!x.ok()) {
      bench::Emit(
          {{"bench", "feature_layers"}, {"executor", run.name}, {"skipped", x.status().message()}});
      continue;
    }
    std::vector<double> total, graph;
    ChunkParseResult r;
    uint64_t out = 0;
    for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
      const ExtractTotals before = (*x)->totals();
      const auto t0 = std::chrono::steady_clock::now();
      for (const TextChunk& c : chunks) {
        (*x)->ExtractChunk(c, &r);
        if (!r.status.ok()) {
          std::fprintf(stderr, "%s\n", r.status.ToString().c_str());
          return 1;
        }
        out += r.batch.rows();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const ExtractTotals after = (*x)->totals();
      if (rep == 0) continue;
      total.push_back(rows / s);
      graph.push_back(rows / (after.graph_seconds - before.graph_seconds));
    }
    const ExtractTotals t = (*x)->totals();
    bench::Emit(
        {{"bench", "feature_layers"},
         {"executor", run.name},
         {"device", t.device},
         {"rows", rows},
         {"chunks", chunks.size()},
         {"reps", reps},
         {"rows_per_s", bench::Median(total)},
         {"graph_rows_per_s", bench::Median(graph)},
         {"launches_per_chunk", static_cast<double>(t.device_launches) / (t.chunks ? t.chunks : 1)},
         {"layers", (*plan)->layers.size()},
         {"operators", (*plan)->ops.size()}});
  }
  return 0;
}

}  // namespace
}  // namespace ctrbox

int main(int argc, char** argv) { return ctrbox::Main(argc, argv); }
