#include "io/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
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

// Bytes read from a file, counted for progress (below a decompressor: the stored bytes).
class CountingFile final : public SequentialFile {
 public:
  CountingFile(std::unique_ptr<SequentialFile> file, std::shared_ptr<uint64_t> count)
      : file_(std::move(file)), count_(std::move(count)) {}
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    Status s = file_->Read(n, scratch, bytes_read);
    *count_ += *bytes_read;
    return s;
  }
  const std::string& name() const override { return file_->name(); }

 private:
  std::unique_ptr<SequentialFile> file_;
  std::shared_ptr<uint64_t> count_;
};

// Reads several files one after another through a per-file ChunkSource. The opener keeps
// *consumed at the bytes of the file consumed so far; a chunk's progress is the bytes of the
// files before it plus that. The total is the files' sizes, when every one is known (not
// kUnknownSize: standard input, a command).
class FileSequenceSource final : public ChunkSource {
 public:
  static constexpr uint64_t kUnknownSize = ~uint64_t{0};
  using Opener = std::function<StatusOr<std::unique_ptr<ChunkSource>>(
      const std::string& path, std::shared_ptr<uint64_t> consumed)>;
  FileSequenceSource(std::vector<std::string> files, std::vector<uint64_t> sizes, Opener open)
      : files_(std::move(files)), sizes_(std::move(sizes)), open_(std::move(open)) {
    const bool known = sizes_.size() == files_.size() &&
                       std::count(sizes_.begin(), sizes_.end(), kUnknownSize) == 0;
    for (uint64_t b : sizes_) total_ += known ? b : 0;  // 0: no fraction to give
  }

  Status Next(TextChunk* chunk, bool* eof) override {
    while (true) {
      if (!current_) {
        if (next_file_ == files_.size()) {
          *eof = true;
          return Status::OK();
        }
        *consumed_ = 0;
        ASSIGN_OR_RETURN(current_, open_(files_[next_file_++], consumed_));
      }
      bool file_eof = false;
      RETURN_IF_ERROR(current_->Next(chunk, &file_eof));
      if (!file_eof) {
        const uint64_t size = next_file_ <= sizes_.size() ? sizes_[next_file_ - 1] : kUnknownSize;
        chunk->progress = done_ + std::min(*consumed_, size);
        *eof = false;
        return Status::OK();
      }
      if (total_ > 0) done_ += sizes_[next_file_ - 1];
      current_.reset();
    }
  }
  uint64_t total() const override { return total_; }

 private:
  std::vector<std::string> files_;
  std::vector<uint64_t> sizes_;
  Opener open_;
  size_t next_file_ = 0;
  uint64_t total_ = 0, done_ = 0;
  std::shared_ptr<uint64_t> consumed_ = std::make_shared<uint64_t>(0);
  std::unique_ptr<ChunkSource> current_;
};

// Synthetic rows: a chunk names a row range (first_line = first row, offset = row count);
// the workers generate the rows.
// With a share of several ranks, a chunk is one block of the share.
class SynthSource final : public ChunkSource {
 public:
  SynthSource(uint64_t rows, uint64_t block_rows, RowShare share)
      : rows_(rows), block_rows_(block_rows), share_(share), next_(share.index * share.unit) {
    if (share_.count > 1) {
      for (uint64_t b = next_; b < rows_; b += share_.count * share_.unit) {
        total_ += std::min(share_.unit, rows_ - b);
      }
    } else {
      total_ = rows_;
    }
  }
  Status Next(TextChunk* chunk, bool* eof) override {
    *eof = next_ >= rows_;
    if (*eof) return Status::OK();
    chunk->file = "<generated>";
    chunk->first_line = next_;
    if (share_.count > 1) {
      chunk->offset = std::min(share_.unit, rows_ - next_);
      next_ += share_.count * share_.unit;
    } else {
      chunk->offset = std::min(block_rows_, rows_ - next_);
      next_ += chunk->offset;
    }
    done_ += chunk->offset;
    chunk->progress = done_;
    return Status::OK();
  }
  uint64_t total() const override { return total_; }

 private:
  const uint64_t rows_, block_rows_;
  const RowShare share_;
  uint64_t next_, total_ = 0, done_ = 0;
};

using DecodeFn = std::function<void(const TextChunk&, ChunkParseResult*)>;

