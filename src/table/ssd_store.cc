#include "table/ssd_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "table/ssd_store_internal.h"
#include "util/coding.h"
#include "util/logging.h"

namespace ctrbox {
namespace {

using ssd_internal::FileNameOf;
using ssd_internal::kIndexName;

bool IsStoreFile(const std::string& name) {
  return (name.rfind("params-", 0) == 0 && name.size() > 4 &&
          name.substr(name.size() - 4) == ".dat") ||
         name == kIndexName || name == std::string(kIndexName) + ".tmp";
}

// The reader of a parameter file: with O_DIRECT when `direct` is asked and the file system
// takes it (*direct_taken then true), otherwise through the page cache with read-ahead off.
StatusOr<std::unique_ptr<RandomAccessFile>> OpenRecordReader(Env* env, const std::string& path,
                                                             bool direct, bool* direct_taken) {
  *direct_taken = false;
  if (direct) {
    auto reader = env->NewDirectRandomAccessFile(path);
    if (reader.ok()) {
      *direct_taken = true;
      return reader;
    }
    if (reader.status().code() != StatusCode::kFailedPrecondition) return reader.status();
  }
  ASSIGN_OR_RETURN(auto reader, env->NewRandomAccessFile(path));
  reader->AdviseRandomReads();  // records are read one at a time, here and there
  return reader;
}

}  // namespace

Status SsdStore::OpenReader(ParamFile* file) {
  bool direct = false;
  ASSIGN_OR_RETURN(file->reader,
                   OpenRecordReader(env_, file->path, options_.direct_reads, &direct));
  if (direct_.exchange(direct ? 1 : 0) == -1 && options_.direct_reads && !direct) {
    LOG_WARNING(
        "storage.direct_reads: {} takes no O_DIRECT reads; the SSD tier reads through "
        "the page cache",
        options_.dir);
  }
  // Mapped (its first file_bytes: the size a file grows to) as asked, unless the reads are
  // O_DIRECT ones; an Env that maps no files leaves the preads.
  if (options_.mapped_reads == MappedReads::kOff || direct) return Status::OK();
  auto m = env_->NewMappedRandomAccessFile(file->path, options_.file_bytes);
  if (m.ok()) {
    file->mapped = std::move(*m);
    file->mapped->AdviseRandomReads();
  } else if (m.status().code() != StatusCode::kFailedPrecondition) {
    return m.status();
  }
  if (mapped_.exchange(file->mapped ? 1 : 0) == -1 && !file->mapped &&
      options_.mapped_reads == MappedReads::kOn) {
    LOG_WARNING("storage.mapped_reads: {} maps no files; the SSD tier reads with pread",
                options_.dir);
  }
  return Status::OK();
}

const RandomAccessFile& SsdStore::ReaderFor(const ParamFile& file, bool* mapped) const {
  *mapped =
      file.mapped != nullptr && (options_.mapped_reads == MappedReads::kOn || read_path_.mapped());
  return *mapped ? *file.mapped : *file.reader;
}

void SsdStore::Counted(bool mapped, uint64_t nanos, uint64_t bytes) const {
  read_nanos_.fetch_add(nanos, std::memory_order_relaxed);
  if (bytes == 0) return;  // a read that failed: its time only
  bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
  // The read counted, then its way (Stats loads them the other way round: mapped <= read).
  records_read_.fetch_add(1);
  if (mapped) mapped_records_read_.fetch_add(1);
  device_.Note(nanos);
  if (options_.mapped_reads == MappedReads::kAuto && read_path_.Note(mapped, nanos) && mapped) {
    // To pread: the pages the mapped reads touched go back to the page cache's own ageing.
    // Left mapped, they kept the page cache of a confined box for themselves: the 2 M-row job
    // in a 666 MB cgroup ran at 0.66x unconfined against pread's 0.72x.
    ReaderLock lock(&files_mu_);
    for (const auto& f : files_) {
      if (f && f->mapped) f->mapped->ReleaseMappedPages();
    }
  }
}

SsdStore::SsdStore(Env* env, SsdOptions options, ValueLayout layout)
    : env_(env),
      options_(std::move(options)),
      layout_(layout),
      page_(PageBytes(layout)),
      read_path_(options_.read_path),
      device_(options_.device_watch) {
  index_.assign(size_t{1} << options_.group_bits, GroupEntry{});
  stripe_unique_rows_.assign(size_t{1} << std::min(options_.stripe_bits, options_.group_bits), 0);
  if (options_.recycle_files > 0) {
    recycler_ = std::make_shared<FileRecycler>(env_, options_.dir, options_.recycle_files);
  }
}

SsdStore::~SsdStore() {
  // The pooled files go; a file whose last reader lets go later is deleted.
  if (recycler_) recycler_->Drain(/*close=*/true);
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
  ReaderLock lock(&files_mu_);
  const ParamFile* f = loc.file < files_.size() ? files_[loc.file].get() : nullptr;
  return f != nullptr && f->bloom->MayContain(key);
}

std::shared_ptr<ParamFile> SsdStore::File(uint32_t id) const {
  ReaderLock lock(&files_mu_);
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

namespace {

// Reads n bytes at `offset` of a file into out, retrying an I/O error a bounded number of times
// with backoff (a transient device or network-filesystem error); a short read is not retried:
// it is not going to change. Errors say what was read (where()).
template <typename Where>
Status ReadBytes(const RandomAccessFile& reader, uint64_t offset, size_t n, char* out,
                 uint64_t* nanos, std::atomic<uint64_t>* retries, Where where) {
  size_t got = 0;
  constexpr int kReadRetries = 3;
  for (int attempt = 0;; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    Status st = reader.Read(offset, n, out, &got);
    *nanos += std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    if (st.ok()) break;
    if (st.code() != StatusCode::kIOError || attempt == kReadRetries) {
      return Status(st.code(), fmt::format("{}: {}{}", where(), st.message(),
                                           attempt ? fmt::format(" ({} retries)", attempt) : ""));
    }
    retries->fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1 << (2 * attempt)));  // 1, 4, 16 ms
  }
  if (got != n) return CorruptionError(where() + ": file too short");
  return Status::OK();
}

// Loads one byte of every 4 KiB of [p, p + n) (and its last byte), so that its pages' faults
// happen here. REQUIRES: n > 0.
void TouchPages(const char* p, size_t n) {
  constexpr size_t kPage = 4096;
  unsigned char sink = 0;
  for (size_t at = 0; at < n; at += kPage) sink ^= *static_cast<const volatile char*>(p + at);
  sink ^= *static_cast<const volatile char*>(p + n - 1);
  asm volatile("" : : "r"(sink));
}

}  // namespace

