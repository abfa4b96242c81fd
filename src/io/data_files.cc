// The data files of a job: its paths expanded (directories, shard manifests), a file's
// fingerprint, the schema the data has, the files and sizes a reader reads (io/reader.h).
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

#include "io/reader_internal.h"
#include "io/shard.h"
#include "io/shard_dir.h"
#include "io/text_format.h"
#include "io/text_scan.h"

namespace ctrbox {

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

namespace {

// " (f's first line reads as libfm ...: --format libfm?)" when the first line of the data
// reads as another format than o.format: said before what that format would need.
std::string OtherFormatHint(Env* env, const DataOptions& o) {
  if (o.paths.empty() || o.paths[0] == "-") return "";
  StatusOr<TextChunk> chunk = ReadFirstChunk(env, o);
  if (!chunk.ok()) return "";
  const std::string_view line = std::string_view(chunk->data).substr(0, chunk->data.find('\n'));
  const std::string guess = GuessFormat(line);
  const std::string name = guess.substr(0, guess.find(' '));
  if (guess.empty() || name == DataFormatName(o.format)) return "";
  return fmt::format(" (the data's first line reads as {}, not {}: --format {}?)", guess,
                     DataFormatName(o.format), name);
}

// data.slot_from: position without data.num_slots: the most features a row of the input's
// first 64 KB has (libFM's one-hot files have one per field on every row).
StatusOr<uint32_t> PositionSlots(Env* env, const DataOptions& o) {
  if (o.paths.empty()) return 0;  // a command's output is not read twice
  ASSIGN_OR_RETURN(const TextChunk chunk, ReadFirstChunk(env, o));
  uint32_t most = 0;
  size_t start = 0;
  while (start < chunk.data.size()) {
    size_t nl = chunk.data.find('\n', start);
    if (nl == std::string::npos) nl = chunk.data.size();
    uint32_t features = 0;
    text_scan::Tokenizer tok(std::string_view(chunk.data).substr(start, nl - start));
    std::string_view t;
    while (tok.Next(&t)) features += t.find(':') != std::string_view::npos;
    most = std::max(most, features);
    start = nl + 1;
  }
  return most;
}

}  // namespace

StatusOr<uint32_t> OneHotFields(Env* env, const DataOptions& o) {
  if (o.paths.empty() || o.paths[0] == "-") return 0;
  ASSIGN_OR_RETURN(const TextChunk chunk, ReadFirstChunk(env, o));
  uint32_t fields = 0;
  size_t rows = 0;
  for (size_t start = 0; start < chunk.data.size();) {
    size_t nl = chunk.data.find('\n', start);
    if (nl == std::string::npos) break;  // (a last line the chunk may have cut)
    text_scan::Tokenizer tok(std::string_view(chunk.data).substr(start, nl - start));
    start = nl + 1;
    std::string_view t;
    if (!tok.Next(&t)) continue;  // (the label)
    uint32_t n = 0;
    while (tok.Next(&t)) {
      const size_t colon = t.find(':');
      if (colon == std::string_view::npos || t.substr(colon + 1) != "1") return 0;
      ++n;
    }
    if (rows++ == 0) fields = n;
    if (n != fields) return 0;
  }
  return fields >= 2 ? fields : 0;
}

StatusOr<Schema> ResolveSchema(Env* env, const DataOptions& o) {
  if (o.format != DataFormat::kShards) {
    uint32_t num_slots = o.num_slots;
    if (o.slot_from == SlotFrom::kPosition && num_slots == 0) {
      ASSIGN_OR_RETURN(num_slots, PositionSlots(env, o));
    }
    Schema s = SchemaForFormat(o.format, num_slots, o.num_dense, o.slot_from);
    if (s.num_slots == 0) {
      return InvalidArgumentError(fmt::format("data.num_slots must be set (> 0) for format {}{}",
                                              DataFormatName(o.format), OtherFormatHint(env, o)));
    }
    return s;
  }
  ASSIGN_OR_RETURN(auto files, ExpandDataPaths(env, o.paths, o.format));
  ASSIGN_OR_RETURN(auto src, ShardBlockSource::Open(env, files[0]));
  return src->schema();
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

}  // namespace ctrbox
