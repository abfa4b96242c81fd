#include "util/mem_env.h"

#include <algorithm>
#include <chrono>

namespace ctrbox {

struct MemEnv::Node {
  std::string data;          // what the file holds now
  std::string synced;        // what a crash leaves of it
  bool sync_failed = false;  // a Sync failed: its unsynced bytes never become durable
  int64_t modified_ns = 0;   // its creation or last append (the wall clock)
};

namespace {

int64_t WallNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "a//b/" -> "a/b"; "/" stays.
std::string Normalize(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out += c;
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace

// Reads through a shared node; its bytes may grow while a reader is open.
class MemEnv::Reader : public SequentialFile, public RandomAccessFile {
 public:
  Reader(MemEnv* env, std::shared_ptr<Node> node, std::string name)
      : env_(env), node_(std::move(node)), name_(std::move(name)) {}

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    RETURN_IF_ERROR(Read(pos_, n, scratch, bytes_read));
    pos_ += *bytes_read;
    return Status::OK();
  }
  Status Read(uint64_t offset, size_t n, char* scratch, size_t* bytes_read) const override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    *bytes_read = 0;
    RETURN_IF_ERROR(env_->Count(FaultOp::kRead));
    const std::string& d = node_->data;
    if (offset >= d.size()) return Status::OK();
    *bytes_read = std::min<uint64_t>(n, d.size() - offset);
    std::copy_n(d.data() + offset, *bytes_read, scratch);
    return Status::OK();
  }
  uint64_t size() const override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    return node_->data.size();
  }
  const std::string& name() const override { return name_; }

 private:
  MemEnv* env_;
  std::shared_ptr<Node> node_;
  std::string name_;
  uint64_t pos_ = 0;
};

class MemEnv::Writer : public WritableFile {
 public:
  Writer(MemEnv* env, std::shared_ptr<Node> node, std::string name)
      : env_(env), node_(std::move(node)), name_(std::move(name)) {}

  Status Append(std::string_view data) override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    if (closed_) return FailedPreconditionError(name_ + ": append after close");
    RETURN_IF_ERROR(env_->Count(FaultOp::kWrite));
    node_->data.append(data);
    node_->modified_ns = WallNanos();
    return Status::OK();
  }
  Status Flush() override {
    return closed_ ? FailedPreconditionError(name_ + ": closed") : Status::OK();
  }
  Status Sync() override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    if (closed_) return FailedPreconditionError(name_ + ": sync after close");
    Status s = env_->Count(FaultOp::kSync);
    if (!s.ok()) {
      node_->sync_failed = true;
      return s;
    }
    if (!node_->sync_failed) node_->synced = node_->data;
    return Status::OK();
  }
  Status Close() override {
    if (closed_) return FailedPreconditionError(name_ + ": closed twice");
    closed_ = true;
    return Status::OK();
  }
  const std::string& name() const override { return name_; }

 private:
  MemEnv* env_;
  std::shared_ptr<Node> node_;
  std::string name_;
  bool closed_ = false;
};

MemEnv::MemEnv() { dirs_ = {"/", "."}; }
MemEnv::~MemEnv() = default;

Status MemEnv::NoSpace(const std::string& what) {
  return ResourceExhaustedError(what + ": No space left on device (injected)");
}
Status MemEnv::Eio(const std::string& what) {
  return IOError(what + ": Input/output error (injected)");
}

void MemEnv::InjectFault(FaultOp op, uint64_t n, Status error, bool sticky) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_[static_cast<int>(op)] = Fault{calls_[static_cast<int>(op)] + n, std::move(error), sticky};
}

void MemEnv::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_ = {};
}

uint64_t MemEnv::Calls(FaultOp op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_[static_cast<int>(op)];
}

uint64_t MemEnv::FaultsFired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

