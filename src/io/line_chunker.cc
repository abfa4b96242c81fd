#include "io/line_chunker.h"

#include <algorithm>

namespace ctrbox {
namespace {
constexpr size_t kReadBytes = 1 << 20;

// The start of the first line of data[0, end) longer than max bytes (a trailing '\r' not
// counted, as the parsers count), or npos. data[end - 1] is '\n'.
size_t FirstOverlong(const std::string& data, size_t end, size_t max) {
  for (size_t start = 0; start < end;) {
    const size_t nl = data.find('\n', start);
    size_t len = nl - start;
    if (len > 0 && data[nl - 1] == '\r') --len;
    if (len > max) return start;
    start = nl + 1;
  }
  return std::string::npos;
}
}  // namespace

LineChunker::LineChunker(std::unique_ptr<SequentialFile> file, size_t chunk_bytes,
                         size_t max_line_bytes, bool from_file_start, uint64_t first_offset)
    : file_(std::move(file)),
      chunk_bytes_(chunk_bytes),
      max_line_bytes_(max_line_bytes),
      offset_(first_offset),
      from_file_start_(from_file_start) {}

Status LineChunker::ReadMore() {
  size_t old = pending_.size();
  pending_.resize(old + kReadBytes);
  size_t n = 0;
  Status s = file_->Read(kReadBytes, pending_.data() + old, &n);
  pending_.resize(old + n);
  bytes_read_ += n;
  if (n == 0 && s.ok()) eof_ = true;
  return s;
}

Status LineChunker::SkipRestOfLine() {
  while (true) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      pending_.erase(0, nl + 1);
      offset_ += nl + 1;
      return Status::OK();
    }
    offset_ += pending_.size();
    pending_.clear();
    if (eof_) return Status::OK();
    RETURN_IF_ERROR(ReadMore());
  }
}

Status LineChunker::Next(TextChunk* chunk, bool* eof) {
  if (!started_ && !from_file_start_) started_ = true;  // mid-file: no byte-order mark
  if (!started_) {
    // A UTF-8 byte-order mark (editors on Windows write one) is not part of the first record.
    while (pending_.size() < 3 && !eof_) RETURN_IF_ERROR(ReadMore());
    if (std::string_view(pending_).starts_with("\xEF\xBB\xBF")) {
      pending_.erase(0, 3);
      offset_ += 3;
    }
    started_ = true;
  }
  chunk->file = file_->name();
  chunk->data.clear();
  chunk->overlong_lines.clear();
  chunk->first_line = next_line_;
  chunk->offset = offset_;
  chunk->lines_from_file_start = from_file_start_;
  *eof = false;
  while (true) {
    if (pending_.size() >= chunk_bytes_ || eof_) {
      size_t last_nl = pending_.rfind('\n');
      if (last_nl != std::string::npos) {
        // Whole lines, none longer than max_line_bytes: the chunk ends before an overlong
        // one, which is skipped alone (every reader, whatever its parser, sees the rule).
        size_t end = last_nl + 1;
        if (end > max_line_bytes_) {
          const size_t bad = FirstOverlong(pending_, end, max_line_bytes_);
          if (bad == 0) {
            const size_t nl = pending_.find('\n');
            chunk->overlong_lines.push_back(next_line_++);
            pending_.erase(0, nl + 1);
            offset_ += nl + 1;
            return Status::OK();
          }
          if (bad != std::string::npos) end = bad;
        }
        chunk->data.assign(pending_, 0, end);
        pending_.erase(0, end);
        offset_ += end;
        next_line_ +=
            static_cast<uint64_t>(std::count(chunk->data.begin(), chunk->data.end(), '\n'));
        return Status::OK();
      }
      if (eof_) {
        if (pending_.empty()) {
          *eof = true;
          return Status::OK();
        }
        // The last line has no newline.
        offset_ += pending_.size();
        if (pending_.size() > max_line_bytes_) {
          chunk->overlong_lines.push_back(next_line_);
        } else {
          chunk->data = std::move(pending_);
          chunk->data.push_back('\n');
        }
        pending_.clear();
        ++next_line_;
        return Status::OK();
      }
    }
    if (pending_.size() > max_line_bytes_ && pending_.find('\n') == std::string::npos) {
      chunk->overlong_lines.push_back(next_line_++);
      offset_ += pending_.size();
      pending_.clear();
      return SkipRestOfLine();
    }
    RETURN_IF_ERROR(ReadMore());
  }
}

}  // namespace ctrbox
