// A job of files validated per epoch (jobs/train_steps.h, docs/model.md "Validation and
// early stopping"): the epochs one at a time, each followed by the held-back rows' metrics, a
// copy of the model when it is the best so far and a checkpoint; the best epoch's model is
// the one the job keeps.
#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "ckpt/model_dir.h"
#include "ckpt/model_files.h"
#include "jobs/data.h"
#include "jobs/evaluator.h"
#include "jobs/holdout.h"
#include "jobs/train_steps.h"
#include "util/cleanup.h"
#include "util/logging.h"
#include "util/sys.h"

namespace ctrbox::train_steps {
namespace {

// Where the job stands among its epochs; a checkpoint records it (CheckpointManifest::epochs).
struct EpochState {
  uint32_t done = 0;  // epochs trained and scored
  uint32_t best = 0;  // the epoch of the lowest validation logloss (0: none yet)
  double best_logloss = std::numeric_limits<double>::infinity();
  bool stopped = false;   // early: `patience` epochs without a lower logloss
  bool restored = false;  // the best epoch's model is the table's (the job's end)
  nlohmann::json history = nlohmann::json::array();  // one entry per epoch done

  nlohmann::json ToJson() const {
    return {{"done", done},       {"best", best},         {"best_logloss", best_logloss},
            {"stopped", stopped}, {"restored", restored}, {"history", history}};
  }
  static StatusOr<EpochState> FromJson(const nlohmann::json& j, const std::string& where) {
    try {
      EpochState s;
      s.done = j.at("done").get<uint32_t>();
      s.best = j.at("best").get<uint32_t>();
      s.best_logloss =
          j.at("best_logloss").is_null() ? s.best_logloss : j.at("best_logloss").get<double>();
      s.stopped = j.at("stopped").get<bool>();
      s.restored = j.at("restored").get<bool>();
      s.history = j.at("history");
      return s;
    } catch (const std::exception& e) {
      return CorruptionError(fmt::format("{}: its epochs record: {}", where, e.what()));
    }
  }
};

// A MetricSummary as MetricSummary::ToJson wrote it (an epoch's history entry).
MetricSummary MetricsOf(const nlohmann::json& j) {
  MetricSummary m;
  m.examples = j.value("examples", uint64_t{0});
  m.logloss = j.value("logloss", 0.0);
  m.copc = j.value("copc", 0.0);
  m.ctr = j.value("ctr", 0.0);
  m.mean_prediction = j.value("mean_prediction", 0.0);
  if (j.contains("auc") && j["auc"].is_number()) {
    m.auc = j["auc"].get<double>();
  } else {
    const std::string why = j.value("auc_undefined", std::string());
    m.auc_undefined = why == "every label is 0"   ? "every label is 0"
                      : why == "every label is 1" ? "every label is 1"
                                                  : "no examples";
  }
  return m;
}

std::string CopyName(uint32_t epoch) { return fmt::format("best-epoch-{}", epoch); }

// The copies of best epochs in `dir` but the best's (0: none) and those a checkpoint there
// names (a copy of a job that stopped before its checkpoint, older bests): deleted.
Status PruneCopies(Env* env, const std::string& dir, uint32_t best) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> ids, ListCheckpoints(env, dir));
  std::set<std::string> named;
  if (best > 0) named.insert(CopyName(best));
  for (uint64_t id : ids) {
    StatusOr<CheckpointManifest> m = ReadCheckpointManifest(env, dir, id);
    if (!m.ok() || m->epochs.is_null()) continue;
    named.insert(CopyName(m->epochs.value("best", 0u)));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(dir));
  for (const std::string& c : children) {
    if (c.rfind("best-epoch-", 0) == 0 && !named.contains(c)) {
      RETURN_IF_ERROR(DeleteDirOfFiles(env, JoinPath(dir, c), "MANIFEST"));
    }
  }
  return Status::OK();
}

// The best epoch's model, from its copy, in place of the table's and the model's.
Status RestoreBest(Env* env, const JobConfig& job, const std::string& copy, ThreadPool* pool,
                   TrainStart* start) {
  // The table goes first: its SSD tier's directory is the one the copy's table opens.
  JobConfig drop = job;
  drop.storage.keep_store = false;
  RETURN_IF_ERROR(CloseTable(env, drop, std::move(start->table)));
  ASSIGN_OR_RETURN(LoadedModel lm, OpenModel(env, copy, job.StorageFor({}), pool));
  start->model = std::move(lm.model);
  start->table = std::move(lm.table);
  start->position.trained_examples = lm.manifest.trained_examples;
  if (start->ckpt) start->ckpt->OnShrink();  // every row may differ: the next commit is a base
  return Status::OK();
}

}  // namespace

Status PruneEpochCopies(Env* env, const JobConfig& job) {
  if (job.ckpt.dir.empty() || !job.train.validating()) return Status::OK();
  return PruneCopies(env, job.ckpt.dir, 0);
}

