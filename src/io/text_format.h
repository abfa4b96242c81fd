// Text input formats: Criteo TSV, libsvm, libFM, libFFM and the slot format.
// The grammar of each is in docs/formats/text_inputs.md.
//
// Parsing is a pure function of a chunk of lines, so chunks parse in parallel.
#ifndef CTRBOX_IO_TEXT_FORMAT_H_
#define CTRBOX_IO_TEXT_FORMAT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "io/bad_input.h"
#include "io/batch.h"
#include "io/line_chunker.h"

namespace ctrbox {

// libsvm and libfm are one layout (`label idx:val ...`, libFM's own files); libffm is
// `label field:idx:val ...`.
enum class DataFormat { kCriteo, kLibsvm, kLibfm, kSlots, kShards, kLibffm };

// Parses "criteo" | "libsvm" | "libfm" | "libffm" | "slots" | "shards".
bool ParseDataFormat(std::string_view name, DataFormat* out);
std::string_view DataFormatName(DataFormat f);

// Where an `idx:val` token's slot comes from (data.slot_from; libsvm and libfm): kOne puts
// every feature into slot 0; kPosition makes the token's position in the row its slot (files
// with one feature per field in field order, as libFM's one-hot files are).
enum class SlotFrom { kOne, kPosition };
bool ParseSlotFrom(std::string_view name, SlotFrom* out);
std::string_view SlotFromName(SlotFrom s);

constexpr uint32_t kCriteoDense = 13;
constexpr uint32_t kCriteoSlots = 26;

// Which slot's seed makes each slot's keys (model.shared_slots, docs/model.md): the slots of a
// group share their keys, so equal raw values in them give one key. Entry s is the slot whose
// seed slot s uses; slots past the end (and an empty map) use their own.
using KeySlots = std::vector<uint32_t>;
inline uint32_t KeySlotOf(const KeySlots& k, uint32_t slot) {
  return slot < k.size() ? k[slot] : slot;
}

struct TextFormatOptions {
  DataFormat format = DataFormat::kCriteo;
  // The shape of the rows. Criteo: 26 slots, 13 dense. libsvm and libfm: 1 slot, 0 dense
  // (data.num_slots with slot_from position). libffm and slots: as configured
  // (data.num_slots, data.num_dense).
  Schema schema{kCriteoSlots, kCriteoDense};
  SlotFrom slot_from = SlotFrom::kOne;
  // Lines without a label are accepted (label 0); used by predict.
  bool labels_optional = false;
  size_t max_line_bytes = 1 << 20;
  KeySlots key_slots;
};

// The schema a format implies, given the configured slot and dense counts.
Schema SchemaForFormat(DataFormat format, uint32_t num_slots, uint32_t num_dense,
                       SlotFrom slot_from = SlotFrom::kOne);

// The formats whose grammar `line` follows ("libfm or libsvm", "criteo"), or "" when none or
// it is ambiguous: the hint of a bad line's message.
std::string GuessFormat(std::string_view line);

struct ChunkParseResult {
  Status status;  // not OK only for unrecoverable input (a corrupt shard block)
  Batch batch;
  RecordCounts counts;
  std::vector<BadRecord> samples;   // the first few bad records of each kind
  std::vector<uint64_t> bad_lines;  // every bad line, in order (including overlong ones)
  // Optional per-row data for a reader's in-order step (ChunkDecoder::in_order): the feature
  // extractor's dedupe hashes, two words per row of batch.
  std::vector<uint64_t> row_tags;
  // The feature extractor's id column of each row (Extractor::Options::id_column), as text.
  std::vector<std::string> row_ids;
  // The feature extractor's line number of each row (Extractor::Options::serving).
  std::vector<uint64_t> row_lines;
};

// Parses the lines of `chunk` into result->batch (reset to the format's schema).
void ParseTextChunk(const TextFormatOptions& options, const TextChunk& chunk,
                    ChunkParseResult* result);
// Resets the parts of *result that every decoder fills.
void ResetParseResult(Schema schema, ChunkParseResult* result);

}  // namespace ctrbox

#endif  // CTRBOX_IO_TEXT_FORMAT_H_
