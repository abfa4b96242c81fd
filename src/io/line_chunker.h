// LineChunker: cuts a byte stream into chunks of whole lines, never holding a whole file.
//
// Each chunk is about `chunk_bytes` of complete lines; lines keep their numbers so parsers
// can report file:line. A line longer than `max_line_bytes` is never buffered whole: it is
// skipped and reported in TextChunk::overlong_lines.
//
// Thread safety: not thread-safe.
#ifndef CTRBOX_IO_LINE_CHUNKER_H_
#define CTRBOX_IO_LINE_CHUNKER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/env.h"

namespace ctrbox {

// A unit of raw input for one parse task: whole text lines, or one shard block.
struct TextChunk {
  std::string file;                      // the source, for messages
  std::string data;                      // whole lines, each ending in '\n' (or a shard block)
  uint64_t first_line = 1;               // number of the first line (or block) in data, 1-based
  uint64_t offset = 0;                   // byte offset of data in the file
  std::vector<uint64_t> overlong_lines;  // lines skipped for length (after the lines in data)
  uint64_t seq = 0;                      // position of the chunk in the job's stream
  // Whether first_line counts lines from the file's start (false: from the start of a byte
  // range of it, docs/distributed.md; line 1 is then not the file's first line).
  bool lines_from_file_start = true;
  // How much of the whole input is consumed up to the end of this chunk, in the units of its
  // source's total() (bytes of the files as stored, or generated rows); set by the sources
  // that know their total.
  uint64_t progress = 0;
};

// A sequential source of raw input chunks. Thread safety: not thread-safe.
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // Fills *chunk with the next unit of input, or sets *eof.
  virtual Status Next(TextChunk* chunk, bool* eof) = 0;
  // The size of the whole input in the units of TextChunk::progress; 0 when unknown (a
  // pipe, a command).
  virtual uint64_t total() const { return 0; }
};

class LineChunker final : public ChunkSource {
 public:
  // from_file_start false: `file` is a byte range of a file starting at `first_offset`
  // (offsets are the file's; lines are counted from the range's start).
  LineChunker(std::unique_ptr<SequentialFile> file, size_t chunk_bytes, size_t max_line_bytes,
              bool from_file_start = true, uint64_t first_offset = 0);

  // Fills *chunk with the next lines; sets *eof (and leaves the chunk empty) at the end.
  Status Next(TextChunk* chunk, bool* eof) override;
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  Status ReadMore();
  Status SkipRestOfLine();

  std::unique_ptr<SequentialFile> file_;
  size_t chunk_bytes_;
  size_t max_line_bytes_;
  std::string pending_;  // bytes read, not yet handed out; starts at a line start
  uint64_t next_line_ = 1;
  uint64_t offset_ = 0;  // file offset of pending_[0]
  uint64_t bytes_read_ = 0;
  bool eof_ = false;
  bool started_ = false;  // the file's start was looked at (for a byte-order mark)
  bool from_file_start_ = true;
};

}  // namespace ctrbox

#endif  // CTRBOX_IO_LINE_CHUNKER_H_