template <typename Parse, typename Where>
Status SsdStore::ReadView(const ParamFile& file, uint64_t begin, size_t n, RecordView* out,
                          Parse parse, Where where) const {
  bool mapped = false;
  const RandomAccessFile& reader = ReaderFor(file, &mapped);
  if (const char* in_place = mapped ? reader.MappedBytes(begin, n) : nullptr) {
    // Read where it lies (docs/storage.md, "Reads in place"); the view holds the file, so the
    // mapping, while it points into it. The read's time is that of a load from each of its
    // pages: where a page is not in memory, the device's latency (the choosers' signal), as a
    // copy's would be, without the parse's CPU.
    out->SetMapped(in_place, n, file.shared_from_this());
    const auto start = std::chrono::steady_clock::now();
    TouchPages(in_place, n);
    Counted(true,
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                 start)
                .count(),
            n);
  } else {
    out->UseBytes();
    out->bytes.resize(n);
    uint64_t nanos = 0;
    const Status read =
        ReadBytes(reader, begin, n, out->bytes.data(), &nanos, &read_retries_, where);
    Counted(mapped, nanos, read.ok() ? n : 0);  // (a record is never empty)
    RETURN_IF_ERROR(read);
  }
  Status parsed = parse(out);
  if (!parsed.ok()) return CorruptionError(where() + ": " + parsed.message());
  return Status::OK();
}

