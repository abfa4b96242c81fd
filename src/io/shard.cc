#include "io/shard.h"

#include <fmt/format.h>
#include <lz4.h>
#include <zstd.h>

#include <cstring>

#include "util/coding.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

constexpr char kFileMagic[8] = {'C', 'T', 'R', 'S', 'H', 'R', 'D', '1'};
constexpr char kFooterMagic[8] = {'C', 'T', 'R', 'S', 'E', 'N', 'D', '1'};
constexpr uint32_t kBlockMagic = 0x4B4C4243;  // "CBLK"
constexpr uint32_t kVersion = 1;
constexpr size_t kFileHeaderSize = 32;
constexpr size_t kBlockHeaderSize = 56;
constexpr size_t kFooterSize = 40;
constexpr uint32_t kFlagWeights = 1;
constexpr uint32_t kFlagAllSingle = 2;

struct BlockHeader {
  uint32_t flags, rows, unique_keys;
  uint64_t num_keys, raw_bytes, stored_bytes, payload_checksum;
};

// Assigns dictionary indices to keys in first-seen order (open addressing).
class KeyDictionary {
 public:
  void Reset(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    buckets_.assign(cap, kEmpty);
    keys_.clear();
  }
  uint32_t IndexOf(uint64_t key) {
    size_t mask = buckets_.size() - 1;
    for (size_t i = Mix64(key) & mask;; i = (i + 1) & mask) {
      uint32_t s = buckets_[i];
      if (s == kEmpty) {
        buckets_[i] = static_cast<uint32_t>(keys_.size());
        keys_.push_back(key);
        return buckets_[i];
      }
      if (keys_[s] == key) return s;
    }
  }
  const std::vector<uint64_t>& keys() const { return keys_; }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  std::vector<uint32_t> buckets_;
  std::vector<uint64_t> keys_;
};

}  // namespace

bool ParseShardCodec(std::string_view name, ShardCodec* out) {
  if (name == "zstd")
    *out = ShardCodec::kZstd;
  else if (name == "lz4")
    *out = ShardCodec::kLz4;
  else if (name == "none")
    *out = ShardCodec::kNone;
  else
    return false;
  return true;
}

// ---- writer ---------------------------------------------------------------------------------

ShardWriter::ShardWriter(std::unique_ptr<WritableFile> file, Schema schema,
                         ShardWriterOptions options)
    : file_(std::move(file)), schema_(schema), options_(options) {
  pending_.Reset(schema);
}

StatusOr<std::unique_ptr<ShardWriter>> ShardWriter::Open(Env* env, const std::string& path,
                                                         Schema schema,
                                                         ShardWriterOptions options) {
  if (options.block_rows == 0) return InvalidArgumentError("shard block_rows must be > 0");
  ASSIGN_OR_RETURN(auto file, env->NewWritableFile(path));
  std::unique_ptr<ShardWriter> w(new ShardWriter(std::move(file), schema, options));
  std::string h(kFileMagic, 8);
  PutFixed<uint32_t>(&h, kVersion);
  PutFixed<uint32_t>(&h, schema.num_slots);
  PutFixed<uint32_t>(&h, schema.num_dense);
  PutFixed<uint32_t>(&h, static_cast<uint32_t>(options.codec));
  PutFixed<uint64_t>(&h, Checksum64(h));
  RETURN_IF_ERROR(w->Write(h));
  return w;
}

Status ShardWriter::Write(std::string_view data) {
  bytes_written_ += data.size();
  return file_->Append(data);
}

Status ShardWriter::Add(const Batch& batch) {
  size_t begin = 0;
  while (begin < batch.rows()) {
    size_t take = std::min<size_t>(batch.rows() - begin, options_.block_rows - pending_.rows());
    pending_.AppendRows(batch, begin, begin + take);
    begin += take;
    if (pending_.rows() == options_.block_rows) RETURN_IF_ERROR(WriteBlock());
  }
  return Status::OK();
}

