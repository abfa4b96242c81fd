// gen: synthetic click logs with a planted model (io/synth.h), as one file, as a stream's
// partitions landing over time (docs/routine.md), or as raw views with their job
// (docs/features.md). Split from tool_commands.cc.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "cli/commands.h"
#include "feature/view_gen.h"
#include "io/partitions.h"
#include "io/synth.h"
#include "metrics/metrics.h"
#include "util/cleanup.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"
#include "util/thread_pool.h"

namespace ctrbox {

StatusOr<nlohmann::json> RunGenViews(const GenArgs& args) {
  if (args.out.empty()) return InvalidArgumentError("gen needs --out DIR");
  ViewGenOptions o;
  o.rows = args.rows;
  o.test_rows = args.test_rows > 0 ? args.test_rows : std::max<uint64_t>(1, args.rows / 5);
  o.seed = args.seed;
  Stopwatch clock;
  ASSIGN_OR_RETURN(ViewGenResult r, GenerateViews(Env::Posix(), args.out, o));
  LOG_INFO(
      "wrote the views of {} + {} impressions to {} ({}); oracle AUC {:.4f}; train with "
      "ctrbox train -c {}/job.yaml",
      o.rows, o.test_rows, args.out, FormatBytes(r.bytes), r.oracle_auc, args.out);
  return nlohmann::json{{"command", "gen"},
                        {"format", "views"},
                        {"rows", o.rows},
                        {"test_rows", o.test_rows},
                        {"seed", o.seed},
                        {"out", args.out},
                        {"files", r.files},
                        {"bytes", r.bytes},
                        {"seconds", clock.Seconds()},
                        {"ctr", r.ctr},
                        {"oracle_auc", r.oracle_auc},
                        {"oracle_test_rows", r.kept_test_rows}};
}

namespace {
StatusOr<nlohmann::json> RunGenPartitions(const GenArgs& args, SynthOptions o);
// Writes --rows rows of `o` to the file `out` (a temporary renamed into place, synced).
StatusOr<nlohmann::json> WriteSynthFile(const GenArgs& args, const SynthOptions& o,
                                        const std::string& out);
}  // namespace

StatusOr<nlohmann::json> RunGen(const GenArgs& args) {
  if (args.format == "views" && args.partitions > 0) {
    return InvalidArgumentError(
        "gen --partitions writes a stream of one text format (criteo, libsvm, libfm, libffm, "
        "slots), not views; split a views job's main file into partitions yourself");
  }
  if (args.format == "views") return RunGenViews(args);
  SynthOptions o;
  if (!ParseDataFormat(args.format, &o.format) || o.format == DataFormat::kShards) {
    return InvalidArgumentError(fmt::format(
        "gen --format {}: expected criteo, libsvm, libfm, libffm, slots or views", args.format));
  }
  if (args.out.empty()) return InvalidArgumentError("gen needs --out FILE");
  if (args.rows == 0) return InvalidArgumentError("gen --rows must be >= 1");
  o.seed = args.seed;
  o.vocab_scale = args.vocab_scale;
  o.zipf = args.zipf;
  if (args.partitions > 0) return RunGenPartitions(args, o);
  return WriteSynthFile(args, o, args.out);
}

namespace {

// gen --partitions: a stream's data root (docs/routine.md), one partition after another.
StatusOr<nlohmann::json> RunGenPartitions(const GenArgs& args, SynthOptions o) {
  ASSIGN_OR_RETURN(const PartitionLayout layout, PartitionLayout::Parse(args.layout));
  const std::optional<int64_t> first = layout.Ordinal(args.start);
  if (!first) {
    return InvalidArgumentError(
        fmt::format("gen --start '{}' is no partition of --layout '{}'", args.start, args.layout));
  }
  Env* env = Env::Posix();
  nlohmann::json parts = nlohmann::json::array();
  Stopwatch clock;
  for (uint32_t i = 0; i < args.partitions; ++i) {
    if (i > 0 && args.interval > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(args.interval));
    }
    const std::string name = layout.Name(*first + i);
    const std::string dir = JoinPath(args.out, name);
    RETURN_IF_ERROR(env->CreateDirs(dir));
    o.period = i;
    o.seed = args.seed + i;
    o.ctr_drift = args.ctr_drift;
    o.new_id_share = args.new_id_share;
    ASSIGN_OR_RETURN(nlohmann::json one, WriteSynthFile(args, o, JoinPath(dir, "part-00000")));
    // Ready once the data is complete (WriteSynthFile renamed it into place, synced).
    RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(dir, args.done_file), ""));
    parts.push_back({{"partition", name},
                     {"rows", args.rows},
                     {"ctr", one["ctr"]},
                     {"oracle_auc", one["oracle_auc"]}});
  }
  return nlohmann::json{{"command", "gen"},    {"format", args.format},
                        {"out", args.out},     {"layout", args.layout},
                        {"partitions", parts}, {"seconds", clock.Seconds()}};
}