Status SsdStore::ReadRecord(const ParamFile& file, const RecordLoc& loc, uint32_t g,
                            RecordView* out) const {
  // `where` is formatted only for an error: a pull reads thousands of records a second.
  auto where = [&] {
    return fmt::format("{}: record at offset {} (group {})", file.path, loc.offset, g);
  };
  return ReadView(
      file, loc.offset, loc.length, out,
      [&](RecordView* v) { return v->Parse(layout_, options_.group_bits, g, loc.offset, page_); },
      where);
}

Status SsdStore::ReadPieces(const ParamFile& file, const RecordLoc& loc, uint32_t g,
                            PieceRange pieces, RecordView* out) const {
  const uint64_t begin = RecordPiece(loc.offset, loc.length, page_, pieces.first).begin;
  const uint64_t end = RecordPiece(loc.offset, loc.length, page_, pieces.last).end;
  auto where = [&] {
    return fmt::format("{}: record at offset {} (group {}), pieces {}-{}", file.path, loc.offset, g,
                       pieces.first, pieces.last);
  };
  return ReadView(
      file, begin, end - begin, out,
      [&](RecordView* v) {
        return v->ParsePieces(layout_, options_.group_bits, g, loc.offset, loc.length, page_,
                              pieces);
      },
      where);
}

uint64_t SsdStore::FileBytes(const ParamFile& file) const {
  MutexLock lock(&counts_mu_);
  return file.bytes;
}

Status SsdStore::Roll() {
  // The closed writer goes at once: if the new file cannot be made, the next append tries
  // again. current_ stays until the new file replaces it (its drop is decided below).
  if (writer_) {
    RETURN_IF_ERROR(writer_->Close());
    writer_.reset();
  }
  const uint32_t id = next_file_id_++;
  const std::string path = JoinPath(options_.dir, FileNameOf(id));
  // Over a dead file if one is pooled (its cached pages take the bytes), else a new one.
  const std::string dead = recycler_ ? recycler_->Take() : std::string();
  StatusOr<std::unique_ptr<WritableFile>> opened =
      dead.empty() ? env_->NewWritableFile(path) : env_->ReuseWritableFile(dead, path);
  if (!dead.empty() && opened.ok()) files_recycled_.fetch_add(1, std::memory_order_relaxed);
  if (!dead.empty() && !opened.ok()) {  // the dead file goes, under whichever name it has now
    env_->DeleteFile(dead).IgnoreError();
    env_->DeleteFile(path).IgnoreError();
  }
  ASSIGN_OR_RETURN(auto writer, std::move(opened));  // (the next append tries again)
  const std::string header = EncodeParamFileHeader(id, layout_);
  RETURN_IF_ERROR(writer->Append(header));
  RETURN_IF_ERROR(writer->Flush());
  // Sized for as many keys as the last full file took (an eighth more), or as many rows with
  // an embedding as a file holds before there is one: sizing by the largest row overstated
  // the keys by half, and rows without an embedding are smaller still.
  uint64_t filter_keys = 0;
  {
    MutexLock lock(&counts_mu_);
    if (current_ && current_->bytes + current_->bytes / 8 >= options_.file_bytes) {
      last_file_keys_ = current_->filter_keys;
    }
    filter_keys = filter_keys_;
  }
  const size_t expected_rows = std::max<size_t>(
      1024, last_file_keys_ > 0 ? last_file_keys_ + last_file_keys_ / 8
                                : options_.file_bytes / layout_.EncodedBytes(true));
  int bits = options_.bloom_bits_per_key;
  if (options_.bloom_budget > 0) {
    // Every key in the files gets the same share of the budget: granting each new file its
    // bits while the budget lasts left the files opened after it with no filter at all (every
    // key of theirs then costs a record read; 18 % of the new keys' lookups in store_bench).
    const double fair = static_cast<double>(options_.bloom_budget) * 8 /
                        static_cast<double>(filter_keys + expected_rows);
    bits = std::min(bits, static_cast<int>(fair));
    const uint64_t used = bloom_bytes_.load(std::memory_order_relaxed);
    const uint64_t cap = options_.bloom_budget + options_.bloom_budget / 4;
    while (bits > 0 && used + BloomFilter::BytesFor(expected_rows, bits) > cap) --bits;
    if (bits < 2) bits = 0;  // one bit per key would rule out too few keys to pay
  }
  auto file = std::make_shared<ParamFile>(env_, id, path,
                                          std::make_unique<BloomFilter>(expected_rows, bits));
  file->recycler = recycler_;
  RETURN_IF_ERROR(OpenReader(file.get()));
  file->bytes = header.size();
  // The new file is published and becomes the current one in one step, so that a Replace in
  // between cannot leave the old current file empty but kept.
  std::vector<uint32_t> dropped;
  {
    WriterLock table(&files_mu_);
    if (files_.size() <= id) files_.resize(id + 1);
    files_[id] = file;
  }
  {
    MutexLock lock(&counts_mu_);
    if (counted_.size() <= id) counted_.resize(id + 1, nullptr);
    counted_[id] = file.get();
    file_bytes_ += header.size();
    bloom_bytes_.fetch_add(file->bloom->MemoryBytes(), std::memory_order_relaxed);
    if (current_ && current_->live_records == 0 && current_->pending_records == 0) {
      current_->obsolete = true;  // nothing refers to it
      file_bytes_ -= current_->bytes;
      filter_keys_ -= current_->filter_keys;
      bloom_bytes_.fetch_sub(current_->bloom->MemoryBytes(), std::memory_order_relaxed);
      counted_[current_->id] = nullptr;
      dropped.push_back(current_->id);
    }
    current_file_ = file.get();
  }
  DropFiles(dropped);
  current_ = std::move(file);
  writer_ = std::move(writer);
  bytes_written_.fetch_add(header.size(), std::memory_order_relaxed);
  return Status::OK();
}

