// SsdStore (table/ssd_store.h): the INDEX — written at a clean close, validated and read back
// by Inspect and Reopen (docs/storage.md, "SSD-PS: parameter files").
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "table/ssd_store.h"
#include "table/ssd_store_internal.h"
#include "util/coding.h"

namespace ctrbox {
namespace {

using ssd_internal::FileNameOf;
using ssd_internal::kIndexName;

constexpr char kIndexMagic[8] = {'C', 'T', 'R', 'S', 'I', 'D', 'X', '1'};
constexpr uint32_t kIndexVersion = 6;  // 2: the layout names the embedding quantization;
                                       // 3: group entries carry the delta filter;
                                       // 4: and the older delta; 5: the layout's tables;
                                       // 6: the base's fences (paged param files, version 3)

// A validated INDEX (docs/storage.md): header, file table and group index. Offsets point into
// `data`.
struct IndexFileEntry {
  uint32_t id, live_records;
  uint64_t bytes, live_bytes;
  size_t bloom_offset;  // nwords little-endian uint64 words
  uint64_t bloom_words;
  int bloom_hashes;
};
struct ParsedIndex {
  std::string path, data;
  uint32_t group_bits = 0, next_file_id = 0;
  ValueLayout layout;
  std::vector<IndexFileEntry> files;
  size_t groups_offset = 0;  // 2^group_bits GroupEntry
};

StatusOr<ParsedIndex> ParseIndex(Env* env, const std::string& path) {
  ParsedIndex x;
  x.path = path;
  RETURN_IF_ERROR(ReadFileToString(env, path, &x.data));
  const std::string& s = x.data;
  auto bad = [&](const std::string& what) { return CorruptionError(path + ": " + what); };
  if (s.size() < 52 || std::memcmp(s.data(), kIndexMagic, 8) != 0) return bad("not a store INDEX");
  if (GetFixed<uint64_t>(s.data() + s.size() - 8) != Checksum64(s.data(), s.size() - 8)) {
    return bad("checksum mismatch");
  }
  const char* const begin = s.data();
  const char* p = begin + 8;
  const uint32_t version = GetFixed<uint32_t>(p);
  if (version != kIndexVersion) {
    return bad(fmt::format("unknown version {} (this build reads {})", version, kIndexVersion));
  }
  x.group_bits = GetFixed<uint32_t>(p + 4);
  if (x.group_bits < 1 || x.group_bits > 30) return bad("bad group_bits");
  x.layout = ValueLayout{GetFixed<uint32_t>(p + 8), GetFixed<uint32_t>(p + 12),
                         GetFixed<uint32_t>(p + 16)};
  SetRowCodes(GetFixed<uint32_t>(p + 20), &x.layout);
  x.layout.quant_range = GetFixed<float>(p + 24);
  if (!QuantOptionsError(QuantOptions{x.layout.quant_bits, x.layout.quant_range}).empty() ||
      (x.layout.state_bits != 0 && x.layout.state_bits != 16)) {
    return bad("bad quantization");
  }
  x.next_file_id = GetFixed<uint32_t>(p + 28);
  const uint32_t nfiles = GetFixed<uint32_t>(p + 32);
  p += 36;
  const char* end = begin + s.size() - 8;
  {  // the tables: their count, then (dim, state floats) of each if several
    if (end - p < 4) return bad("truncated table list");
    x.layout.tables = GetFixed<uint32_t>(p);
    p += 4;
    if (x.layout.tables < 1 || x.layout.tables > kMaxTables) return bad("bad table count");
    if (x.layout.tables > 1) {
      if (end - p < 8 * static_cast<ptrdiff_t>(x.layout.tables)) return bad("truncated table list");
      for (uint32_t t = 0; t < x.layout.tables; ++t) {
        x.layout.table_dim[t] = GetFixed<uint32_t>(p);
        x.layout.table_state[t] = GetFixed<uint32_t>(p + 4);
        p += 8;
      }
    }
  }
  for (uint32_t i = 0; i < nfiles; ++i) {
    if (end - p < 36) return bad("truncated file table");
    IndexFileEntry f;
    f.id = GetFixed<uint32_t>(p);
    f.bytes = GetFixed<uint64_t>(p + 4);
    f.live_bytes = GetFixed<uint64_t>(p + 12);
    f.live_records = GetFixed<uint32_t>(p + 20);
    f.bloom_words = GetFixed<uint64_t>(p + 24);
    f.bloom_hashes = static_cast<int>(GetFixed<uint32_t>(p + 32));
    p += 36;
    if (f.id >= x.next_file_id || f.bloom_words > (uint64_t{1} << 32) ||
        static_cast<uint64_t>(end - p) < f.bloom_words * 8) {
      return bad("bad file entry");
    }
    f.bloom_offset = static_cast<size_t>(p - begin);
    p += f.bloom_words * 8;
    x.files.push_back(f);
  }
  if (static_cast<uint64_t>(end - p) != (uint64_t{1} << x.group_bits) * sizeof(GroupEntry)) {
    return bad("group index size does not match group_bits");
  }
  x.groups_offset = static_cast<size_t>(p - begin);
  return x;
}

GroupEntry GroupAt(const ParsedIndex& x, uint64_t g) {
  GroupEntry e;
  std::memcpy(&e, x.data.data() + x.groups_offset + g * sizeof(GroupEntry), sizeof(GroupEntry));
  return e;
}

}  // namespace

Status SsdStore::WriteIndex() {
  // The INDEX names every file the directory keeps: dead files pooled for reuse go first.
  if (recycler_) recycler_->Drain(/*close=*/false);
  RETURN_IF_ERROR(FlushAppends());
  uint32_t next_file_id = 0;
  {
    MutexLock append(&append_mu_);
    if (writer_) RETURN_IF_ERROR(writer_->Sync());
    next_file_id = next_file_id_;
  }
  std::string s(kIndexMagic, 8);
  PutFixed<uint32_t>(&s, kIndexVersion);
  PutFixed<uint32_t>(&s, options_.group_bits);
  PutFixed<uint32_t>(&s, layout_.dim);
  PutFixed<uint32_t>(&s, layout_.emb_state);
  PutFixed<uint32_t>(&s, layout_.wide_state);
  PutFixed<uint32_t>(&s, RowCodesWord(layout_));
  PutFixed<float>(&s, layout_.quant_range);
  PutFixed<uint32_t>(&s, next_file_id);
  std::vector<std::shared_ptr<ParamFile>> live;
  std::string tables;
  PutFixed<uint32_t>(&tables, layout_.tables);
  for (uint32_t t = 0; layout_.multi() && t < layout_.tables; ++t) {
    PutFixed<uint32_t>(&tables, layout_.table_dim[t]);
    PutFixed<uint32_t>(&tables, layout_.table_state[t]);
  }
  {
    ReaderLock lock(&files_mu_);
    for (const auto& f : files_) {
      if (f) live.push_back(f);
    }
  }
  PutFixed<uint32_t>(&s, static_cast<uint32_t>(live.size()));
  s += tables;
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
  static_assert(sizeof(GroupEntry) == 88);  // docs/formats/param_file.md
  PutArray(&s, index_.data(), index_.size());
  PutFixed<uint64_t>(&s, Checksum64(s));
  return WriteFileAtomic(env_, JoinPath(options_.dir, kIndexName), s);
}

StatusOr<StoreSummary> SsdStore::Inspect(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kIndexName);
  if (!env->FileExists(path)) {
    return NotFoundError(path + " is missing: no cleanly closed store in " + dir);
  }
  ASSIGN_OR_RETURN(const ParsedIndex x, ParseIndex(env, path));
  const ValueLayout& layout = x.layout;
  const uint32_t nfiles = static_cast<uint32_t>(x.files.size());
  uint64_t file_bytes = 0, bloom_bytes = 0;
  for (const IndexFileEntry& f : x.files) {
    file_bytes += f.bytes;
    bloom_bytes += f.bloom_words * 8;
  }
  const uint64_t groups = uint64_t{1} << x.group_bits;
  uint64_t live = 0, records = 0, rows = 0, emb = 0, with_delta = 0, value = 0;
  for (uint64_t g = 0; g < groups; ++g) {
    const GroupEntry e = GroupAt(x, g);
    for (const RecordLoc* loc : e.records()) {
      if (!loc->exists()) continue;
      live += loc->length;
      ++records;
    }
    with_delta += e.delta.exists();
    rows += e.unique_rows;
    emb += e.unique_emb;
    const uint32_t t = TableOfGroup(layout, static_cast<uint32_t>(g));
    value +=
        e.unique_rows * (layout.TableEncodedBytes(t, false) - 8) +
        e.unique_emb * (layout.TableEncodedBytes(t, true) - layout.TableEncodedBytes(t, false));
  }
  StoreSummary r;
  r.layout = layout;
  r.keys = rows;
  r.keys_with_embedding = emb;
  r.bytes_live = value;
  r.files = nfiles;
  r.file_bytes = file_bytes;
  r.live_record_bytes = live;
  r.records = records;
  r.groups = groups;
  r.groups_with_delta = with_delta;
  r.index_bytes = groups * sizeof(GroupEntry);
  r.bloom_bytes = bloom_bytes;
  return r;
}

