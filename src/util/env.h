// Env: the file-system and clock interface through which all of ctrbox's I/O goes
// (leveldb's Env, RocksDB's FileSystem). Tests substitute in-memory or fault-injecting
// implementations; production uses Env::Posix().
//
// Thread safety: an Env is safe for concurrent use. A file object is used by one thread at a
// time, except RandomAccessFile::Read, which is safe to call concurrently.
#ifndef CTRBOX_UTIL_ENV_H_
#define CTRBOX_UTIL_ENV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace ctrbox {

class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to `n` bytes into `scratch`; sets *bytes_read (0 only at end of file).
  virtual Status Read(size_t n, char* scratch, size_t* bytes_read) = 0;
  // The path (or "<stdin>") for messages.
  virtual const std::string& name() const = 0;
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to `n` bytes at `offset`; *bytes_read < n only at end of file.
  virtual Status Read(uint64_t offset, size_t n, char* scratch, size_t* bytes_read) const = 0;
  virtual uint64_t size() const = 0;
  virtual const std::string& name() const = 0;
  // Says that the reads will be scattered (the SSD tier's group records): the OS then reads
  // nothing ahead of them, where its read-ahead would fill the page cache with the neighbours
  // of every record read (docs/storage.md, "Where the page cache cannot hide the disk"). A
  // no-op where the Env has no such hint.
  virtual void AdviseRandomReads() const {}
  // A reader out of a mapping (Env::NewMappedRandomAccessFile) unmaps the pages its reads
  // touched: they stay in the page cache (later reads map them again), but no longer count in
  // the process's RSS nor age as mapped pages, which the kernel keeps over unmapped ones and
  // costs more to reclaim. A no-op elsewhere. Safe while other threads read.
  virtual void ReleaseMappedPages() const {}
  // A reader out of a mapping: the address of bytes [offset, offset + n) of the file where
  // they are all in the mapping and in the file, so that the caller reads them in place
  // instead of copying them out (valid while this reader lives; touching a page the device
  // cannot read raises SIGBUS, as a copy out of the mapping would). Null where they are not,
  // and for every other reader: Read them.
  virtual const char* MappedBytes(uint64_t offset, size_t n) const { return nullptr; }
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::string_view data) = 0;
  // Hands buffered data to the operating system.
  virtual Status Flush() = 0;
  // Makes appended data durable (fsync).
  virtual Status Sync() = 0;
  // Flushes and closes; further calls are errors. Destruction without Close() closes
  // silently, so call Close() wherever the data matters.
  virtual Status Close() = 0;
  virtual const std::string& name() const = 0;
};

// An exclusive lock on a file (Env::LockFile), held until this is destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

// What stat(2) says of a path, links followed.
struct FileStat {
  enum class Kind { kRegular, kDirectory, kOther };  // kOther: a FIFO, socket or device
  Kind kind = Kind::kOther;
  uint64_t size = 0;
  int64_t modified_ns = 0;  // the last change of its bytes, nanoseconds since the epoch
};

class Env {
 public:
  virtual ~Env() = default;

  // The POSIX environment (stateless; lives for the whole process).
  static Env* Posix();

