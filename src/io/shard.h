// Binary shards: columnar, compressed, checksummed blocks of parsed examples.
// The layout is specified in docs/formats/shard.md.
#ifndef CTRBOX_IO_SHARD_H_
#define CTRBOX_IO_SHARD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "io/batch.h"
#include "io/line_chunker.h"
#include "io/text_format.h"
#include "util/env.h"

namespace ctrbox {

enum class ShardCodec : uint32_t { kNone = 0, kZstd = 1, kLz4 = 2 };
bool ParseShardCodec(std::string_view name, ShardCodec* out);

struct ShardWriterOptions {
  ShardCodec codec = ShardCodec::kZstd;
  int zstd_level = 1;
  uint32_t block_rows = 65536;
};

// Writes one shard file. Thread safety: not thread-safe.
class ShardWriter {
 public:
  // Creates (truncates) `path`. The file is complete only after Finish() returns OK.
  static StatusOr<std::unique_ptr<ShardWriter>> Open(Env* env, const std::string& path,
                                                     Schema schema, ShardWriterOptions options);
  // Buffers the rows of `batch`, writing every full block. REQUIRES: batch.schema == schema.
  Status Add(const Batch& batch);
  // Writes the last block and the footer, syncs and closes the file.
  Status Finish();

  // Rows added so far (written or buffered).
  uint64_t rows() const { return total_rows_ + pending_.rows(); }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  ShardWriter(std::unique_ptr<WritableFile> file, Schema schema, ShardWriterOptions options);
  Status WriteBlock();
  Status Write(std::string_view data);

  std::unique_ptr<WritableFile> file_;
  Schema schema_;
  ShardWriterOptions options_;
  Batch pending_;
  uint64_t num_blocks_ = 0, total_rows_ = 0, total_keys_ = 0, bytes_written_ = 0;
  std::string payload_, stored_;
};

// Reads the blocks of one shard file in order, undecoded, for parallel decoding.
// Thread safety: not thread-safe.
class ShardBlockSource final : public ChunkSource {
 public:
  // `consumed`, when given, is kept at the bytes of the file read so far (for progress).
  static StatusOr<std::unique_ptr<ShardBlockSource>> Open(
      Env* env, const std::string& path, std::shared_ptr<uint64_t> consumed = nullptr);

  Schema schema() const { return schema_; }
  // Fills chunk->data with the next block: the file's codec (u32), the block header and the
  // stored payload. At the footer, checks the totals and sets *eof.
  Status Next(TextChunk* chunk, bool* eof) override;

 private:
  ShardBlockSource(std::unique_ptr<SequentialFile> file, Schema schema, ShardCodec codec);
  Status ReadExact(size_t n, char* out);

  std::unique_ptr<SequentialFile> file_;
  Schema schema_;
  ShardCodec codec_;
  uint64_t offset_ = 0;
  uint64_t blocks_ = 0, rows_ = 0, keys_ = 0;
  std::shared_ptr<uint64_t> consumed_;
};

// Decodes one block produced by ShardBlockSource into result->batch, verifying checksums and
// column consistency; result->status is Corruption on any mismatch.
void DecodeShardBlock(Schema schema, const TextChunk& chunk, ChunkParseResult* result);

}  // namespace ctrbox

#endif  // CTRBOX_IO_SHARD_H_
