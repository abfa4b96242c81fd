#include "io/reader.h"

#include <fmt/format.h>

#include <atomic>
#include <memory>

#include "io/compressed_file.h"
#include "io/line_chunker.h"
#include "io/reader_internal.h"
#include "io/shard.h"
#include "util/command_file.h"

namespace ctrbox {
namespace {

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
          ASSIGN_OR_RETURN(file,
                           OpenCommandOutput(o.command, fmt::format("data.command `{}`", o.command),
                                             {o.cancel, closing}));
        } else if (path == "-") {
          if (ranged) return InvalidArgumentError("standard input cannot be read by byte ranges");
          ASSIGN_OR_RETURN(file, OpenStdin({o.cancel, closing}));
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

StatusOr<TextChunk> ReadFirstChunk(Env* env, const DataOptions& o, size_t bytes) {
  DataOptions first = o;
  first.chunk_bytes = bytes;
  first.byte_share = {};
  ASSIGN_OR_RETURN(auto source, OpenTextChunks(env, first));
  TextChunk chunk;
  bool eof = false;
  RETURN_IF_ERROR(source->Next(&chunk, &eof));
  if (eof) return TextChunk();
  return chunk;
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
  return NewParallelChunkReader(decoder.schema, std::move(source), std::move(decoder.decode), o,
                                closing, std::move(decoder.in_order));
}

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
    return NewParallelChunkReader(schema, std::move(source), std::move(decode), o);
  }
  TextFormatOptions text;
  text.format = o.format;
  text.schema = schema;
  text.labels_optional = o.labels_optional;
  text.max_line_bytes = o.max_line_bytes;
  text.key_slots = o.key_slots;
  text.slot_from = o.slot_from;
  auto closing = std::make_shared<std::atomic<bool>>(false);
  auto source = TextSource(env, o, std::move(files), std::move(sizes), closing);
  DecodeFn decode = [text](const TextChunk& c, ChunkParseResult* r) { ParseTextChunk(text, c, r); };
  return NewParallelChunkReader(schema, std::move(source), std::move(decode), o, closing);
}

void KillDataCommands() { KillCommands(); }

}  // namespace ctrbox
