// MemEnv: an in-memory Env with a crash model and fault injection, for tests of everything
// that must survive a crash or an I/O error (docs/fault_injection.md; leveldb's
// FaultInjectionTestEnv, RocksDB's FaultInjectionTestFS).
//
// Crash model. A file's bytes become durable at WritableFile::Sync; a directory entry
// (creation, rename, deletion) becomes durable at SyncDir of its directory. SimulateCrash()
// reverts every file to its last synced bytes and the namespace to its last synced entries:
// a synced file whose entry was never synced disappears; an entry synced before its file was
// is an empty (or older) file. Directories are durable once created.
//
// fsync failure model ("fsyncgate"): after a Sync fails, that file's unsynced bytes are lost
// for good. A later Sync of the file reports success but makes nothing durable, as Linux does
// after it has reported the error and dropped the dirty pages; code that retries a failed
// fsync and then trusts it is caught by the next SimulateCrash().
//
// Faults: InjectFault(op, n, error) fails the n-th next call of that kind (or of any kind) with
// `error` (NoSpace() or Eio() for ENOSPC and EIO), once or from then on. A failed Append
// writes nothing. FlipBit corrupts stored bytes.
//
// Thread safety: every method may be called concurrently (one mutex); file objects follow the
// Env contract (env.h). A file object opened before SimulateCrash() writes into the lost
// version of its file.
#ifndef CTRBOX_UTIL_MEM_ENV_H_
#define CTRBOX_UTIL_MEM_ENV_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "util/env.h"

namespace ctrbox {

enum class FaultOp : int {
  kRead = 0,  // SequentialFile::Read, RandomAccessFile::Read
  kWrite,     // WritableFile::Append
  kSync,      // WritableFile::Sync, Env::SyncDir
  kOpen,      // New*File
  kRename,    // Env::RenameFile
  kDelete,    // Env::DeleteFile, Env::DeleteDir
  kAny,       // any of the above
};
constexpr int kNumFaultOps = 7;

class MemEnv : public Env {
 public:
  MemEnv();
  ~MemEnv() override;

  // ENOSPC and EIO as the POSIX Env reports them (resource_exhausted, io_error).
  static Status NoSpace(const std::string& what);
  static Status Eio(const std::string& what);

  // Fails the n-th (1-based) next call of `op` with `error`; sticky: that call and every later
  // one. Replaces an earlier fault of the same op.
  void InjectFault(FaultOp op, uint64_t n, Status error, bool sticky = false);
  void ClearFaults();
  // Calls of `op` so far (kAny: all calls), counted whether they failed or not.
  uint64_t Calls(FaultOp op) const;
  // Faults that fired so far.
  uint64_t FaultsFired() const;

  // Loses everything not durable (see above).
  void SimulateCrash();
  // Flips bit `bit` (0 = lowest bit of the first byte) of the file's current and synced bytes.
  Status FlipBit(const std::string& path, uint64_t bit);
  // The file's current bytes (not a counted read).
  StatusOr<std::string> Contents(const std::string& path) const;

  // Env
  StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override;
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;
  bool IsRegularFile(const std::string& path) override;  // every file MemEnv holds is
  StatusOr<uint64_t> GetFileSize(const std::string& path) override;
  StatusOr<FileStat> Stat(const std::string& path) override;  // modified: its last append
  StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override;
  Status CreateDirs(const std::string& dir) override;
  Status DeleteFile(const std::string& path) override;
  Status DeleteDir(const std::string& dir) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  // Locks are names held in this Env (no file is made); not a counted call.
  StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;
  uint64_t NowMicros() override;

  struct Node;  // a file's bytes (shared by the names and handles that refer to it)

 private:
  class Reader;
  class Writer;
  friend class Reader;
  friend class Writer;

  // Counts a call of `op`; returns the injected error if one fires. REQUIRES: mu_ held.
  Status Count(FaultOp op);
  StatusOr<std::unique_ptr<WritableFile>> OpenWritable(const std::string& path, bool truncate);

  struct Fault {
    uint64_t at = 0;  // the Calls() value at which it fires; 0: none
    Status error;
    bool sticky = false;
  };

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Node>> files_;    // the namespace now
  std::map<std::string, std::shared_ptr<Node>> durable_;  // ... as a crash would leave it
  std::set<std::string> dirs_;
  std::set<std::string> locks_;
  std::array<uint64_t, kNumFaultOps> calls_{};
  std::array<Fault, kNumFaultOps> faults_{};
  uint64_t fired_ = 0;
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_MEM_ENV_H_
