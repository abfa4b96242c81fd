#include "io/shard_dir.h"

#include <fmt/format.h>

#include <set>

#include "util/dir_lock.h"
#include "util/hash.h"
#include "util/parse.h"

namespace ctrbox {
namespace {

constexpr std::string_view kVersionLine = "ctrbox-shards 1";

// A name convert writes: part-NNNNN.ctrshard, or that plus ".tmp" while it is written.
bool IsConversionFile(std::string_view name) {
  if (name.ends_with(".tmp")) name.remove_suffix(4);
  return name.starts_with("part-") && name.ends_with(kShardSuffix);
}

// A file name that cannot escape the directory or confuse the line format.
bool IsPlainName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name) {
    if (c == '/' || c == ' ' || c == '\n' || c == '\t' || c == '\0') return false;
  }
  return true;
}

}  // namespace

uint64_t ShardDirManifest::rows() const {
  uint64_t n = 0;
  for (const ShardFileEntry& f : files) n += f.rows;
  return n;
}

std::string EncodeShardManifest(const ShardDirManifest& m) {
  std::string text =
      fmt::format("{}\nschema {} {}\n", kVersionLine, m.schema.num_slots, m.schema.num_dense);
  for (const ShardFileEntry& f : m.files) {
    text += fmt::format("file {} {} {}\n", f.name, f.rows, f.bytes);
  }
  text += fmt::format("total {} {}\n", m.files.size(), m.rows());
  text += fmt::format("checksum {:016x}\n", Checksum64(text));
  return text;
}

StatusOr<ShardDirManifest> DecodeShardManifest(std::string_view text, const std::string& where) {
  auto bad = [&](size_t line, std::string_view what) {
    return CorruptionError(fmt::format("{}:{}: {}", where, line, what));
  };
  // The checksum line comes last and covers every byte before it.
  if (text.empty() || text.back() != '\n') return bad(1, "truncated (no final newline)");
  const size_t last = text.rfind('\n', text.size() - 2);
  const std::string_view body = last == std::string_view::npos ? "" : text.substr(0, last + 1);
  const std::string_view sum_line = text.substr(body.size(), text.size() - body.size() - 1);
  std::vector<std::string_view> lines = Split(body, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  const size_t sum_line_no = lines.size() + 1;
  uint64_t want = 0;
  if (!sum_line.starts_with("checksum ") || sum_line.size() != 9 + 16 ||
      std::from_chars(sum_line.data() + 9, sum_line.data() + sum_line.size(), want, 16).ptr !=
          sum_line.data() + sum_line.size()) {
    return bad(sum_line_no, "expected `checksum <16 hex digits>` as the last line");
  }
  if (Checksum64(body) != want) return bad(sum_line_no, "checksum mismatch (the file is damaged)");

  if (lines.empty() || lines[0] != kVersionLine) {
    return bad(1, fmt::format("expected `{}` (an unknown version, or not a SHARDS manifest)",
                              kVersionLine));
  }
  ShardDirManifest m;
  bool have_schema = false, have_total = false;
  std::set<std::string_view> names;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t no = i + 1;
    if (have_total) return bad(no, "a line after `total`");
    std::vector<std::string_view> f = Split(lines[i], ' ');
    if (f[0] == "schema") {
      uint64_t slots = 0, dense = 0;
      if (have_schema || i != 1 || f.size() != 3 || !ParseUint64(f[1], &slots) ||
          !ParseUint64(f[2], &dense) || slots == 0 || slots > UINT32_MAX || dense > UINT32_MAX) {
        return bad(no, "expected `schema <num_slots >= 1> <num_dense>` as the second line");
      }
      m.schema = Schema{static_cast<uint32_t>(slots), static_cast<uint32_t>(dense)};
      have_schema = true;
    } else if (f[0] == "file") {
      ShardFileEntry e;
      if (!have_schema || f.size() != 4 || !IsPlainName(f[1]) || !f[1].ends_with(kShardSuffix) ||
          !ParseUint64(f[2], &e.rows) || !ParseUint64(f[3], &e.bytes) || e.rows == 0) {
        return bad(no, "expected `file <name>.ctrshard <rows >= 1> <bytes>`");
      }
      if (!names.insert(f[1]).second) return bad(no, fmt::format("{} listed twice", f[1]));
      e.name = std::string(f[1]);
      m.files.push_back(std::move(e));
    } else if (f[0] == "total") {
      uint64_t files = 0, rows = 0;
      if (f.size() != 3 || !ParseUint64(f[1], &files) || !ParseUint64(f[2], &rows)) {
        return bad(no, "expected `total <files> <rows>`");
      }
      if (files != m.files.size() || rows != m.rows()) {
        return bad(no, fmt::format("totals say {} files and {} rows; the lines list {} and {}",
                                   files, rows, m.files.size(), m.rows()));
      }
      have_total = true;
    } else {
      return bad(no, fmt::format("unknown line `{}`", lines[i].substr(0, 60)));
    }
  }
  if (!have_schema || !have_total) return bad(sum_line_no, "no `schema` or `total` line");
  return m;
}