// Workers pull chunks from the source (one at a time, under a lock), decode them in parallel
// and deposit the results by sequence number; Next() hands them out in order.
class ParallelChunkReader final : public BatchReader {
 public:
  // `closing` (optional) is set at destruction, before the workers are joined: a source
  // waiting on a pipe checks it, so that closing the reader never waits on a stalled producer.
  ParallelChunkReader(Schema schema, std::unique_ptr<ChunkSource> source, DecodeFn decode,
                      const DataOptions& options,
                      std::shared_ptr<std::atomic<bool>> closing = nullptr,
                      std::function<Status(ChunkParseResult*)> in_order = nullptr)
      : schema_(schema),
        source_(std::move(source)),
        decode_(std::move(decode)),
        in_order_(std::move(in_order)),
        max_inflight_(std::max(options.max_inflight, options.threads)),
        closing_(std::move(closing)),
        total_(source_->total()),
        tracker_(options.bad_input) {
    for (int t = 0; t < std::max(1, options.threads); ++t)
      workers_.emplace_back([this] { Work(); });
  }
  ~ParallelChunkReader() override {
    if (closing_) closing_->store(true);
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  Schema schema() const override { return schema_; }
  RecordCounts counts() const override { return tracker_.counts(); }
  InputProgress progress() const override {
    return {progress_.load(std::memory_order_relaxed), total_};
  }

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
          progress_.store(total_, std::memory_order_relaxed);  // all of it (footers too)
          *eof = true;
          return Status::OK();
        }
        r = std::move(it->second.first);
        progress_.store(it->second.second, std::memory_order_relaxed);
        results_.erase(it);
        ++next_out_;
      }
      cv_.notify_all();
      if (!r.status.ok()) return final_status_ = r.status;
      Status s = tracker_.Add(r.counts, r.samples);
      if (!s.ok()) return final_status_ = s;
      if (in_order_) {
        s = in_order_(&r);
        if (!s.ok()) return final_status_ = s;
      }
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
        results_.emplace(seq, std::make_pair(std::move(r), chunk.progress));
      }
      cv_.notify_all();
    }
  }

  const Schema schema_;
  std::unique_ptr<ChunkSource> source_;  // guarded by mu_
  const DecodeFn decode_;
  const std::function<Status(ChunkParseResult*)> in_order_;  // consumer thread
  const int max_inflight_;
  const std::shared_ptr<std::atomic<bool>> closing_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                   // guarded by mu_
  uint64_t next_seq_ = 0;               // guarded by mu_
  uint64_t next_out_ = 0;               // guarded by mu_
  uint64_t source_done_at_ = kNotDone;  // guarded by mu_
  Status source_status_;                // guarded by mu_
  // Decoded chunks by sequence number, with their progress.
  std::map<uint64_t, std::pair<ChunkParseResult, uint64_t>> results_;  // guarded by mu_
  const uint64_t total_;               // the source's total (read before the workers start)
  std::atomic<uint64_t> progress_{0};  // of the last chunk Next handed out

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

// The process groups of running data.commands, for KillDataCommands (a signal handler): a
// fixed array of atomics, which a handler may read.
constexpr int kMaxCommands = 16;
std::atomic<pid_t> g_command_groups[kMaxCommands];

void RegisterCommand(pid_t pgid) {
  for (auto& slot : g_command_groups) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pgid)) return;
  }
}
void UnregisterCommand(pid_t pgid) {
  for (auto& slot : g_command_groups) {
    pid_t mine = pgid;
    if (slot.compare_exchange_strong(mine, 0)) return;
  }
}

// Standard input, or the standard output of a shell command (data.command), read so that a
// producer that stalls never holds up a cancelled job: reads wait in poll() for at most 0.1 s
// at a time and give up with Cancelled once `cancel` is set. The command runs in its own
// process group (a terminal's Ctrl-C reaches ctrbox, which decides), and is sent SIGTERM when
// the input is cancelled or closed before its end. A command that exits with a nonzero status
// is an error at the end of its output.
class PipeInput final : public SequentialFile {
 public:
  // Reads give up once `cancel` (optional) or `closing` is set.
  using Flags = std::pair<const std::atomic<bool>*, std::shared_ptr<std::atomic<bool>>>;

  static StatusOr<std::unique_ptr<SequentialFile>> Stdin(Flags cancel) {
    return std::unique_ptr<SequentialFile>(
        new PipeInput("<stdin>", STDIN_FILENO, 0, std::move(cancel)));
  }

