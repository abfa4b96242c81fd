#include "io/reader.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "io/compressed_file.h"
#include "io/line_chunker.h"
#include "io/shard.h"
#include "io/shard_dir.h"
#include "io/synth.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

// Reads several files one after another through a per-file ChunkSource.
class FileSequenceSource final : public ChunkSource {
 public:
  using Opener = std::function<StatusOr<std::unique_ptr<ChunkSource>>(const std::string& path)>;
  FileSequenceSource(std::vector<std::string> files, Opener open)
      : files_(std::move(files)), open_(std::move(open)) {}

  Status Next(TextChunk* chunk, bool* eof) override {
    while (true) {
      if (!current_) {
        if (next_file_ == files_.size()) {
          *eof = true;
          return Status::OK();
        }
        ASSIGN_OR_RETURN(current_, open_(files_[next_file_++]));
      }
      bool file_eof = false;
      RETURN_IF_ERROR(current_->Next(chunk, &file_eof));
      if (!file_eof) {
        *eof = false;
        return Status::OK();
      }
      current_.reset();
    }
  }

 private:
  std::vector<std::string> files_;
  Opener open_;
  size_t next_file_ = 0;
  std::unique_ptr<ChunkSource> current_;
};

// Synthetic rows: a chunk names a row range (first_line = first row, offset = row count);
// the workers generate the rows.
class SynthSource final : public ChunkSource {
 public:
  SynthSource(uint64_t rows, uint64_t block_rows) : rows_(rows), block_rows_(block_rows) {}
  Status Next(TextChunk* chunk, bool* eof) override {
    *eof = next_ >= rows_;
    if (*eof) return Status::OK();
    chunk->file = "<generated>";
    chunk->first_line = next_;
    chunk->offset = std::min(block_rows_, rows_ - next_);
    next_ += chunk->offset;
    return Status::OK();
  }

 private:
  uint64_t rows_, block_rows_, next_ = 0;
};

using DecodeFn = std::function<void(const TextChunk&, ChunkParseResult*)>;

// Workers pull chunks from the source (one at a time, under a lock), decode them in parallel
// and deposit the results by sequence number; Next() hands them out in order.
class ParallelChunkReader final : public BatchReader {
 public:
  ParallelChunkReader(Schema schema, std::unique_ptr<ChunkSource> source, DecodeFn decode,
                      const DataOptions& options)
      : schema_(schema),
        source_(std::move(source)),
        decode_(std::move(decode)),
        max_inflight_(std::max(options.max_inflight, options.threads)),
        tracker_(options.bad_input) {
    for (int t = 0; t < std::max(1, options.threads); ++t)
      workers_.emplace_back([this] { Work(); });
  }
  ~ParallelChunkReader() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  Schema schema() const override { return schema_; }
  RecordCounts counts() const override { return tracker_.counts(); }

  Status Next(Batch* batch, bool* eof) override {
    *eof = false;
    if (!final_status_.ok()) return final_status_;
    while (true) {
      ChunkParseResult r;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return results_.count(next_out_) || source_done_at_ == next_out_; });
        auto it = results_.find(next_out_);
        if (it == results_.end()) {
          // No more chunks: the source ended (or failed) at next_out_.
          if (!source_status_.ok()) return final_status_ = source_status_;
          Status s = tracker_.Finish();
          if (!s.ok()) return final_status_ = s;
          *eof = true;
          return Status::OK();
        }
        r = std::move(it->second);
        results_.erase(it);
        ++next_out_;
      }
      cv_.notify_all();
      if (!r.status.ok()) return final_status_ = r.status;
      Status s = tracker_.Add(r.counts, r.samples);
      if (!s.ok()) return final_status_ = s;
      if (r.batch.rows() > 0) {
        *batch = std::move(r.batch);
        return Status::OK();
      }
    }
  }

 private:
  static constexpr uint64_t kNotDone = ~uint64_t{0};

  void Work() {
    TextChunk chunk;
    while (true) {
      uint64_t seq;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] {
          return stop_ || source_done_at_ != kNotDone ||
                 next_seq_ - next_out_ < static_cast<uint64_t>(max_inflight_);
        });
        if (stop_ || source_done_at_ != kNotDone) return;
        bool eof = false;
        Status s = source_->Next(&chunk, &eof);
        if (!s.ok() || eof) {
          source_status_ = s;
          source_done_at_ = next_seq_;
          cv_.notify_all();
          return;
        }
        seq = next_seq_++;
      }
      ChunkParseResult r;
      decode_(chunk, &r);
      {
        std::lock_guard<std::mutex> l(mu_);
        results_.emplace(seq, std::move(r));
      }
      cv_.notify_all();
    }
  }

  const Schema schema_;
  std::unique_ptr<ChunkSource> source_;  // guarded by mu_
  const DecodeFn decode_;
  const int max_inflight_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                             // guarded by mu_
  uint64_t next_seq_ = 0;                         // guarded by mu_
  uint64_t next_out_ = 0;                         // guarded by mu_
  uint64_t source_done_at_ = kNotDone;            // guarded by mu_
  Status source_status_;                          // guarded by mu_
  std::map<uint64_t, ChunkParseResult> results_;  // guarded by mu_

  // Owned by the consumer thread.
  BadInputTracker tracker_;
  Status final_status_;
  std::vector<std::thread> workers_;
};

}  // namespace