Status ShardWriter::WriteBlock() {
  const Batch& b = pending_;
  const size_t rows = b.rows(), S = schema_.num_slots;
  if (rows == 0) return Status::OK();
  bool all_single = true;
  for (size_t i = 0; i < rows * S && all_single; ++i) {
    all_single = b.offsets[i + 1] - b.offsets[i] == 1;
  }
  payload_.clear();
  for (float l : b.labels) payload_.push_back(static_cast<char>(l != 0.0f));
  PutArray(&payload_, b.dense.data(), b.dense.size());
  if (!all_single) {
    for (size_t i = 0; i < rows * S; ++i)
      PutFixed<uint32_t>(&payload_, b.offsets[i + 1] - b.offsets[i]);
  }
  KeyDictionary dict;
  dict.Reset(b.keys.size());
  std::vector<uint32_t> index(b.keys.size());
  for (size_t i = 0; i < b.keys.size(); ++i) index[i] = dict.IndexOf(b.keys[i]);
  PutArray(&payload_, dict.keys().data(), dict.keys().size());
  PutArray(&payload_, index.data(), index.size());
  if (b.has_weights()) PutArray(&payload_, b.weights.data(), b.weights.size());

  switch (options_.codec) {
    case ShardCodec::kNone:
      stored_ = payload_;
      break;
    case ShardCodec::kZstd: {
      stored_.resize(ZSTD_compressBound(payload_.size()));
      size_t n = ZSTD_compress(stored_.data(), stored_.size(), payload_.data(), payload_.size(),
                               options_.zstd_level);
      if (ZSTD_isError(n)) return InternalError(std::string("zstd: ") + ZSTD_getErrorName(n));
      stored_.resize(n);
      break;
    }
    case ShardCodec::kLz4: {
      if (payload_.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
        return InvalidArgumentError("shard block too large for lz4; lower block_rows");
      }
      stored_.resize(LZ4_compressBound(static_cast<int>(payload_.size())));
      int n =
          LZ4_compress_default(payload_.data(), stored_.data(), static_cast<int>(payload_.size()),
                               static_cast<int>(stored_.size()));
      if (n <= 0) return InternalError("lz4 compression failed");
      stored_.resize(static_cast<size_t>(n));
      break;
    }
  }
  std::string h;
  PutFixed<uint32_t>(&h, kBlockMagic);
  PutFixed<uint32_t>(&h, (b.has_weights() ? kFlagWeights : 0) | (all_single ? kFlagAllSingle : 0));
  PutFixed<uint32_t>(&h, static_cast<uint32_t>(rows));
  PutFixed<uint32_t>(&h, static_cast<uint32_t>(dict.keys().size()));
  PutFixed<uint64_t>(&h, b.keys.size());
  PutFixed<uint64_t>(&h, payload_.size());
  PutFixed<uint64_t>(&h, stored_.size());
  PutFixed<uint64_t>(&h, Checksum64(stored_));
  PutFixed<uint64_t>(&h, Checksum64(h));
  RETURN_IF_ERROR(Write(h));
  RETURN_IF_ERROR(Write(stored_));
  ++num_blocks_;
  total_rows_ += rows;
  total_keys_ += b.keys.size();
  pending_.Reset(schema_);
  return Status::OK();
}

Status ShardWriter::Finish() {
  RETURN_IF_ERROR(WriteBlock());
  std::string f(kFooterMagic, 8);
  PutFixed<uint64_t>(&f, num_blocks_);
  PutFixed<uint64_t>(&f, total_rows_);
  PutFixed<uint64_t>(&f, total_keys_);
  PutFixed<uint64_t>(&f, Checksum64(f));
  RETURN_IF_ERROR(Write(f));
  RETURN_IF_ERROR(file_->Sync());
  return file_->Close();
}

// ---- reader ---------------------------------------------------------------------------------

ShardBlockSource::ShardBlockSource(std::unique_ptr<SequentialFile> file, Schema schema,
                                   ShardCodec codec)
    : file_(std::move(file)), schema_(schema), codec_(codec) {}

Status ShardBlockSource::ReadExact(size_t n, char* out) {
  size_t done = 0;
  while (done < n) {
    size_t got = 0;
    RETURN_IF_ERROR(file_->Read(n - done, out + done, &got));
    if (got == 0) {
      return CorruptionError(fmt::format("{}: truncated at offset {} (expected {} more bytes)",
                                         file_->name(), offset_ + done, n - done));
    }
    done += got;
  }
  offset_ += n;
  return Status::OK();
}

