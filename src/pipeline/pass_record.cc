#include "pipeline/pass_record.h"

#include <algorithm>

namespace ctrbox {

nlohmann::json CountsJson(const RecordCounts& c) {
  nlohmann::json bad = nlohmann::json::object();
  for (int k = 0; k < kNumBadKinds; ++k)
    bad[std::string(BadKindName(static_cast<BadKind>(k)))] = c.bad[k];
  return {{"records_good", c.good}, {"records_malformed", c.bad_total()}, {"malformed", bad}};
}

nlohmann::json StorageJson(const StorageStats& s) {
  nlohmann::json r = {
      {"tiers", s.has_disk ? "memory+ssd" : "memory"},
      {"memory_budget", s.memory_budget},
      {"memory_bytes", s.memory_bytes},
      {"peak_memory_bytes", s.peak_memory_bytes},
      {"hit_rate", s.hit_rate()},
      {"memory_by_owner",
       {{"rows", s.cache_row_bytes},
        {"row_index", s.cache_index_bytes},
        {"row_metadata", s.cache_meta_bytes},
        {"group_index", s.index_bytes},
        {"bloom_filters", s.bloom_bytes}}},
  };
#define CTRBOX_COUNTER_JSON(name, in_pass_lines) r[#name] = s.name;
  CTRBOX_CACHE_COUNTERS(CTRBOX_COUNTER_JSON)
  if (!s.has_disk) return r;
  CTRBOX_SSD_COUNTERS(CTRBOX_COUNTER_JSON)
  CTRBOX_DISK_COUNTERS(CTRBOX_COUNTER_JSON)
#undef CTRBOX_COUNTER_JSON
  r.update({{"group_bits", s.group_bits},
            {"direct_reads", s.direct_reads},
            {"mapped_reads", s.mapped_reads},
            {"write_amplification",
             s.persisted_bytes ? double(s.ssd_bytes_written) / double(s.persisted_bytes) : 0.0},
            {"files", s.files},
            {"file_bytes", s.file_bytes},
            {"free_file_bytes", s.free_file_bytes},
            {"live_bytes", s.live_bytes},
            {"stale_fraction", s.stale_fraction()},
            {"keys_on_disk", s.keys_on_disk},
            {"index_bytes", s.index_bytes},
            {"bloom_bytes", s.bloom_bytes}});
  return r;
}

nlohmann::json DiskJson(const StorageStats& s, double seconds) {
  if (!s.has_disk) return nullptr;
  const double per_s = seconds > 0 ? 1.0 / seconds : 0.0;
  const double read_seconds = static_cast<double>(s.ssd_read_nanos) * 1e-9;
  return {{"reads", s.records_read},
          {"reads_per_s", static_cast<double>(s.records_read) * per_s},
          {"read_mb_per_s", static_cast<double>(s.ssd_bytes_read) * 1e-6 * per_s},
          {"mean_read_us",
           s.records_read ? read_seconds * 1e6 / static_cast<double>(s.records_read) : 0.0},
          {"read_seconds", read_seconds},
          {"reads_in_flight", read_seconds * per_s},
          // Whether the write-back sets the pace: the pulls' waits for it to make room, and
          // its own reads (of reads above), in seconds summed over the threads.
          {"budget_wait_seconds", static_cast<double>(s.budget_wait_nanos) * 1e-9},
          {"writeback_reads", s.writeback_reads},
          {"writeback_read_seconds", static_cast<double>(s.writeback_read_nanos) * 1e-9}};
}

nlohmann::json DiskCeilingJson(const DiskCeiling& c) {
  if (!c.measured) return {{"measured", false}, {"why_not", c.why_not}};
  return {{"measured", true},
          {"random_4k_reads_qd1_per_s", c.random_reads_qd1_per_s},
          {"random_4k_reads_qd16_per_s", c.random_reads_qd16_per_s},
          {"seq_read_mb_per_s", c.seq_mb_per_s},
          // A read's latency on the disk alone, beside the job's mean_read_us.
          {"read_us_qd1", c.random_reads_qd1_per_s > 0 ? 1e6 / c.random_reads_qd1_per_s : 0.0},
          {"probe_seconds", c.seconds}};
}

nlohmann::json StorageDeltaJson(const StorageStats& before, const StorageStats& after) {
  StorageStats d;
  nlohmann::json j;
#define CTRBOX_COUNTER_DELTA(name, in_pass_lines) \
  d.name = after.name - before.name;              \
  if (in_pass_lines) j[#name] = d.name;
  CTRBOX_CACHE_COUNTERS(CTRBOX_COUNTER_DELTA)
  j["hit_rate"] = d.hit_rate();
  j["memory_bytes"] = after.memory_bytes;
  if (!after.has_disk) return j;
  CTRBOX_SSD_COUNTERS(CTRBOX_COUNTER_DELTA)
  CTRBOX_DISK_COUNTERS(CTRBOX_COUNTER_DELTA)
#undef CTRBOX_COUNTER_DELTA
  j.update({{"file_bytes", after.file_bytes},
            {"live_bytes", after.live_bytes},
            {"keys_on_disk", after.keys_on_disk}});
  return j;
}

nlohmann::json StagesJson(const StageClocks& clocks) {
  nlohmann::json j;
  for (StageId s : kStages) {
    const StageClock& c = clocks[s];
    j[StageName(s)] = {
        {"busy_seconds", c.busy}, {"stalled_seconds", c.stalled}, {"idle_seconds", c.idle}};
  }
  return j;
}

nlohmann::json CheckpointJson(const CheckpointManifest& m, double seconds) {
  return {{"name", CheckpointName(m.id)},
          {"kind", m.base ? "base" : "delta"},
          {"rows", m.rows},
          {"bytes", m.files[0].bytes + m.files[1].bytes},
          {"seconds", seconds}};
}

nlohmann::json PassRecord(const Pass& pass, uint64_t examples, uint64_t table_keys,
                          double pass_seconds, const nlohmann::json& checkpoint,
                          nlohmann::json storage_delta) {
  const MetricSummary& ps = pass.metrics;
  nlohmann::json record = {{"event", "pass"},
                           {"pass", pass.index},
                           {"examples", examples},
                           {"pass_examples", ps.examples},
                           {"auc", ps.AucJson()},
                           {"logloss", ps.logloss},
                           {"copc", ps.copc},
                           {"working_set_keys", pass.ws.keys.size()},
                           {"rows_from_passes_in_flight", pass.patched_rows},
                           {"table_keys", table_keys},
                           {"seconds", pass_seconds},
                           {"examples_per_s", ps.examples / std::max(pass_seconds, 1e-9)},
                           {"stages", StagesJson(pass.clock)},
                           {"storage", std::move(storage_delta)}};
  if (pass.extract_busy >= 0) record["stages"]["extract"] = {{"busy_seconds", pass.extract_busy}};
  if (!checkpoint.is_null()) record["checkpoint"] = checkpoint;
  if (ps.auc_undefined) record["auc_undefined"] = ps.auc_undefined;
  return record;
}

}  // namespace ctrbox