  // Opens `path` for streaming reads; the path "-" is standard input.
  virtual StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) = 0;
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // The same with reads that bypass the page cache (O_DIRECT): each read is widened to whole
  // blocks in the reader's own aligned buffer and the asked bytes copied out, so callers read
  // any range. For files read here and there whose pages the cache cannot keep (the SSD tier
  // on a box whose memory is mostly the model's): they then cost the box no page cache, and
  // the kernel no reclaim of it. FailedPrecondition where the file system or the Env takes no
  // such reads (tmpfs, MemEnv).
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> NewDirectRandomAccessFile(
      const std::string& path) {
    return FailedPreconditionError(path + ": this Env has no reads that bypass the page cache");
  }
  // The same with reads copied out of a shared read-only mapping of the file's first
  // max(map_bytes, size) bytes: no system call per read (a few-KB read from the page cache
  // spent ~2/3 of its time in pread's entry, page-cache lookup and copy; docs/storage.md,
  // "Reads from a mapping"). The file may grow after the open; reads past its end are cut as
  // a pread's are, and reads past the mapping go through pread. REQUIRES: no one cuts the file
  // below bytes a reader still reads (a mapped page past the end faults, SIGBUS), and an I/O
  // error of the device on a page not cached is a SIGBUS too, not a status: for files whose
  // pages the page cache mostly holds. FailedPrecondition where the Env or the file system
  // maps no files (MemEnv).
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> NewMappedRandomAccessFile(
      const std::string& path, uint64_t map_bytes) {
    (void)map_bytes;
    return FailedPreconditionError(path + ": this Env maps no files");
  }
  // Creates or truncates `path`.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // Opens `path` for appending, creating it if needed.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) = 0;
  // Renames the existing file `from` to `path` and opens it for writing from its start: what
  // is written replaces its bytes in place, and Close() cuts the file to the bytes written, so
  // that it then holds them alone, as a NewWritableFile would. Where the old bytes are in the
  // page cache their pages are written over instead of new ones being allocated (and the old
  // ones freed), which NewWritableFile's truncation would take (docs/storage.md, "Recycled
  // files"). This default renames and truncates.
  virtual StatusOr<std::unique_ptr<WritableFile>> ReuseWritableFile(const std::string& from,
                                                                    const std::string& path) {
    RETURN_IF_ERROR(RenameFile(from, path));
    return NewWritableFile(path);
  }

  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  // A regular file (after following links): not a directory, FIFO, socket or device.
  virtual bool IsRegularFile(const std::string& path) = 0;
  virtual StatusOr<uint64_t> GetFileSize(const std::string& path) = 0;
  // NotFound when `path` does not exist.
  virtual StatusOr<FileStat> Stat(const std::string& path) = 0;
  // Names (not paths) of the entries of directory `dir`, sorted, without "." and "..".
  virtual StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) = 0;
  // Creates `dir` and its missing parents; OK if it exists.
  virtual Status CreateDirs(const std::string& dir) = 0;
  virtual Status DeleteFile(const std::string& path) = 0;
  // Deletes an empty directory.
  virtual Status DeleteDir(const std::string& dir) = 0;
  // Atomically replaces `to` with `from` (rename(2)).
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // fsyncs directory `dir`, making renames and creations in it durable.
  virtual Status SyncDir(const std::string& dir) = 0;

  // Takes an exclusive lock on `path` (created if missing) at once, or fails: a lock held by
  // another process, or by another FileLock of this one, is kFailedPrecondition ("pid N
  // holds PATH" where the holder wrote its pid). The POSIX Env uses flock(2): the OS drops the
  // lock when its holder dies, so a killed job never blocks the next one.
  virtual StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;

  // The wall clock: microseconds since 1970-01-01 00:00 UTC (file times and partition names
  // are compared with it).
  virtual uint64_t NowMicros() = 0;
  // The same in seconds.
  double NowSeconds() { return static_cast<double>(NowMicros()) * 1e-6; }
};

// Reads the whole file at `path` into *out (for small files: manifests, configs).
Status ReadFileToString(Env* env, const std::string& path, std::string* out);

// Writes `data` to `path` durably and atomically: a temporary file in the same directory is
// written, synced, renamed over `path`, and the directory is synced.
Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data);

// Deletes directory `dir` and the files in it (no subdirectories). With `first`, that file goes
// first and the directory is synced, so that a crash halfway leaves a directory without it
// (incomplete, for a directory whose MANIFEST marks it complete), never one with files
// missing. OK if `dir` does not exist.
Status DeleteDirOfFiles(Env* env, const std::string& dir, const std::string& first = "");

// Joins two path components with one '/'.
std::string JoinPath(std::string_view a, std::string_view b);
// The directory part of `path` ("." if none).
std::string DirName(std::string_view path);
// The last component of `path`.
std::string BaseName(std::string_view path);

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_ENV_H_