Status MemEnv::Count(FaultOp op) {
  const uint64_t n = ++calls_[static_cast<int>(op)];
  const uint64_t all = ++calls_[static_cast<int>(FaultOp::kAny)];
  for (auto [f, at] : {std::pair{&faults_[static_cast<int>(op)], n},
                       std::pair{&faults_[static_cast<int>(FaultOp::kAny)], all}}) {
    if (f->at != 0 && (at == f->at || (f->sticky && at > f->at))) {
      ++fired_;
      return f->error;
    }
  }
  return Status::OK();
}

void MemEnv::SimulateCrash() {
  std::lock_guard<std::mutex> lock(mu_);
  files_ = durable_;
  for (auto& [name, node] : files_) {
    // The surviving names see the durable bytes from now on, in a fresh node: handles opened
    // before the crash keep writing into the old one, which nothing refers to any more.
    auto fresh = std::make_shared<Node>();
    fresh->data = fresh->synced = node->synced;
    fresh->modified_ns = node->modified_ns;
    node = fresh;
  }
  durable_ = files_;
}

Status MemEnv::FlipBit(const std::string& path, uint64_t bit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(Normalize(path));
  if (it == files_.end()) return NotFoundError(path + ": no such file");
  Node& n = *it->second;
  if (bit / 8 >= n.data.size()) return OutOfRangeError(path + ": bit beyond the end");
  n.data[bit / 8] = static_cast<char>(n.data[bit / 8] ^ (1 << (bit % 8)));
  if (bit / 8 < n.synced.size()) {
    n.synced[bit / 8] = static_cast<char>(n.synced[bit / 8] ^ (1 << (bit % 8)));
  }
  return Status::OK();
}

StatusOr<std::string> MemEnv::Contents(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(Normalize(path));
  if (it == files_.end()) return NotFoundError(path + ": no such file");
  return it->second->data;
}

StatusOr<std::unique_ptr<SequentialFile>> MemEnv::NewSequentialFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Count(FaultOp::kOpen));
  auto it = files_.find(Normalize(path));
  if (it == files_.end()) return NotFoundError(path + ": No such file or directory");
  return std::unique_ptr<SequentialFile>(new Reader(this, it->second, path));
}

StatusOr<std::unique_ptr<RandomAccessFile>> MemEnv::NewRandomAccessFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Count(FaultOp::kOpen));
  auto it = files_.find(Normalize(path));
  if (it == files_.end()) return NotFoundError(path + ": No such file or directory");
  return std::unique_ptr<RandomAccessFile>(new Reader(this, it->second, path));
}

StatusOr<std::unique_ptr<WritableFile>> MemEnv::OpenWritable(const std::string& path,
                                                             bool truncate) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Count(FaultOp::kOpen));
  const std::string p = Normalize(path);
  if (!dirs_.count(DirName(p))) return NotFoundError(path + ": No such file or directory");
  if (dirs_.count(p)) return IOError(path + ": Is a directory");
  std::shared_ptr<Node>& node = files_[p];
  if (!node) {
    node = std::make_shared<Node>();
    node->modified_ns = WallNanos();
  } else if (truncate) {
    node->data.clear();  // the truncation is durable only with the next Sync
    node->sync_failed = false;
    node->modified_ns = WallNanos();
  }
  return std::unique_ptr<WritableFile>(new Writer(this, node, path));
}

StatusOr<std::unique_ptr<WritableFile>> MemEnv::NewWritableFile(const std::string& path) {
  return OpenWritable(path, true);
}

StatusOr<std::unique_ptr<WritableFile>> MemEnv::NewAppendableFile(const std::string& path) {
  return OpenWritable(path, false);
}

bool MemEnv::FileExists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string p = Normalize(path);
  return files_.count(p) || dirs_.count(p);
}

bool MemEnv::IsDirectory(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return dirs_.count(Normalize(path)) > 0;
}

bool MemEnv::IsRegularFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.count(Normalize(path)) > 0;
}

StatusOr<uint64_t> MemEnv::GetFileSize(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(Normalize(path));
  if (it == files_.end()) return NotFoundError(path + ": No such file or directory");
  return static_cast<uint64_t>(it->second->data.size());
}