Status WriteShardManifest(Env* env, const std::string& dir, const ShardDirManifest& m) {
  return WriteFileAtomic(env, JoinPath(dir, kShardManifestName), EncodeShardManifest(m));
}

StatusOr<ShardDirManifest> ReadShardManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kShardManifestName);
  if (!env->FileExists(path)) {
    return FailedPreconditionError(fmt::format(
        "shard directory {} has no {} manifest: the conversion that wrote it did not finish "
        "(or it was not written by ctrbox convert); run ctrbox convert again",
        dir, kShardManifestName));
  }
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(env, path, &text));
  ASSIGN_OR_RETURN(ShardDirManifest m, DecodeShardManifest(text, path));
  std::set<std::string> listed;
  for (const ShardFileEntry& f : m.files) {
    const std::string p = JoinPath(dir, f.name);
    StatusOr<uint64_t> size = env->GetFileSize(p);
    if (!size.ok()) {
      return CorruptionError(fmt::format("{}: listed in {} but missing", p, path));
    }
    if (*size != f.bytes) {
      return CorruptionError(fmt::format("{}: {} bytes, but {} lists {} (changed since convert)", p,
                                         *size, path, f.bytes));
    }
    listed.insert(f.name);
  }
  ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(dir));
  for (const std::string& c : children) {
    if (std::string_view(c).ends_with(kShardSuffix) && !listed.contains(c)) {
      return FailedPreconditionError(fmt::format(
          "{}: not listed in {} (added after the conversion?); remove it or convert again",
          JoinPath(dir, c), path));
    }
  }
  return m;
}

StatusOr<size_t> ClearShardDir(Env* env, const std::string& dir) {
  if (env->FileExists(dir) && !env->IsDirectory(dir)) {
    return InvalidArgumentError(
        fmt::format("convert --out {}: exists and is not a directory", dir));
  }
  RETURN_IF_ERROR(env->CreateDirs(dir));
  ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(dir));
  std::vector<std::string> shards;
  bool has_manifest = false;
  for (const std::string& c : children) {
    if (c == kShardManifestName) {
      has_manifest = true;
    } else if (c == kLockFileName) {
      continue;  // convert's own lock (util/dir_lock.h)
    } else if (IsConversionFile(c) || c == std::string(kShardManifestName) + ".tmp") {
      shards.push_back(c);
    } else {
      return FailedPreconditionError(fmt::format(
          "convert --out {}: the directory holds {}, which convert did not write; give an empty "
          "or new directory (convert replaces only an earlier conversion)",
          dir, c));
    }
  }
  if (has_manifest) {
    RETURN_IF_ERROR(env->DeleteFile(JoinPath(dir, kShardManifestName)));
    RETURN_IF_ERROR(env->SyncDir(dir));
  }
  for (const std::string& c : shards) RETURN_IF_ERROR(env->DeleteFile(JoinPath(dir, c)));
  if (!shards.empty()) RETURN_IF_ERROR(env->SyncDir(dir));
  return shards.size();
}

void RemoveFailedConversion(Env* env, const std::string& dir, bool created_dir) {
  StatusOr<std::vector<std::string>> children = env->GetChildren(dir);
  if (!children.ok()) return;
  for (const std::string& c : *children) {
    if (IsConversionFile(c)) env->DeleteFile(JoinPath(dir, c)).IgnoreError();
  }
  if (created_dir) env->DeleteDir(dir).IgnoreError();  // fails, harmlessly, unless empty
}

}  // namespace ctrbox