namespace {

// Where the epochs stand: a resumed job's from its checkpoint.
StatusOr<EpochState> EpochsSoFar(const JobConfig& job, const TrainStart& start, uint32_t limit) {
  EpochState state;
  if (!start.resumed) return state;
  if (start.resumed->epochs.is_null()) {
    return InvalidArgumentError(
        fmt::format("{} in {} was not written by a job validated per epoch: give this job its own "
                    "ckpt.dir (or --fresh)",
                    CheckpointName(start.resumed->id), job.ckpt.dir));
  }
  ASSIGN_OR_RETURN(state,
                   EpochState::FromJson(start.resumed->epochs, CheckpointName(start.resumed->id)));
  LOG_INFO("epochs: {} done (the best: epoch {}, validation logloss {:.5f}); {}", state.done,
           state.best, state.best_logloss,
           state.stopped || state.done >= limit ? "training is over" : "going on");
  return state;
}

// A directory of this run's own for the best epoch's copy (a job without ckpt.dir).
StatusOr<std::string> MakeCopiesDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      JoinPath(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "ctrbox-epochs-XXXXXX");
  if (::mkdtemp(path.data()) == nullptr) {
    return IOError(fmt::format("cannot make a directory for the best epoch's copy at {}: {}", path,
                               std::strerror(errno)));
  }
  return path;
}

// The epochs' training runs, summed into the report of the job.
struct EpochTotals {
  uint64_t examples = 0, passes = 0;
  std::optional<ExtractTotals> extracted;  // the epochs' training reads (not their validation's)
  double extract_busy = 0;
  double seconds = 0;
  std::optional<RecordCounts> counts;

  void Add(const PassesRun& run) {
    examples += run.examples;
    passes += run.report.passes;
    if (run.report.extract) {
      if (!extracted) extracted.emplace();
      extracted->Add(*run.report.extract);
      extract_busy += run.report.extract_busy_seconds.value_or(0);
    }
    seconds += run.report.seconds;
    if (run.report.counts) {
      if (!counts) counts.emplace();
      counts->Add(*run.report.counts);
    }
  }
  void Fill(uint32_t epochs, PassesRun* run) const {
    run->examples = examples;
    run->report.examples = examples;
    run->report.passes = passes;  // every epoch's (the report's pass count is the run's)
    if (extracted) {
      run->report.extract = extracted;
      run->report.extract_busy_seconds = extract_busy;
    }
    run->report.seconds = seconds;
    run->report.examples_per_s = seconds > 0 ? examples / seconds : 0.0;
    run->report.epochs = epochs;
    if (counts) run->report.counts = counts;
  }
};

// One epoch's training pass over the rows not held back.
StatusOr<PassesRun> TrainEpoch(Env* env, const JobConfig& job, const HoldOut& hold_out,
                               TrainStart* start, ProgressSink* sink, const std::atomic<bool>* stop,
                               ThreadPool* pool) {
  PassReaderOptions options = PassOptionsOnRanks(job, nullptr);
  options.epochs = 1;
  options.select = [&hold_out](Batch* b) { hold_out.Keep(b, false); };
  // The epoch's own extraction: the job's extractor also counts the epochs before and every
  // read that scores the rows held back (its readers extract ahead once opened: counted
  // from before this one opens).
  if (job.extractor) start->extracted_before = job.extractor->totals();
  PassReader reader([&] { return OpenData(env, job.data, job.generated, false); }, options);
  RETURN_IF_ERROR(reader.Open());
  return RunPasses(env, job, &reader, start, sink, stop, pool, nullptr, "", nullptr);
}

// The rows held back, scored by the model as the epoch left it.
StatusOr<MetricSummary> ScoreHeldBack(Env* env, const JobConfig& job, const HoldOut& hold_out,
                                      TrainStart* start, ThreadPool* pool) {
  ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> data,
                   OpenData(env, job.data, job.generated, false));
  std::unique_ptr<BatchReader> held = HeldBackRows(std::move(data), hold_out);
  ASSIGN_OR_RETURN(MetricSummary v,
                   Evaluate(held.get(), *start->table, start->model.get(), job.train.batch_size,
                            job.pipeline.pass_examples, job.EvalChunkKeys(), pool, nullptr));
  if (v.examples == 0) {
    return FailedPreconditionError(fmt::format(
        "train.validation_fraction {} held back no row of the training data: too few rows "
        "to validate on; give a larger share, or train a number of epochs without it",
        job.train.ValidationFraction()));
  }
  return v;
}