StatusOr<std::unique_ptr<SsdStore>> SsdStore::Reopen(Env* env, const SsdOptions& options,
                                                     const ValueLayout& layout) {
  const std::string path = JoinPath(options.dir, kIndexName);
  if (!env->FileExists(path)) {
    return FailedPreconditionError(path + " is missing: the store in " + options.dir +
                                   " was not shut down cleanly and cannot be reopened");
  }
  ASSIGN_OR_RETURN(const ParsedIndex x, ParseIndex(env, path));
  auto bad = [&](const std::string& what) { return CorruptionError(path + ": " + what); };
  {  // dead files a store pooled for reuse and did not delete (it stopped before): space only
    ASSIGN_OR_RETURN(auto children, env->GetChildren(options.dir));
    for (const std::string& c : children) {
      if (FileRecycler::IsPoolName(c)) env->DeleteFile(JoinPath(options.dir, c)).IgnoreError();
    }
  }
  if (!(x.layout == layout)) return bad("row layout differs from the table's");
  SsdOptions o = options;
  o.group_bits = x.group_bits;
  std::unique_ptr<SsdStore> store(new SsdStore(env, o, layout));
  // Not shared yet: the locks are taken only to satisfy the analysis.
  MutexLock append(&store->append_mu_);
  MutexLock counts(&store->counts_mu_);
  WriterLock files(&store->files_mu_);
  store->next_file_id_ = x.next_file_id;
  for (const IndexFileEntry& e : x.files) {
    std::vector<uint64_t> words(e.bloom_words);
    if (!words.empty()) {  // a file written without a filter (storage.bloom_share) has none
      std::memcpy(words.data(), x.data.data() + e.bloom_offset, e.bloom_words * 8);
    }
    const std::string fpath = JoinPath(o.dir, FileNameOf(e.id));
    auto f = std::make_shared<ParamFile>(env, e.id, fpath,
                                         std::make_unique<BloomFilter>(words, e.bloom_hashes));
    f->recycler = store->recycler_;
    RETURN_IF_ERROR(store->OpenReader(f.get()));
    if (f->reader->size() < e.bytes) {
      return CorruptionError(fpath + ": shorter than the INDEX says");
    }
    f->bytes = e.bytes;
    f->live_bytes = e.live_bytes;
    f->live_records = e.live_records;
    if (store->files_.size() <= e.id) store->files_.resize(e.id + 1);
    store->files_[e.id] = f;
    if (store->counted_.size() <= e.id) store->counted_.resize(e.id + 1, nullptr);
    store->counted_[e.id] = f.get();
    store->file_bytes_ += e.bytes;
    store->bloom_bytes_.fetch_add(f->bloom->MemoryBytes(), std::memory_order_relaxed);
  }
  std::memcpy(store->index_.data(), x.data.data() + x.groups_offset,
              store->index_.size() * sizeof(GroupEntry));
  for (const GroupEntry& e : store->index_) {
    for (const RecordLoc* loc : e.records()) {
      if (!loc->exists()) continue;
      if (loc->file >= store->files_.size() || !store->files_[loc->file]) {
        return bad("index names a missing file");
      }
      store->live_bytes_ += loc->length;
      store->live_records_ += 1;
      // The keys of the live records: the INDEX does not keep the dead ones' count, which
      // only sizes later files' filters.
      const uint64_t rows = loc == &e.base    ? e.base_rows
                            : loc == &e.delta ? e.delta_rows
                                              : e.older_rows;
      store->counted_[loc->file]->filter_keys += rows;
      store->filter_keys_ += rows;
    }
    const uint32_t g = static_cast<uint32_t>(&e - store->index_.data());
    const uint32_t t = TableOfGroup(layout, g);
    store->unique_rows_[t] += e.unique_rows;
    store->stripe_unique_rows_[store->StripeOfGroup(g)] += e.unique_rows;
    store->unique_emb_[t] += e.unique_emb;
  }
  RETURN_IF_ERROR(env->DeleteFile(path));
  RETURN_IF_ERROR(env->SyncDir(o.dir));
  return store;
}

}  // namespace ctrbox
