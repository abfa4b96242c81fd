#include "jobs/train_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "jobs/data.h"
#include "util/blas.h"
#include "util/logging.h"

namespace ctrbox {

nlohmann::json GpuJson(const GpuStepStats& s, double seconds, uint64_t examples) {
  const double mb = static_cast<double>(std::max<uint64_t>(s.minibatches, 1));
  return {{"passes", s.passes},
          {"minibatches", s.minibatches},
          {"launches", s.train.launches},
          {"copies", s.train.copies},
          {"host_syncs", s.train.syncs},
          {"launches_per_minibatch", s.train.launches / mb},
          {"gemms_per_minibatch", s.train.gemm_calls / mb},
          // the train thread's time inside the launches and the GEMM calls (on CUDA)
          {"host_launch_us_per_minibatch", 1e6 * s.train.launch_host_seconds / mb},
          {"host_gemm_us_per_minibatch", 1e6 * s.train.gemm_host_seconds / mb},
          {"host_syncs_per_minibatch", s.train.syncs / mb},
          // gpu.replay: the recorded steps replayed (one launch each), the kernels, GEMMs and
          // copies they ran, the steps recorded, and buffers allocated by the train stage
          {"replays", s.train.replays},
          {"replayed_ops", s.train.replayed_ops},
          {"captures", s.captures},
          {"allocations", s.train.allocations},
          {"phase_seconds",
           {{"exchange", s.exchange_seconds},
            {"forward", s.forward_seconds},
            {"backward", s.backward_seconds},
            {"dense", s.dense_seconds},
            {"sparse", s.sparse_seconds},
            {"replayed", s.replayed_seconds}}},
          // the pull stage's host time staging passes (GpuStepStats::stage_*_seconds)
          {"stage_seconds",
           {{"wait", s.stage_wait_seconds},
            {"plan", s.stage_plan_seconds},
            {"rows", s.stage_rows_seconds},
            {"feed", s.stage_feed_seconds}}},
          {"gpu_seconds", s.gpu_seconds()},
          {"gpu_busy_share", s.gpu_seconds() / std::max(seconds, 1e-9)},
          // the train stage's own speed: the examples over GPU 0's busy time
          {"examples_per_gpu_second", s.gpu_seconds() > 0 ? examples / s.gpu_seconds() : 0.0}};
}

void LogGpuPhases(const GpuStepStats& s, double seconds) {
  if (s.minibatches == 0) return;
  const double mb = static_cast<double>(s.minibatches);
  LOG_INFO(
      "GPU 0 per minibatch ({} minibatches, {:.1f} launches, {:.2f} replays, {:.2f} host syncs): "
      "exchange {:.0f} us, forward {:.0f} us, backward {:.0f} us, dense {:.0f} us, sparse {:.0f} "
      "us, replayed whole {:.0f} us; busy {:.1f}% of the run",
      s.minibatches, s.train.launches / mb, s.train.replays / mb, s.train.syncs / mb,
      1e6 * s.exchange_seconds / mb, 1e6 * s.forward_seconds / mb, 1e6 * s.backward_seconds / mb,
      1e6 * s.dense_seconds / mb, 1e6 * s.sparse_seconds / mb, 1e6 * s.replayed_seconds / mb,
      100.0 * s.gpu_seconds() / std::max(seconds, 1e-9));
}

TrainReport ReportOfRun(const TrainRunFacts& f) {
  const JobConfig& job = *f.job;
  const PassStages& stages = *f.stages;
  const StageRunResult& run = *f.run;
  const TableStats ts = f.table->Stats();
  TrainReport r;
  r.examples = stages.examples();
  r.seconds = run.seconds;
  r.examples_per_s = stages.examples() / std::max(run.seconds, 1e-9);
  r.metrics = stages.summary();
  r.passes = stages.passes();
  r.epochs = job.train.epochs;
  r.threads = job.train.threads;
  r.device = f.device;
  r.batch_size = job.train.batch_size;
  r.deterministic = job.train.deterministic;
  r.pipelined = job.pipeline.enabled;
  r.interrupted = run.interrupted;
  r.job_passes = f.position.passes;
  r.job_examples = f.position.examples;
  r.keys = ts.keys;
  r.keys_with_embedding = ts.keys_with_emb;
  r.embeddings_created = stages.created();
  r.keys_shrunk = stages.shrunk();
  r.bytes_live = ts.value_bytes;
  r.table_memory_bytes = ts.memory_bytes;
  r.keys_in_memory = ts.keys_in_memory;
  r.keys_on_disk = ts.keys_on_disk;
  r.table_bytes_per_key = ts.keys ? double(ts.memory_bytes) / ts.keys : 0.0;
  r.value_bytes_per_key = ts.keys ? double(ts.value_bytes) / ts.keys : 0.0;
  r.storage = f.table->Storage();
  r.quant = job.spec.model.quant;
  r.dense_params = f.model->dense_params().size();
  r.model_shape = f.model->Describe();
  r.input = IsGenerated(job.data) ? "generated" : (job.data.command.empty() ? "files" : "command");
  r.blas_core = blas::CoreName();
  r.blas_core_chosen_by = blas::CoreChosenBy();
  r.stages = run.totals;
  r.stage_split = stages.split();
  r.checkpoint_seconds = stages.checkpoint_seconds();
  r.rows_from_passes_in_flight = stages.patched_rows();
  r.passes_peak_bytes = stages.passes_peak_bytes();
  r.memory_at_peak = stages.memory_at_peak();
  return r;
}

nlohmann::json TrainReport::ToJson() const {
  nlohmann::json j = {
      {"command", "train"},
      {"examples", examples},
      {"seconds", seconds},
      {"examples_per_s", examples_per_s},
      {"auc", metrics.AucJson()},
      {"logloss", metrics.logloss},
      {"copc", metrics.copc},
      {"passes", passes},
      {"epochs", epochs},
      {"threads", threads},
      {"device", device},
      {"batch_size", batch_size},
      {"keys", keys},
      {"keys_with_embedding", keys_with_embedding},
      {"embeddings_created", embeddings_created},
      {"keys_shrunk", keys_shrunk},
      {"bytes_live", bytes_live},
      {"table_memory_bytes", table_memory_bytes},
      {"keys_in_memory", keys_in_memory},
      {"keys_on_disk", keys_on_disk},
      {"storage", StorageJson(storage)},
      {"table_bytes_per_key", table_bytes_per_key},
      {"value_bytes_per_key", value_bytes_per_key},
      {"quant",
       {{"bits", quant.bits},
        {"range", quant.range},
        {"rounding", QuantRoundingName(quant.rounding)}}},
      {"dense_params", dense_params},
      {"model_shape", model_shape},
      {"input", input},
      {"blas_core", blas_core},
      {"blas_core_chosen_by", blas_core_chosen_by},
      {"deterministic", deterministic},
      {"pipelined", pipelined},
      {"rows_from_passes_in_flight", rows_from_passes_in_flight},
      {"passes_peak_bytes", passes_peak_bytes},
      {"interrupted", interrupted},
      {"stages", StagesJson(stages)},
      {"checkpoint_seconds", checkpoint_seconds},
      {"stage_split",
       {{"read_input_seconds", stage_split.read_input},
        {"read_working_set_seconds", stage_split.read_working_set},
        {"read_pass_table_seconds", stage_split.read_pass_table},
        {"pull_table_seconds", stage_split.pull_table},
        {"pull_shared_seconds", stage_split.pull_shared},
        {"pull_gpu_stage_seconds", stage_split.pull_gpu_stage}}},
      {"job_passes", job_passes},
      {"job_examples", job_examples},
      {"saved", saved},
  };
  if (metrics.auc_undefined) j["auc_undefined"] = metrics.auc_undefined;
  if (storage.has_disk) {
    j["disk"] = DiskJson(storage, seconds);
    if (disk_ceiling) {
      j["disk"]["ceiling"] = DiskCeilingJson(*disk_ceiling);
      // The job's reads against the most the disk gave (16 in flight): near 1, the disk
      // sets the speed.
      if (disk_ceiling->measured && disk_ceiling->random_reads_qd16_per_s > 0) {
        j["disk"]["reads_of_ceiling"] =
            j["disk"]["reads_per_s"].get<double>() / disk_ceiling->random_reads_qd16_per_s;
      }
    }
  }
  if (extract_busy_seconds) j["stages"]["extract"] = {{"busy_seconds", *extract_busy_seconds}};
  if (!pass_sizing.is_null()) j["pass_sizing"] = pass_sizing;
  if (extract) j["extract"] = ExtractJson(*extract);
  if (gpu) {
    j["gpu_staged_bytes"] = gpu->staged_bytes;
    j["gpu"] = GpuJson(gpu->stats, gpu->seconds, gpu->examples);
  }
  if (counts) j.update(CountsJson(*counts));
  if (resumed_from) {
    j["resumed_from"] = *resumed_from;
    j["resume_warnings"] = resume_warnings;
  }
  if (ranks) {
    j["ranks"] = ranks->ranks;
    j["rank"] = ranks->rank;
    j["exchange"] = {{"bytes_sent", ranks->bytes_sent},
                     {"bytes_received", ranks->bytes_received},
                     {"seconds", ranks->exchange_seconds}};
    if (!ranks->per_rank.empty()) j["per_rank"] = ranks->per_rank;
  }
  if (checkpoint) j["checkpoint"] = *checkpoint;
  if (digest) j["digest"] = *digest;
  if (model_dir) j["model_dir"] = *model_dir;
  if (generation) j["generation"] = *generation;
  if (save_seconds) j["save_seconds"] = *save_seconds;
  if (validation) j["validation"] = *validation;
  if (test) {
    j["test_examples"] = test->examples;
    j["test_auc"] = test->AucJson();
    if (test->auc_undefined) j["test_auc_undefined"] = test->auc_undefined;
    j["test_logloss"] = test->logloss;
    j["test_copc"] = test->copc;
    j["eval_seconds"] = eval_seconds;
  }
  if (oracle_auc) j["oracle_auc"] = *oracle_auc;
  if (dry_run) j["dry_run"] = true;
  if (total_seconds) j["total_seconds"] = *total_seconds;
  if (peak_rss_bytes) j["peak_rss_bytes"] = *peak_rss_bytes;
  // The job's own memory (heap, stacks: the resident set less its pages mapped from files)
  // at its peak over the passes' samples: peak_rss_bytes counts the SSD files' pages that
  // mapped reads touched too (storage.mapped_reads), which are the page cache's.
  if (peak_rss_bytes && memory_at_peak.rss > 0) {
    j["peak_anon_rss_bytes"] = memory_at_peak.rss - memory_at_peak.file_pages;
  }
  if (memory_peak_by_owner) j["memory_peak_by_owner"] = *memory_peak_by_owner;
  if (memory_box) j["memory_box"] = *memory_box;
  return j;
}

nlohmann::json ExtractJson(const ExtractTotals& x) {
  nlohmann::json joins = nlohmann::json::array();
  for (size_t j = 0; j < x.join_hits.size(); ++j) {
    joins.push_back({{"lookups", x.join_lookups[j]},
                     {"hits", x.join_hits[j]},
                     {"hit_rate", x.join_lookups[j] ? static_cast<double>(x.join_hits[j]) /
                                                          static_cast<double>(x.join_lookups[j])
                                                    : 0.0}});
  }
  return {{"chunks", x.chunks},
          {"rows_in", x.rows_in},
          {"rows_out", x.rows_out},
          {"filtered", x.filtered},
          {"duplicates", x.duplicates},
          {"bad_rows", x.bad_rows},
          {"parse_seconds", x.parse_seconds},
          {"graph_seconds", x.graph_seconds},
          {"assemble_seconds", x.assemble_seconds},
          {"busy_seconds", x.parse_seconds + x.graph_seconds + x.assemble_seconds},
          {"joins", joins},
          {"device", x.device},
          {"device_launches", x.device_launches},
          {"side_rows", x.side_rows},
          {"side_bytes", x.side_bytes},
          {"side_bad", CountsJson(x.side_counts)}};
}

void LogExtract(const ExtractTotals& x, double seconds, int reader_threads, uint64_t malformed) {
  const double busy = x.parse_seconds + x.graph_seconds + x.assemble_seconds;
  LOG_INFO(
      "extract: {:.1f}% of the run over {} reader thread(s) ({:.2f} s: parse {:.2f}, graph "
      "{:.2f}, assemble {:.2f}); rows {} in, {} out, {} filtered, {} duplicates, {} bad in the "
      "graph; {} malformed lines skipped before it",
      100.0 * busy / std::max(seconds * std::max(reader_threads, 1), 1e-9), reader_threads, busy,
      x.parse_seconds, x.graph_seconds, x.assemble_seconds, x.rows_in, x.rows_out, x.filtered,
      x.duplicates, x.bad_rows, malformed - std::min(malformed, x.bad_rows));
}

std::string NoExamplesReason(const JobConfig& job, uint64_t records_malformed) {
  std::string why = fmt::format("{} records malformed and skipped", records_malformed);
  if (job.extractor == nullptr) return why;
  const ExtractTotals x = job.extractor->totals();
  return fmt::format(
      "{}; the feature graph read {} rows: {} filtered out by its filters, {} duplicates "
      "dropped, {} bad{}",
      why, x.rows_in, x.filtered, x.duplicates, x.bad_rows,
      x.rows_in > 0 && x.filtered == x.rows_in ? " (every row: look at the filters' conditions)"
                                               : "");
}

void LogStageTable(const StageClocks& clocks, double seconds, uint64_t passes, bool pipelined) {
  std::string line;
  for (StageId s : kStages) {
    const double busy = clocks[s].busy;
    line += fmt::format("  {} {:.1f}% ({:.3f} s/pass)", StageName(s),
                        100.0 * busy / std::max(seconds, 1e-9), passes ? busy / passes : 0.0);
  }
  LOG_INFO("stage busy time / pass time ({}, {} passes, {:.3f} s/pass):{}",
           pipelined ? "pipelined" : "sequential", passes, passes ? seconds / passes : 0.0, line);
}

nlohmann::json PassSizingJson(const PassReaderOptions& options, const PassSizingStats& stats,
                              uint64_t row_bytes) {
  const char* by = options.window_keys > 0         ? "memory"
                   : options.device_pass_bytes > 0 ? "gpu_memory"
                                                   : "examples";
  nlohmann::json j = {{"by", by},
                      {"max_examples", options.pass_examples},
                      {"passes", stats.passes},
                      {"min_pass_examples", stats.min_examples},
                      {"max_pass_examples", stats.max_examples}};
  if (options.window_keys > 0) {
    j["window_keys"] = options.window_keys;
    j["max_keys"] = options.max_keys;  // the rows the budget holds: no pass is larger
    j["window_passes"] = options.window_passes;
    j["row_bytes"] = row_bytes;
    j["closed_by_keys"] = stats.closed_by_keys;
    j["max_window_keys_used"] = stats.max_window_keys;
    j["max_pass_keys"] = stats.max_pass_keys;
    if (!options.table_row_bytes.empty()) {  // model.slot_dims: keys weighed by their rows
      j["table_row_bytes"] = options.table_row_bytes;
      j["window_row_bytes"] = options.window_bytes;
      j["max_window_row_bytes_used"] = stats.max_window_row_bytes;
    }
  }
  if (options.window_keys > 0 && options.pass_memory > 0) {
    j["pass_memory"] = options.pass_memory;
    j["memory_passes"] = options.memory_passes;
    j["closed_by_memory"] = stats.closed_by_memory;
    j["max_window_bytes_used"] = stats.max_window_bytes;
    j["max_pass_bytes"] = stats.max_pass_bytes;
    j["max_minibatch_bytes"] = stats.max_batch_bytes;
  }
  if (options.device_pass_bytes > 0) {
    j["gpu_pass_bytes"] = options.device_pass_bytes;  // each pass's share of gpu.staged_memory
    j["closed_by_gpu_memory"] = stats.closed_by_device;
    j["max_pass_gpu_bytes"] = stats.max_device_bytes;
  }
  return j;
}

}  // namespace ctrbox
