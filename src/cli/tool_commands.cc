// convert, extract, inspect and report: tools over data files, model directories, stores,
// checkpoints and serving directories, which read them directly (gen: gen_commands.cc).
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/model_dir.h"
#include "ckpt/serving_files.h"
#include "cli/commands.h"
#include "cli/html_report.h"
#include "io/reader.h"
#include "io/shard.h"
#include "io/shard_dir.h"
#include "jobs/data.h"
#include "jobs/train_report.h"
#include "pipeline/pass_record.h"
#include "table/ssd_store.h"
#include "util/cleanup.h"
#include "util/dir_lock.h"
#include "util/disk_probe.h"
#include "util/json_text.h"
#include "util/logging.h"
#include "util/parse.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

// Bytes of one stored embedding (codes when quantized, else float32): of model.embedding_dim,
// or with model.slot_dims one per table ([{"dim", "embedding_bytes"}...]).
nlohmann::json QuantizedEmbeddingBytes(const ModelOptions& m) {
  if (!m.MultiTable()) return uint64_t{StoredElementBytes(m.quant.bits)} * m.embedding_dim;
  nlohmann::json tables = nlohmann::json::array();
  for (uint32_t dim : m.TableDims()) {
    tables.push_back(
        {{"dim", dim}, {"embedding_bytes", uint64_t{StoredElementBytes(m.quant.bits)} * dim}});
  }
  return tables;
}

// The dimension of each table of a multi-table layout (model.slot_dims), or [dim].
std::vector<uint32_t> TableDims(const ValueLayout& l) {
  if (!l.multi()) return {l.dim};
  return std::vector<uint32_t>(l.table_dim, l.table_dim + l.tables);
}

// What `inspect --store` prints.
nlohmann::json StoreJson(const std::string& dir, const StoreSummary& s) {
  const ValueLayout& layout = s.layout;
  return {{"command", "inspect"},
          {"store_dir", dir},
          {"tiers", {{"memory_keys", 0}, {"disk_keys", s.keys}}},
          {"keys", s.keys},
          {"keys_with_embedding", s.keys_with_embedding},
          {"bytes_live", s.bytes_live},
          {"files", s.files},
          {"file_bytes", s.file_bytes},
          {"live_record_bytes", s.live_record_bytes},
          {"stale_fraction", s.file_bytes ? 1.0 - static_cast<double>(s.live_record_bytes) /
                                                      static_cast<double>(s.file_bytes)
                                          : 0.0},
          {"records", s.records},
          {"groups", s.groups},
          {"groups_with_delta", s.groups_with_delta},
          {"index_bytes", s.index_bytes},
          {"bloom_bytes", s.bloom_bytes},
          {"index_bytes_per_key",
           s.keys ? static_cast<double>(s.index_bytes + s.bloom_bytes) / static_cast<double>(s.keys)
                  : 0.0},
          {"layout",
           {{"dim", layout.dim},
            {"emb_state", layout.emb_state},
            {"wide_state", layout.wide_state},
            {"quant_bits", layout.quant_bits},
            {"state_bits", layout.state_bits},
            {"quant_range", layout.quant_range},
            {"table_dims", TableDims(layout)}}},
          {"value_bytes_per_key",
           s.keys ? static_cast<double>(s.bytes_live) / static_cast<double>(s.keys) : 0.0}};
}

}  // namespace

void PrintJson(const nlohmann::json& j) { std::cout << JsonText(j) << std::endl; }

namespace {

// inspect --serving-dir: every listed version verified, and each one's chain loadable.
Status InspectServing(const std::string& dir) {
  Env* env = Env::Posix();
  ASSIGN_OR_RETURN(std::vector<ServingVersion> versions, ReadServingVersions(env, dir));
  if (versions.empty()) {
    return NotFoundError(fmt::format("{}: no published version ({} is missing or empty)", dir,
                                     JoinPath(dir, kServingDonefile)));
  }
  nlohmann::json list = nlohmann::json::array();
  uint64_t bytes = 0, failed = 0;
  for (const ServingVersion& v : versions) {
    nlohmann::json e = v.ToJson();
    const Status s = VerifyServingVersion(env, dir, v);
    e["verified"] = s.ok();
    if (!s.ok()) {
      e["error"] = s.ToString();
      ++failed;
    }
    bytes += v.bytes;
    list.push_back(std::move(e));
  }
  // The newest version as serving would load it: its base, then its deltas.
  Stopwatch clock;
  StatusOr<ServingState> newest = LoadServingState(env, dir, versions.back().version);
  nlohmann::json report = {{"command", "inspect"},
                           {"serving_dir", dir},
                           {"versions", list},
                           {"bytes", bytes},
                           {"newest", versions.back().version},
                           {"newest_loads", newest.ok()}};
  if (newest.ok()) {
    report["newest_keys"] = newest->rows.size();
    report["newest_load_seconds"] = clock.Seconds();
  } else {
    report["newest_error"] = newest.status().ToString();
  }
  PrintJson(report);
  if (failed > 0 || !newest.ok()) {
    return DataLossError(fmt::format("{}: {} of {} versions do not verify{}", dir, failed,
                                     versions.size(),
                                     newest.ok() ? "" : "; the newest does not load"));
  }
  return Status::OK();
}

}  // namespace

