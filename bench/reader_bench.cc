// Reader benchmark: parsing Criteo TSV against reading the same rows from binary shards.
//
//   build/bench/reader_bench [--tsv FILE] [--rows N] [--reps N] [--inputs text,zstd,lz4]
//
// With --tsv, reads that file (e.g. the output of shared/baselines/gen_criteo.py); otherwise
// generates N Criteo-like rows. Converts them to shards (zstd and lz4) in a temporary
// directory, then prints one JSON line per (input, reader threads) with the median over
// --reps reads, and a summary line with the shard / text speed ratios.
#include <cstdlib>
#include <cstring>

#include "bench/bench_util.h"
#include "io/reader.h"
#include "io/shard.h"
#include "io/synth.h"
#include "util/env.h"

namespace ctrbox::bench {
namespace {

struct Timing {
  double seconds;
  uint64_t rows;
};

Timing ReadAll(const DataOptions& o) {
  Stopwatch clock;
  auto reader = OpenReader(Env::Posix(), o);
  if (!reader.ok()) {
    std::fprintf(stderr, "%s\n", reader.status().ToString().c_str());
    std::exit(1);
  }
  uint64_t rows = 0;
  Batch b;
  while (true) {
    bool eof = false;
    Status s = (*reader)->Next(&b, &eof);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
    if (eof) break;
    rows += b.rows();
  }
  return {clock.Seconds(), rows};
}

int Main(int argc, char** argv) {
  std::string tsv;
  uint64_t rows = 1000000;
  int reps = 3;
  std::string inputs = "text,zstd,lz4";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--inputs")) inputs = argv[i + 1];
    if (!std::strcmp(argv[i], "--tsv")) tsv = argv[i + 1];
    if (!std::strcmp(argv[i], "--rows")) rows = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  Env* env = Env::Posix();
  char tmpl[] = "/tmp/ctrbox_reader_bench_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  if (tsv.empty()) {
    tsv = dir + "/data.tsv";
    std::string text;
    SynthGenerator(SynthOptions{}).GenerateText(0, rows, &text, nullptr);
    if (!WriteFileAtomic(env, tsv, text).ok()) return 1;
  }
  DataOptions text_opts;
  text_opts.paths = {tsv};
  // Convert once per codec.
  for (const char* codec : {"zstd", "lz4"}) {
    ShardWriterOptions wo;
    ParseShardCodec(codec, &wo.codec);
    auto reader = OpenReader(env, text_opts);
    auto writer = ShardWriter::Open(env, dir + "/" + codec + ".ctrshard", (*reader)->schema(), wo);
    Batch b;
    while (true) {
      bool eof = false;
      if (!(*reader)->Next(&b, &eof).ok()) return 1;
      if (eof) break;
      if (!(*writer)->Add(b).ok()) return 1;
    }
    if (!(*writer)->Finish().ok()) return 1;
  }
  const uint64_t text_bytes = *env->GetFileSize(tsv);
  double text_1t = 0, zstd_1t = 0, text_2t = 0, zstd_2t = 0;
  for (const char* input : {"text", "zstd", "lz4"}) {
    if (inputs.find(input) == std::string::npos) continue;
    for (int threads : {1, 2}) {
      DataOptions o = text_opts;
      o.threads = threads;
      std::string path = tsv;
      if (std::strcmp(input, "text") != 0) {
        path = dir + "/" + input + ".ctrshard";
        o.paths = {path};
        o.format = DataFormat::kShards;
      }
      std::vector<double> secs;
      uint64_t n = 0;
      for (int r = 0; r < reps; ++r) {
        Timing t = ReadAll(o);
        secs.push_back(t.seconds);
        n = t.rows;
      }
      const double s = Median(secs);
      const uint64_t bytes = *env->GetFileSize(path);
      Emit({{"bench", "reader"},
            {"input", input},
            {"threads", threads},
            {"rows", n},
            {"file_bytes", bytes},
            {"seconds_median", s},
            {"rows_per_s", n / s},
            {"mb_per_s", bytes / s / 1e6}});
      if (!std::strcmp(input, "text")) (threads == 1 ? text_1t : text_2t) = n / s;
      if (!std::strcmp(input, "zstd")) (threads == 1 ? zstd_1t : zstd_2t) = n / s;
    }
  }
  Emit({{"bench", "reader_summary"},
        {"text_bytes", text_bytes},
        {"zstd_over_text_1_thread", zstd_1t / text_1t},
        {"zstd_over_text_2_threads", zstd_2t / text_2t}});
  (void)std::system(("rm -rf " + dir).c_str());
  return 0;
}

}  // namespace
}  // namespace ctrbox::bench

int main(int argc, char** argv) { return ctrbox::bench::Main(argc, argv); }