  static StatusOr<std::unique_ptr<SequentialFile>> Command(const std::string& command,
                                                           Flags cancel) {
    const std::string name = fmt::format("data.command `{}`", command);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return IOError(fmt::format("{}: pipe: {}", name, std::strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    pid_t pid = 0;
    std::fflush(nullptr);
    const int rc =
        ::posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      return IOError(fmt::format("{}: cannot run: {}", name, std::strerror(rc)));
    }
    RegisterCommand(pid);
    return std::unique_ptr<SequentialFile>(new PipeInput(name, fds[0], pid, std::move(cancel)));
  }

  ~PipeInput() override {
    if (pid_ > 0) {
      ::kill(-pid_, SIGTERM);  // closed before the end of the output: stop the command
      Reap();
    }
    if (fd_ != STDIN_FILENO && fd_ >= 0) ::close(fd_);
  }

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    while (fd_ >= 0) {
      if ((cancel_.first != nullptr && cancel_.first->load(std::memory_order_relaxed)) ||
          (cancel_.second && cancel_.second->load(std::memory_order_relaxed))) {
        if (pid_ > 0) {
          ::kill(-pid_, SIGTERM);
          Reap();
        }
        return CancelledError(fmt::format("{}: reading was interrupted", name_));
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, /*timeout_ms=*/100);
      if (ready < 0 && errno != EINTR) {
        return IOError(fmt::format("{}: poll: {}", name_, std::strerror(errno)));
      }
      if (ready <= 0) continue;
      const ssize_t got = ::read(fd_, scratch, n);
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return IOError(fmt::format("{}: read error: {}", name_, std::strerror(errno)));
      }
      if (got > 0) {
        *bytes_read = static_cast<size_t>(got);
        return Status::OK();
      }
      // End of output. A command's exit status decides whether it was all of it.
      if (fd_ != STDIN_FILENO) ::close(fd_);
      fd_ = -1;
      if (pid_ > 0) {
        const int status = Reap();
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          return IOError(fmt::format("{} failed ({})", name_,
                                     WIFEXITED(status)
                                         ? fmt::format("exit status {}", WEXITSTATUS(status))
                                         : fmt::format("signal {}", WTERMSIG(status))));
        }
      }
    }
    return Status::OK();
  }
  const std::string& name() const override { return name_; }

 private:
  PipeInput(std::string name, int fd, pid_t pid, Flags cancel)
      : name_(std::move(name)), fd_(fd), pid_(pid), cancel_(std::move(cancel)) {}

  // Waits for the command; returns its wait status.
  int Reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    UnregisterCommand(pid_);
    pid_ = 0;
    return status;
  }

  std::string name_;
  int fd_;
  pid_t pid_;  // the command (and its process group), 0 when none or reaped
  const Flags cancel_;
};

// The lines of a file that start in bytes [begin, end): from the first line start at or after
// `begin` up to the end of the line holding byte end - 1 (docs/distributed.md, "Byte
// ranges"). The parts of a file thus hold every line exactly once.
class ByteRangeFile final : public SequentialFile {
 public:
  ByteRangeFile(std::unique_ptr<RandomAccessFile> file, uint64_t begin, uint64_t end,
                std::string name)
      : file_(std::move(file)), begin_(begin), end_(end), name_(std::move(name)) {}

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    if (!started_) {
      started_ = true;
      pos_ = begin_;
      if (begin_ > 0) {
        // Past the line that holds byte begin - 1 (it belongs to the range before).
        pos_ = begin_ - 1;
        bool found = false;
        char buf[1 << 16];
        while (!found && pos_ < file_->size()) {
          size_t got = 0;
          RETURN_IF_ERROR(file_->Read(pos_, sizeof(buf), buf, &got));
          if (got == 0) break;
          const void* nl = std::memchr(buf, '\n', got);
          if (nl != nullptr) {
            pos_ += static_cast<const char*>(nl) - buf + 1;
            found = true;
          } else {
            pos_ += got;
          }
        }
        if (!found) done_ = true;  // the range is inside the file's last line
      }
    }
    if (done_ || n == 0 || pos_ >= file_->size()) return Status::OK();
    if (pos_ < end_) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(n, end_ - pos_));
      size_t got = 0;
      RETURN_IF_ERROR(file_->Read(pos_, want, scratch, &got));
      if (got == 0) return Status::OK();
      pos_ += got;
      last_ = scratch[got - 1];
      *bytes_read = got;
      return Status::OK();
    }
    // At the range's end: finish the line that started before it (if one is open).
    if (last_ == '\n' || last_ == 0) {
      done_ = true;
      return Status::OK();
    }
    size_t got = 0;
    RETURN_IF_ERROR(file_->Read(pos_, n, scratch, &got));
    if (got == 0) return Status::OK();
    const void* nl = std::memchr(scratch, '\n', got);
    if (nl != nullptr) {
      got = static_cast<const char*>(nl) - scratch + 1;
      done_ = true;
    }
    pos_ += got;
    last_ = scratch[got - 1];
    *bytes_read = got;
    return Status::OK();
  }
  const std::string& name() const override { return name_; }

 private:
  std::unique_ptr<RandomAccessFile> file_;
  const uint64_t begin_, end_;
  const std::string name_;
  bool started_ = false, done_ = false;
  uint64_t pos_ = 0;
  char last_ = 0;  // the last byte handed out (0: none yet)
};

