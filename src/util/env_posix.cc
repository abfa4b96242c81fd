// The POSIX implementation of Env.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "util/env.h"

namespace ctrbox {
namespace {

Status PosixError(const std::string& context, int err) {
  std::string m = context + ": " + std::strerror(err);
  if (err == ENOENT) return NotFoundError(std::move(m));
  return IOError(std::move(m));
}

class PosixSequentialFile final : public SequentialFile {
 public:
  PosixSequentialFile(std::string name, int fd, bool owns)
      : name_(std::move(name)), fd_(fd), owns_(owns) {}
  ~PosixSequentialFile() override {
    if (owns_) ::close(fd_);
  }
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    while (true) {
      ssize_t r = ::read(fd_, scratch, n);
      if (r >= 0) {
        *bytes_read = static_cast<size_t>(r);
        return Status::OK();
      }
      if (errno == EINTR) continue;
      *bytes_read = 0;
      return PosixError("read " + name_, errno);
    }
  }
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  int fd_;
  bool owns_;
};

// Reads up to n bytes at offset (fewer only at the file's end), retrying interrupted reads.
Status PreadFully(int fd, const std::string& name, uint64_t offset, size_t n, char* scratch,
                  size_t* bytes_read) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, scratch + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      *bytes_read = done;
      return PosixError("pread " + name, errno);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  *bytes_read = done;
  return Status::OK();
}

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string name, int fd, uint64_t size)
      : name_(std::move(name)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }
  Status Read(uint64_t offset, size_t n, char* scratch, size_t* bytes_read) const override {
    return PreadFully(fd_, name_, offset, n, scratch, bytes_read);
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void AdviseRandomReads() const override { ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM); }

 private:
  std::string name_;
  int fd_;
  uint64_t size_;
};

// Reads copied out of a shared read-only mapping of the file's first map_bytes() bytes (the
// file may grow into them after the open: the writer appends through the same page cache). A
// page past the file's end must not be touched (SIGBUS), so a read past the end known is
// checked against the file's size first (fstat) and cut there, as a pread would be; a read
// past the mapping goes through pread.
class PosixMappedFile final : public RandomAccessFile {
 public:
  PosixMappedFile(std::string name, int fd, uint64_t size, const char* map, uint64_t map_bytes)
      : name_(std::move(name)),
        fd_(fd),
        size_(size),
        map_(map),
        map_bytes_(map_bytes),
        known_(std::min(size, map_bytes)) {}
  ~PosixMappedFile() override {
    ::munmap(const_cast<char*>(map_), map_bytes_);
    ::close(fd_);
  }
  Status Read(uint64_t offset, size_t n, char* scratch, size_t* bytes_read) const override {
    *bytes_read = 0;
    if (n == 0) return Status::OK();
    uint64_t known = 0;
    RETURN_IF_ERROR(Known(offset + n, &known));
    if (offset + n > map_bytes_) return PreadFully(fd_, name_, offset, n, scratch, bytes_read);
    if (offset >= known) return Status::OK();
    const size_t got = static_cast<size_t>(std::min<uint64_t>(n, known - offset));
    std::memcpy(scratch, map_ + offset, got);
    *bytes_read = got;
    return Status::OK();
  }
  const char* MappedBytes(uint64_t offset, size_t n) const override {
    // A failed fstat gives null: the caller's Read then meets it and reports it.
    uint64_t known = 0;
    if (n == 0 || offset + n > map_bytes_ || !Known(offset + n, &known).ok() ||
        offset + n > known) {
      return nullptr;
    }
    return map_ + offset;
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void AdviseRandomReads() const override {
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
    ::madvise(const_cast<char*>(map_), map_bytes_, MADV_RANDOM);
  }
  void ReleaseMappedPages() const override {
    // A shared file mapping's pages stay in the page cache; only this mapping lets go of them.
    ::madvise(const_cast<char*>(map_), map_bytes_, MADV_DONTNEED);
  }

 private:
  // Sets *known to the bytes known to be in the file (at most map_bytes_), asking the file's
  // size first when a read would end past what is known (the file being appended to grows
  // under its mapping).
  Status Known(uint64_t end, uint64_t* known_out) const {
    uint64_t known = known_.load(std::memory_order_acquire);
    if (end > known && known < map_bytes_) {
      struct stat st;
      if (::fstat(fd_, &st) != 0) return PosixError("stat " + name_, errno);
      const uint64_t now = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), map_bytes_);
      if (now > known) {  // others may raise it too: keep the largest
        while (!known_.compare_exchange_weak(known, now, std::memory_order_acq_rel) &&
               known < now) {
        }
        known = std::max(known, now);
      }
      // The file may also have been cut (a recycled file sealed): nothing past its end.
      if (static_cast<uint64_t>(st.st_size) < known) known = static_cast<uint64_t>(st.st_size);
    }
    *known_out = known;
    return Status::OK();
  }

  std::string name_;
  int fd_;
  uint64_t size_;  // at the open
  const char* map_;
  uint64_t map_bytes_;
  mutable std::atomic<uint64_t> known_;  // bytes known to be in the file (at most map_bytes_)
};