// After epoch `epoch` scored `v`: a copy of the model when it is the best so far, the state
// committed with the checkpoint, the epoch's line logged. Returns whether it was the best.
StatusOr<bool> EndEpoch(Env* env, const JobConfig& job, const std::string& copies, uint32_t epoch,
                        const PassesRun& run, const MetricSummary& v, double validation_seconds,
                        double seconds, TrainStart* start, ThreadPool* pool, EpochState* state) {
  const bool better = v.logloss < state->best_logloss;
  if (better) {
    // The copy first, then the checkpoint naming it: a crash between leaves the old best.
    const std::string copy = JoinPath(copies, CopyName(epoch));
    RETURN_IF_ERROR(DeleteDirOfFiles(env, copy, "MANIFEST"));
    RETURN_IF_ERROR(SaveModel(env, copy, job.spec, *start->table, *start->model,
                              start->position.trained_examples, pool, InputRecord(job))
                        .status());
    state->best = epoch;
    state->best_logloss = v.logloss;
  }
  state->done = epoch;
  state->stopped = job.train.epochs_auto && epoch - state->best >= job.train.Patience();
  nlohmann::json entry = {{"epoch", epoch},
                          {"examples", run.examples},
                          {"train", run.report.metrics.ToJson()},
                          {"validation", v.ToJson()}};
  state->history.push_back(entry);
  if (start->ckpt) {
    start->ckpt->SetEpochs(state->ToJson());
    RETURN_IF_ERROR(
        start->ckpt
            ->Commit(*start->table, DensePayload(*start->model), start->position, nullptr, pool)
            .status());
  }
  RETURN_IF_ERROR(PruneCopies(env, copies, state->best));
  nlohmann::json line = entry;
  line["event"] = "epoch";
  line["best_epoch"] = state->best;
  line["validation_seconds"] = validation_seconds;
  line["seconds"] = seconds;
  RETURN_IF_ERROR(start->metrics_log->Write(line));
  return better;
}

}  // namespace

StatusOr<EpochsRun> RunEpochs(Env* env, const JobConfig& job, TrainStart* start, ProgressSink* sink,
                              const std::atomic<bool>* stop, ThreadPool* pool) {
  const HoldOut hold_out(job.train.ValidationFraction(), job.train.seed);
  const uint32_t limit = job.train.EpochLimit();
  ASSIGN_OR_RETURN(EpochState state, EpochsSoFar(job, *start, limit));
  // The copies of the best epoch: beside the checkpoints (a resumed job finds its copy), or
  // in a directory of this run's own.
  std::string copies = job.ckpt.dir;
  std::string scratch;
  if (copies.empty()) {
    ASSIGN_OR_RETURN(scratch, MakeCopiesDir());
    copies = scratch;
  }
  Cleanup remove_scratch([&] {
    if (scratch.empty()) return;
    StatusOr<std::vector<std::string>> children = env->GetChildren(scratch);
    if (children.ok()) {
      for (const std::string& c : *children) {
        DeleteDirOfFiles(env, JoinPath(scratch, c)).IgnoreError();
      }
    }
    env->DeleteDir(scratch).IgnoreError();
  });

  EpochsRun out;
  EpochTotals totals;
  while (!state.stopped && state.done < limit) {
    const uint32_t epoch = state.done + 1;
    Stopwatch clock;
    ASSIGN_OR_RETURN(PassesRun run, TrainEpoch(env, job, hold_out, start, sink, stop, pool));
    if (run.interrupted) {
      LOG_WARNING(
          "stopped while training epoch {}: it is not committed; --resume trains it again from "
          "the last epoch's checkpoint",
          epoch);
      out.abandoned = true;
      out.run = std::move(run);
      return out;
    }
    start->position = run.position;
    totals.Add(run);
    Stopwatch eval_clock;
    ASSIGN_OR_RETURN(const MetricSummary v, ScoreHeldBack(env, job, hold_out, start, pool));
    ASSIGN_OR_RETURN(const bool better,
                     EndEpoch(env, job, copies, epoch, run, v, eval_clock.Seconds(),
                              clock.Seconds(), start, pool, &state));
    LOG_INFO("epoch {}: validation logloss {:.5f} AUC {} over {} held-back rows{}; {}", epoch,
             v.logloss, v.AucText(), v.examples, better ? " (the best so far: kept)" : "",
             state.stopped    ? fmt::format("stopping: no lower logloss for {} epochs "
                                               "(train.early_stop_patience)",
                                            job.train.Patience())
             : epoch >= limit ? "the last epoch"
                              : fmt::format("the best is epoch {}", state.best));
    out.run = std::move(run);
  }
  if (!state.restored && state.best != 0 && state.best != state.done) {
    LOG_INFO(
        "keeping epoch {} (validation logloss {:.5f}), the best of {}: its model replaces "
        "epoch {}'s",
        state.best, state.best_logloss, state.done, state.done);
    RETURN_IF_ERROR(RestoreBest(env, job, JoinPath(copies, CopyName(state.best)), pool, start));
  }
  state.restored = true;
  if (start->ckpt) start->ckpt->SetEpochs(state.ToJson());  // the final commit records it
  // The job's model is the best epoch's: its position (trained_examples: the examples that
  // made it) and its training metrics, not the last epoch's.
  out.run.position = start->position;
  for (const nlohmann::json& e : state.history) {
    if (e.value("epoch", 0u) == state.best) out.run.report.metrics = MetricsOf(e.at("train"));
  }
  totals.Fill(state.done, &out.run);
  out.validation = {{"fraction", job.train.ValidationFraction()},
                    {"epochs", state.done},
                    {"best_epoch", state.best},
                    {"best_logloss", state.best_logloss},
                    {"stopped_early", state.stopped},
                    {"auto", job.train.epochs_auto},
                    {"history", state.history}};
  return out;
}

}  // namespace ctrbox::train_steps
