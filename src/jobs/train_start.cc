#include "jobs/train_start.h"

#include <fmt/format.h>

#include <algorithm>

#include "ckpt/model_dir.h"
#include "io/reader.h"
#include "jobs/data.h"
#include "table/tiered_table.h"
#include "util/blas.h"
#include "util/json_text.h"
#include "util/logging.h"
#include "util/memory_box.h"
#include "util/parse.h"

namespace ctrbox {

// The job settings besides the model spec that change what a resumed job computes: what the
// data is, and how it is cut into passes and minibatches. A checkpoint records them.
StatusOr<nlohmann::json> ResultSettings(Env* env, const JobConfig& job) {
  nlohmann::json data;
  if (job.stream.enabled()) {  // the partitions are the stream's position (docs/routine.md)
    data = {{"format", DataFormatName(job.data.format)},
            {"stream",
             {{"root", job.stream.root},
              {"layout", job.stream.layout},
              {"done_file", job.stream.done_file}}}};
  } else if (IsGenerated(job.data)) {
    const GeneratedData& g = job.generated;
    data = {{"generated",
             {{"layout", DataFormatName(g.layout)},
              {"rows", g.rows},
              {"seed", g.seed},
              {"vocab_scale", g.vocab_scale},
              {"zipf", g.zipf}}}};
  } else if (!job.data.command.empty()) {
    data = {{"format", DataFormatName(job.data.format)}, {"command", job.data.command}};
  } else {
    ASSIGN_OR_RETURN(auto files, ExpandDataPaths(env, job.data.paths, job.data.format));
    nlohmann::json list = nlohmann::json::array();
    for (const std::string& f : files) {
      ASSIGN_OR_RETURN(nlohmann::json entry, DataFileRecord(env, f));
      list.push_back(std::move(entry));
    }
    data = {{"format", DataFormatName(job.data.format)}, {"files", list}};
    if (job.segment_plan) data["plan"] = job.segment_plan->ToJson();
    // Ranks that read every file and keep their share of each global minibatch: a resume
    // skips its share of the stream's rows, not of its own files.
    if (job.file_share) data["rows"] = "every file in order, shared by global minibatch";
  }
  // A changed feature graph is changed data (the side views' contents are not compared).
  if (job.features != nullptr)
    data["features"] = fmt::format("{:016x}", job.features->Fingerprint());
  nlohmann::json settings = {{"data", data},
                             {"pipeline.pass_examples", job.pipeline.pass_examples},
                             {"train.batch_size", job.train.batch_size},
                             {"train.epochs", job.train.epochs},
                             {"table.shrink_every_passes", job.train.shrink_every_passes}};
  if (job.train.validating()) {  // the rows held back, and when the epochs stop
    settings["train.validation"] = {{"fraction", job.train.ValidationFraction()},
                                    {"seed", job.train.seed},
                                    {"epochs", job.train.epochs_auto ? "auto" : "fixed"},
                                    {"max_epochs", job.train.EpochLimit()},
                                    {"patience", job.train.Patience()}};
  }
  // Passes sized by memory are cut where the key window fills: another budget cuts others.
  const PassReaderOptions passes = job.PassOptions();
  if (passes.device_pass_bytes > 0) {
    // (The key's name before gpu.staged_memory: checkpoints written with it must still match.)
    settings["pass sizing (gpu.pass_memory)"] = {{"gpu_pass_bytes", passes.device_pass_bytes}};
  }
  if (passes.window_keys > 0) {
    settings["pass sizing (storage.memory_budget)"] = {{"window_keys", passes.window_keys},
                                                       {"window_passes", passes.window_passes}};
    if (passes.pass_memory > 0) {
      settings["pass sizing (storage.memory_budget)"]["pass_memory"] = passes.pass_memory;
      settings["pass sizing (storage.memory_budget)"]["memory_passes"] = passes.memory_passes;
    }
  }
  return settings;
}

namespace {

// Settings that are a rank's share of the job's: the job's value is the rank's times the ranks.
bool DividedAmongRanks(const std::string& key) {
  return key == "train.batch_size" || key == "pipeline.pass_examples";
}

// A setting as the job sets it, from one rank's share of it.
nlohmann::json JobValue(const std::string& key, const nlohmann::json& v, uint32_t ranks) {
  if (ranks <= 1 || !DividedAmongRanks(key) || !v.is_number_unsigned()) return v;
  return v.get<uint64_t>() * ranks;
}

// The data a job of another number of ranks shares with this one: each rank's files (and its
// plan of them) are its own, the format, generator and feature graph the job's.
nlohmann::json SharedData(nlohmann::json data) {
  if (data.is_object()) {
    data.erase("files");
    data.erase("plan");
  }
  return data;
}

}  // namespace

std::string ResumeMismatch(const CheckpointManifest& m, const ModelSpec& spec,
                           const nlohmann::json& settings, uint32_t ranks_then,
                           uint32_t ranks_now) {
  const std::string name = CheckpointName(m.id);
  if (m.spec.ToJson() != spec.ToJson()) {
    std::string key = m.spec.FirstIncompatibility(spec);
    if (key.empty()) key = m.spec.FirstDifference(spec);
    if (key.empty() || key == "spec") {
      return fmt::format("{} was written with another model spec than this job sets", name);
    }
    return fmt::format("{} was written with another model spec than this job sets: {}", name,
                       m.spec.DescribeDifference(spec, key));
  }
  const bool reshard = ranks_then != ranks_now;
  for (const auto& [key, value] : settings.items()) {
    const nlohmann::json old = m.settings.contains(key) ? m.settings[key] : nlohmann::json();
    if (old == value && !reshard) continue;
    if (reshard) {
      if (key == "data") {
        if (SharedData(old) == SharedData(value)) continue;
        return fmt::format("{} was written from other data than this job reads: {} there, {} now",
                           name, JsonText(SharedData(old)), JsonText(SharedData(value)));
      }
      if (key != "data" && !DividedAmongRanks(key) && old == value) continue;
      if (DividedAmongRanks(key) && old.is_number_unsigned() && value.is_number_unsigned()) {
        // A rank's pass is the job's divided by the ranks, rounded down: equal within that.
        const uint64_t a = JobValue(key, old, ranks_then).get<uint64_t>();
        const uint64_t b = JobValue(key, value, ranks_now).get<uint64_t>();
        const uint64_t slack = key == "train.batch_size" ? 0 : std::max(ranks_then, ranks_now);
        if ((a > b ? a - b : b - a) <= slack) continue;
      }
    }
    if (key == "data" && old.contains("files") && value.contains("files")) {
      const auto &a = old["files"], &b = value["files"];
      bool differs = old.value("format", "") != value.value("format", "");
      for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        nlohmann::json then = i < a.size() ? a[i] : nlohmann::json(),
                       now = i < b.size() ? b[i] : nlohmann::json();
        // A checkpoint written before fingerprints were recorded is compared on path and size.
        if (then.is_object() && now.is_object() && !then.contains("fingerprint")) {
          now.erase("fingerprint");
        }
        if (then == now) continue;
        differs = true;
        if (then.is_object() && now.is_object() && then["path"] == now["path"] &&
            then["bytes"] == now["bytes"]) {
          return fmt::format(
              "the input differs from {}'s: {} has the same size but other content (fingerprint "
              "{} there, {} now): it was edited in place",
              name, now["path"].get<std::string>(), JsonText(then["fingerprint"]),
              JsonText(now["fingerprint"]));
        }
        return fmt::format("the input differs from {}'s: {} there, {} now", name,
                           then.is_null() ? "no file" : JsonText(then),
                           now.is_null() ? "no file" : JsonText(now));
      }
      if (!differs) continue;
    }
    // The key window is the budget less the group index and the Bloom filters' share: name
    // the keys that move it, and the group default that changed (docs/storage.md, pass sizing).
    const char* why = key == "pass sizing (storage.memory_budget)"
                          ? " (the key window follows storage.memory_budget, storage.group_bits "
                            "and storage.bloom_share; before 2026-12-03 storage.group_bits "
                            "defaulted to log2(memory_budget / 960), one more than now; its "
                            "passes and the pass memory's follow pipeline.queue_depth)"
                          : "";
    // Named as the user sets it: the job's value, not a rank's share.
    return fmt::format("{} was written with {} = {}, this job sets {}{}", name, key,
                       JsonText(JobValue(key, old, ranks_then)),
                       JsonText(JobValue(key, value, ranks_now)), why);
  }
  return "";
}

