// The pass's metrics line and the JSON of its parts (docs/pipeline.md, "Stage report"): the
// push stage writes one per pass; the train job's report (jobs/train_report.h) reuses the parts.
#ifndef CTRBOX_PIPELINE_PASS_RECORD_H_
#define CTRBOX_PIPELINE_PASS_RECORD_H_

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "io/bad_input.h"
#include "pipeline/pass.h"
#include "table/sparse_table.h"
#include "util/disk_probe.h"

namespace ctrbox {

// {"records_good", "records_malformed", "malformed": {kind: count}}.
nlohmann::json CountsJson(const RecordCounts& counts);
// The table's storage counters ("storage" in the train report).
nlohmann::json StorageJson(const StorageStats& s);
// The SSD tier's reads over a run of `seconds` (null without the tier): reads and MB per
// second, the mean read's latency, and the reads in flight on average (the reading threads'
// time in reads / the run's: near the threads that read, the disk sets the speed; near 0,
// it does not).
nlohmann::json DiskJson(const StorageStats& s, double seconds);
// The disk's measured ceiling (util/disk_probe.h; "ceiling" in the report's "disk", and in
// inspect --store): {measured, why_not} or the three rates and the probe's seconds.
nlohmann::json DiskCeilingJson(const DiskCeiling& c);
// The counters that change per pass, as differences, with the current byte figures.
nlohmann::json StorageDeltaJson(const StorageStats& before, const StorageStats& after);
// {"read": {"busy_seconds", "stalled_seconds", "idle_seconds"}, "pull": ..., ...}.
nlohmann::json StagesJson(const StageClocks& clocks);
// A committed checkpoint in a pass line.
nlohmann::json CheckpointJson(const CheckpointManifest& m, double seconds);

// The metrics line of a pushed pass. `examples`: the run's examples so far; `checkpoint`:
// null, or CheckpointJson of the checkpoint committed after it.
nlohmann::json PassRecord(const Pass& pass, uint64_t examples, uint64_t table_keys,
                          double pass_seconds, const nlohmann::json& checkpoint,
                          nlohmann::json storage_delta);

}  // namespace ctrbox

#endif  // CTRBOX_PIPELINE_PASS_RECORD_H_