// Whether `file` starts with the magic of a compression (io/compressed_file.h).
StatusOr<bool> LooksCompressed(RandomAccessFile* file) {
  char head[6] = {};
  size_t got = 0;
  RETURN_IF_ERROR(file->Read(0, sizeof(head), head, &got));
  const std::string_view h(head, got);
  return h.starts_with("\x1f\x8b") || h.starts_with("\x28\xb5\x2f\xfd") || h.starts_with("BZh") ||
         h.starts_with(
             "\xfd"
             "7zXZ");
}

// The part of `path` that `share` names (its first byte's offset in *begin_out), refused for a
// compressed file.
StatusOr<std::unique_ptr<SequentialFile>> OpenByteRange(Env* env, const std::string& path,
                                                        ByteShare share, uint64_t* begin_out) {
  ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path));
  ASSIGN_OR_RETURN(bool compressed, LooksCompressed(file.get()));
  if (compressed) {
    return InvalidArgumentError(fmt::format(
        "{}: compressed; with fewer files than ranks each rank reads a byte range of every "
        "file, which a compressed file cannot give: decompress it, or give each rank a file "
        "of its own",
        path));
  }
  const auto [begin, end] = ByteRange(file->size(), share);
  *begin_out = begin;
  const std::string name = fmt::format("{} (bytes {}-{}, part {} of {})", path, begin, end,
                                       share.index + 1, share.count);
  return std::unique_ptr<SequentialFile>(new ByteRangeFile(std::move(file), begin, end, name));
}

// The chunks of whole lines of `files` (or of o.command), decompressed as sniffed.
std::unique_ptr<ChunkSource> TextSource(Env* env, const DataOptions& o,
                                        std::vector<std::string> files, std::vector<uint64_t> sizes,
                                        std::shared_ptr<std::atomic<bool>> closing) {
  return std::make_unique<FileSequenceSource>(
      std::move(files), std::move(sizes),
      [env, o, closing](const std::string& path, std::shared_ptr<uint64_t> consumed)
          -> StatusOr<std::unique_ptr<ChunkSource>> {
        std::unique_ptr<SequentialFile> file;
        const bool ranged = o.byte_share.count > 1;
        uint64_t first_offset = 0;
        if (!o.command.empty()) {
          if (ranged) return InvalidArgumentError("data.command cannot be read by byte ranges");
          ASSIGN_OR_RETURN(file, PipeInput::Command(o.command, {o.cancel, closing}));
        } else if (path == "-") {
          if (ranged) return InvalidArgumentError("standard input cannot be read by byte ranges");
          ASSIGN_OR_RETURN(file, PipeInput::Stdin({o.cancel, closing}));
        } else if (ranged) {
          ASSIGN_OR_RETURN(file, OpenByteRange(env, path, o.byte_share, &first_offset));
        } else {
          ASSIGN_OR_RETURN(file, env->NewSequentialFile(path));
        }
        // Counted below the decompressor: progress in the bytes as stored.
        file = std::make_unique<CountingFile>(std::move(file), std::move(consumed));
        ASSIGN_OR_RETURN(file, OpenDecompressed(std::move(file)));
        // A byte range starts mid-file: its lines are counted from the range's start.
        return std::unique_ptr<ChunkSource>(new LineChunker(
            std::move(file), o.chunk_bytes, o.max_line_bytes, first_offset == 0, first_offset));
      });
}