StatusOr<std::vector<std::string>> ExpandDataPaths(Env* env, const std::vector<std::string>& paths,
                                                   DataFormat format) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    if (p != "-" && env->IsDirectory(p) && format == DataFormat::kShards) {
      // A shard directory is read as its manifest lists it, or not at all.
      ASSIGN_OR_RETURN(ShardDirManifest m, ReadShardManifest(env, p));
      if (m.files.empty()) {
        return InvalidArgumentError(fmt::format("shard directory {} holds no rows", p));
      }
      for (const ShardFileEntry& f : m.files) files.push_back(JoinPath(p, f.name));
    } else if (p != "-" && env->IsDirectory(p)) {
      ASSIGN_OR_RETURN(auto children, env->GetChildren(p));
      size_t before = files.size();
      for (const std::string& c : children) {
        if (c.empty() || c[0] == '.') continue;
        std::string full = JoinPath(p, c);
        if (env->IsDirectory(full)) continue;
        // A FIFO, socket or device would block the reader (forever, for a FIFO nobody writes):
        // refused before anything is read.
        if (!env->IsRegularFile(full)) {
          return InvalidArgumentError(fmt::format(
              "data directory {} holds {}, which is not a regular file (a FIFO, socket or "
              "device); stream a pipe with --data - or data.command instead",
              p, full));
        }
        files.push_back(std::move(full));
      }
      if (files.size() == before) {
        return InvalidArgumentError(fmt::format("data directory {} holds no data files", p));
      }
    } else if (p == "-" || env->IsRegularFile(p)) {
      files.push_back(p);
    } else if (env->FileExists(p)) {
      return InvalidArgumentError(fmt::format(
          "data path {} is not a regular file (a FIFO, socket or device); stream a pipe with "
          "--data - or data.command instead",
          p));
    } else {
      return NotFoundError(fmt::format("data path {} does not exist", p));
    }
  }
  if (files.empty()) return InvalidArgumentError("no data paths given");
  return files;
}

StatusOr<uint64_t> DataFileFingerprint(Env* env, const std::string& path) {
  constexpr uint64_t kEnd = 1 << 20, kBlock = 16 << 10, kBlocks = 64;
  ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path));
  const uint64_t size = file->size();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end)
  if (size <= 2 * kEnd + kBlocks * kBlock) {
    ranges.emplace_back(0, size);
  } else {
    ranges.emplace_back(0, kEnd);
    const uint64_t inner = size - 2 * kEnd, stride = inner / kBlocks;
    for (uint64_t b = 0; b < kBlocks; ++b) {
      const uint64_t at = kEnd + b * stride + (stride - kBlock) / 2;
      ranges.emplace_back(at, at + kBlock);
    }
    ranges.emplace_back(size - kEnd, size);
  }
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, &size, sizeof(size));
  std::string buf;
  Status status;
  for (const auto& [begin, end] : ranges) {
    buf.resize(end - begin);
    size_t got = 0;
    status = file->Read(begin, buf.size(), buf.data(), &got);
    if (!status.ok()) break;
    if (got != buf.size()) {
      status = IOError(fmt::format("{}: changed size while being read", path));
      break;
    }
    XXH3_64bits_update(state, buf.data(), buf.size());
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  RETURN_IF_ERROR(status);
  return digest;
}

StatusOr<Schema> ResolveSchema(Env* env, const DataOptions& o) {
  if (o.format != DataFormat::kShards) {
    Schema s = SchemaForFormat(o.format, o.num_slots, o.num_dense);
    if (s.num_slots == 0) {
      return InvalidArgumentError(
          fmt::format("data.num_slots must be set (> 0) for format {}", DataFormatName(o.format)));
    }
    return s;
  }
  ASSIGN_OR_RETURN(auto files, ExpandDataPaths(env, o.paths, o.format));
  ASSIGN_OR_RETURN(auto src, ShardBlockSource::Open(env, files[0]));
  return src->schema();
}

