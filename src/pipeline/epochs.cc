// A job of files validated per epoch (pipeline/train_steps.h, docs/model.md "Validation and
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
#include "pipeline/data.h"
#include "pipeline/evaluator.h"
#include "pipeline/holdout.h"
#include "pipeline/train_steps.h"
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

StatusOr<EpochsRun> RunEpochs(Env* env, const JobConfig& job, TrainStart* start, ProgressSink* sink,
                              const std::atomic<bool>* stop, ThreadPool* pool) {
  const HoldOut hold_out(job.train.ValidationFraction(), job.train.seed);
  const uint32_t limit = job.train.EpochLimit();
  EpochState state;
  if (start->resumed) {
    if (start->resumed->epochs.is_null()) {
      return InvalidArgumentError(fmt::format(
          "{} in {} was not written by a job validated per epoch: give this job its own "
          "ckpt.dir (or --fresh)",
          CheckpointName(start->resumed->id), job.ckpt.dir));
    }
    ASSIGN_OR_RETURN(
        state, EpochState::FromJson(start->resumed->epochs, CheckpointName(start->resumed->id)));
    LOG_INFO("epochs: {} done (the best: epoch {}, validation logloss {:.5f}); {}", state.done,
             state.best, state.best_logloss,
             state.stopped || state.done >= limit ? "training is over" : "going on");
  }
  // The copies of the best epoch: beside the checkpoints (a resumed job finds its copy), or
  // in a directory of this run's own.
  std::string copies = job.ckpt.dir;
  std::string scratch;
  if (copies.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string path =
        JoinPath(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "ctrbox-epochs-XXXXXX");
    if (::mkdtemp(path.data()) == nullptr) {
      return IOError(fmt::format("cannot make a directory for the best epoch's copy at {}: {}",
                                 path, std::strerror(errno)));
    }
    copies = scratch = path;
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
  uint64_t examples = 0, passes = 0;
  std::optional<ExtractTotals> extracted;  // the epochs' training reads, summed
  double extract_busy = 0;
  double seconds = 0;
  RecordCounts counts;
  bool counted = false;
  while (!state.stopped && state.done < limit) {
    const uint32_t epoch = state.done + 1;
    Stopwatch clock;
    PassReaderOptions options = PassOptionsOnRanks(job, nullptr);
    options.epochs = 1;
    options.select = [&hold_out](Batch* b) { hold_out.Keep(b, false); };
    // The epoch's own extraction: the job's extractor also counts the epochs before and every
    // read that scores the rows held back (its readers extract ahead once opened: counted
    // from before this one opens).
    if (job.extractor) start->extracted_before = job.extractor->totals();
    PassReader reader([&] { return OpenData(env, job.data, job.generated, false); }, options);
    RETURN_IF_ERROR(reader.Open());
    ASSIGN_OR_RETURN(PassesRun run,
                     RunPasses(env, job, &reader, start, sink, stop, pool, nullptr, "", nullptr));
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
    examples += run.examples;
    passes += run.report.passes;
    if (run.report.extract) {  // each epoch's training reads (not its validation's)
      if (!extracted) extracted.emplace();
      extracted->Add(*run.report.extract);
      extract_busy += run.report.extract_busy_seconds.value_or(0);
    }
    seconds += run.report.seconds;
    if (run.report.counts) {
      counts.Add(*run.report.counts);
      counted = true;
    }
    // Score the rows held back.
    Stopwatch eval_clock;
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
    const bool better = v.logloss < state.best_logloss;
    if (better) {
      // The copy first, then the checkpoint naming it: a crash between leaves the old best.
      const std::string copy = JoinPath(copies, CopyName(epoch));
      RETURN_IF_ERROR(DeleteDirOfFiles(env, copy, "MANIFEST"));
      RETURN_IF_ERROR(SaveModel(env, copy, job.spec, *start->table, *start->model,
                                start->position.trained_examples, pool, InputRecord(job))
                          .status());
      state.best = epoch;
      state.best_logloss = v.logloss;
    }
    state.done = epoch;
    state.stopped = job.train.epochs_auto && epoch - state.best >= job.train.Patience();
    nlohmann::json entry = {{"epoch", epoch},
                            {"examples", run.examples},
                            {"train", run.report.metrics.ToJson()},
                            {"validation", v.ToJson()}};
    state.history.push_back(entry);
    if (start->ckpt) {
      start->ckpt->SetEpochs(state.ToJson());
      RETURN_IF_ERROR(
          start->ckpt
              ->Commit(*start->table, DensePayload(*start->model), start->position, nullptr, pool)
              .status());
    }
    RETURN_IF_ERROR(PruneCopies(env, copies, state.best));
    nlohmann::json line = entry;
    line["event"] = "epoch";
    line["best_epoch"] = state.best;
    line["validation_seconds"] = eval_clock.Seconds();
    line["seconds"] = clock.Seconds();
    RETURN_IF_ERROR(start->metrics_log->Write(line));
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

  out.run.examples = examples;
  out.run.report.examples = examples;
  out.run.report.passes = passes;  // every epoch's (the report's pass count is the run's)
  if (extracted) {
    out.run.report.extract = extracted;
    out.run.report.extract_busy_seconds = extract_busy;
  }
  out.run.report.seconds = seconds;
  out.run.report.examples_per_s = seconds > 0 ? examples / seconds : 0.0;
  out.run.report.epochs = state.done;
  if (counted) out.run.report.counts = counts;
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
