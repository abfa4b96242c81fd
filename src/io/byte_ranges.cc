// Byte ranges of text files (a rank's part of a file, docs/distributed.md "Byte ranges") and
// data segments (parts of files with rows to skip: a resumed job on another number of ranks).
#include <fmt/format.h>

#include <cstring>
#include <mutex>

#include "io/reader_internal.h"

namespace ctrbox {
namespace {

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

}  // namespace

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

}  // namespace

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

}  // namespace ctrbox
