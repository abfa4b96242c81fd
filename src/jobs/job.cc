#include "jobs/job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpu/trainer.h"
#include "jobs/data.h"
#include "model/ctr_model.h"
#include "table/cache_stripe.h"
#include "util/parse.h"

namespace ctrbox {

Status TrainOptions::Validate() const {
  if (threads < 1) return InvalidArgumentError("train.threads must be >= 1");
  if (batch_size < 1) return InvalidArgumentError("train.batch_size must be >= 1");
  if (epochs < 1) return InvalidArgumentError("train.epochs must be >= 1");
  if (validation_fraction > 0.5) {
    return InvalidArgumentError(
        fmt::format("train.validation_fraction {} holds back more than half of the training "
                    "rows: give a share from 0 to 0.5",
                    validation_fraction));
  }
  if (epochs_auto && ValidationFraction() <= 0) {
    return InvalidArgumentError(
        "train.epochs: auto stops on the validation logloss, but train.validation_fraction is "
        "0: give it a share of the training rows (0.1 when unset), or a number of epochs");
  }
  if (!epochs_auto && (max_epochs != 0 || patience != 0)) {
    return InvalidArgumentError(fmt::format(
        "{} applies to train.epochs: auto (it stops on the validation logloss); this job "
        "trains train.epochs {}: set train.epochs: auto, or leave {} out",
        max_epochs != 0 ? "train.max_epochs" : "train.early_stop_patience", epochs,
        max_epochs != 0 ? "train.max_epochs" : "train.early_stop_patience"));
  }
  return Status::OK();
}

nlohmann::json SegmentPlan::ToJson() const {
  nlohmann::json list = nlohmann::json::array();
  for (const DataSegment& s : segments) {
    list.push_back({{"path", s.path}, {"part", {s.part.index, s.part.count}}, {"skip", s.skip}});
  }
  return {{"from_ranks", from_ranks},
          {"passes", passes},
          {"examples", examples},
          {"segments", std::move(list)}};
}

StatusOr<SegmentPlan> SegmentPlan::FromJson(const nlohmann::json& j) {
  SegmentPlan p;
  try {
    p.from_ranks = j.at("from_ranks").get<uint32_t>();
    p.passes = j.at("passes").get<uint64_t>();
    p.examples = j.at("examples").get<uint64_t>();
    for (const nlohmann::json& s : j.at("segments")) {
      DataSegment d;
      d.path = s.at("path").get<std::string>();
      d.part.index = s.at("part").at(0).get<uint32_t>();
      d.part.count = s.at("part").at(1).get<uint32_t>();
      d.skip = s.at("skip").get<uint64_t>();
      if (d.part.count < 1 || d.part.index >= d.part.count) {
        return CorruptionError(
            fmt::format("stream plan: {} has part {} of {}", d.path, d.part.index, d.part.count));
      }
      p.segments.push_back(std::move(d));
    }
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(fmt::format("stream plan: {}", e.what()));
  }
  return p;
}

CtrModel::SumOrder SumOrderFor(const JobConfig& job, uint32_t ranks, uint32_t rank) {
  const uint32_t B = job.train.batch_size;
  if (!job.train.deterministic || !CanonicalDevice(job) || !CanonicalRanks(ranks, B * ranks)) {
    return {};
  }
  return {true, B * ranks, B * rank, CtrModel::kSumBlockRows, B};
}

TieredOptions JobConfig::StorageFor(const ValueLayout& layout) const {
  TieredOptions o = storage;
  o.layout = layout;
  if (pipeline.queue_depth == 0 && !settings_given.contains("storage.lfu_half_life")) {
    o.lfu_half_life = kLfuHalfLifeWithoutQueues;
  }
  return o;
}

PassReaderOptions JobConfig::PassOptions(uint32_t ranks) const {
  PassReaderOptions o;
  o.pass_examples = pipeline.pass_examples;
  o.epochs = segment_plan ? 1 : train.epochs;  // a plan's segments hold the epochs left
  // A rank's share of every global minibatch: kept from the files it reads whole, or
  // generated so (each epoch's shares start anew).
  if (file_share) {
    o.share = *file_share;
  } else if (IsGenerated(data) && !generated.share.whole()) {
    o.share = generated.share;
    o.shared_epoch_rows = generated.rows;
  }
  o.hashing = spec.model.hashing;
  o.key_tables = spec.model.KeyTableMap();
  const TieredOptions table = StorageFor(CtrModel::LayoutFor(spec.model, spec.sparse_optimizer));
  const uint64_t row_budget = table.RowBudgetBytes();
  if (gpu_options.staged_memory > 0 && pipeline.size_by_memory) {
    // The staged passes share the GPU memory (ResolveGpuStagedMemory sets the default with
    // device: gpu). Set explicitly, it cuts a CPU run's passes alike, so that a job can move
    // between the GPU and the CPU by resume.
    o.device_pass_bytes = gpu_options.staged_memory / (pipeline.queue_depth + 2);
    // With canonical sums a GPU's buffers hold a record per node of its cut: the rank whose
    // GPUs take the most nodes (the ranks cut the same passes; a CPU run with the same gpu.*
    // settings counts them alike, so that its passes are the GPU run's).
    GpuSumNodes nodes;
    for (uint32_t r = 0; r < ranks; ++r) {
      const GpuSumNodes n = MostSumNodes(SumOrderFor(*this, ranks, r), gpu_options.gpus);
      nodes = {n.canonical, std::max(nodes.gpu, n.gpu), std::max(nodes.rank, n.rank)};
    }
    o.device_bytes = [layout = table.layout, gpus = gpu_options.gpus, nodes](const PassShape& s) {
      return GpuPassBytesBound({s.rows, s.content_bytes + sizeof(uint32_t), s.key_uses, s.keys,
                                s.batches, s.batch_keys, s.max_batch_keys},
                               layout, gpus, nodes);
    };
    o.batch_size = train.batch_size;
    o.row_bytes = RowBlock::BytesPerRow(table.layout);
    o.window_passes = 2 * pipeline.queue_depth + 3;
  }
  if (!pipeline.size_by_memory || row_budget == 0) return o;
  const uint64_t row_bytes = table.ResidentRowBytes();
  o.window_passes = 2 * pipeline.queue_depth + 3;
  o.window_keys = std::max<uint64_t>(
      1, static_cast<uint64_t>(kPinnedShare * static_cast<double>(row_budget)) / row_bytes);
  o.batch_size = train.batch_size;
  o.max_keys = row_budget / row_bytes;
  if (table.layout.multi()) {
    // model.slot_dims: each key weighs its own table's resident row (max_keys and window_keys
    // above stay the widest row's bound, for the report and the error's hint).
    for (uint32_t t = 0; t < table.layout.tables; ++t) {
      TieredOptions one = table;
      one.layout = table.layout.Table(t);
      o.table_row_bytes.push_back(one.ResidentRowBytes());
    }
    o.window_bytes = static_cast<uint64_t>(kPinnedShare * static_cast<double>(row_budget));
    o.max_bytes = row_budget;
  }
  o.pass_memory = pipeline.pass_memory > 0
                      ? pipeline.pass_memory
                      : std::max(PipelineOptions::kMinPassMemory, storage.memory_budget / 4);
  o.memory_passes = 3 * pipeline.queue_depth + 4;
  o.row_bytes = RowBlock::BytesPerRow(table.layout);
  const uint64_t index_bytes = (uint64_t{1} << table.ssd.group_bits) * sizeof(GroupEntry) +
                               (uint64_t{1} << table.stripe_bits) * CacheStripe::MinIndexBytes();
  o.key_limit_hint = [index_bytes, row_bytes, share = table.bloom_share,
                      batch = train.batch_size](uint64_t keys) {
    // The Bloom filters' share comes on top: need = fixed + share x need.
    const auto need = static_cast<uint64_t>(
        std::ceil(static_cast<double>(index_bytes + keys * row_bytes) / (1.0 - share)));
    return fmt::format(
        "storage.memory_budget must be at least {} ({} bytes) for this data at "
        "train.batch_size={} (one minibatch's rows at {} bytes each, the SSD group index and "
        "the Bloom filters' storage.bloom_share; more makes larger passes), or lower "
        "train.batch_size",
        FormatBytes(need), need, batch, row_bytes);
  };
  return o;
}

std::string_view LateRuleName(LateRule r) {
  switch (r) {
    case LateRule::kSkip:
      return "skip";
    case LateRule::kFail:
      return "fail";
    case LateRule::kWait:
      return "wait";
  }
  return "?";
}

bool ParseLateRule(std::string_view name, LateRule* out) {
  for (LateRule r : {LateRule::kSkip, LateRule::kFail, LateRule::kWait}) {
    if (name == LateRuleName(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

namespace {

// The stream and serving keys against the rest of the job.
Status ValidateStream(const JobConfig& job) {
  if (!job.stream.enabled()) {
    if (!job.serving.dir.empty()) {
      return InvalidArgumentError(
          "serving.dir publishes the versions of a stream job: set stream.root too "
          "(docs/routine.md)");
    }
    if (job.stream.admit_min_count > 1) {
      return InvalidArgumentError(
          "table.admit.min_count is for stream jobs (its counts are committed with each "
          "partition): set stream.root");
    }
    if (job.stream.ttl_partitions > 0) {
      return InvalidArgumentError(
          "table.ttl_partitions counts a stream job's partitions: set stream.root, or use "
          "table.delete_after_unseen_passes");
    }
    return Status::OK();
  }
  if (!job.data.command.empty()) {
    return InvalidArgumentError(
        "stream.root is the job's data: leave data.paths and data.command (and --data) unset");
  }
  if (job.ckpt.dir.empty()) {
    return InvalidArgumentError(
        "stream.root needs ckpt.dir: a partition is trained once because its commit is a "
        "checkpoint (docs/routine.md)");
  }
  if (job.train.epochs != 1 || job.train.epochs_auto) {
    return InvalidArgumentError("train.epochs must be 1 for a stream job (each partition once)");
  }
  if (job.train.validating()) {
    return InvalidArgumentError(
        "train.validation_fraction is for a job of files: a stream job's partitions are each "
        "tested before they are trained (its online metrics)");
  }
  if (job.train.shrink_every_passes != 0) {
    return InvalidArgumentError(
        "table.shrink_every_passes counts passes of a job of files; a stream job shrinks after "
        "partitions: table.ttl_partitions");
  }
  if (job.stream.poll_seconds <= 0) return InvalidArgumentError("stream.poll_seconds must be > 0");
  if (const std::string& d = job.stream.done_file;
      d.empty() || d == "." || d == ".." || d.find('/') != std::string::npos) {
    return InvalidArgumentError(fmt::format(
        "stream.done_file '{}' must be a file name in each partition's directory (e.g. "
        "_SUCCESS), written last by the partition's writer: {}",
        d,
        d.empty() ? "with none, a partition would count as ready while its files are written"
                  : "a path outside the partition's directory would never mark it ready"));
  }
  const ServingOptions& s = job.serving;
  if (s.delta_every == 0 || s.base_every == 0 || s.keep_bases == 0) {
    return InvalidArgumentError(
        "serving.delta_every, serving.base_every and serving.keep_bases must be >= 1");
  }
  if (s.quant_bits != 0 && s.quant_bits != 8 && s.quant_bits != 16) {
    return InvalidArgumentError(
        fmt::format("serving.quant.bits must be 0, 8 or 16, not {}", s.quant_bits));
  }
  return Status::OK();
}

}  // namespace

namespace {

// Per-epoch validation reads the training data again after every epoch.
Status ValidateValidation(const JobConfig& job) {
  const char* why = nullptr;
  if (std::find(job.data.paths.begin(), job.data.paths.end(), "-") != job.data.paths.end()) {
    why = "standard input cannot be read again after each epoch";
  } else if (job.dist.ranks > 1) {
    why = "it is not built for ranks yet (one process validates; docs/model.md)";
  } else if (job.train.dry_run) {
    why = "train.dry_run trains nothing to validate";
  }
  if (why == nullptr) return Status::OK();
  return InvalidArgumentError(
      fmt::format("train.validation_fraction{}: {}",
                  job.train.epochs_auto ? " (train.epochs: auto validates per epoch)" : "", why));
}

}  // namespace

Status JobConfig::Validate() const {
  RETURN_IF_ERROR(ValidateStream(*this));
  // The layouts criteo, libsvm and libfm fix (but libsvm's and libfm's slots under
  // data.slot_from: position), and libffm fixes num_dense (io/text_format.h): a value set for
  // them would be ignored.
  const bool idx_val = data.format == DataFormat::kLibsvm || data.format == DataFormat::kLibfm;
  const bool fixed_slots =
      data.format == DataFormat::kCriteo || (idx_val && data.slot_from != SlotFrom::kPosition);
  const bool fixed_dense =
      data.format == DataFormat::kCriteo || idx_val || data.format == DataFormat::kLibffm;
  if ((fixed_slots && data.num_slots != 0) || (fixed_dense && data.num_dense != 0)) {
    return InvalidArgumentError(fmt::format(
        "data.{} does not apply to format {} (its layout is fixed; it is for {})",
        fixed_slots && data.num_slots != 0 ? "num_slots" : "num_dense", DataFormatName(data.format),
        fixed_slots && data.num_slots != 0
            ? "libffm and slots, and libsvm or libfm with data.slot_from: position"
            : "slots"));
  }
  if (data.slot_from != SlotFrom::kOne && !idx_val) {
    return InvalidArgumentError(fmt::format(
        "data.slot_from applies to the libsvm and libfm formats (label idx:val), not {}",
        DataFormatName(data.format)));
  }
  RETURN_IF_ERROR(train.Validate());
  RETURN_IF_ERROR(pipeline.Validate());
  if (train.continue_model && fresh) {
    return InvalidArgumentError(
        "train.continue (--continue) and --fresh: continue the model in model_dir, or replace "
        "it, not both");
  }
  if (train.validating()) RETURN_IF_ERROR(ValidateValidation(*this));
  if (spec.model.quant.bits == 1 || spec.model.quant.bits > 16) {
    return InvalidArgumentError("storage.quant.bits must be 0 (float32) or 2..16");
  }
  if (const OptimizerOptions& s = spec.sparse_optimizer; s.state_bits != 0) {
    if (s.state_bits != 16) {
      return InvalidArgumentError(
          fmt::format("optimizer.sparse.state_bits must be 0 or 16, not {}", s.state_bits));
    }
    if (s.kind != OptimizerKind::kAdagrad && s.kind != OptimizerKind::kRowwiseAdagrad) {
      return InvalidArgumentError(fmt::format(
          "optimizer.sparse.state_bits: 16 is for adagrad and rowwise_adagrad (a sum of "
          "squares), not {}",
          OptimizerKindName(s.kind)));
    }
  }
  if (const HashingOptions& h = spec.model.hashing; h.enabled() != (h.bins > 0)) {
    return InvalidArgumentError(
        h.enabled() ? fmt::format("features.hashing.method={} needs features.hashing.bins (K)",
                                  HashingMethodName(h.method))
                    : "features.hashing.bins is set but features.hashing.method is none (it "
                      "would be ignored)");
  }
  if (const auto& b = spec.model.bottom_mlp; !b.empty() && b.back() != spec.model.embedding_dim) {
    return InvalidArgumentError(fmt::format(
        "model.bottom_mlp must end at model.embedding_dim ({}), not {}: its output z joins the "
        "embeddings' dot products",
        spec.model.embedding_dim, b.back()));
  }
  if (std::string e = TowersError(spec.model, kUnknownDense); !e.empty())
    return InvalidArgumentError(e);
  if (std::string e = spec.model.SlotDimsError(0); !e.empty()) return InvalidArgumentError(e);
  if (spec.model.cross_experts > 0 &&
      (spec.model.cross_layers == 0 || spec.model.cross_rank == 0)) {
    return InvalidArgumentError(
        "model.cross_experts needs model.cross_layers and model.cross_rank (each expert is of "
        "rank model.cross_rank)");
  }
  if (spec.model.cross_rank > 0 && spec.model.cross_layers == 0) {
    return InvalidArgumentError(
        "model.cross_rank is set but model.cross_layers is 0 (it would be ignored)");
  }
  if (spec.dense_optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
    return InvalidArgumentError(
        "optimizer.dense.type: rowwise_adagrad is for sparse rows; use adagrad for the MLP");
  }
  if (resume && ckpt.dir.empty()) {
    return InvalidArgumentError("--resume needs ckpt.dir (--set ckpt.dir=DIR)");
  }
  if (train.dry_run && (!ckpt.dir.empty() || resume)) {
    return InvalidArgumentError(
        "train.dry_run trains nothing and commits nothing: it takes no ckpt.dir or --resume");
  }
  if (gpu && train.deterministic && gpu_options.scatter == ScatterMode::kAtomic) {
    return InvalidArgumentError(
        "train.deterministic=true needs gpu.scatter=segment (atomic sums have no fixed order)");
  }
  return Status::OK();
}

}  // namespace ctrbox
