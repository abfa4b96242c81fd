#include "serve/served_rows.h"

#include <gtest/gtest.h>

#include <map>

#include "ckpt/serving_files.h"
#include "util/random.h"

namespace ctrbox {
namespace {

struct Ref {
  bool has_emb;
  float wide;
  std::vector<float> emb;
};

// n rows of `layout` with random keys, embeddings on the layout's grid, some without one.
RowBlock RandomRows(const ValueLayout& layout, size_t n, uint64_t seed,
                    std::map<uint64_t, Ref>* ref) {
  Random rng(seed);
  const Quantizer q = layout.quantizer();
  RowBlock rows(layout);
  rows.Resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t key;
    do key = rng.Next();
    while (ref->contains(key));
    rows.ClearRow(i, key);
    Ref r{rng.Below(5) != 0, static_cast<float>(rng.Below(1000)) / 997.0f - 0.5f, {}};
    rows.wide(i) = r.wide;
    if (r.has_emb) {
      rows.flags(i) |= kFlagHasEmb;
      for (uint32_t d = 0; d < layout.dim; ++d) {
        float x = static_cast<float>(rng.Below(20001)) / 10000.0f - 1.0f;
        if (q.enabled()) x = q.Value(q.Code(x, 0.5f));
        rows.emb(i)[d] = x;
      }
      r.emb.assign(rows.emb(i), rows.emb(i) + layout.dim);
    }
    (*ref)[key] = r;
  }
  return rows;
}

TEST(ServedRowsTest, LookupsGiveEveryRowAsAMapHoldsItAtEveryPrecision) {
  for (uint32_t bits : {0u, 8u, 16u}) {
    for (bool wide : {false, true}) {
      ValueLayout table;
      table.dim = 8;
      const ValueLayout layout = ServingLayout(table, bits, 0.75f);
      std::map<uint64_t, Ref> ref;
      ServedRows::Builder b(layout, wide);
      for (uint64_t block = 0; block < 3; ++block) {
        b.Add(RandomRows(layout, 5000 + block * 1234, 11 + block, &ref));
      }
      std::shared_ptr<const ServedRows> rows = b.Finish();
      ASSERT_EQ(rows->size(), ref.size());
      RowBlock out(layout);
      out.Resize(1);
      for (const auto& [key, r] : ref) {
        ASSERT_TRUE(rows->Lookup(key, &out, 0)) << key;
        EXPECT_EQ(out.key(0), key);
        EXPECT_EQ(out.has_emb(0), r.has_emb);
        EXPECT_EQ(out.wide(0), wide ? r.wide : 0.0f);
        for (uint32_t d = 0; r.has_emb && d < layout.dim; ++d) {
          ASSERT_EQ(out.emb(0)[d], r.emb[d]) << "bits " << bits << " key " << key << " d " << d;
        }
      }
      Random rng(99);
      for (int i = 0; i < 10000; ++i) {
        const uint64_t k = rng.Next();
        EXPECT_EQ(rows->Lookup(k, &out, 0), ref.contains(k));
      }
      // ForEach gives every row once.
      size_t seen = 0;
      ASSERT_TRUE(rows->ForEach([&](const RowBlock& block) {
                        for (size_t i = 0; i < block.size(); ++i) {
                          EXPECT_TRUE(ref.contains(block.key(i)));
                          ++seen;
                        }
                        return Status::OK();
                      })
                      .ok());
      EXPECT_EQ(seen, ref.size());
      // The bytes a key: its key, its codes (and wide weight), a bit and about a byte of
      // bucket offsets.
      const double per_key = double(rows->MemoryBytes()) / double(rows->size());
      const double row = 8 + layout.quantizer().StoredBytes(layout.dim) + (wide ? 4 : 0);
      EXPECT_LT(per_key, row + 2.5) << "bits " << bits;
    }
  }
}

TEST(ServedRowsTest, NoRowsAndOneRow) {
  ValueLayout layout = ServingLayout(ValueLayout{}, 16, 1.0f);
  std::shared_ptr<const ServedRows> none = ServedRows::Builder(layout, false).Finish();
  RowBlock out(layout);
  out.Resize(1);
  EXPECT_FALSE(none->Lookup(7, &out, 0));
  std::map<uint64_t, Ref> ref;
  ServedRows::Builder b(layout, false);
  b.Add(RandomRows(layout, 1, 3, &ref));
  auto one = b.Finish();
  EXPECT_TRUE(one->Lookup(ref.begin()->first, &out, 0));
  EXPECT_FALSE(one->Lookup(ref.begin()->first + 1, &out, 0));
}

}  // namespace
}  // namespace ctrbox