namespace {

// Cancelled once Ctrl-C or SIGTERM asked the command to stop.
Status CheckStop(const std::atomic<bool>* stop) {
  if (stop != nullptr && stop->load()) return CancelledError("interrupted");
  return Status::OK();
}

// A convert or extract that was stopped: said, with what became of its output.
Status Stopped(const Status& s, const std::string& out) {
  if (s.code() != StatusCode::kCancelled) return s;
  LOG_WARNING(
      "interrupted: stopped before the end of the input; nothing is written to {} (the "
      "part written so far is removed)",
      out);
  return CancelledError("interrupted");
}

// Writes the shards of `reader` into `out` (already cleared) and their manifest last.
Status WriteConversion(Env* env, BatchReader* reader, const ConvertArgs& args,
                       const ShardWriterOptions& wo, ShardDirManifest* manifest,
                       uint64_t* bytes_out) {
  manifest->schema = reader->schema();
  std::unique_ptr<ShardWriter> writer;
  std::string tmp, final_path;
  auto finish_file = [&]() -> Status {
    if (!writer) return Status::OK();
    RETURN_IF_ERROR(writer->Finish());  // syncs the file
    manifest->files.push_back({BaseName(final_path), writer->rows(), writer->bytes_written()});
    *bytes_out += writer->bytes_written();
    writer.reset();
    return env->RenameFile(tmp, final_path);
  };
  Batch batch, slice;
  while (true) {
    bool eof = false;
    RETURN_IF_ERROR(reader->Next(&batch, &eof));
    RETURN_IF_ERROR(CheckStop(args.stop));
    if (eof) break;
    for (size_t begin = 0; begin < batch.rows();) {
      if (!writer) {
        final_path =
            JoinPath(args.out, fmt::format("part-{:05d}.ctrshard", manifest->files.size()));
        tmp = final_path + ".tmp";
        ASSIGN_OR_RETURN(writer, ShardWriter::Open(env, tmp, reader->schema(), wo));
      }
      const size_t take =
          std::min<uint64_t>(batch.rows() - begin, args.rows_per_file - writer->rows());
      slice.Reset(batch.schema);
      slice.AppendRows(batch, begin, begin + take);
      RETURN_IF_ERROR(writer->Add(slice));
      begin += take;
      if (writer->rows() >= args.rows_per_file) RETURN_IF_ERROR(finish_file());
    }
  }
  RETURN_IF_ERROR(finish_file());
  if (manifest->files.empty()) return Status::OK();  // the caller says why
  // The shard files and their renames are durable before the manifest names them.
  RETURN_IF_ERROR(env->SyncDir(args.out));
  return WriteShardManifest(env, args.out, *manifest);
}

}  // namespace

namespace {

StatusOr<nlohmann::json> Convert(const JobConfig& job, const ConvertArgs& args);

constexpr char kSecondStop[] =
    "\nctrbox: second interrupt: stopped at once; the output may hold part files (*.tmp) and "
    "no manifest, which no reader takes as a result (exit status 3)\n";

// The rows of job.data as text (ConvertArgs::text_out).
StatusOr<nlohmann::json> WriteText(const JobConfig& job, const std::string& path) {
  Env* env = Env::Posix();
  Stopwatch clock;
  ASSIGN_OR_RETURN(auto reader, OpenReader(env, job.data));
  const std::string tmp = path + ".tmp";
  ASSIGN_OR_RETURN(auto file, env->NewWritableFile(tmp));
  Cleanup remove_tmp([&] {
    file.reset();
    env->DeleteFile(tmp).IgnoreError();
  });
  const Schema schema = reader->schema();
  uint64_t rows = 0, bytes = 0;
  std::string text;
  while (true) {
    Batch b;
    bool eof = false;
    RETURN_IF_ERROR(reader->Next(&b, &eof));
    RETURN_IF_ERROR(CheckStop(job.data.cancel));
    if (eof) break;
    text.clear();
    for (size_t r = 0; r < b.rows(); ++r) {
      fmt::format_to(std::back_inserter(text), "{}", b.labels[r]);
      for (uint32_t j = 0; j < schema.num_dense; ++j) {
        fmt::format_to(std::back_inserter(text), "\t{}", b.dense[r * schema.num_dense + j]);
      }
      for (uint32_t s = 0; s < schema.num_slots; ++s) {
        text += '\t';
        const size_t at = r * schema.num_slots + s;
        for (uint32_t k = b.offsets[at]; k < b.offsets[at + 1]; ++k) {
          fmt::format_to(std::back_inserter(text), "{}{}", k > b.offsets[at] ? " " : "", b.keys[k]);
        }
      }
      text += '\n';
    }
    rows += b.rows();
    bytes += text.size();
    RETURN_IF_ERROR(file->Append(text));
  }
  const RecordCounts c = reader->counts();
  if (rows == 0) {  // an empty file would pass for a result
    return FailedPreconditionError(fmt::format("no rows in the input ({}): {} is not written",
                                               NoExamplesReason(job, c.bad_total()), path));
  }
  RETURN_IF_ERROR(file->Close());
  RETURN_IF_ERROR(env->RenameFile(tmp, path));
  remove_tmp.Cancel();
  return nlohmann::json({{"rows", rows},
                         {"out", path},
                         {"bytes_out", bytes},
                         {"seconds", clock.Seconds()},
                         {"records_malformed", c.bad_total()},
                         {"num_slots", schema.num_slots},
                         {"num_dense", schema.num_dense}});
}

}  // namespace

