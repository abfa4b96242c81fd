// The readers' shared parts inside src/io (io/reader.h is the public face): the chunk reader
// and its sources (chunk_reader.cc), byte ranges and segments (byte_ranges.cc), the data
// files (data_files.cc). Include only from src/io.
#ifndef CTRBOX_IO_READER_INTERNAL_H_
#define CTRBOX_IO_READER_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/reader.h"

namespace ctrbox {

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

using DecodeFn = std::function<void(const TextChunk&, ChunkParseResult*)>;

// Workers pull chunks from `source` (one at a time), decode them in parallel
// (options.threads of them, options.max_inflight ahead) and Next() hands the batches out in
// order. `closing` (optional) is set at destruction before the workers are joined (a source
// waiting on a pipe gives up); `in_order` (optional) runs on each result in order, on Next's
// thread.
std::unique_ptr<BatchReader> NewParallelChunkReader(
    Schema schema, std::unique_ptr<ChunkSource> source, DecodeFn decode, const DataOptions& options,
    std::shared_ptr<std::atomic<bool>> closing = nullptr,
    std::function<Status(ChunkParseResult*)> in_order = nullptr);

// Whether `file` starts with the magic of a compression (io/compressed_file.h).
StatusOr<bool> LooksCompressed(RandomAccessFile* file);
// The part of `path` that `share` names (its first byte's offset in *begin_out), refused for a
// compressed file.
StatusOr<std::unique_ptr<SequentialFile>> OpenByteRange(Env* env, const std::string& path,
                                                        ByteShare share, uint64_t* begin_out);
// DataOptions::segments: each segment through its own reader, one after the other.
StatusOr<std::unique_ptr<BatchReader>> OpenSegments(Env* env, const DataOptions& o);
// The files of o (or its command as the one "file") and their sizes (kUnknownSize for a
// command or standard input).
StatusOr<std::pair<std::vector<std::string>, std::vector<uint64_t>>> InputFiles(
    Env* env, const DataOptions& o);

}  // namespace ctrbox

#endif  // CTRBOX_IO_READER_INTERNAL_H_
