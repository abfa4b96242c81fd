#include "table/param_file.h"

#include <fmt/format.h>

#include <cstring>

#include "util/coding.h"
#include "util/crc32c.h"
#include "util/hash.h"

namespace ctrbox {
namespace {
constexpr char kFileMagic[8] = {'C', 'T', 'R', 'P', 'A', 'R', 'M', '1'};
constexpr char kRecordMagic[4] = {'G', 'R', 'E', 'C'};
constexpr uint32_t kVersion = 2;  // 2: the header names the embedding quantization
}  // namespace

ParamFile::~ParamFile() {
  if (obsolete) env->DeleteFile(path).IgnoreError();  // space only; a leftover is harmless
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

void RecordBuilder::Reset(uint32_t group) {
  bytes_.assign(kRecordMagic, 4);
  PutFixed<uint32_t>(&bytes_, group);
  PutFixed<uint32_t>(&bytes_, 0);  // rows, set by Finish
  PutFixed<uint32_t>(&bytes_, 0);  // payload bytes, set by Finish
  PutFixed<uint32_t>(&bytes_, 0);  // CRC, set by Finish
  keys_.clear();
  emb_rows_ = 0;
}

void RecordBuilder::AddEncoded(std::string_view row, uint64_t key) {
  bytes_.append(row);
  keys_.push_back(key);
  emb_rows_ += (GetFixed<uint16_t>(row.data() + 18) & kFlagHasEmb) ? 1 : 0;
}

void RecordBuilder::AddRow(const RowBlock& rows, size_t i) {
  rows.EncodeRow(i, &bytes_);
  keys_.push_back(rows.key(i));
  emb_rows_ += rows.has_emb(i) ? 1 : 0;
}

std::string_view RecordBuilder::Finish() {
  const uint32_t n = static_cast<uint32_t>(keys_.size());
  const uint32_t payload = static_cast<uint32_t>(bytes_.size() - kRecordHeaderBytes);
  std::memcpy(bytes_.data() + 8, &n, 4);
  std::memcpy(bytes_.data() + 12, &payload, 4);
  uint32_t crc = Crc32c(bytes_.data(), 16);
  crc = Crc32cExtend(crc, bytes_.data() + kRecordHeaderBytes, payload);
  std::memcpy(bytes_.data() + 16, &crc, 4);
  return bytes_;
}

StatusOr<RecordHeader> CheckRecord(const char* p, size_t n) {
  if (n < kRecordHeaderBytes || std::memcmp(p, kRecordMagic, 4) != 0) {
    return CorruptionError("not a group record");
  }
  RecordHeader h{GetFixed<uint32_t>(p + 4), GetFixed<uint32_t>(p + 8), GetFixed<uint32_t>(p + 12)};
  if (kRecordHeaderBytes + uint64_t{h.payload_bytes} > n) {
    return CorruptionError("record extends past its end");
  }
  uint32_t crc = Crc32c(p, 16);
  crc = Crc32cExtend(crc, p + kRecordHeaderBytes, h.payload_bytes);
  if (crc != GetFixed<uint32_t>(p + 16)) return CorruptionError("record CRC mismatch");
  return h;
}

Status RecordView::Parse(const ValueLayout& layout, uint32_t group_bits) {
  const char* p = bytes.data();
  const RecordHeader h{GetFixed<uint32_t>(p + 4), GetFixed<uint32_t>(p + 8),
                       GetFixed<uint32_t>(p + 12)};
  group = h.group;
  keys.clear();
  offsets.clear();
  size_t off = kRecordHeaderBytes;
  const size_t end = kRecordHeaderBytes + h.payload_bytes;
  const size_t fixed = layout.EncodedBytes(false);
  for (uint32_t i = 0; i < h.rows; ++i) {
    if (end - off < fixed) return CorruptionError(fmt::format("row {} is truncated", i));
    const uint64_t key = GetFixed<uint64_t>(p + off);
    const uint16_t flags = GetFixed<uint16_t>(p + off + 18);
    if (flags & ~kFlagHasEmb) return CorruptionError(fmt::format("row {} has unknown flags", i));
    if (!layout.ValidKey(key))
      return CorruptionError(fmt::format("row {} names no table of the layout", i));
    const size_t size = layout.EncodedBytesOf(key, (flags & kFlagHasEmb) != 0);
    if (end - off < size) return CorruptionError(fmt::format("row {} is truncated", i));
    if (GroupOfKey(layout, group_bits, key) != h.group) {
      return CorruptionError(fmt::format("row {} belongs to another group", i));
    }
    keys.push_back(key);
    offsets.push_back(static_cast<uint32_t>(off));
    off += size;
  }
  if (off != end) return CorruptionError("record size does not match its rows");
  offsets.push_back(static_cast<uint32_t>(off));
  return Status::OK();
}

Status RecordView::DecodeRow(size_t i, RowBlock* out, size_t r) const {
  const std::string_view row_bytes = row(i);
  if (out->DecodeRow(row_bytes.data(), row_bytes.size(), r) != row_bytes.size()) {
    return CorruptionError("a parameter-file row does not decode");
  }
  return Status::OK();
}

}  // namespace ctrbox
