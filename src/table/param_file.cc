#include "table/param_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "util/coding.h"
#include "util/crc32c.h"
#include "util/hash.h"

namespace ctrbox {
namespace {
constexpr char kFileMagic[8] = {'C', 'T', 'R', 'P', 'A', 'R', 'M', '1'};
constexpr char kRecordMagic[4] = {'G', 'R', 'E', 'C'};
// 2: the header names the embedding quantization; 3: paged records (fingerprint order, a
// segment per page)
constexpr uint32_t kVersion = 3;
}  // namespace

ParamFile::~ParamFile() {
  if (!obsolete || (recycler && recycler->Offer(path, bytes))) return;
  env->DeleteFile(path).IgnoreError();  // space only; a leftover is harmless
}

namespace {
constexpr char kPoolPrefix[] = "params-free-";
}  // namespace

bool FileRecycler::IsPoolName(const std::string& name) { return name.rfind(kPoolPrefix, 0) == 0; }

bool FileRecycler::Offer(const std::string& path, uint64_t bytes) {
  MutexLock lock(&mu_);
  if (closed_ || files_.size() >= max_) return false;
  std::string pooled = JoinPath(dir_, fmt::format("{}{:06d}.dat", kPoolPrefix, next_++));
  if (!env_->RenameFile(path, pooled).ok()) return false;
  files_.emplace_back(std::move(pooled), bytes);
  bytes_ += bytes;
  return true;
}

std::string FileRecycler::Take() {
  MutexLock lock(&mu_);
  if (files_.empty()) return "";
  auto [path, bytes] = std::move(files_.back());
  files_.pop_back();
  bytes_ -= bytes;
  return path;
}

void FileRecycler::Drain(bool close) {
  std::vector<std::pair<std::string, uint64_t>> files;
  {
    MutexLock lock(&mu_);
    closed_ = closed_ || close;
    files.swap(files_);
    bytes_ = 0;
  }
  for (const auto& f : files) env_->DeleteFile(f.first).IgnoreError();  // as ~ParamFile
}

uint64_t FileRecycler::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

std::string EncodeParamFileHeader(uint32_t file_id, const ValueLayout& l) {
  std::string h(kFileMagic, 8);
  PutFixed<uint32_t>(&h, kVersion);
  PutFixed<uint32_t>(&h, file_id);
  PutFixed<uint32_t>(&h, l.dim);
  PutFixed<uint32_t>(&h, l.emb_state);
  PutFixed<uint32_t>(&h, l.wide_state);
  PutFixed<uint32_t>(&h, RowCodesWord(l));
  PutFixed<float>(&h, l.quant_range);
  PutFixed<uint32_t>(&h, Crc32c(h.data(), h.size()));
  return h;
}

Status CheckParamFileHeader(const std::string& path, const char* p, size_t n, uint32_t file_id,
                            const ValueLayout& l) {
  if (n < kParamFileHeaderBytes || std::memcmp(p, kFileMagic, 8) != 0) {
    return CorruptionError(path + ": not a ctrbox parameter file");
  }
  if (GetFixed<uint32_t>(p + 8) != kVersion) {
    return CorruptionError(fmt::format("{}: unknown version {} (this build reads {})", path,
                                       GetFixed<uint32_t>(p + 8), kVersion));
  }
  if (GetFixed<uint32_t>(p + 36) != Crc32c(p, 36))
    return CorruptionError(path + ": header CRC mismatch");
  if (GetFixed<uint32_t>(p + 12) != file_id || GetFixed<uint32_t>(p + 16) != l.dim ||
      GetFixed<uint32_t>(p + 20) != l.emb_state || GetFixed<uint32_t>(p + 24) != l.wide_state ||
      GetFixed<uint32_t>(p + 28) != RowCodesWord(l) || GetFixed<float>(p + 32) != l.quant_range) {
    return CorruptionError(
        path + ": header does not match the store (file id, row layout or quantization)");
  }
  return Status::OK();
}

size_t PageBytes(const ValueLayout& l) {
  constexpr size_t kPage = 4096;
  const size_t need = kSegmentHeaderBytes + l.EncodedBytes(true);
  return (need + kPage - 1) / kPage * kPage;
}

namespace {

// The first page boundary a record at `offset` may be cut at: past its header.
uint64_t FirstCut(uint64_t offset, size_t page) {
  return ((offset + kRecordHeaderBytes) / page + 1) * page;
}

}  // namespace

size_t RecordPieces(uint64_t offset, uint64_t length, size_t page) {
  const uint64_t cut = FirstCut(offset, page), end = offset + length;
  return cut >= end ? 1 : static_cast<size_t>((end - 1 - cut) / page + 2);
}

PieceSpan RecordPiece(uint64_t offset, uint64_t length, size_t page, size_t i) {
  const uint64_t cut = FirstCut(offset, page), end = offset + length;
  const uint64_t begin = i == 0 ? offset : cut + (i - 1) * page;
  return PieceSpan{begin, std::min<uint64_t>(cut + i * page, end)};
}

PieceRange PiecesFor(const Fences& fences, size_t pieces, uint16_t fp) {
  // Piece i >= 1 starts with fingerprint fences[i - 1]: a key may be in the last piece that
  // starts below fp, through the last that starts at or below it (equal fingerprints may
  // straddle a cut).
  const size_t known = std::min(pieces - 1, kBaseFences);
  PieceRange r;
  for (size_t i = 1; i <= known; ++i) {
    if (fences[i - 1] < fp) r.first = i;
    if (fences[i - 1] <= fp) r.last = i;
  }
  if (r.last == known) r.last = pieces - 1;  // the pieces past the fences: read them all
  return r;
}

void RecordBuilder::Reset(uint32_t group) {
  group_ = group;
  rows_.clear();
  ends_.clear();
  keys_.clear();
  emb_rows_ = 0;
  ordered_ = false;
}

void RecordBuilder::AddEncoded(std::string_view row, uint64_t key) {
  rows_.append(row);
  ends_.push_back(static_cast<uint32_t>(rows_.size()));
  keys_.push_back(key);
  emb_rows_ += (GetFixed<uint16_t>(row.data() + 18) & kFlagHasEmb) ? 1 : 0;
  ordered_ = false;
}

void RecordBuilder::AddRow(const RowBlock& rows, size_t i) {
  rows.EncodeRow(i, &rows_);
  ends_.push_back(static_cast<uint32_t>(rows_.size()));
  keys_.push_back(rows.key(i));
  emb_rows_ += rows.has_emb(i) ? 1 : 0;
  ordered_ = false;
}

namespace {

void PutSegmentHeader(std::string* out, uint32_t group) {
  PutFixed<uint32_t>(out, 0);  // CRC, rows and bytes: set when the segment closes
  PutFixed<uint32_t>(out, group);
  PutFixed<uint32_t>(out, 0);
  PutFixed<uint32_t>(out, 0);
}

void CloseSegment(std::string* out, size_t at, uint32_t rows) {
  char* h = out->data() + at;
  const uint32_t bytes = static_cast<uint32_t>(out->size() - at - kSegmentHeaderBytes);
  std::memcpy(h + 8, &rows, 4);
  std::memcpy(h + 12, &bytes, 4);
  const uint32_t crc = Crc32c(h + 4, out->size() - at - 4);
  std::memcpy(h, &crc, 4);
}

}  // namespace

void RecordBuilder::Order() {
  if (ordered_) return;
  // By (fingerprint, key): each row's fingerprint hashed once, into the high bits of a word
  // whose low bits are the row's index, so that the sort compares plain integers; the rows of
  // one fingerprint (a few per record at most) then go in key order.
  const size_t n = keys_.size();
  sort_words_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    sort_words_[i] = uint64_t{RowFingerprint(keys_[i])} << 32 | i;
  }
  std::sort(sort_words_.begin(), sort_words_.end());
  order_.resize(n);
  for (size_t k = 0; k < n; ++k) order_[k] = static_cast<uint32_t>(sort_words_[k]);
  for (size_t k = 0; k < n;) {
    size_t end = k + 1;
    while (end < n && sort_words_[end] >> 32 == sort_words_[k] >> 32) ++end;
    if (end - k > 1) {
      std::sort(order_.begin() + k, order_.begin() + end,
                [&](uint32_t a, uint32_t b) { return keys_[a] < keys_[b]; });
    }
    k = end;
  }
  ordered_ = true;
}