void SsdStore::DropFiles(const std::vector<uint32_t>& dropped) {
  if (dropped.empty()) return;
  WriterLock table(&files_mu_);
  for (uint32_t id : dropped) files_[id] = nullptr;
}

Status SsdStore::ReserveSpace(uint64_t bytes) {
  if (options_.disk_budget == 0) return Status::OK();
  MutexLock lock(&counts_mu_);
  // Dead files kept for reuse give way to live bytes.
  if (recycler_ && file_bytes_ + recycler_->bytes() + bytes > options_.disk_budget) {
    recycler_->Drain(/*close=*/false);
  }
  if (file_bytes_ + bytes > options_.disk_budget) {
    return ResourceExhaustedError(fmt::format(
        "SSD parameter files would exceed storage.disk_budget ({} in files, {} live, {} more "
        "needed, budget {})",
        file_bytes_, live_bytes_, bytes, options_.disk_budget));
  }
  return Status::OK();
}

Status SsdStore::Append(RecordBuilder* builder, RecordLoc* loc, Fences* fences) {
  builder->Order();  // (the sort needs no place: outside the lock the appenders share)
  MutexLock append(&append_mu_);
  const std::vector<uint64_t>& keys = builder->keys();
  std::string_view record =
      writer_ ? builder->Lay(current_->bytes, page_, fences) : std::string_view();
  if (!writer_ || (current_->bytes + record.size() > options_.file_bytes &&
                   current_->bytes > kParamFileHeaderBytes)) {
    RETURN_IF_ERROR(Roll());
    record = builder->Lay(current_->bytes, page_, fences);  // laid out for its new place
  }
  RETURN_IF_ERROR(ReserveSpace(record.size()));
  RETURN_IF_ERROR(writer_->Append(record));
  current_->bloom->AddAll(keys.data(), keys.size());
  *loc = RecordLoc{current_->id, static_cast<uint32_t>(current_->bytes),
                   static_cast<uint32_t>(record.size())};
  {
    MutexLock lock(&counts_mu_);
    current_->bytes += record.size();
    current_->filter_keys += keys.size();
    filter_keys_ += keys.size();
    current_->pending_records += 1;
    file_bytes_ += record.size();
  }
  records_written_.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(record.size(), std::memory_order_relaxed);
  return Status::OK();
}

Status SsdStore::FlushAppends() {
  MutexLock append(&append_mu_);
  return writer_ ? writer_->Flush() : Status::OK();
}