StatusOr<std::unique_ptr<ShardBlockSource>> ShardBlockSource::Open(
    Env* env, const std::string& path, std::shared_ptr<uint64_t> consumed) {
  ASSIGN_OR_RETURN(auto file, env->NewSequentialFile(path));
  std::unique_ptr<ShardBlockSource> src(
      new ShardBlockSource(std::move(file), Schema{}, ShardCodec::kNone));
  src->consumed_ = std::move(consumed);
  char h[kFileHeaderSize];
  RETURN_IF_ERROR(src->ReadExact(kFileHeaderSize, h));
  if (std::memcmp(h, kFileMagic, 8) != 0) {
    return CorruptionError(path + ": not a ctrbox shard (bad magic)");
  }
  if (GetFixed<uint64_t>(h + 24) != Checksum64(h, 24)) {
    return CorruptionError(path + ": shard header checksum mismatch");
  }
  uint32_t version = GetFixed<uint32_t>(h + 8);
  if (version != kVersion) {
    return CorruptionError(fmt::format(
        "{}: shard version {} is not supported (this build reads {})", path, version, kVersion));
  }
  src->schema_ = Schema{GetFixed<uint32_t>(h + 12), GetFixed<uint32_t>(h + 16)};
  uint32_t codec = GetFixed<uint32_t>(h + 20);
  if (codec > 2) return CorruptionError(fmt::format("{}: unknown codec {}", path, codec));
  src->codec_ = static_cast<ShardCodec>(codec);
  return src;
}

Status ShardBlockSource::Next(TextChunk* chunk, bool* eof) {
  *eof = false;
  chunk->file = file_->name();
  chunk->offset = offset_;
  chunk->first_line = blocks_ + 1;
  chunk->overlong_lines.clear();
  char magic[8];
  RETURN_IF_ERROR(ReadExact(4, magic));
  if (GetFixed<uint32_t>(magic) != kBlockMagic) {
    // Must be the footer.
    char f[kFooterSize];
    std::memcpy(f, magic, 4);
    RETURN_IF_ERROR(ReadExact(kFooterSize - 4, f + 4));
    if (std::memcmp(f, kFooterMagic, 8) != 0 || GetFixed<uint64_t>(f + 32) != Checksum64(f, 32)) {
      return CorruptionError(fmt::format("{}: offset {}: neither a block nor a valid footer",
                                         file_->name(), chunk->offset));
    }
    if (GetFixed<uint64_t>(f + 8) != blocks_ || GetFixed<uint64_t>(f + 16) != rows_ ||
        GetFixed<uint64_t>(f + 24) != keys_) {
      return CorruptionError(fmt::format(
          "{}: footer totals ({} blocks, {} rows) do not match the blocks read ({}, {})",
          file_->name(), GetFixed<uint64_t>(f + 8), GetFixed<uint64_t>(f + 16), blocks_, rows_));
    }
    size_t extra = 0;
    char c;
    RETURN_IF_ERROR(file_->Read(1, &c, &extra));
    if (extra != 0) return CorruptionError(file_->name() + ": bytes after the footer");
    *eof = true;
    return Status::OK();
  }
  // chunk->data = the file's codec (u32) + block header + stored payload
  char h[kBlockHeaderSize];
  std::memcpy(h, magic, 4);
  RETURN_IF_ERROR(ReadExact(kBlockHeaderSize - 4, h + 4));
  if (GetFixed<uint64_t>(h + 48) != Checksum64(h, 48)) {
    return CorruptionError(fmt::format("{}: block {} at offset {}: header checksum mismatch",
                                       file_->name(), blocks_ + 1, chunk->offset));
  }
  const uint64_t stored = GetFixed<uint64_t>(h + 32);
  const uint64_t raw = GetFixed<uint64_t>(h + 24);
  if (stored > (1ull << 32) || raw > (1ull << 34)) {
    return CorruptionError(
        fmt::format("{}: block {}: implausible sizes", file_->name(), blocks_ + 1));
  }
  chunk->data.resize(4 + kBlockHeaderSize + stored);
  const uint32_t codec = static_cast<uint32_t>(codec_);
  std::memcpy(chunk->data.data(), &codec, 4);
  std::memcpy(chunk->data.data() + 4, h, kBlockHeaderSize);
  RETURN_IF_ERROR(ReadExact(stored, chunk->data.data() + 4 + kBlockHeaderSize));
  ++blocks_;
  rows_ += GetFixed<uint32_t>(h + 8);
  keys_ += GetFixed<uint64_t>(h + 16);
  if (consumed_) *consumed_ = offset_;
  return Status::OK();
}