namespace {

// The standard output of a shell command (data.command), read as a text data file. A command
// that exits with a nonzero status is an error at the end of its output.
class CommandOutput final : public SequentialFile {
 public:
  static StatusOr<std::unique_ptr<SequentialFile>> Open(const std::string& command) {
    std::fflush(nullptr);
    FILE* f = ::popen(command.c_str(), "r");
    if (f == nullptr) {
      return IOError(
          fmt::format("data.command: cannot run `{}`: {}", command, std::strerror(errno)));
    }
    return std::unique_ptr<SequentialFile>(new CommandOutput(command, f));
  }
  ~CommandOutput() override {
    if (f_ != nullptr) ::pclose(f_);
  }
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    if (f_ == nullptr) return Status::OK();
    *bytes_read = std::fread(scratch, 1, n, f_);
    if (*bytes_read > 0) return Status::OK();
    if (std::ferror(f_))
      return IOError(fmt::format("{}: read error: {}", name_, std::strerror(errno)));
    const int status = ::pclose(f_);
    f_ = nullptr;
    if (status == -1) return IOError(fmt::format("{}: {}", name_, std::strerror(errno)));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
    return IOError(fmt::format("{} failed ({})", name_,
                               WIFEXITED(status)
                                   ? fmt::format("exit status {}", WEXITSTATUS(status))
                                   : fmt::format("signal {}", WTERMSIG(status))));
  }
  const std::string& name() const override { return name_; }

 private:
  CommandOutput(const std::string& command, FILE* f)
      : name_(fmt::format("data.command `{}`", command)), f_(f) {}
  std::string name_;
  FILE* f_;
};

}  // namespace

StatusOr<std::unique_ptr<BatchReader>> OpenReader(Env* env, const DataOptions& o) {
  if (o.threads < 1) return InvalidArgumentError("data.reader_threads must be >= 1");
  if (!o.command.empty()) {
    if (!o.paths.empty()) return InvalidArgumentError("set data.paths or data.command, not both");
    if (o.format == DataFormat::kShards) {
      return InvalidArgumentError("data.command reads text formats only, not shards");
    }
  }
  std::vector<std::string> files = {o.command};
  if (o.command.empty()) {
    ASSIGN_OR_RETURN(files, ExpandDataPaths(env, o.paths, o.format));
  }
  ASSIGN_OR_RETURN(Schema schema, ResolveSchema(env, o));
  if (o.format == DataFormat::kShards) {
    auto source = std::make_unique<FileSequenceSource>(
        std::move(files),
        [env, schema](const std::string& path) -> StatusOr<std::unique_ptr<ChunkSource>> {
          ASSIGN_OR_RETURN(auto shard, ShardBlockSource::Open(env, path));
          if (!(shard->schema() == schema)) {
            return InvalidArgumentError(fmt::format(
                "{}: shard has {} slots and {} dense values, but the data set has {} and {}", path,
                shard->schema().num_slots, shard->schema().num_dense, schema.num_slots,
                schema.num_dense));
          }
          return std::unique_ptr<ChunkSource>(std::move(shard));
        });
    DecodeFn decode = [schema](const TextChunk& c, ChunkParseResult* r) {
      DecodeShardBlock(schema, c, r);
    };
    return std::unique_ptr<BatchReader>(
        new ParallelChunkReader(schema, std::move(source), std::move(decode), o));
  }
  TextFormatOptions text;
  text.format = o.format;
  text.schema = schema;
  text.labels_optional = o.labels_optional;
  text.max_line_bytes = o.max_line_bytes;
  auto source = std::make_unique<FileSequenceSource>(
      std::move(files),
      [env, o](const std::string& path) -> StatusOr<std::unique_ptr<ChunkSource>> {
        std::unique_ptr<SequentialFile> file;
        if (o.command.empty()) {
          ASSIGN_OR_RETURN(file, env->NewSequentialFile(path));
        } else {
          ASSIGN_OR_RETURN(file, CommandOutput::Open(o.command));
        }
        ASSIGN_OR_RETURN(file, OpenDecompressed(std::move(file)));
        return std::unique_ptr<ChunkSource>(
            new LineChunker(std::move(file), o.chunk_bytes, o.max_line_bytes));
      });
  DecodeFn decode = [text](const TextChunk& c, ChunkParseResult* r) { ParseTextChunk(text, c, r); };
  return std::unique_ptr<BatchReader>(
      new ParallelChunkReader(schema, std::move(source), std::move(decode), o));
}

std::unique_ptr<BatchReader> NewSynthReader(const SynthOptions& options, uint64_t rows, int threads,
                                            uint64_t block_rows) {
  auto gen = std::make_shared<SynthGenerator>(options);
  const Schema schema = gen->schema();
  DecodeFn decode = [gen, schema](const TextChunk& c, ChunkParseResult* r) {
    ResetParseResult(schema, r);
    gen->GenerateBatch(c.first_line, c.first_line + c.offset, &r->batch, nullptr);
    r->counts.good = c.offset;
  };
  DataOptions o;
  o.threads = std::max(1, threads);
  return std::unique_ptr<BatchReader>(new ParallelChunkReader(
      schema, std::make_unique<SynthSource>(rows, block_rows), std::move(decode), o));
}

}  // namespace ctrbox
