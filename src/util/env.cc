#include "util/env.h"

namespace ctrbox {

Status ReadFileToString(Env* env, const std::string& path, std::string* out) {
  out->clear();
  ASSIGN_OR_RETURN(auto file, env->NewSequentialFile(path));
  constexpr size_t kChunk = 1 << 16;
  while (true) {
    size_t old = out->size();
    out->resize(old + kChunk);
    size_t n = 0;
    Status s = file->Read(kChunk, out->data() + old, &n);
    out->resize(old + n);
    RETURN_IF_ERROR(s);
    if (n == 0) return Status::OK();
  }
}

Status DeleteDirOfFiles(Env* env, const std::string& dir, const std::string& first) {
  if (!env->IsDirectory(dir)) return Status::OK();
  if (!first.empty() && env->FileExists(JoinPath(dir, first))) {
    RETURN_IF_ERROR(env->DeleteFile(JoinPath(dir, first)));
    RETURN_IF_ERROR(env->SyncDir(dir));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(dir));
  for (const std::string& c : children) RETURN_IF_ERROR(env->DeleteFile(JoinPath(dir, c)));
  return env->DeleteDir(dir);
}

Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data) {
  if (env->IsDirectory(path)) {
    return InvalidArgumentError(path + " is a directory: name a file to write");
  }
  const std::string tmp = path + ".tmp";
  Status s = [&]() -> Status {
    ASSIGN_OR_RETURN(auto file, env->NewWritableFile(tmp));
    RETURN_IF_ERROR(file->Append(data));
    RETURN_IF_ERROR(file->Sync());
    RETURN_IF_ERROR(file->Close());
    return env->RenameFile(tmp, path);
  }();
  if (!s.ok()) {
    // Nothing half-written is left beside the file (the old file, if any, is untouched).
    if (env->FileExists(tmp)) env->DeleteFile(tmp).IgnoreError();
    return s;
  }
  return env->SyncDir(DirName(path));
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  std::string r(a);
  if (r.back() != '/') r += '/';
  r += b;
  return r;
}

std::string DirName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t pos = path.rfind('/');
  if (pos == std::string_view::npos) return ".";
  if (pos == 0) return "/";
  return std::string(path.substr(0, pos));
}

std::string BaseName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t pos = path.rfind('/');
  return std::string(pos == std::string_view::npos ? path : path.substr(pos + 1));
}

}  // namespace ctrbox
