#include "util/dir_lock.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace ctrbox {

StatusOr<std::unique_ptr<DirLock>> DirLock::Acquire(Env* env, const std::string& dir,
                                                    std::string_view role) {
  if (env->FileExists(dir) && !env->IsDirectory(dir)) {
    return InvalidArgumentError(fmt::format("{} {}: exists and is not a directory", role, dir));
  }
  const bool created = !env->FileExists(dir);
  RETURN_IF_ERROR(env->CreateDirs(dir));
  StatusOr<std::unique_ptr<FileLock>> lock = env->LockFile(JoinPath(dir, kLockFileName));
  if (!lock.ok()) {
    if (lock.status().code() != StatusCode::kFailedPrecondition) return lock.status();
    return FailedPreconditionError(fmt::format(
        "{} {} is in use by another ctrbox job ({}): one job writes a directory at a time; wait "
        "for it to end, or give this job another directory",
        role, dir, lock.status().message()));
  }
  return std::unique_ptr<DirLock>(new DirLock(env, dir, created, std::move(*lock)));
}

DirLock::~DirLock() {
  env_->DeleteFile(JoinPath(dir_, kLockFileName)).IgnoreError();
  lock_.reset();
  if (created_) env_->DeleteDir(dir_).IgnoreError();  // fails, harmlessly, unless empty
}

Status DirLocks::Add(Env* env, const std::string& dir, std::string_view role) {
  if (dir.empty()) return Status::OK();
  // One lock per directory however it is spelled ("m", "./m", "m/").
  std::string name = std::filesystem::path(dir).lexically_normal().string();
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  for (const auto& l : locks_) {
    if (l->dir() == name) return Status::OK();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DirLock> lock, DirLock::Acquire(env, name, role));
  locks_.push_back(std::move(lock));
  return Status::OK();
}

}  // namespace ctrbox
