#include "table/cache_stripe.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "table/accessor.h"
#include "util/hash.h"
#include "util/random.h"

namespace ctrbox {
namespace {

// The layouts rows are stored in: float32, 8- and 16-bit codes, bfloat16 state, several
// tables of their own dimensions (model.slot_dims), row-wise state (one float per embedding).
std::vector<ValueLayout> Layouts() {
  std::vector<ValueLayout> out;
  ValueLayout plain{16, 16, 1};
  out.push_back(plain);
  ValueLayout q8 = plain;
  q8.quant_bits = 8;
  out.push_back(q8);
  ValueLayout q16 = plain;
  q16.quant_bits = 16;
  q16.state_bits = 16;
  out.push_back(q16);
  ValueLayout rowwise{5, 1, 1};
  rowwise.quant_bits = 8;  // 5 codes: the state starts past a padded word
  out.push_back(rowwise);
  ValueLayout tables{8, 8, 1};
  tables.tables = 2;
  tables.table_dim[0] = tables.table_state[0] = 8;
  tables.table_dim[1] = tables.table_state[1] = 3;
  out.push_back(tables);
  return out;
}

// CacheStripe::EncodeRow copies the slab's stored form into the canonical encoding; the simple
// reference decodes the row (ReadRow) and encodes it again (RowBlock::EncodeRow). The bytes
// are the same for rows with and without an embedding, in every layout.
TEST(CacheStripeTest, EncodeRowGivesTheBytesOfReadRowThenEncodeRow) {
  for (const ValueLayout& l : Layouts()) {
    SCOPED_TRACE(::testing::Message() << "dim " << l.dim << " quant " << l.quant_bits
                                      << " state_bits " << l.state_bits << " tables " << l.tables);
    CacheStripe stripe(l);
    CacheStripe::Lock lock(stripe);
    CtrAccessor acc(l, AccessorOptions{});
    RowBlock rows(l), back(l);
    back.Resize(1);
    std::vector<uint32_t> nodes;
    for (uint64_t i = 0; i < 64; ++i) {
      const uint64_t key = l.multi() ? TableKey(Mix64(i), i % 2) : Mix64(i);
      rows.Resize(i + 1);
      acc.InitRow(&rows, i, key);             // embeddings on the grid of a quantized layout
      if (i % 5 == 0) rows.ClearRow(i, key);  // no embedding
      rows.show(i) = float(i) * 0.5f;
      rows.click(i) = float(i % 3);
      rows.unseen(i) = static_cast<uint16_t>(i % 7);
      rows.wide(i) = -0.25f * float(i);
      for (uint32_t s = 0; s < l.wide_state; ++s) rows.wide_state(i)[s] = float(i + s);
      for (uint32_t s = 0; s < l.StateOf(key) && rows.has_emb(i); ++s) {
        rows.emb_state(i)[s] = 0.5f * float(s + 1);  // exact in bfloat16 too
      }
      const uint32_t node = stripe.Insert(key);
      stripe.WriteRow(node, rows, i);
      nodes.push_back(node);
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::string got, want;
      const bool emb = stripe.EncodeRow(nodes[i], &got);
      stripe.ReadRow(nodes[i], &back, 0);
      back.EncodeRow(0, &want);
      EXPECT_EQ(emb, back.has_emb(0)) << i;
      EXPECT_EQ(got, want) << "row " << i;
      EXPECT_EQ(got.size(), l.EncodedBytesOf(rows.key(i), rows.has_emb(i)));
    }
  }
}

// ForEachNodeById visits the live nodes ForEachNode visits (the index's), each once, in
// increasing id order: through inserts, erases that free ids and inserts that take them again,
// and the renumbering of CompactArenas.
TEST(CacheStripeTest, ForEachNodeByIdVisitsTheIndexsNodesInIdOrder) {
  CacheStripe stripe(ValueLayout{4, 4, 1});
  CacheStripe::Lock lock(stripe);
  Random rng(3);
  std::vector<uint64_t> keys;
  auto check = [&](const char* when) {
    stripe.AssertLocked();  // (called with the lock held)
    std::set<uint32_t> by_index;
    stripe.ForEachNode([&](uint32_t n) { by_index.insert(n); });
    std::vector<uint32_t> by_id;
    stripe.ForEachNodeById([&](uint32_t n) { by_id.push_back(n); });
    EXPECT_EQ(by_id, std::vector<uint32_t>(by_index.begin(), by_index.end())) << when;
    EXPECT_EQ(by_id.size(), stripe.size()) << when;
  };
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 200; ++i) {
      const uint64_t key = rng.Next();
      if (stripe.Find(key) == kNoNode) {
        stripe.Insert(key);
        keys.push_back(key);
      }
    }
    check("after inserts");
    for (int i = 0; i < 150 && !keys.empty(); ++i) {
      const size_t at = rng.Below(keys.size());
      stripe.Erase(stripe.Find(keys[at]));
      keys[at] = keys.back();
      keys.pop_back();
    }
    check("after erases");
    if (round % 5 == 4) {
      stripe.CompactArenas();
      check("after compacting the arenas");
    }
  }
}