// The files of o (or its command as the one "file") and their sizes (unknown for a command or
// standard input).
StatusOr<std::pair<std::vector<std::string>, std::vector<uint64_t>>> InputFiles(
    Env* env, const DataOptions& o) {
  std::vector<std::string> files = {o.command};
  if (o.command.empty()) {
    ASSIGN_OR_RETURN(files, ExpandDataPaths(env, o.paths, o.format));
  }
  std::vector<uint64_t> sizes;
  if (o.command.empty()) {
    for (const std::string& f : files) {
      auto size =
          f == "-" ? StatusOr<uint64_t>(FileSequenceSource::kUnknownSize) : env->GetFileSize(f);
      if (size.ok() && o.byte_share.count > 1) {  // this share's part of it
        const auto [begin, end] = ByteRange(*size, o.byte_share);
        size = end - begin;
      }
      sizes.push_back(size.ok() ? *size : FileSequenceSource::kUnknownSize);
    }
  }
  return std::make_pair(std::move(files), std::move(sizes));
}

}  // namespace

StatusOr<std::unique_ptr<ChunkSource>> OpenTextChunks(Env* env, const DataOptions& o) {
  if (!o.command.empty() && !o.paths.empty()) {
    return InvalidArgumentError("set paths or command, not both");
  }
  DataOptions text = o;
  text.format = DataFormat::kCriteo;
  ASSIGN_OR_RETURN(auto input, InputFiles(env, text));
  return TextSource(env, text, std::move(input.first), std::move(input.second),
                    std::make_shared<std::atomic<bool>>(false));
}

StatusOr<std::unique_ptr<BatchReader>> OpenTextReaderWith(Env* env, const DataOptions& o,
                                                          ChunkDecoder decoder) {
  if (o.threads < 1) return InvalidArgumentError("data.reader_threads must be >= 1");
  if (!o.command.empty() && !o.paths.empty()) {
    return InvalidArgumentError("set data.paths or data.command, not both");
  }
  DataOptions text = o;
  text.format = DataFormat::kCriteo;  // any text format: every regular file of a directory
  ASSIGN_OR_RETURN(auto input, InputFiles(env, text));
  auto closing = std::make_shared<std::atomic<bool>>(false);
  auto source = TextSource(env, text, std::move(input.first), std::move(input.second), closing);
  return std::unique_ptr<BatchReader>(new ParallelChunkReader(decoder.schema, std::move(source),
                                                              std::move(decoder.decode), o, closing,
                                                              std::move(decoder.in_order)));
}

StatusOr<bool> SplitsByBytes(Env* env, const std::string& path, DataFormat format) {
  if (format == DataFormat::kShards || path == "-") return false;
  ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path));
  ASSIGN_OR_RETURN(bool compressed, LooksCompressed(file.get()));
  return !compressed;
}

std::pair<uint64_t, uint64_t> ByteRange(uint64_t size, ByteShare share) {
  const auto at = [&](uint64_t i) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(size) * i / share.count);
  };
  return {at(share.index), at(share.index + 1)};
}

namespace {

// DataOptions::segments: each segment through its own reader (of the one file and part), the
// first `skip` rows dropped, one after the other.
class SegmentReader final : public BatchReader {
 public:
  SegmentReader(Env* env, DataOptions options, Schema schema, std::vector<uint64_t> sizes)
      : env_(env), options_(std::move(options)), schema_(schema), sizes_(std::move(sizes)) {
    for (uint64_t s : sizes_) total_ += s;
  }

  Schema schema() const override { return schema_; }

  Status Next(Batch* batch, bool* eof) override {
    *eof = false;
    const std::vector<DataSegment>& segments = *options_.segments;
    while (true) {
      if (current_ == nullptr) {
        if (next_ == segments.size()) {
          *eof = true;
          return Status::OK();
        }
        DataOptions one = options_;
        one.segments.reset();
        one.paths = {segments[next_].path};
        one.byte_share = segments[next_].part;
        ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> r, OpenReader(env_, one));
        to_skip_ = segments[next_].skip;
        std::lock_guard<std::mutex> lock(mu_);
        current_ = std::move(r);
        ++next_;
      }
      bool end = false;
      RETURN_IF_ERROR(current_->Next(batch, &end));
      if (end) {
        if (to_skip_ > 0) {
          const DataSegment& s = segments[next_ - 1];
          return FailedPreconditionError(fmt::format(
              "{} (part {} of {}) ended {} rows short of the {} rows a checkpoint says were "
              "trained from it: the data changed since",
              s.path, s.part.index, s.part.count, to_skip_, s.skip));
        }
        std::lock_guard<std::mutex> lock(mu_);
        done_counts_.Add(current_->counts());
        done_bytes_ += sizes_[next_ - 1];
        current_.reset();
        continue;
      }
      if (to_skip_ >= batch->rows()) {
        to_skip_ -= batch->rows();
        continue;
      }
      if (to_skip_ > 0) {
        Batch rest;
        rest.Reset(batch->schema);
        rest.AppendRows(*batch, to_skip_, batch->rows());
        *batch = std::move(rest);
        to_skip_ = 0;
      }
      return Status::OK();
    }
  }

