#include "jobs/holdout.h"

#include <gtest/gtest.h>

#include "io/batch_test_util.h"
#include "io/synth.h"

namespace ctrbox {
namespace {

// A batch of generated rows, some with key weights.
Batch Rows(uint64_t n, uint64_t seed, bool weights) {
  SynthOptions o;
  o.seed = seed;
  o.format = DataFormat::kSlots;  // multi-hot slots: rows of varying key counts
  Batch b;
  SynthGenerator(o).GenerateBatch(0, n, &b, nullptr);
  if (weights) {
    b.weights.resize(b.keys.size());
    for (size_t i = 0; i < b.weights.size(); ++i) b.weights[i] = 0.25f * float(i % 7);
  }
  return b;
}

// The reference: each row on its own, appended one at a time.
Batch Reference(const Batch& b, const HoldOut& h, bool held) {
  Batch out;
  out.Reset(b.schema);
  for (size_t r = 0; r < b.rows(); ++r) {
    if (h.Held(b, r) == held) out.AppendRows(b, r, r + 1);
  }
  return out;
}

TEST(HoldOutTest, KeepsTheRowsTheReferenceKeepsOnEitherSide) {
  for (bool weights : {false, true}) {
    for (double fraction : {0.01, 0.1, 0.5, 0.9}) {
      const Batch rows = Rows(5000, 3, weights);
      const HoldOut h(fraction, 7);
      for (bool held : {true, false}) {
        Batch kept = rows;
        h.Keep(&kept, held);
        ExpectSameBatch(kept, Reference(rows, h, held));
      }
    }
  }
}

TEST(HoldOutTest, HoldsBackTheFractionAndDependsOnlyOnTheRowAndTheSeed) {
  const Batch rows = Rows(20000, 4, false);
  const HoldOut h(0.1, 1);
  uint64_t held = 0;
  for (size_t r = 0; r < rows.rows(); ++r) held += h.Held(rows, r);
  // Binomial(20000, 0.1): sd 42; six sd either side.
  EXPECT_NEAR(double(held), 2000.0, 260.0);
  // The same row in another batch, at another place: the same decision.
  Batch tail;
  tail.Reset(rows.schema);
  tail.AppendRows(rows, 12345, 12400);
  for (size_t r = 0; r < tail.rows(); ++r) EXPECT_EQ(h.Held(tail, r), h.Held(rows, 12345 + r));
  // Another seed holds back other rows.
  const HoldOut other(0.1, 2);
  uint64_t differ = 0;
  for (size_t r = 0; r < rows.rows(); ++r) differ += h.Held(rows, r) != other.Held(rows, r);
  EXPECT_GT(differ, 2000u);
  // A row differing in one key (or one key's slot, or its label) is another row.
  Batch one;
  one.Reset(rows.schema);
  one.AppendRows(rows, 0, 1);
  uint64_t moved = 0;
  for (uint64_t k = 0; k < 200; ++k) {
    Batch changed = one;
    changed.keys[0] ^= k + 1;
    moved += HoldOut(0.5, 1).Held(changed, 0) != HoldOut(0.5, 1).Held(one, 0);
  }
  EXPECT_GT(moved, 50u);
}

// A reader of fixed batches.
class Blocks final : public BatchReader {
 public:
  explicit Blocks(std::vector<Batch> blocks) : blocks_(std::move(blocks)) {}
  Schema schema() const override { return blocks_.front().schema; }
  Status Next(Batch* b, bool* eof) override {
    *eof = next_ == blocks_.size();
    if (!*eof) *b = blocks_[next_++];
    return Status::OK();
  }
  RecordCounts counts() const override { return {}; }

 private:
  std::vector<Batch> blocks_;
  size_t next_ = 0;
};

TEST(HoldOutTest, TheHeldBackReaderGivesTheHeldRowsInOrderAndSkipsEmptyBlocks) {
  const Batch rows = Rows(3000, 5, false);
  const HoldOut h(0.02, 9);
  std::vector<Batch> blocks;
  for (size_t b = 0; b < rows.rows(); b += 10) {  // blocks of 10 rows: many hold none back
    blocks.emplace_back();
    blocks.back().Reset(rows.schema);
    blocks.back().AppendRows(rows, b, std::min<size_t>(b + 10, rows.rows()));
  }
  auto reader = HeldBackRows(std::make_unique<Blocks>(std::move(blocks)), h);
  Batch all, b;
  all.Reset(rows.schema);
  bool eof = false;
  while (true) {
    ASSERT_TRUE(reader->Next(&b, &eof).ok());
    if (eof) break;
    ASSERT_GT(b.rows(), 0u);
    all.AppendRows(b, 0, b.rows());
  }
  ExpectSameBatch(all, Reference(rows, h, true));
}

}  // namespace
}  // namespace ctrbox
