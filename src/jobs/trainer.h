// The train job: read examples, cut them into passes, run each pass through the stages
// read -> pull -> train -> push, overlapped on consecutive passes (pipeline.enabled) or one
// after the other; save the model. Stages, invariants and the stage report: docs/pipeline.md.
// Nothing is written to the model directory unless every pass succeeded.
//
// The parts, in the order a job uses them: job.h (the settings and their validation),
// pass_reader.h (passes from the input), train_start.h (resume / continue / new model),
// stages.h (the four stage functions), stage_runner.h (sequential or overlapped),
// train_report.h (metrics lines and the report), evaluator.h (held-out evaluation).
#ifndef CTRBOX_JOBS_TRAINER_H_
#define CTRBOX_JOBS_TRAINER_H_

#include <atomic>

#include "dist/comm.h"
#include "jobs/job.h"
#include "jobs/train_report.h"
#include "pipeline/progress_sink.h"
#include "util/env.h"

namespace ctrbox {

// Runs the train job of files (not a stream job: jobs/stream.h) and returns its report
// (TrainReport::ToJson is the JSON object `ctrbox train` prints). When
// *stop becomes true (Ctrl-C), the job stops after the pass in training is pushed, saves the
// model and reports "interrupted": true (docs/pipeline.md). sink and stop may be null.
//
// comm (may be null: one rank, as always) makes this process one rank of a distributed job
// (docs/distributed.md): it reads its share of the input files, holds its part of the sparse
// table, and trains one model with the other ranks. Every rank must call RunTrain with the
// same job.
// REQUIRES: !job.stream.enabled().
StatusOr<TrainReport> RunTrain(Env* env, JobConfig job, ProgressSink* sink,
                               const std::atomic<bool>* stop = nullptr, Comm* comm = nullptr);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_TRAINER_H_