std::string_view RecordBuilder::Lay(uint64_t offset, size_t page, Fences* fences) {
  Order();
  const size_t n = keys_.size();
  if (fences != nullptr) fences->fill(0xFFFF);
  record_.assign(kRecordMagic, 4);
  PutFixed<uint32_t>(&record_, group_);
  PutFixed<uint32_t>(&record_, static_cast<uint32_t>(n));
  PutFixed<uint32_t>(&record_, 0);  // payload bytes, set at the end
  PutFixed<uint32_t>(&record_, 0);  // CRC of the header
  uint64_t cut = FirstCut(offset, page);
  size_t piece = 0;
  auto next_piece = [&] {
    record_.resize(cut - offset, '\0');  // zero fill to the cut
    cut += page;
    ++piece;
  };
  if (cut - (offset + kRecordHeaderBytes) < kSegmentHeaderBytes) next_piece();
  size_t seg = record_.size();
  uint32_t seg_rows = 0;
  PutSegmentHeader(&record_, group_);
  for (size_t k = 0; k < n; ++k) {
    const uint32_t i = order_[k];
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    const size_t size = ends_[i] - begin;
    if (offset + record_.size() + size > cut) {
      CloseSegment(&record_, seg, seg_rows);
      next_piece();
      seg = record_.size();
      seg_rows = 0;
      PutSegmentHeader(&record_, group_);
    }
    if (seg_rows == 0 && piece >= 1 && piece <= kBaseFences && fences != nullptr) {
      (*fences)[piece - 1] = RowFingerprint(keys_[i]);  // (piece 1 may be the first with rows)
    }
    record_.append(rows_, begin, size);
    ++seg_rows;
  }
  CloseSegment(&record_, seg, seg_rows);
  const uint32_t payload = static_cast<uint32_t>(record_.size() - kRecordHeaderBytes);
  std::memcpy(record_.data() + 12, &payload, 4);
  const uint32_t crc = Crc32c(record_.data(), 16);
  std::memcpy(record_.data() + 16, &crc, 4);
  return record_;
}