  RecordCounts counts() const override {
    std::lock_guard<std::mutex> lock(mu_);
    RecordCounts c = done_counts_;
    if (current_ != nullptr) c.Add(current_->counts());
    return c;
  }

  InputProgress progress() const override {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t done = done_bytes_;
    if (current_ != nullptr) done += current_->progress().done;
    return {done, total_};
  }

 private:
  Env* const env_;
  const DataOptions options_;
  const Schema schema_;
  const std::vector<uint64_t> sizes_;  // each segment's bytes
  uint64_t total_ = 0;
  size_t next_ = 0;        // the segment to open next
  uint64_t to_skip_ = 0;   // rows of the current segment still to drop
  mutable std::mutex mu_;  // guards current_ (replaced on Next's thread), done_*
  std::unique_ptr<BatchReader> current_;
  RecordCounts done_counts_;
  uint64_t done_bytes_ = 0;
};

StatusOr<std::unique_ptr<BatchReader>> OpenSegments(Env* env, const DataOptions& o) {
  if (!o.command.empty()) return InvalidArgumentError("data segments are parts of files");
  ASSIGN_OR_RETURN(Schema schema, ResolveSchema(env, o));
  std::vector<uint64_t> sizes;
  for (const DataSegment& s : *o.segments) {
    if (s.part.count < 1 || s.part.index >= s.part.count) {
      return InvalidArgumentError(
          fmt::format("{}: part {} of {} is no part", s.path, s.part.index, s.part.count));
    }
    ASSIGN_OR_RETURN(uint64_t size, env->GetFileSize(s.path));
    const auto [begin, end] = ByteRange(size, s.part);
    sizes.push_back(end - begin);
  }
  return std::unique_ptr<BatchReader>(new SegmentReader(env, o, schema, std::move(sizes)));
}

}  // namespace

StatusOr<std::unique_ptr<BatchReader>> OpenReader(Env* env, const DataOptions& o) {
  if (o.segments) return OpenSegments(env, o);
  if (o.opener) return o.opener(env, o);
  if (o.threads < 1) return InvalidArgumentError("data.reader_threads must be >= 1");
  if (!o.command.empty()) {
    if (!o.paths.empty()) return InvalidArgumentError("set data.paths or data.command, not both");
    if (o.format == DataFormat::kShards) {
      return InvalidArgumentError("data.command reads text formats only, not shards");
    }
  }
  ASSIGN_OR_RETURN(auto input, InputFiles(env, o));
  std::vector<std::string> files = std::move(input.first);
  std::vector<uint64_t> sizes = std::move(input.second);  // for progress
  ASSIGN_OR_RETURN(Schema schema, ResolveSchema(env, o));
  if (o.format == DataFormat::kShards) {
    if (o.byte_share.count > 1) {
      return InvalidArgumentError(
          "shards are not read by byte ranges: give each rank at least one shard file");
    }
    auto source = std::make_unique<FileSequenceSource>(
        std::move(files), std::move(sizes),
        [env, schema](const std::string& path, std::shared_ptr<uint64_t> consumed)
            -> StatusOr<std::unique_ptr<ChunkSource>> {
          ASSIGN_OR_RETURN(auto shard, ShardBlockSource::Open(env, path, std::move(consumed)));
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
  text.key_slots = o.key_slots;
  auto closing = std::make_shared<std::atomic<bool>>(false);
  auto source = TextSource(env, o, std::move(files), std::move(sizes), closing);
  DecodeFn decode = [text](const TextChunk& c, ChunkParseResult* r) { ParseTextChunk(text, c, r); };
  return std::unique_ptr<BatchReader>(
      new ParallelChunkReader(schema, std::move(source), std::move(decode), o, closing));
}

void KillDataCommands() {
  for (auto& slot : g_command_groups) {
    const pid_t pgid = slot.load();
    if (pgid > 0) ::kill(-pgid, SIGTERM);
  }
}

std::unique_ptr<BatchReader> NewSynthReader(const SynthOptions& options, uint64_t rows, int threads,
                                            uint64_t block_rows, RowShare share) {
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
      schema, std::make_unique<SynthSource>(rows, block_rows, share), std::move(decode), o));
}

}  // namespace ctrbox