namespace {

// --resume: the newest checkpoint that loads. NotFound when ckpt.dir holds none yet.
Status Resume(Env* env, const JobConfig& job, const nlohmann::json& settings, PassReader* reader,
              ThreadPool* pool, TrainStart* start) {
  ASSIGN_OR_RETURN(ResumedState r,
                   ResumeNewestCheckpoint(
                       env, job.ckpt.dir,
                       [&](const ValueLayout& layout) -> StatusOr<std::unique_ptr<SparseTable>> {
                         TieredOptions o = job.StorageFor(layout);
                         o.reopen = false;  // the checkpoint is the state: start from empty files
                         ASSIGN_OR_RETURN(auto t, TieredTable::Open(env, o));
                         return std::unique_ptr<SparseTable>(std::move(t));
                       },
                       pool));
  const uint32_t ranks = static_cast<uint32_t>(std::max(job.dist.ranks, 1));
  const std::string why = ResumeMismatch(r.manifest, job.spec, settings, ranks, ranks);
  if (!why.empty()) return InvalidArgumentError("cannot resume: " + why);
  start->resumed = r.manifest;
  start->resume_warnings = std::move(r.warnings);
  start->model = std::move(r.model);
  start->table = std::move(r.table);
  start->position = r.manifest.position;
  LOG_INFO("resuming from {} in {}: {} passes, {} examples done", CheckpointName(r.manifest.id),
           job.ckpt.dir, start->position.passes, start->position.examples);
  // A plan's stream starts where the job stood when it was planned.
  const SegmentPlan from = job.segment_plan.value_or(SegmentPlan());
  if (start->position.passes < from.passes || start->position.examples < from.examples) {
    return CorruptionError(fmt::format(
        "{} in {}: its position ({} passes, {} examples) is before its input plan's start ({}, "
        "{})",
        CheckpointName(r.manifest.id), job.ckpt.dir, start->position.passes,
        start->position.examples, from.passes, from.examples));
  }
  if (reader == nullptr) return Status::OK();  // a stream job: its position is its partitions
  return reader->Skip(start->position.passes - from.passes,
                      start->position.examples - from.examples, job.dist.ranks > 1);
}

// The model in model_dir, continued with this job's hyperparameters.
Status ContinueModel(Env* env, const JobConfig& job, ThreadPool* pool, const KeyFilter& owned,
                     TrainStart* start) {
  ASSIGN_OR_RETURN(LoadedModel lm, OpenModel(env, job.model_dir, job.StorageFor({}), pool, owned));
  std::string diff = lm.manifest.spec.FirstIncompatibility(job.spec);
  if (!diff.empty()) {
    return InvalidArgumentError(fmt::format(
        "the model in {} cannot be continued by this job, which changes its shape: {}; use "
        "--fresh to start a new model there",
        job.model_dir, lm.manifest.spec.DescribeDifference(job.spec, diff)));
  }
  diff = lm.manifest.spec.FirstDifference(job.spec);
  if (!diff.empty()) {
    LOG_INFO("continuing with this job's {} ({}; other hyperparameters may differ too)", diff,
             lm.manifest.spec.DescribeDifference(job.spec, diff));
  }
  LOG_INFO("continuing training of the model in {} ({} keys, {} examples trained)", job.model_dir,
           lm.manifest.keys, lm.manifest.trained_examples);
  start->position.trained_examples = lm.manifest.trained_examples;
  start->model = std::move(lm.model);
  start->table = std::move(lm.table);
  return Status::OK();
}

// A model in model_dir is continued only when the job says so (--continue): a command run
// again must not quietly train an old model further.
Status RefuseUnaskedContinue(Env* env, const JobConfig& job) {
  StatusOr<ModelManifest> m = ReadManifest(env, job.model_dir);
  return FailedPreconditionError(fmt::format(
      "{} holds a trained model{}: pass --continue (train.continue: true) to train it further "
      "on this data, or --fresh to replace it with a new one (or give another --model-dir)",
      job.model_dir,
      m.ok() ? fmt::format(" ({} keys, {} examples trained)", m->keys, m->trained_examples)
             : std::string()));
}

Status NewModel(Env* env, const JobConfig& job, TrainStart* start) {
  start->model =
      std::make_unique<CtrModel>(job.spec.schema, job.spec.model, job.spec.sparse_optimizer,
                                 job.spec.dense_optimizer, job.train.seed);
  ASSIGN_OR_RETURN(start->table,
                   TieredTable::Open(env, job.StorageFor(start->model->value_layout())));
  return Status::OK();
}

// Without --resume or --fresh, checkpoints of an earlier job in ckpt.dir are refused.
Status CheckNoOldCheckpoints(Env* env, const JobConfig& job) {
  ASSIGN_OR_RETURN(auto ids, ListCheckpoints(env, job.ckpt.dir));
  if (ids.empty()) return Status::OK();
  return InvalidArgumentError(fmt::format(
      "{} holds checkpoints of an earlier job (newest {}): pass --resume to continue it, "
      "or --fresh to start a new job there (its old checkpoints are pruned after the "
      "first new one)",
      job.ckpt.dir, CheckpointName(ids.back())));
}

// Model files without a MANIFEST (lost, or a first save that did not finish) are refused
// rather than overwritten: the user says --fresh.
Status CheckNoOrphanModel(Env* env, const JobConfig& job) {
  ASSIGN_OR_RETURN(auto files, ModelFilesIn(env, job.model_dir));
  if (files.empty()) return Status::OK();
  return FailedPreconditionError(fmt::format(
      "{} holds model files ({}{}) but no MANIFEST: a model whose MANIFEST was lost, or a "
      "first save that did not finish; it cannot be continued. Pass --fresh to start a new "
      "model there (the old files are deleted when it is saved)",
      job.model_dir, files.front(), files.size() > 1 ? ", ..." : ""));
}

}  // namespace