Status RunConvertCommand(const JobConfig& job, const ConvertArgs& args) {
  if (job.features != nullptr) {
    return InvalidArgumentError(
        "the job has a feature graph: use `ctrbox extract` to write its "
        "extracted rows as shards");
  }
  JobConfig stoppable = job;
  ConvertArgs a = args;
  a.stop = stoppable.data.cancel = StopOnSignals(kSecondStop);
  StatusOr<nlohmann::json> report = Convert(stoppable, a);
  if (!report.ok()) return Stopped(report.status(), args.out);
  PrintJson(*report);
  return Status::OK();
}

Status RunExtractCommand(const JobConfig& job_in, const ConvertArgs& args, bool explain) {
  if (job_in.features == nullptr) {
    return InvalidArgumentError(
        "extract needs a job (-c) with a feature graph (features.main, "
        "views, ops, label, slots: docs/features.md)");
  }
  if (args.out.empty() == args.text_out.empty()) {
    return InvalidArgumentError("extract needs --out DIR (shards) or --text FILE, one of them");
  }
  RETURN_IF_ERROR(job_in.Validate());
  JobConfig job = job_in;
  ConvertArgs a = args;
  a.stop = job.data.cancel = StopOnSignals(kSecondStop);
  job.data.key_slots = job.spec.model.KeySlotMap();  // model.shared_slots, as train keys them
  if (explain) std::cerr << job.features->Describe();
  Stopwatch clock;
  RETURN_IF_ERROR(AttachFeatures(Env::Posix(), &job));
  const double open_seconds = clock.Seconds();
  StatusOr<nlohmann::json> written =
      !args.text_out.empty() ? WriteText(job, args.text_out) : Convert(job, a);
  if (!written.ok()) {
    return Stopped(written.status(), !args.text_out.empty() ? args.text_out : args.out);
  }
  nlohmann::json report = std::move(*written);
  report["command"] = "extract";
  report["extract"] = ExtractJson(job.extractor->totals());
  report["open_seconds"] = open_seconds;
  PrintJson(report);
  return Status::OK();
}

namespace {

StatusOr<nlohmann::json> Convert(const JobConfig& job, const ConvertArgs& args) {
  if (args.out.empty()) return InvalidArgumentError("convert needs --out DIR");
  if (job.data.paths.empty() && job.data.command.empty()) {
    return InvalidArgumentError("convert needs --data (or data.command)");
  }
  if (args.rows_per_file == 0) return InvalidArgumentError("convert --rows-per-file must be >= 1");
  ShardWriterOptions wo;
  if (!ParseShardCodec(args.codec, &wo.codec)) {
    return InvalidArgumentError(fmt::format("--codec {}: expected zstd, lz4 or none", args.codec));
  }
  wo.block_rows = args.block_rows;
  Env* env = Env::Posix();
  Stopwatch clock;
  // Shards hold keys as this conversion makes them: with model.shared_slots, keyed as a model
  // with those groups trains (docs/model.md).
  DataOptions data = job.data;
  if (data.key_slots.empty()) data.key_slots = job.spec.model.KeySlotMap();
  ASSIGN_OR_RETURN(auto reader, OpenReader(env, data));
  const bool created_dir = !env->FileExists(args.out);
  // One conversion into a directory at a time; a created directory goes with a failure.
  ASSIGN_OR_RETURN(std::unique_ptr<DirLock> lock, DirLock::Acquire(env, args.out, "convert --out"));
  ASSIGN_OR_RETURN(const size_t replaced, ClearShardDir(env, args.out));
  if (replaced > 0) {
    LOG_INFO("{}: replacing an earlier conversion ({} files)", args.out, replaced);
  }
  ShardDirManifest manifest;
  uint64_t bytes_out = 0;
  Status s = WriteConversion(env, reader.get(), args, wo, &manifest, &bytes_out);
  if (s.ok() && manifest.files.empty()) {  // an empty shard directory would pass for a result
    s = FailedPreconditionError(fmt::format("no rows in the input ({}): nothing is written to {}",
                                            NoExamplesReason(job, reader->counts().bad_total()),
                                            args.out));
  }
  if (!s.ok()) {
    // Nothing of a failed conversion is usable without its manifest: give the space back.
    RemoveFailedConversion(env, args.out, created_dir);
    return s;
  }
  const RecordCounts c = reader->counts();
  return nlohmann::json({{"command", "convert"},
                         {"rows", manifest.rows()},
                         {"files", manifest.files.size()},
                         {"out", args.out},
                         {"bytes_out", bytes_out},
                         {"codec", args.codec},
                         {"seconds", clock.Seconds()},
                         {"records_malformed", c.bad_total()},
                         {"num_slots", reader->schema().num_slots},
                         {"num_dense", reader->schema().num_dense}});
}

}  // namespace

