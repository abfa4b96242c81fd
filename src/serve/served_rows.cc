#include "serve/served_rows.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <string_view>

#include "util/env.h"
#include "util/hash.h"

namespace ctrbox {

ServedRows::ServedRows(const ValueLayout& layout, bool wide)
    : layout_(layout), quant_(layout.quantizer()), wide_(wide) {
  emb_bytes_ = static_cast<uint32_t>(quant_.StoredBytes(layout_.dim));
  stride_ = emb_bytes_ + (wide_ ? sizeof(float) : 0);
}

ServedRows::Builder::Builder(const ValueLayout& layout, bool wide)
    : out_(new ServedRows(layout, wide)) {}

void ServedRows::Builder::Add(const RowBlock& rows, size_t i) {
  keys_.push_back(rows.key(i));
  has_emb_.push_back(rows.has_emb(i));
  rows_.resize(rows_.size() + out_->stride_);
  out_->EncodeRow(rows, i, rows_.data() + rows_.size() - out_->stride_);
}

void ServedRows::Builder::Add(const RowBlock& rows) {
  for (size_t i = 0; i < rows.size(); ++i) Add(rows, i);
}

std::unique_ptr<ServedRows> ServedRows::Builder::Build() {
  ServedRows& r = *out_;
  const size_t n = keys_.size();
  // About four keys a bucket: a power of two of buckets, the hash's top bits choose.
  const size_t buckets = std::bit_ceil(std::max<size_t>(n / 4, 1));
  r.bucket_shift_ = 64 - std::countr_zero(buckets);
  // Counting sort of the keys by bucket (stable: the order within a bucket is the input's).
  std::vector<uint32_t> count(buckets + 1, 0);
  for (uint64_t k : keys_) ++count[r.Bucket(k) + 1];
  std::partial_sum(count.begin(), count.end(), count.begin());
  r.offsets_ = count;
  r.keys_.resize(n);
  r.rows_.resize(n * r.stride_);
  r.has_emb_.assign((n + 63) / 64, 0);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t at = count[r.Bucket(keys_[i])]++;
    r.keys_[at] = keys_[i];
    std::memcpy(r.rows_.data() + size_t{at} * r.stride_, rows_.data() + i * r.stride_, r.stride_);
    if (has_emb_[i]) r.has_emb_[at / 64] |= uint64_t{1} << (at % 64);
  }
  keys_ = {};
  rows_ = {};
  has_emb_ = {};
  r.PointAtVectors();
  return std::move(out_);
}

std::shared_ptr<const ServedRows> ServedRows::Builder::Finish() {
  return std::shared_ptr<const ServedRows>(Build().release());
}

StatusOr<std::shared_ptr<const ServedRows>> ServedRows::Builder::Finish(const std::string& file) {
  std::unique_ptr<ServedRows> rows = Build();
  if (!file.empty()) RETURN_IF_ERROR(rows->Map(file));
  return std::shared_ptr<const ServedRows>(rows.release());
}

void ServedRows::PointAtVectors() {
  n_ = keys_.size();
  offsets_p_ = offsets_.data();
  keys_p_ = keys_.data();
  rows_p_ = rows_.data();
  has_emb_p_ = has_emb_.data();
}

