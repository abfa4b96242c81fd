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

}  // namespace
}  // namespace ctrbox