StatusOr<TrainStart> StartTrain(Env* env, const JobConfig& job, PassReader* reader,
                                ThreadPool* pool, const KeyFilter& owned) {
  TrainStart start;
  nlohmann::json settings;
  bool started = false;
  if (!job.ckpt.dir.empty()) {
    ASSIGN_OR_RETURN(settings, ResultSettings(env, job));
    if (job.resume) {
      Status s = Resume(env, job, settings, reader, pool, &start);
      if (s.code() == StatusCode::kNotFound && !start.resumed) {
        LOG_INFO("no checkpoint in {} yet: starting the job", job.ckpt.dir);
      } else {
        RETURN_IF_ERROR(s);
        started = true;
      }
    } else if (!job.fresh) {
      RETURN_IF_ERROR(CheckNoOldCheckpoints(env, job));
    }
  }
  if (!started) {
    if (!job.model_dir.empty() && !job.fresh && ModelExists(env, job.model_dir)) {
      if (!job.train.continue_model) RETURN_IF_ERROR(RefuseUnaskedContinue(env, job));
      RETURN_IF_ERROR(ContinueModel(env, job, pool, owned, &start));
    } else {
      if (!job.model_dir.empty() && !job.fresh) RETURN_IF_ERROR(CheckNoOrphanModel(env, job));
      RETURN_IF_ERROR(NewModel(env, job, &start));
    }
  }

  LOG_INFO("model: {}", start.model->Describe());
  if (!job.storage.ssd.dir.empty() && job.storage.memory_budget > 0) {
    // The box the job runs in, against the budget (docs/storage.md, "The box's memory for the
    // cache"): the job's own memory came to 1.6-2.1x its budget in the runs measured there
    // (the passes' memory follows the budget), and the page cache wants some of the rest.
    const MemoryBox box = FindMemoryBox();
    const double share =
        box.limit ? static_cast<double>(job.storage.memory_budget) / static_cast<double>(box.limit)
                  : 0;
    LOG_INFO("memory box: {} ({}); storage.memory_budget {}: {:.3g} % of it",
             FormatBytes(box.limit), box.source, FormatBytes(job.storage.memory_budget),
             100 * share);
    if (share > 0.5) {
      LOG_WARNING(
          "storage.memory_budget is {:.0f} % of the memory box ({}): the job's own memory was "
          "about twice its budget where measured, so above ~50 % of the box it may be killed or "
          "leave the page cache too little (docs/storage.md, \"The box's memory for the cache\")",
          100 * share, box.source);
    }
  }
  if (const std::string w = blas::SlowCoreWarning(); !w.empty()) LOG_WARNING("{}", w);
  if (const std::string n = blas::CoreChoiceNote(); !n.empty()) LOG_INFO("{}", n);
  if (!job.ckpt.dir.empty()) {
    ASSIGN_OR_RETURN(start.ckpt, CheckpointWriter::Open(env, job.ckpt, job.spec, settings,
                                                        start.model->value_layout(),
                                                        start.resumed ? &*start.resumed : nullptr));
  }
  std::string metrics_path = job.train.metrics_path;
  if (metrics_path.empty() && !job.model_dir.empty() && !job.train.dry_run)
    metrics_path = JoinPath(job.model_dir, "metrics.jsonl");
  ASSIGN_OR_RETURN(start.metrics_log, MetricsLog::Open(env, metrics_path));
  if (start.resumed) {
    // Pass lines logged after this checkpoint by the run that stopped follow in the log; the
    // passes from here on are logged again.
    RETURN_IF_ERROR(start.metrics_log->Write({{"event", "resume"},
                                              {"checkpoint", CheckpointName(start.resumed->id)},
                                              {"passes", start.position.passes},
                                              {"examples", start.position.examples}}));
  }
  return start;
}

}  // namespace ctrbox