// ShrinkArenas moves embeddings out of the slabs past the cut while the node ids stay: every
// row's bytes (EncodeRow) are those it had, in every layout (several tables, quantized, rows
// without an embedding), pinned rows included, and the slabs are given back; but only past
// the room the stripe's high-water mark (NoteHighWater) takes.
TEST(CacheStripeTest, ShrinkArenasKeepsEveryRowAndGivesSlabsBack) {
  for (const ValueLayout& l : Layouts()) {
    SCOPED_TRACE(::testing::Message()
                 << "dim " << l.dim << " quant " << l.quant_bits << " tables " << l.tables);
    CacheStripe stripe(l);
    CacheStripe::Lock lock(stripe);
    CtrAccessor acc(l, AccessorOptions{});
    RowBlock rows(l);
    Random rng(11);
    std::vector<std::pair<uint32_t, std::string>> held;  // node, its row's bytes
    constexpr size_t kRows = 20000;
    rows.Resize(kRows);
    for (uint64_t i = 0; i < kRows; ++i) {
      const uint64_t key = l.multi() ? TableKey(Mix64(i), i % 2) : Mix64(i);
      acc.InitRow(&rows, i, key);
      if (i % 7 == 0) rows.ClearRow(i, key);  // no embedding
      rows.show(i) = float(i);
      const uint32_t node = stripe.Insert(key);
      stripe.WriteRow(node, rows, i);
      if (i % 3 == 0) stripe.meta(node).pins = 1;  // a pull holds it: ids must stay
      std::string bytes;
      stripe.EncodeRow(node, &bytes);
      held.emplace_back(node, bytes);
    }
    stripe.NoteHighWater();  // at its top
    // The stripe's share falls to a tenth, at random (so the cut has records past it).
    for (size_t i = 0; i < held.size();) {
      if (rng.Below(10) != 0) {
        stripe.Erase(held[i].first);
        held[i] = held.back();
        held.pop_back();
      } else {
        ++i;
      }
    }
    const size_t before = stripe.AllocatedBytes(), counted = stripe.MemoryBytes();
    const size_t emb_before = stripe.EmbeddingSlabBytes();
    EXPECT_EQ(stripe.ShrinkArenas(), 0u);  // room for its high-water mark is kept
    // Later rounds find it this low at their top: the mark falls by 1/32 a round, and the
    // slabs go once it is an eighth (and two slabs) above what the rows need.
    size_t freed = 0, rounds = 0, first = 0;
    for (; rounds < 100; ++rounds) {
      stripe.NoteHighWater();
      const size_t f = stripe.ShrinkArenas();
      if (f > 0 && first == 0) first = rounds + 1;
      freed += f;
    }
    EXPECT_GE(first, 3u);  // not at one or two low rounds
    // By then the mark has fallen to the rows' ((31/32)^100 < 1/10), and the slabs with it.
    EXPECT_LT(stripe.EmbeddingSlabBytes(), emb_before / 4);
    EXPECT_LE(stripe.AllocatedBytes(), before - freed);  // (and the free list shrank)
    EXPECT_EQ(stripe.MemoryBytes(), counted);  // the budget counts live records: unchanged
    EXPECT_EQ(stripe.ShrinkArenas(), 0u);      // within its slack now
    for (const auto& [node, bytes] : held) {
      std::string now;
      stripe.EncodeRow(node, &now);
      ASSERT_EQ(now, bytes) << "node " << node;
    }
    // And it goes on: rows written again and new rows reuse the freed places.
    rows.Resize(1);
    for (size_t i = 0; i < held.size(); i += 2) {
      acc.InitRow(&rows, 0, stripe.key(held[i].first));
      rows.show(0) = 7.0f;
      stripe.WriteRow(held[i].first, rows, 0);
      held[i].second.clear();
      stripe.EncodeRow(held[i].first, &held[i].second);
    }
    for (uint64_t i = kRows; i < kRows + 3000; ++i) {
      const uint64_t key = l.multi() ? TableKey(Mix64(i), i % 2) : Mix64(i);
      acc.InitRow(&rows, 0, key);
      const uint32_t node = stripe.Insert(key);
      stripe.WriteRow(node, rows, 0);
      std::string bytes;
      stripe.EncodeRow(node, &bytes);
      held.emplace_back(node, bytes);
    }
    for (const auto& [node, bytes] : held) {
      std::string now;
      stripe.EncodeRow(node, &now);
      ASSERT_EQ(now, bytes) << "node " << node << " after reuse";
    }
  }
}

}  // namespace
}  // namespace ctrbox
