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

Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  {
    ASSIGN_OR_RETURN(auto file, env->NewWritableFile(tmp));
    RETURN_IF_ERROR(file->Append(data));
    RETURN_IF_ERROR(file->Sync());
    RETURN_IF_ERROR(file->Close());
  }
  RETURN_IF_ERROR(env->RenameFile(tmp, path));
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