namespace {

size_t Aligned(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

Status ServedRows::Map(const std::string& file) {
  // The arrays one after another, each 64-byte aligned, written with the project's writer.
  const size_t a = Aligned(offsets_.size() * sizeof(uint32_t));
  const size_t b = a + Aligned(keys_.size() * sizeof(uint64_t));
  const size_t c = b + Aligned(has_emb_.size() * sizeof(uint64_t));
  const size_t total = std::max<size_t>(c + rows_.size(), 1);
  Status s = [&]() -> Status {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> w, Env::Posix()->NewWritableFile(file));
    size_t at = 0;
    auto put = [&](const void* p, size_t n, size_t until) -> Status {
      RETURN_IF_ERROR(w->Append(std::string_view(static_cast<const char*>(p), n)));
      at += n;
      RETURN_IF_ERROR(w->Append(std::string(until - at, '\0')));  // the next array's alignment
      at = until;
      return Status::OK();
    };
    RETURN_IF_ERROR(put(offsets_.data(), offsets_.size() * sizeof(uint32_t), a));
    RETURN_IF_ERROR(put(keys_.data(), keys_.size() * sizeof(uint64_t), b));
    RETURN_IF_ERROR(put(has_emb_.data(), has_emb_.size() * sizeof(uint64_t), c));
    RETURN_IF_ERROR(put(rows_.data(), rows_.size(), total));
    RETURN_IF_ERROR(w->Sync());  // (clean pages can be dropped)
    return w->Close();
  }();
  // Mapped, then unlinked whatever happened: the descriptor and the mapping keep the file
  // while the rows live, and a failure leaves nothing behind.
  int fd = -1;
  void* m = MAP_FAILED;
  if (s.ok() && (fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC)) < 0) {
    s = IOError(fmt::format("{}: open: {}", file, std::strerror(errno)));
  }
  if (s.ok() && (m = ::mmap(nullptr, total, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    s = IOError(fmt::format("{}: mmap: {}", file, std::strerror(errno)));
    ::close(fd);
  }
  ::unlink(file.c_str());
  if (!s.ok()) return s;
  fd_ = fd;
  ::madvise(m, total, MADV_RANDOM);  // lookups touch a page or two: no read-ahead
  map_ = m;
  map_bytes_ = total;
  const char* base = static_cast<const char*>(m);
  offsets_p_ = reinterpret_cast<const uint32_t*>(base);
  keys_p_ = reinterpret_cast<const uint64_t*>(base + a);
  has_emb_p_ = reinterpret_cast<const uint64_t*>(base + b);
  rows_p_ = base + c;
  offsets_ = {};
  keys_ = {};
  rows_ = {};
  has_emb_ = {};
  Release();  // nothing resident until a lookup reads it
  return Status::OK();
}

ServedRows::~ServedRows() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

void ServedRows::Release() const {
  // Out of this process's page tables, then out of the page cache (clean pages).
  ::madvise(map_, map_bytes_, MADV_DONTNEED);
  ::posix_fadvise(fd_, 0, static_cast<off_t>(map_bytes_), POSIX_FADV_DONTNEED);
}

size_t ServedRows::ResidentBytes() const {
  if (map_ == nullptr) return MemoryBytes();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((map_bytes_ + page - 1) / page);
  if (::mincore(map_, map_bytes_, in.data()) != 0) return map_bytes_;
  size_t resident = 0;
  for (unsigned char v : in) resident += v & 1;
  return resident * page;
}

size_t ServedRows::Trim(size_t budget) const {
  if (map_ == nullptr) return MemoryBytes();
  const size_t resident = ResidentBytes();
  if (resident > budget) Release();
  return resident;
}

size_t ServedRows::Bucket(uint64_t key) const {
  return bucket_shift_ >= 64 ? 0 : static_cast<size_t>(Mix64(key) >> bucket_shift_);
}

uint32_t ServedRows::Find(uint64_t key) const {
  if (n_ == 0) return kNone;
  const size_t b = Bucket(key);
  for (uint32_t at = offsets_p_[b], end = offsets_p_[b + 1]; at < end; ++at) {
    if (keys_p_[at] == key) return at;
  }
  return kNone;
}

void ServedRows::EncodeRow(const RowBlock& rows, size_t i, char* out) const {
  if (quant_.enabled()) {
    quant_.Encode(rows.emb(i), layout_.dim, out);
  } else {
    std::memcpy(out, rows.emb(i), emb_bytes_);
  }
  if (wide_) {
    const float w = rows.wide(i);
    std::memcpy(out + emb_bytes_, &w, sizeof(w));
  }
}

void ServedRows::DecodeRow(uint32_t at, RowBlock* out, size_t i) const {
  out->ClearRow(i, keys_p_[at]);
  const char* p = rows_p_ + size_t{at} * stride_;
  if (has_emb_p_[at / 64] >> (at % 64) & 1) {
    out->flags(i) |= kFlagHasEmb;
    if (quant_.enabled()) {
      quant_.Decode(p, layout_.dim, out->emb(i));
    } else {
      std::memcpy(out->emb(i), p, emb_bytes_);
    }
  }
  if (wide_) std::memcpy(&out->wide(i), p + emb_bytes_, sizeof(float));
}

bool ServedRows::Lookup(uint64_t key, RowBlock* out, size_t i) const {
  const uint32_t at = Find(key);
  if (at == kNone) return false;
  DecodeRow(at, out, i);
  return true;
}

Status ServedRows::ForEach(const std::function<Status(const RowBlock&)>& fn) const {
  constexpr size_t kBlock = 65536;
  RowBlock rows(layout_);
  for (size_t b = 0; b < n_; b += kBlock) {
    const size_t e = std::min(n_, b + kBlock);
    rows.Resize(e - b);
    for (size_t at = b; at < e; ++at) DecodeRow(static_cast<uint32_t>(at), &rows, at - b);
    RETURN_IF_ERROR(fn(rows));
  }
  return Status::OK();
}

size_t ServedRows::MemoryBytes() const {
  if (map_ != nullptr) return map_bytes_;
  return keys_.capacity() * sizeof(uint64_t) + rows_.capacity() +
         has_emb_.capacity() * sizeof(uint64_t) + offsets_.capacity() * sizeof(uint32_t);
}

}  // namespace ctrbox