Status RecordView::ParseSegment(const ValueLayout& layout, uint32_t group_bits, uint32_t g,
                                size_t at, size_t n, uint32_t* rows) {
  if (n < kSegmentHeaderBytes) return CorruptionError("segment is truncated");
  const std::string_view in = data();
  const char* h = in.data() + at;
  const uint32_t count = GetFixed<uint32_t>(h + 8), size = GetFixed<uint32_t>(h + 12);
  if (size > n - kSegmentHeaderBytes) return CorruptionError("segment extends past its page");
  if (Crc32c(h + 4, 12 + size) != GetFixed<uint32_t>(h)) {
    return CorruptionError("segment CRC mismatch");
  }
  if (GetFixed<uint32_t>(h + 4) != g) return CorruptionError("segment of another group");
  size_t off = at + kSegmentHeaderBytes;
  const size_t end = off + size;
  const size_t fixed = layout.EncodedBytes(false);
  const char* p = in.data();
  // The previous row's fingerprint (its key hashed once: a row's, carried to the next).
  uint16_t prev_fp = keys.empty() ? 0 : RowFingerprint(keys.back());
  for (uint32_t i = 0; i < count; ++i) {
    if (end - off < fixed) return CorruptionError(fmt::format("row {} is truncated", *rows));
    const uint64_t key = GetFixed<uint64_t>(p + off);
    const uint16_t flags = GetFixed<uint16_t>(p + off + 18);
    if (flags & ~kFlagHasEmb) {
      return CorruptionError(fmt::format("row {} has unknown flags", *rows));
    }
    if (!layout.ValidKey(key)) {
      return CorruptionError(fmt::format("row {} names no table of the layout", *rows));
    }
    const size_t row_size = layout.EncodedBytesOf(key, (flags & kFlagHasEmb) != 0);
    if (end - off < row_size) return CorruptionError(fmt::format("row {} is truncated", *rows));
    if (GroupOfKey(layout, group_bits, key) != g) {
      return CorruptionError(fmt::format("row {} belongs to another group", *rows));
    }
    const uint16_t fp = RowFingerprint(key);
    if (!keys.empty() && (fp < prev_fp || (fp == prev_fp && key <= keys.back()))) {
      return CorruptionError(fmt::format("row {} is out of fingerprint order", *rows));
    }
    prev_fp = fp;
    keys.push_back(key);
    offsets.push_back(static_cast<uint32_t>(off));
    off += row_size;
    ends.push_back(static_cast<uint32_t>(off));
    ++*rows;
  }
  if (off != end) return CorruptionError("segment size does not match its rows");
  return Status::OK();
}