// O_DIRECT reads: offsets, sizes and the buffer must be multiples of the device's logical block
// (512 B or 4 KiB): a read is widened to whole 4 KiB blocks in a buffer of the calling thread.
class PosixDirectFile final : public RandomAccessFile {
 public:
  static constexpr uint64_t kBlock = 4096;
  PosixDirectFile(std::string name, int fd, uint64_t size)
      : name_(std::move(name)), fd_(fd), size_(size) {}
  ~PosixDirectFile() override { ::close(fd_); }
  Status Read(uint64_t offset, size_t n, char* scratch, size_t* bytes_read) const override {
    *bytes_read = 0;
    if (n == 0) return Status::OK();
    const uint64_t begin = offset / kBlock * kBlock;
    const uint64_t end = (offset + n + kBlock - 1) / kBlock * kBlock;
    const size_t want = static_cast<size_t>(end - begin);
    char* buf = Buffer(want);
    if (buf == nullptr) return IOError("read " + name_ + ": no memory for an aligned buffer");
    size_t done = 0;
    while (done < want) {
      ssize_t r = ::pread(fd_, buf + done, want - done, static_cast<off_t>(begin + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError("pread (O_DIRECT) " + name_, errno);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
      if (done % kBlock != 0) break;  // the file's end, which need not be aligned
    }
    const uint64_t skip = offset - begin;
    const size_t got = done > skip ? std::min<size_t>(n, done - skip) : 0;
    std::memcpy(scratch, buf + skip, got);
    *bytes_read = got;
    return Status::OK();
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  // The calling thread's aligned buffer of at least `bytes` (kept: the SSD tier's reading
  // threads read records of similar sizes).
  static char* Buffer(size_t bytes) {
    struct Aligned {
      char* data = nullptr;
      size_t size = 0;
      ~Aligned() { std::free(data); }
    };
    thread_local Aligned buf;
    if (buf.size < bytes) {
      std::free(buf.data);
      buf.size = 0;
      buf.data = static_cast<char*>(std::aligned_alloc(kBlock, bytes));
      if (buf.data != nullptr) buf.size = bytes;
    }
    return buf.data;
  }

  std::string name_;
  int fd_;
  uint64_t size_;
};

class PosixWritableFile final : public WritableFile {
 public:
  // cut_on_close: Close() truncates the file to the bytes written through this object (a
  // reused file, Env::ReuseWritableFile).
  PosixWritableFile(std::string name, int fd, bool cut_on_close = false)
      : name_(std::move(name)), fd_(fd), cut_on_close_(cut_on_close) {
    buf_.reserve(kBufferSize);
  }
  ~PosixWritableFile() override {
    if (fd_ >= 0) Close().IgnoreError();  // the caller chose not to Close(); nothing to report to
  }
  Status Append(std::string_view data) override {
    if (fd_ < 0) return FailedPreconditionError("append to closed file " + name_);
    if (buf_.size() + data.size() > kBufferSize) {
      RETURN_IF_ERROR(Flush());
      if (data.size() >= kBufferSize) return WriteRaw(data);
    }
    buf_.append(data);
    return Status::OK();
  }
  Status Flush() override {
    if (fd_ < 0) return FailedPreconditionError("flush of closed file " + name_);
    Status s = WriteRaw(buf_);
    buf_.clear();
    return s;
  }
  Status Sync() override {
    RETURN_IF_ERROR(Flush());
    if (::fdatasync(fd_) != 0) return PosixError("fdatasync " + name_, errno);
    return Status::OK();
  }
  Status Close() override {
    if (fd_ < 0) return Status::OK();
    Status s = Flush();
    if (s.ok() && cut_on_close_ && ::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
      s = PosixError("truncate " + name_, errno);
    }
    if (::close(fd_) != 0 && s.ok()) s = PosixError("close " + name_, errno);
    fd_ = -1;
    return s;
  }
  const std::string& name() const override { return name_; }

 private:
  static constexpr size_t kBufferSize = 1 << 20;

  Status WriteRaw(std::string_view data) {
    while (!data.empty()) {
      ssize_t w = ::write(fd_, data.data(), data.size());
      if (w < 0) {
        if (errno == EINTR) continue;
        return PosixError("write " + name_, errno);
      }
      data.remove_prefix(static_cast<size_t>(w));
      written_ += static_cast<uint64_t>(w);
    }
    return Status::OK();
  }

  std::string name_;
  int fd_;
  const bool cut_on_close_;
  uint64_t written_ = 0;  // bytes handed to write(2)
  std::string buf_;
};

class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // the flock goes with the descriptor

 private:
  int fd_;
};

// Opens a file to read without updating its access time (O_NOATIME): the kernel then skips
// the access-time check on every read, which the parameter files' millions of preads paid
// for. O_NOATIME is refused (EPERM) on a file the caller neither owns nor has CAP_FOWNER
// over; such a file is opened plainly.
int OpenToRead(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = ::open(path.c_str(), flags);
  return fd;
}

class PosixEnv final : public Env {
 public:
  StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override {
    if (path == "-") {
      return std::unique_ptr<SequentialFile>(new PosixSequentialFile("<stdin>", 0, false));
    }
    int fd = OpenToRead(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + path, errno);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<SequentialFile>(new PosixSequentialFile(path, fd, true));
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    int fd = OpenToRead(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return PosixError("stat " + path, err);
    }
    return std::unique_ptr<RandomAccessFile>(
        new PosixRandomAccessFile(path, fd, static_cast<uint64_t>(st.st_size)));
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewDirectRandomAccessFile(
      const std::string& path) override {
    int fd = OpenToRead(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
      if (errno == EINVAL) {
        return FailedPreconditionError(path + ": the file system takes no O_DIRECT reads");
      }
      return PosixError("open (O_DIRECT) " + path, errno);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return PosixError("stat " + path, err);
    }
    auto file = std::make_unique<PosixDirectFile>(path, fd, static_cast<uint64_t>(st.st_size));
    // A file system may take O_DIRECT at open and refuse its reads (EINVAL): try one.
    char byte;
    size_t got = 0;
    if (st.st_size > 0 && !file->Read(0, 1, &byte, &got).ok()) {
      return FailedPreconditionError(path + ": the file system takes no O_DIRECT reads");
    }
    return std::unique_ptr<RandomAccessFile>(std::move(file));
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewMappedRandomAccessFile(
      const std::string& path, uint64_t map_bytes) override {
    int fd = OpenToRead(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open " + path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return PosixError("stat " + path, err);
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    const uint64_t bytes = std::max<uint64_t>({map_bytes, size, 1});
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      if (err == ENODEV || err == EACCES || err == ENOMEM) {
        return FailedPreconditionError(path + ": mmap: " + std::strerror(err));
      }
      return PosixError("mmap " + path, err);
    }
    return std::unique_ptr<RandomAccessFile>(
        new PosixMappedFile(path, fd, size, static_cast<const char*>(map), bytes));
  }
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return OpenWritable(path, O_TRUNC);
  }
  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    return OpenWritable(path, O_APPEND);
  }
  StatusOr<std::unique_ptr<WritableFile>> ReuseWritableFile(const std::string& from,
                                                            const std::string& path) override {
    RETURN_IF_ERROR(RenameFile(from, path));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open for writing " + path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, /*cut_on_close=*/true));
  }
  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
  bool IsDirectory(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
  bool IsRegularFile(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }
  StatusOr<uint64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError("stat " + path, errno);
    return static_cast<uint64_t>(st.st_size);
  }
  StatusOr<FileStat> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError("stat " + path, errno);
    FileStat f;
    f.kind = S_ISREG(st.st_mode)   ? FileStat::Kind::kRegular
             : S_ISDIR(st.st_mode) ? FileStat::Kind::kDirectory
                                   : FileStat::Kind::kOther;
    f.size = static_cast<uint64_t>(st.st_size);
    f.modified_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    return f;
  }
  StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PosixError("opendir " + dir, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
  Status CreateDirs(const std::string& dir) override {
    if (dir.empty() || IsDirectory(dir)) return Status::OK();
    std::string parent = DirName(dir);
    if (parent != dir && parent != "." && parent != "/") RETURN_IF_ERROR(CreateDirs(parent));
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return PosixError("mkdir " + dir, errno);
    }
    return Status::OK();
  }
  Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("unlink " + path, errno);
    return Status::OK();
  }
  Status DeleteDir(const std::string& dir) override {
    if (::rmdir(dir.c_str()) != 0) return PosixError("rmdir " + dir, errno);
    return Status::OK();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError("rename " + from + " to " + to, errno);
    }
    return Status::OK();
  }
  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open directory " + dir, errno);
    Status s;
    if (::fsync(fd) != 0) s = PosixError("fsync directory " + dir, errno);
    ::close(fd);
    return s;
  }
  StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return PosixError("open " + path, errno);
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        if (err != EWOULDBLOCK) {
          ::close(fd);
          return PosixError("lock " + path, err);
        }
        char pid[32] = {};
        const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
        ::close(fd);
        std::string holder(pid, n > 0 ? static_cast<size_t>(n) : 0);
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' '))
          holder.pop_back();
        if (holder.empty()) return FailedPreconditionError(path + " is locked");
        const bool me = holder == std::to_string(::getpid());
        return FailedPreconditionError("pid " + holder + (me ? ", this process," : "") + " holds " +
                                       path);
      }
      // A holder lets go by removing the file, then unlocking: lock the file the path names.
      struct stat held, named;
      if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
          held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
        const std::string pid = std::to_string(::getpid()) + "\n";
        if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
          const int err = errno;
          ::close(fd);
          return PosixError("write " + path, err);
        }
        return std::unique_ptr<FileLock>(new PosixFileLock(fd));
      }
      ::close(fd);
    }
    return IOError("lock " + path + ": the file was replaced 100 times while locking it");
  }

  uint64_t NowMicros() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }

 private:
  StatusOr<std::unique_ptr<WritableFile>> OpenWritable(const std::string& path, int mode) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0644);
    if (fd < 0) return PosixError("open for writing " + path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
};

}  // namespace

Env* Env::Posix() {
  static PosixEnv* env = new PosixEnv();  // stateless; never destroyed
  return env;
}

}  // namespace ctrbox
