// DirLock: one job per directory. A job holds every directory it writes (the model directory,
// the checkpoint directory, the SSD tier's directory, shard outputs) with an exclusive lock on
// DIR/LOCK for as long as it writes there, as leveldb holds its LOCK file. A second job on the
// directory, in another process or this one, is refused at once, naming the directory, its
// role and the holder's pid; a lock left by a killed process never blocks (the OS drops it
// with the process).
//
// Thread safety: a DirLock is owned by one thread at a time.
#ifndef CTRBOX_UTIL_DIR_LOCK_H_
#define CTRBOX_UTIL_DIR_LOCK_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

// The lock file's name in a held directory (listings of a directory's own files skip it).
inline constexpr std::string_view kLockFileName = "LOCK";

class DirLock {
 public:
  // Creates `dir` (and its parents) if missing, and locks it. `role` names the directory in
  // the error ("the model directory", "storage.ssd_dir"). A refusal is kFailedPrecondition:
  // "<role> <dir> is in use by another ctrbox job (pid N): ...".
  static StatusOr<std::unique_ptr<DirLock>> Acquire(Env* env, const std::string& dir,
                                                    std::string_view role);

  // Removes the LOCK file (while still holding it), then releases the lock; a directory this
  // lock created is removed too when nothing else is left in it.
  ~DirLock();

  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  DirLock(Env* env, std::string dir, bool created, std::unique_ptr<FileLock> lock)
      : env_(env), dir_(std::move(dir)), created_(created), lock_(std::move(lock)) {}

  Env* env_;
  std::string dir_;
  bool created_;
  std::unique_ptr<FileLock> lock_;
};

// A job's held directories: Add locks each distinct directory once (an empty path, or one
// already held here, is skipped), and all are released together.
class DirLocks {
 public:
  Status Add(Env* env, const std::string& dir, std::string_view role);

 private:
  std::vector<std::unique_ptr<DirLock>> locks_;
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_DIR_LOCK_H_