void DecodeShardBlock(Schema schema, const TextChunk& chunk, ChunkParseResult* result) {
  ResetParseResult(schema, result);
  auto fail = [&](const std::string& what) {
    result->status = CorruptionError(fmt::format("{}: block {} at offset {}: {}", chunk.file,
                                                 chunk.first_line, chunk.offset, what));
  };
  const char* d = chunk.data.data();
  const ShardCodec codec = static_cast<ShardCodec>(GetFixed<uint32_t>(d));
  const char* h = d + 4;
  BlockHeader bh{GetFixed<uint32_t>(h + 4),  GetFixed<uint32_t>(h + 8),  GetFixed<uint32_t>(h + 12),
                 GetFixed<uint64_t>(h + 16), GetFixed<uint64_t>(h + 24), GetFixed<uint64_t>(h + 32),
                 GetFixed<uint64_t>(h + 40)};
  const char* stored = h + kBlockHeaderSize;
  if (Checksum64(stored, bh.stored_bytes) != bh.payload_checksum) {
    return fail("payload checksum mismatch");
  }
  // The decoding thread's buffer, kept: a fresh one per block faulted its pages in each time.
  thread_local std::string raw_buf;
  const char* p = stored;
  if (codec == ShardCodec::kZstd) {
    raw_buf.resize(bh.raw_bytes);
    size_t n = ZSTD_decompress(raw_buf.data(), raw_buf.size(), stored, bh.stored_bytes);
    if (ZSTD_isError(n) || n != bh.raw_bytes) return fail("zstd payload does not decompress");
    p = raw_buf.data();
  } else if (codec == ShardCodec::kLz4) {
    raw_buf.resize(bh.raw_bytes);
    int n = LZ4_decompress_safe(stored, raw_buf.data(), static_cast<int>(bh.stored_bytes),
                                static_cast<int>(bh.raw_bytes));
    if (n < 0 || static_cast<uint64_t>(n) != bh.raw_bytes)
      return fail("lz4 payload does not decompress");
    p = raw_buf.data();
  } else if (bh.stored_bytes != bh.raw_bytes) {
    return fail("stored and raw sizes differ without a codec");
  }
  const size_t rows = bh.rows, S = schema.num_slots, D = schema.num_dense;
  const bool all_single = bh.flags & kFlagAllSingle, weighted = bh.flags & kFlagWeights;
  const uint64_t expect = rows + rows * D * 4 + (all_single ? 0 : rows * S * 4) +
                          uint64_t{bh.unique_keys} * 8 + bh.num_keys * 4 +
                          (weighted ? bh.num_keys * 4 : 0);
  if (expect != bh.raw_bytes || rows == 0) return fail("column sizes do not add up");
  if (all_single && bh.num_keys != rows * S) return fail("all_single block with wrong key count");

  Batch& b = result->batch;
  b.labels.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    uint8_t l = static_cast<uint8_t>(p[r]);
    if (l > 1) return fail("label is not 0 or 1");
    b.labels[r] = l;
  }
  p += rows;
  b.dense.resize(rows * D);
  std::memcpy(b.dense.data(), p, rows * D * 4);
  p += rows * D * 4;
  b.offsets.resize(rows * S + 1);
  b.offsets[0] = 0;
  if (all_single) {
    for (size_t i = 1; i <= rows * S; ++i) b.offsets[i] = static_cast<uint32_t>(i);
  } else {
    uint64_t sum = 0;
    for (size_t i = 0; i < rows * S; ++i) {
      sum += GetFixed<uint32_t>(p + 4 * i);
      if (sum > bh.num_keys) return fail("slot counts exceed the key count");
      b.offsets[i + 1] = static_cast<uint32_t>(sum);
    }
    if (sum != bh.num_keys) return fail("slot counts do not sum to the key count");
    p += rows * S * 4;
  }
  const char* dict = p;
  p += uint64_t{bh.unique_keys} * 8;
  b.keys.resize(bh.num_keys);
  for (size_t i = 0; i < bh.num_keys; ++i) {
    uint32_t ix = GetFixed<uint32_t>(p + 4 * i);
    if (ix >= bh.unique_keys) return fail("key index out of range");
    b.keys[i] = GetFixed<uint64_t>(dict + 8 * size_t{ix});
  }
  p += bh.num_keys * 4;
  if (weighted) {
    b.weights.resize(bh.num_keys);
    std::memcpy(b.weights.data(), p, bh.num_keys * 4);
  }
  result->counts.good = rows;
}

}  // namespace ctrbox