StatusOr<FileStat> MemEnv::Stat(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string p = Normalize(path);
  FileStat f;
  if (auto it = files_.find(p); it != files_.end()) {
    f.kind = FileStat::Kind::kRegular;
    f.size = it->second->data.size();
    f.modified_ns = it->second->modified_ns;
    return f;
  }
  if (!dirs_.count(p)) return NotFoundError(path + ": No such file or directory");
  f.kind = FileStat::Kind::kDirectory;
  return f;
}

StatusOr<std::vector<std::string>> MemEnv::GetChildren(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string d = Normalize(dir);
  if (!dirs_.count(d)) return NotFoundError(dir + ": No such file or directory");
  std::set<std::string> names;
  for (const auto& [p, node] : files_) {
    if (DirName(p) == d) names.insert(BaseName(p));
  }
  for (const std::string& p : dirs_) {
    if (p != d && p != "/" && p != "." && DirName(p) == d) names.insert(BaseName(p));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

Status MemEnv::CreateDirs(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::string d = Normalize(dir); !dirs_.count(d); d = DirName(d)) {
    if (files_.count(d)) return IOError(dir + ": a file is in the way");
    dirs_.insert(d);
  }
  return Status::OK();
}

Status MemEnv::DeleteFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Count(FaultOp::kDelete));
  if (files_.erase(Normalize(path)) == 0) {
    return NotFoundError(path + ": No such file or directory");
  }
  return Status::OK();
}

Status MemEnv::DeleteDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Count(FaultOp::kDelete));
  const std::string d = Normalize(dir);
  if (!dirs_.count(d)) return NotFoundError(dir + ": No such file or directory");
  for (const auto& [p, node] : files_) {
    if (DirName(p) == d) return IOError(dir + ": Directory not empty");
  }
  for (const std::string& p : dirs_) {
    if (p != d && DirName(p) == d) return IOError(dir + ": Directory not empty");
  }
  dirs_.erase(d);
  return Status::OK();
}

Status MemEnv::RenameFile(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Count(FaultOp::kRename));
  const std::string f = Normalize(from), t = Normalize(to);
  auto it = files_.find(f);
  if (it == files_.end()) return NotFoundError(from + ": No such file or directory");
  if (!dirs_.count(DirName(t))) return NotFoundError(to + ": No such file or directory");
  std::shared_ptr<Node> node = it->second;
  files_.erase(it);
  files_[t] = std::move(node);
  return Status::OK();
}

Status MemEnv::SyncDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Count(FaultOp::kSync));
  const std::string d = Normalize(dir);
  if (!dirs_.count(d)) return NotFoundError(dir + ": No such file or directory");
  for (auto it = durable_.begin(); it != durable_.end();) {
    it = DirName(it->first) == d ? durable_.erase(it) : std::next(it);
  }
  for (const auto& [p, node] : files_) {
    if (DirName(p) == d) durable_[p] = node;
  }
  return Status::OK();
}

namespace {
class MemFileLock final : public FileLock {
 public:
  MemFileLock(std::mutex* mu, std::set<std::string>* locks, std::string path)
      : mu_(mu), locks_(locks), path_(std::move(path)) {}
  ~MemFileLock() override {
    std::lock_guard<std::mutex> l(*mu_);
    locks_->erase(path_);
  }

 private:
  std::mutex* mu_;
  std::set<std::string>* locks_;
  std::string path_;
};
}  // namespace

StatusOr<std::unique_ptr<FileLock>> MemEnv::LockFile(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  if (!locks_.insert(path).second) return FailedPreconditionError(path + " is locked");
  return std::unique_ptr<FileLock>(new MemFileLock(&mu_, &locks_, path));
}

uint64_t MemEnv::NowMicros() { return static_cast<uint64_t>(WallNanos() / 1000); }

}  // namespace ctrbox