void SsdStore::Count(const RecordLoc& loc, int sign, std::vector<uint32_t>* dropped) {
  ParamFile* f = counted_[loc.file];
  if (sign > 0) {
    if (f->pending_records > 0) f->pending_records -= 1;  // a new record: now in the index
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
  if (f->live_records == 0 && f->pending_records == 0 && f != current_file_) {
    f->obsolete = true;  // unlinked when the last reader lets go
    file_bytes_ -= f->bytes;
    filter_keys_ -= f->filter_keys;
    bloom_bytes_.fetch_sub(f->bloom->MemoryBytes(), std::memory_order_relaxed);
    counted_[loc.file] = nullptr;
    dropped->push_back(loc.file);
  }
}

void SsdStore::Replace(uint32_t g, const GroupEntry& e) {
  const GroupEntry old = index_[g];
  std::vector<uint32_t> dropped;
  {
    MutexLock lock(&counts_mu_);
    // A record may move between the entry's places (a delta becomes the older delta): only
    // records that come or go count. The new ones first: a file holding both an old and a new
    // record must not be deleted in between.
    auto holds = [](const GroupEntry& x, const RecordLoc& loc) {
      for (const RecordLoc* r : x.records()) {
        if (*r == loc) return true;
      }
      return false;
    };
    for (const RecordLoc* r : e.records()) {
      if (r->exists() && !holds(old, *r)) Count(*r, +1, &dropped);
    }
    for (const RecordLoc* r : old.records()) {
      if (r->exists() && !holds(e, *r)) Count(*r, -1, &dropped);
    }
    const uint32_t t = TableOfGroup(layout_, g);
    unique_rows_[t] += e.unique_rows;
    unique_rows_[t] -= old.unique_rows;
    unique_emb_[t] += e.unique_emb;
    unique_emb_[t] -= old.unique_emb;
    index_[g] = e;
  }
  {
    uint64_t& stripe_rows = stripe_unique_rows_[StripeOfGroup(g)];  // (g's stripe lock)
    stripe_rows += e.unique_rows;
    stripe_rows -= old.unique_rows;
  }
  DropFiles(dropped);  // no longer counted nor named by the index: nothing looks them up
}

std::vector<std::shared_ptr<ParamFile>> SsdStore::CompactionCandidates(
    double stale_fraction) const {
  std::vector<std::pair<double, std::shared_ptr<ParamFile>>> found;
  {
    MutexLock counts(&counts_mu_);
    ReaderLock table(&files_mu_);
    for (const auto& f : files_) {
      if (!f || f.get() == current_file_ || counted_[f->id] == nullptr) continue;
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
    MutexLock lock(&counts_mu_);
    for (const ParamFile* f : counted_) s.files += f != nullptr;
    s.file_bytes = file_bytes_;
    s.live_bytes = live_bytes_;
    for (uint32_t t = 0; t < layout_.tables; ++t) {
      s.rows += unique_rows_[t];
      s.emb_rows += unique_emb_[t];
      s.value_bytes += unique_rows_[t] * (layout_.TableEncodedBytes(t, false) - 8) +
                       unique_emb_[t] * (layout_.TableEncodedBytes(t, true) -
                                         layout_.TableEncodedBytes(t, false));
    }
  }
  s.bloom_bytes = bloom_bytes_.load(std::memory_order_relaxed);
  s.index_bytes = index_.capacity() * sizeof(GroupEntry);
  s.mapped_records_read = mapped_records_read_.load();  // before records_read_: see Counted
  s.records_read = records_read_.load();
  s.read_retries = read_retries_.load();
  s.bytes_read = bytes_read_.load();
  s.read_nanos = read_nanos_.load();
  s.direct_reads = direct_.load() == 1;
  s.mapped_reads = mapped_.load() == 1;
  s.read_path_switches = read_path_.switches();
  s.device_read_switches = device_.switches();
  s.records_written = records_written_.load();
  s.bytes_written = bytes_written_.load();
  s.files_recycled = files_recycled_.load();
  s.free_file_bytes = recycler_ ? recycler_->bytes() : 0;
  return s;
}

uint64_t SsdStore::MemoryBytes() const {
  return index_.capacity() * sizeof(GroupEntry) + bloom_bytes_.load(std::memory_order_relaxed);
}

}  // namespace ctrbox
