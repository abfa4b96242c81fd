// Where a job's examples come from: its data paths or command, or, when it names none, the
// built-in generator (io/synth.h) with its planted model. Exports io/reader.h (DataOptions,
// KillDataCommands for a signal handler).
#ifndef CTRBOX_JOBS_DATA_H_
#define CTRBOX_JOBS_DATA_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "io/reader.h"
#include "jobs/job.h"

namespace ctrbox {

// True when `data` names no paths and no command: the job trains on generated rows.
inline bool IsGenerated(const DataOptions& data) {
  return data.paths.empty() && data.command.empty();
}

// What a checkpoint records of an input file, for a resume to tell the same input from another:
// {path, bytes, fingerprint} (DataFileFingerprint); standard input ("-") has bytes null.
StatusOr<nlohmann::json> DataFileRecord(Env* env, const std::string& path);

// A reader of `data`, or of the generated rows (`test`: the held-out rows, seed + 1).
StatusOr<std::unique_ptr<BatchReader>> OpenData(Env* env, const DataOptions& data,
                                                const GeneratedData& gen, bool test);

// A job with a feature graph: opens its extract stage (loads the side views, reads the main
// view's header) and makes job->data read through it. Nothing for a job without one.
Status AttachFeatures(Env* env, JobConfig* job);

// The planted model's AUC on the generated test rows: the best any model can reach.
double OracleAuc(const GeneratedData& gen);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_DATA_H_