namespace {

Status CheckRecordHeader(const char* p, size_t n, uint32_t g, uint64_t length, uint32_t* rows) {
  if (n < kRecordHeaderBytes || std::memcmp(p, kRecordMagic, 4) != 0) {
    return CorruptionError("not a group record");
  }
  if (Crc32c(p, 16) != GetFixed<uint32_t>(p + 16)) return CorruptionError("record CRC mismatch");
  if (GetFixed<uint32_t>(p + 4) != g || kRecordHeaderBytes + GetFixed<uint32_t>(p + 12) != length) {
    return CorruptionError("record does not match the group index");
  }
  *rows = GetFixed<uint32_t>(p + 8);
  return Status::OK();
}

}  // namespace

Status RecordView::ParsePieces(const ValueLayout& layout, uint32_t group_bits, uint32_t g,
                               uint64_t offset, uint64_t length, size_t page, PieceRange pieces) {
  group = g;
  Clear();
  const uint64_t base = RecordPiece(offset, length, page, pieces.first).begin;
  uint32_t rows = 0, header_rows = 0;
  const std::string_view in = data();
  for (size_t i = pieces.first; i <= pieces.last; ++i) {
    const PieceSpan span = RecordPiece(offset, length, page, i);
    if (span.end - base > in.size()) return CorruptionError("record is truncated");
    size_t at = static_cast<size_t>(span.begin - base);
    if (i == 0) {
      RETURN_IF_ERROR(
          CheckRecordHeader(in.data() + at, span.end - span.begin, g, length, &header_rows));
      if (pieces.last + 1 == RecordPieces(offset, length, page)) {
        // The whole record: room for its rows at once (as many as its bytes could hold).
        const size_t n = std::min<size_t>(header_rows, length / layout.EncodedBytes(false));
        keys.reserve(n);
        offsets.reserve(n);
        ends.reserve(n);
      }
      at += kRecordHeaderBytes;
      if (span.end - span.begin - kRecordHeaderBytes < kSegmentHeaderBytes) continue;  // fill
    }
    RETURN_IF_ERROR(ParseSegment(layout, group_bits, g, at, span.end - base - at, &rows));
  }
  if (pieces.first == 0 && pieces.last + 1 == RecordPieces(offset, length, page) &&
      rows != header_rows) {
    return CorruptionError("record's rows do not match its header");
  }
  return Status::OK();
}

Status RecordView::Parse(const ValueLayout& layout, uint32_t group_bits, uint32_t g,
                         uint64_t offset, size_t page) {
  const size_t n = data().size();
  if (n < kRecordHeaderBytes) return CorruptionError("not a group record");
  return ParsePieces(layout, group_bits, g, offset, n, page,
                     PieceRange{0, RecordPieces(offset, n, page) - 1});
}

Status RecordView::DecodeRow(size_t i, RowBlock* out, size_t r) const {
  const std::string_view row_bytes = row(i);
  if (out->DecodeRow(row_bytes.data(), row_bytes.size(), r) != row_bytes.size()) {
    return CorruptionError("a parameter-file row does not decode");
  }
  return Status::OK();
}

}  // namespace ctrbox
