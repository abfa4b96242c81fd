#include "jobs/holdout.h"

#include <cassert>
#include <cmath>
#include <cstdint>
#include <utility>

#include "util/hash.h"  // xxhash, inlined

namespace ctrbox {

HoldOut::HoldOut(double fraction, uint64_t seed) : seed_(seed) {
  assert(fraction > 0 && fraction < 1);
  threshold_ = static_cast<uint64_t>(std::ldexp(fraction, 64));
}

bool HoldOut::Held(const Batch& batch, size_t r) const {
  const size_t S = batch.schema.num_slots, D = batch.schema.num_dense;
  XXH3_state_t state;
  XXH3_INITSTATE(&state);  // a seeded reset reads the state's seed field first
  XXH3_64bits_reset_withSeed(&state, seed_);
  XXH3_64bits_update(&state, &batch.labels[r], sizeof(float));
  if (D > 0) XXH3_64bits_update(&state, &batch.dense[r * D], D * sizeof(float));
  // Where each slot's keys end within the row, the keys and their values.
  const uint32_t k0 = batch.offsets[r * S];
  for (size_t s = 1; s <= S; ++s) {
    const uint32_t end = batch.offsets[r * S + s] - k0;
    XXH3_64bits_update(&state, &end, sizeof(end));
  }
  const uint32_t k1 = batch.offsets[(r + 1) * S];
  if (k1 > k0) {
    XXH3_64bits_update(&state, &batch.keys[k0], (k1 - k0) * sizeof(uint64_t));
    if (batch.has_weights())
      XXH3_64bits_update(&state, &batch.weights[k0], (k1 - k0) * sizeof(float));
  }
  return XXH3_64bits_digest(&state) < threshold_;
}

void HoldOut::Keep(Batch* batch, bool held) const {
  // Each row hashed once: the rows kept before the first left out, then runs of kept rows.
  const size_t n = batch->rows();
  size_t r = 0;
  while (r < n && Held(*batch, r) == held) ++r;
  if (r == n) return;  // every row stays
  Batch kept;
  kept.Reset(batch->schema);
  kept.AppendRows(*batch, 0, r);
  constexpr size_t kNoRun = SIZE_MAX;
  size_t run = kNoRun;  // where the run of kept rows being read began
  for (size_t i = r + 1; i < n; ++i) {
    const bool keep = Held(*batch, i) == held;
    if (keep && run == kNoRun) run = i;
    if (!keep && run != kNoRun) {
      kept.AppendRows(*batch, run, i);
      run = kNoRun;
    }
  }
  if (run != kNoRun) kept.AppendRows(*batch, run, n);
  *batch = std::move(kept);
}

namespace {

class HeldBackReader final : public BatchReader {
 public:
  HeldBackReader(std::unique_ptr<BatchReader> in, HoldOut hold_out)
      : in_(std::move(in)), hold_out_(hold_out) {}
  Schema schema() const override { return in_->schema(); }
  Status Next(Batch* batch, bool* eof) override {
    while (true) {
      RETURN_IF_ERROR(in_->Next(batch, eof));
      if (*eof) return Status::OK();
      hold_out_.Keep(batch, true);
      if (batch->rows() > 0) return Status::OK();  // (Next returns at least one row)
    }
  }
  RecordCounts counts() const override { return in_->counts(); }
  InputProgress progress() const override { return in_->progress(); }

 private:
  std::unique_ptr<BatchReader> in_;
  HoldOut hold_out_;
};

}  // namespace

std::unique_ptr<BatchReader> HeldBackRows(std::unique_ptr<BatchReader> reader, HoldOut hold_out) {
  return std::make_unique<HeldBackReader>(std::move(reader), hold_out);
}

}  // namespace ctrbox