Status RunInspectCommand(const std::string& model_dir, const std::string& store_dir,
                         const std::string& ckpt_dir, const std::string& serving_dir) {
  if (!serving_dir.empty()) return InspectServing(serving_dir);
  if (!ckpt_dir.empty()) {
    ASSIGN_OR_RETURN(nlohmann::json report, InspectCheckpoints(Env::Posix(), ckpt_dir));
    PrintJson(report);
    return Status::OK();
  }
  if (!store_dir.empty()) {
    ASSIGN_OR_RETURN(StoreSummary summary, SsdStore::Inspect(Env::Posix(), store_dir));
    nlohmann::json report = StoreJson(store_dir, summary);
    // The disk under the store's files: what a job reading them can get at most.
    ASSIGN_OR_RETURN(const DiskCeiling ceiling, ProbeDiskDir(Env::Posix(), store_dir, 0.5));
    report["disk_ceiling"] = DiskCeilingJson(ceiling);
    PrintJson(report);
    return Status::OK();
  }
  if (model_dir.empty())
    return InvalidArgumentError("inspect needs --model-dir DIR, --store DIR or --ckpt-dir DIR");
  Stopwatch clock;
  ASSIGN_OR_RETURN(ModelManifest m, VerifyModel(Env::Posix(), model_dir));
  uint64_t on_disk = 0;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) {
    on_disk += f.bytes;
    files.push_back({{"name", f.name}, {"bytes", f.bytes}});
  }
  nlohmann::json report = {
      {"command", "inspect"},
      {"model_dir", model_dir},
      {"keys", m.keys},
      {"keys_with_embedding", m.keys_with_embedding},
      {"bytes_live", m.bytes_live},
      {"value_bytes_per_key", m.keys ? double(m.bytes_live) / m.keys : 0.0},
      {"embedding_bytes", QuantizedEmbeddingBytes(m.spec.model)},
      {"dense_params", m.dense_params},
      {"digest", m.digest},
      {"generation", m.generation},
      {"trained_examples", m.trained_examples},
      {"bytes_on_disk", on_disk},
      {"files", files},
      {"spec", m.spec.ToJson()},
      {"verified", true},
      {"seconds", clock.Seconds()},
  };
  PrintJson(report);
  return Status::OK();
}

Status RunReportCommand(const std::string& model_dir, const std::string& metrics_path,
                        const std::string& out) {
  Env* env = Env::Posix();
  const std::string metrics = !metrics_path.empty() ? metrics_path : model_dir + "/metrics.jsonl";
  if (!env->FileExists(metrics)) {
    return NotFoundError(fmt::format(
        "report: no metrics log {} (train writes it to <model-dir>/metrics.jsonl, or to "
        "train.metrics_path)",
        metrics));
  }
  std::string manifest;
  if (!model_dir.empty() && ModelExists(env, model_dir)) {
    ASSIGN_OR_RETURN(ModelManifest m, ReadManifest(env, model_dir));
    manifest = JsonText(m.ToJson());
  }
  ASSIGN_OR_RETURN(std::string html, RenderReport(metrics, manifest));
  const std::string path = !out.empty() ? out : model_dir + "/report.html";
  RETURN_IF_ERROR(WriteFileAtomic(env, path, html));
  LOG_INFO("wrote {} ({})", path, FormatBytes(html.size()));
  PrintJson({{"command", "report"}, {"out", path}, {"metrics", metrics}, {"bytes", html.size()}});
  return Status::OK();
}

}  // namespace ctrbox