StatusOr<nlohmann::json> WriteSynthFile(const GenArgs& args, const SynthOptions& o,
                                        const std::string& out) {
  SynthGenerator gen(o);
  Env* env = Env::Posix();
  if (env->IsDirectory(out)) {
    return InvalidArgumentError(
        fmt::format("gen --out {}: is a directory; give the path of the file to write", out));
  }
  const std::string tmp = out + ".tmp";
  ASSIGN_OR_RETURN(auto file, env->NewWritableFile(tmp));
  // On any error (a full disk, a failed rename) the partial file is removed.
  Cleanup remove_tmp([&] {
    file.reset();
    env->DeleteFile(tmp).IgnoreError();
  });
  ThreadPool pool(args.threads > 0 ? args.threads : NumCpus());
  constexpr uint64_t kBlock = 32768;
  const size_t per_round = static_cast<size_t>(pool.num_threads()) * 4;
  std::vector<std::string> text(per_round);
  std::vector<std::vector<double>> probs(per_round);
  std::vector<Batch> labels(per_round);
  MetricAccumulator oracle;
  Stopwatch clock;
  uint64_t bytes = 0;
  for (uint64_t start = 0; start < args.rows; start += kBlock * per_round) {
    const size_t blocks = std::min<uint64_t>(per_round, (args.rows - start + kBlock - 1) / kBlock);
    pool.ParallelFor(blocks, [&](size_t b, int) {
      const uint64_t r0 = start + b * kBlock, r1 = std::min(args.rows, r0 + kBlock);
      text[b].clear();
      probs[b].clear();
      gen.GenerateText(r0, r1, &text[b], &probs[b]);
    });
    for (size_t b = 0; b < blocks; ++b) {
      RETURN_IF_ERROR(file->Append(text[b]));
      bytes += text[b].size();
      // Labels are the first character of each line.
      size_t pos = 0;
      for (double p : probs[b]) {
        oracle.Add(text[b][pos] == '1' ? 1.0f : 0.0f, p);
        pos = text[b].find('\n', pos) + 1;
      }
    }
  }
  RETURN_IF_ERROR(file->Sync());
  RETURN_IF_ERROR(file->Close());
  RETURN_IF_ERROR(env->RenameFile(tmp, out));
  remove_tmp.Cancel();
  const MetricSummary s = oracle.Summary();
  const Schema schema = gen.schema();
  LOG_INFO("wrote {} rows to {} ({}); oracle AUC {:.4f}", args.rows, out, FormatBytes(bytes),
           s.auc);
  if (o.format == DataFormat::kSlots || o.format == DataFormat::kLibffm) {
    LOG_INFO("read it with --format {} --set data.num_slots={}{}", args.format, schema.num_slots,
             schema.num_dense ? fmt::format(" --set data.num_dense={}", schema.num_dense) : "");
  }
  return nlohmann::json{{"command", "gen"},
                        {"format", args.format},
                        {"rows", args.rows},
                        {"seed", args.seed},
                        {"out", out},
                        {"bytes", bytes},
                        {"seconds", clock.Seconds()},
                        {"ctr", s.ctr},
                        {"oracle_auc", s.auc},
                        {"oracle_logloss", s.logloss},
                        {"num_slots", schema.num_slots},
                        {"num_dense", schema.num_dense}};
}

}  // namespace

Status RunGenCommand(const GenArgs& args) {
  ASSIGN_OR_RETURN(nlohmann::json report, RunGen(args));
  PrintJson(report);
  return Status::OK();
}

}  // namespace ctrbox
