#include "table/ssd_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "util/coding.h"

namespace ctrbox {
namespace {

constexpr char kIndexMagic[8] = {'C', 'T', 'R', 'S', 'I', 'D', 'X', '1'};
constexpr uint32_t kIndexVersion = 1;
constexpr const char* kIndexName = "INDEX";

std::string FileNameOf(uint32_t id) { return fmt::format("params-{:06d}.dat", id); }

bool IsStoreFile(const std::string& name) {
  return (name.rfind("params-", 0) == 0 && name.size() > 4 &&
          name.substr(name.size() - 4) == ".dat") ||
         name == kIndexName || name == std::string(kIndexName) + ".tmp";
}

}  // namespace

SsdStore::SsdStore(Env* env, SsdOptions options, ValueLayout layout)
    : env_(env), options_(std::move(options)), layout_(layout) {
  index_.assign(size_t{1} << options_.group_bits, GroupEntry{});
}

Status SsdStore::RemoveFiles(Env* env, const std::string& dir) {
  if (!env->IsDirectory(dir)) return Status::OK();
  ASSIGN_OR_RETURN(auto children, env->GetChildren(dir));
  for (const std::string& c : children) {
    if (IsStoreFile(c)) RETURN_IF_ERROR(env->DeleteFile(JoinPath(dir, c)));
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<SsdStore>> SsdStore::Create(Env* env, const SsdOptions& options,
                                                     const ValueLayout& layout) {
  if (options.group_bits < 1 || options.group_bits > 30) {
    return InvalidArgumentError("storage.group_bits must be in [1, 30]");
  }
  if (options.file_bytes < 4096 || options.file_bytes > (1ull << 31)) {
    return InvalidArgumentError("storage.file_bytes must be in [4KB, 2GB]");
  }
  RETURN_IF_ERROR(env->CreateDirs(options.dir));
  RETURN_IF_ERROR(RemoveFiles(env, options.dir));
  return std::unique_ptr<SsdStore>(new SsdStore(env, options, layout));
}

bool SsdStore::MayHold(const RecordLoc& loc, uint64_t key) const {
  if (!loc.exists()) return false;
  std::shared_lock<std::shared_mutex> lock(files_mu_);
  const ParamFile* f = loc.file < files_.size() ? files_[loc.file].get() : nullptr;
  return f != nullptr && f->bloom->MayContain(key);
}

std::shared_ptr<ParamFile> SsdStore::File(uint32_t id) const {
  std::shared_lock<std::shared_mutex> lock(files_mu_);
  return id < files_.size() ? files_[id] : nullptr;
}

Status SsdStore::Read(const RecordLoc& loc, uint32_t g, RecordView* out) const {
  out->keys.clear();
  out->offsets.assign(1, 0);
  if (!loc.exists()) return Status::OK();
  std::shared_ptr<ParamFile> file = File(loc.file);
  if (!file) return InternalError(fmt::format("the file of a record of group {} disappeared", g));
  return ReadRecord(*file, loc, g, out);
}

Status SsdStore::ReadRecord(const ParamFile& file, const RecordLoc& loc, uint32_t g,
                            RecordView* out) const {
  auto where = [&] {
    return fmt::format("{}: record at offset {} (group {})", file.path, loc.offset, g);
  };
  out->bytes.resize(loc.length);
  size_t got = 0;
  RETURN_IF_ERROR(file.reader->Read(loc.offset, loc.length, out->bytes.data(), &got));
  if (got != loc.length) return CorruptionError(where() + ": file too short");
  auto h = CheckRecord(out->bytes.data(), out->bytes.size(), where());
  if (!h.ok()) return h.status();
  if (h->group != g || kRecordHeaderBytes + h->payload_bytes != loc.length) {
    return CorruptionError(where() + ": record does not match the group index");
  }
  records_read_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(loc.length, std::memory_order_relaxed);
  return out->Parse(layout_, options_.group_bits, where());
}

Status SsdStore::ReadFile(const ParamFile& file, std::string* data) const {
  uint64_t bytes;
  {
    std::shared_lock<std::shared_mutex> lock(files_mu_);
    bytes = file.bytes;
  }
  data->resize(bytes);
  size_t got = 0;
  RETURN_IF_ERROR(file.reader->Read(0, bytes, data->data(), &got));
  if (got != bytes) return CorruptionError(file.path + ": shorter than recorded");
  bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
  return CheckParamFileHeader(file.path, data->data(), data->size(), file.id, layout_);
}

Status SsdStore::Roll() {
  if (current_) {
    RETURN_IF_ERROR(writer_->Close());
    std::unique_lock<std::shared_mutex> lock(files_mu_);
    if (current_->live_records == 0) {  // nothing refers to it any more
      current_->obsolete = true;
      file_bytes_ -= current_->bytes;
      bloom_bytes_ -= current_->bloom->MemoryBytes();
      files_[current_->id] = nullptr;
    }
  }
  current_.reset();
  writer_.reset();
  const uint32_t id = next_file_id_++;
  const std::string path = JoinPath(options_.dir, FileNameOf(id));
  ASSIGN_OR_RETURN(auto writer, env_->NewWritableFile(path));
  const std::string header = EncodeParamFileHeader(id, layout_);
  RETURN_IF_ERROR(writer->Append(header));
  RETURN_IF_ERROR(writer->Flush());
  const size_t expected_rows =
      std::max<size_t>(1024, options_.file_bytes * 3 / 2 / layout_.EncodedBytes(true));
  auto file = std::make_shared<ParamFile>(
      env_, id, path, std::make_unique<BloomFilter>(expected_rows, options_.bloom_bits_per_key));
  ASSIGN_OR_RETURN(file->reader, env_->NewRandomAccessFile(path));
  file->bytes = header.size();
  {
    std::unique_lock<std::shared_mutex> lock(files_mu_);
    if (files_.size() <= id) files_.resize(id + 1);
    files_[id] = file;
    file_bytes_ += header.size();
    bloom_bytes_ += file->bloom->MemoryBytes();
  }
  {
    std::unique_lock<std::shared_mutex> lock(files_mu_);
    current_file_ = file.get();
  }
  current_ = std::move(file);
  writer_ = std::move(writer);
  bytes_written_.fetch_add(header.size(), std::memory_order_relaxed);
  return Status::OK();
}

Status SsdStore::ReserveSpace(uint64_t bytes) {
  if (options_.disk_budget == 0) return Status::OK();
  std::shared_lock<std::shared_mutex> lock(files_mu_);
  if (file_bytes_ + bytes > options_.disk_budget) {
    return ResourceExhaustedError(fmt::format(
        "SSD parameter files would exceed storage.disk_budget ({} in files, {} live, {} more "
        "needed, budget {})",
        file_bytes_, live_bytes_, bytes, options_.disk_budget));
  }
  return Status::OK();
}

Status SsdStore::Append(uint32_t g, std::string_view record, const std::vector<uint64_t>& keys,
                        RecordLoc* loc) {
  std::lock_guard<std::mutex> append(append_mu_);
  if (!current_ || (current_->bytes + record.size() > options_.file_bytes &&
                    current_->bytes > kParamFileHeaderBytes)) {
    RETURN_IF_ERROR(Roll());
  }
  RETURN_IF_ERROR(ReserveSpace(record.size()));
  RETURN_IF_ERROR(writer_->Append(record));
  for (uint64_t k : keys) current_->bloom->Add(k);
  *loc = RecordLoc{current_->id, static_cast<uint32_t>(current_->bytes),
                   static_cast<uint32_t>(record.size())};
  {
    std::unique_lock<std::shared_mutex> lock(files_mu_);
    current_->bytes += record.size();
    file_bytes_ += record.size();
  }
  records_written_.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(record.size(), std::memory_order_relaxed);
  return Status::OK();
}

Status SsdStore::FlushAppends() {
  std::lock_guard<std::mutex> append(append_mu_);
  return writer_ ? writer_->Flush() : Status::OK();
}

void SsdStore::Count(const RecordLoc& loc, int sign) {
  ParamFile* f = files_[loc.file].get();
  if (sign > 0) {
    f->live_bytes += loc.length;
    f->live_records += 1;
    live_bytes_ += loc.length;
    live_records_ += 1;
    return;
  }
  f->live_bytes -= loc.length;
  f->live_records -= 1;
  live_bytes_ -= loc.length;
  live_records_ -= 1;
  if (f->live_records == 0 && f != current_file_) {
    f->obsolete = true;  // unlinked when the last reader lets go
    file_bytes_ -= f->bytes;
    bloom_bytes_ -= f->bloom->MemoryBytes();
    files_[loc.file] = nullptr;
  }
}

void SsdStore::Replace(uint32_t g, const GroupEntry& e) {
  const GroupEntry old = index_[g];
  std::unique_lock<std::shared_mutex> lock(files_mu_);
  // Count the new records first: a file holding both an old and a new record must not be
  // deleted in between.
  if (e.base.exists() && !(e.base == old.base)) Count(e.base, +1);
  if (e.delta.exists() && !(e.delta == old.delta)) Count(e.delta, +1);
  if (old.base.exists() && !(old.base == e.base)) Count(old.base, -1);
  if (old.delta.exists() && !(old.delta == e.delta)) Count(old.delta, -1);
  unique_rows_ += e.unique_rows;
  unique_rows_ -= old.unique_rows;
  unique_emb_ += e.unique_emb;
  unique_emb_ -= old.unique_emb;
  index_[g] = e;
}

std::vector<std::shared_ptr<ParamFile>> SsdStore::CompactionCandidates(
    double stale_fraction) const {
  std::vector<std::pair<double, std::shared_ptr<ParamFile>>> found;
  {
    std::shared_lock<std::shared_mutex> lock(files_mu_);
    for (const auto& f : files_) {
      if (!f || f.get() == current_file_) continue;
      const double records = static_cast<double>(f->bytes - kParamFileHeaderBytes);
      const double stale = records - static_cast<double>(f->live_bytes);
      if (records <= 0) continue;
      if (stale_fraction == 0 ? stale > 0 : stale > stale_fraction * records) {
        found.emplace_back(stale / records, f);
      }
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::shared_ptr<ParamFile>> out;
  for (auto& [frac, f] : found) out.push_back(std::move(f));
  return out;
}

DiskStats SsdStore::Stats() const {
  DiskStats s;
  {
    std::shared_lock<std::shared_mutex> lock(files_mu_);
    for (const auto& f : files_) s.files += f != nullptr;
    s.file_bytes = file_bytes_;
    s.live_bytes = live_bytes_;
    s.rows = unique_rows_;
    s.emb_rows = unique_emb_;
    s.bloom_bytes = bloom_bytes_;
  }
  const uint64_t fixed = layout_.EncodedBytes(false) - 8;
  s.value_bytes =
      s.rows * fixed + s.emb_rows * (layout_.EncodedBytes(true) - layout_.EncodedBytes(false));
  s.index_bytes = index_.capacity() * sizeof(GroupEntry);
  s.records_read = records_read_.load();
  s.bytes_read = bytes_read_.load();
  s.records_written = records_written_.load();
  s.bytes_written = bytes_written_.load();
  return s;
}

uint64_t SsdStore::MemoryBytes() const {
  std::shared_lock<std::shared_mutex> lock(files_mu_);
  return index_.capacity() * sizeof(GroupEntry) + bloom_bytes_;
}

// ---- INDEX ----

Status SsdStore::WriteIndex() {
  RETURN_IF_ERROR(FlushAppends());
  {
    std::lock_guard<std::mutex> append(append_mu_);
    if (writer_) RETURN_IF_ERROR(writer_->Sync());
  }
  std::string s(kIndexMagic, 8);
  PutFixed<uint32_t>(&s, kIndexVersion);
  PutFixed<uint32_t>(&s, options_.group_bits);
  PutFixed<uint32_t>(&s, layout_.dim);
  PutFixed<uint32_t>(&s, layout_.emb_state);
  PutFixed<uint32_t>(&s, layout_.wide_state);
  PutFixed<uint32_t>(&s, next_file_id_);
  std::vector<std::shared_ptr<ParamFile>> live;
  {
    std::shared_lock<std::shared_mutex> lock(files_mu_);
    for (const auto& f : files_) {
      if (f) live.push_back(f);
    }
  }
  PutFixed<uint32_t>(&s, static_cast<uint32_t>(live.size()));
  for (const auto& f : live) {
    PutFixed<uint32_t>(&s, f->id);
    PutFixed<uint64_t>(&s, f->bytes);
    PutFixed<uint64_t>(&s, f->live_bytes);
    PutFixed<uint32_t>(&s, f->live_records);
    const std::vector<uint64_t> words = f->bloom->words();
    PutFixed<uint64_t>(&s, words.size());
    PutFixed<uint32_t>(&s, static_cast<uint32_t>(f->bloom->hashes()));
    PutArray(&s, words.data(), words.size());
  }
  static_assert(sizeof(GroupEntry) == 40);
  PutArray(&s, index_.data(), index_.size());
  PutFixed<uint64_t>(&s, Checksum64(s));
  return WriteFileAtomic(env_, JoinPath(options_.dir, kIndexName), s);
}

StatusOr<std::unique_ptr<SsdStore>> SsdStore::Reopen(Env* env, const SsdOptions& options,
                                                     const ValueLayout& layout) {
  const std::string path = JoinPath(options.dir, kIndexName);
  if (!env->FileExists(path)) {
    return FailedPreconditionError(path + " is missing: the store in " + options.dir +
                                   " was not shut down cleanly and cannot be reopened");
  }
  std::string s;
  RETURN_IF_ERROR(ReadFileToString(env, path, &s));
  auto bad = [&](const std::string& what) { return CorruptionError(path + ": " + what); };
  if (s.size() < 44 || std::memcmp(s.data(), kIndexMagic, 8) != 0) return bad("not a store INDEX");
  if (GetFixed<uint64_t>(s.data() + s.size() - 8) != Checksum64(s.data(), s.size() - 8)) {
    return bad("checksum mismatch");
  }
  const char* p = s.data() + 8;
  if (GetFixed<uint32_t>(p) != kIndexVersion) return bad("unknown version");
  SsdOptions o = options;
  o.group_bits = GetFixed<uint32_t>(p + 4);
  if (o.group_bits < 1 || o.group_bits > 30) return bad("bad group_bits");
  const ValueLayout stored{GetFixed<uint32_t>(p + 8), GetFixed<uint32_t>(p + 12),
                           GetFixed<uint32_t>(p + 16)};
  if (!(stored == layout)) return bad("row layout differs from the table's");
  if (o.group_bits < 1 || o.group_bits > 30) return bad("bad group_bits");
  std::unique_ptr<SsdStore> store(new SsdStore(env, o, layout));
  store->next_file_id_ = GetFixed<uint32_t>(p + 20);
  const uint32_t nfiles = GetFixed<uint32_t>(p + 24);
  p += 28;
  const char* end = s.data() + s.size() - 8;
  for (uint32_t i = 0; i < nfiles; ++i) {
    if (end - p < 36) return bad("truncated file table");
    const uint32_t id = GetFixed<uint32_t>(p);
    const uint64_t bytes = GetFixed<uint64_t>(p + 4), live = GetFixed<uint64_t>(p + 12);
    const uint32_t records = GetFixed<uint32_t>(p + 20);
    const uint64_t nwords = GetFixed<uint64_t>(p + 24);
    const int hashes = static_cast<int>(GetFixed<uint32_t>(p + 32));
    p += 36;
    if (id >= store->next_file_id_ || nwords > (uint64_t{1} << 32) ||
        static_cast<uint64_t>(end - p) < nwords * 8) {
      return bad("bad file entry");
    }
    std::vector<uint64_t> words(nwords);
    std::memcpy(words.data(), p, nwords * 8);
    p += nwords * 8;
    const std::string fpath = JoinPath(o.dir, FileNameOf(id));
    auto f =
        std::make_shared<ParamFile>(env, id, fpath, std::make_unique<BloomFilter>(words, hashes));
    ASSIGN_OR_RETURN(f->reader, env->NewRandomAccessFile(fpath));
    if (f->reader->size() < bytes) return CorruptionError(fpath + ": shorter than the INDEX says");
    f->bytes = bytes;
    f->live_bytes = live;
    f->live_records = records;
    if (store->files_.size() <= id) store->files_.resize(id + 1);
    store->files_[id] = f;
    store->file_bytes_ += bytes;
    store->bloom_bytes_ += f->bloom->MemoryBytes();
  }
  if (static_cast<size_t>(end - p) != store->index_.size() * sizeof(GroupEntry)) {
    return bad("group index size does not match group_bits");
  }
  std::memcpy(store->index_.data(), p, store->index_.size() * sizeof(GroupEntry));
  for (const GroupEntry& e : store->index_) {
    for (const RecordLoc* loc : {&e.base, &e.delta}) {
      if (!loc->exists()) continue;
      if (loc->file >= store->files_.size() || !store->files_[loc->file]) {
        return bad("index names a missing file");
      }
      store->live_bytes_ += loc->length;
      store->live_records_ += 1;
    }
    store->unique_rows_ += e.unique_rows;
    store->unique_emb_ += e.unique_emb;
  }
  RETURN_IF_ERROR(env->DeleteFile(path));
  RETURN_IF_ERROR(env->SyncDir(o.dir));
  return store;
}

}  // namespace ctrbox
