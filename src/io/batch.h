// Batch: a block of examples in columnar form, the unit every reader produces and the
// trainer consumes.
//
// Row r has label labels[r], dense values dense[r*num_dense .. +num_dense) (raw, missing = 0),
// and for each slot s the keys keys[offsets[r*num_slots + s] .. offsets[r*num_slots + s + 1]),
// with weights[] parallel to keys (empty means every weight is 1). A slot may have zero keys
// (missing) or several (multi-hot).
//
// Thread safety: a value type.
#ifndef CTRBOX_IO_BATCH_H_
#define CTRBOX_IO_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ctrbox {

// The shape of the examples of one data set.
struct Schema {
  uint32_t num_slots = 0;
  uint32_t num_dense = 0;
  bool operator==(const Schema&) const = default;
};

struct Batch {
  Schema schema;
  std::vector<float> labels;
  std::vector<float> dense;
  std::vector<uint32_t> offsets{0};
  std::vector<uint64_t> keys;
  std::vector<float> weights;

  size_t rows() const { return labels.size(); }
  bool has_weights() const { return !weights.empty(); }
  // Empties the batch and sets its schema.
  void Reset(Schema s);
  // Appends rows [begin, end) of `other`. REQUIRES: other.schema == schema.
  void AppendRows(const Batch& other, size_t begin, size_t end);
  // Bytes held by the columns (their capacity).
  size_t MemoryBytes() const;
  // Bytes of the columns' contents (their size): MemoryBytes() after ShrinkToFit().
  size_t ContentBytes() const;
  // Releases the columns' spare capacity.
  void ShrinkToFit();
};

// Builds a Batch row by row; a row that turns out malformed is dropped with AbortRow().
// Keys may be added in any slot order; EndRow() groups them by slot (stable).
class BatchBuilder {
 public:
  explicit BatchBuilder(Batch* out) : out_(out) {}

  const Schema& schema() const { return out_->schema; }

  void BeginRow(float label);
  // REQUIRES: j < num_dense.
  void SetDense(uint32_t j, float value) { row_dense_[j] = value; }
  // REQUIRES: slot < num_slots.
  void AddKey(uint32_t slot, uint64_t key, float weight = 1.0f);
  // Commits the row to the batch.
  void EndRow();
  // Discards the row begun last.
  void AbortRow() { in_row_ = false; }

 private:
  struct Entry {
    uint32_t slot;
    float weight;
    uint64_t key;
  };
  Batch* out_;
  bool in_row_ = false;
  bool sorted_ = true;
  float label_ = 0;
  std::vector<float> row_dense_;
  std::vector<Entry> row_keys_;
};

}  // namespace ctrbox

#endif  // CTRBOX_IO_BATCH_H_
