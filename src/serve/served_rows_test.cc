#include "serve/served_rows.h"

#include <gtest/gtest.h>
#include <sys/vfs.h>

#include <map>

#include "ckpt/serving_files.h"
#include "util/random.h"
#include "util/temp_dir.h"

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

// Rows in a mapped file (--rows-dir) answer as the rows in memory; Trim gives their resident
// pages back, and lookups read them again.
TEST(ServedRowsTest, MappedRowsAnswerAsRowsInMemoryAndTrimGivesPagesBack) {
  testing::TempDir dir;
  ValueLayout table;
  table.dim = 16;
  const ValueLayout layout = ServingLayout(table, 16, 1.0f);
  std::map<uint64_t, Ref> ref;
  const RowBlock block = RandomRows(layout, 60000, 5, &ref);
  ServedRows::Builder a(layout, true), b(layout, true);
  a.Add(block);
  b.Add(block);
  std::shared_ptr<const ServedRows> memory = a.Finish();
  auto mapped = b.Finish(dir.File("rows.bin"));
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_TRUE((*mapped)->mapped());
  EXPECT_FALSE(Env::Posix()->FileExists(dir.File("rows.bin")));  // unlinked: freed with them
  EXPECT_EQ((*mapped)->size(), memory->size());
  // On tmpfs the file is memory: its pages cannot be given back (a real SSD directory's can).
  struct statfs fs;
  const bool tmpfs = ::statfs(dir.path().c_str(), &fs) == 0 && fs.f_type == 0x01021994;
  if (tmpfs)
    std::fprintf(stderr, "%s is on tmpfs: the residency checks are skipped\n", dir.path().c_str());
  if (!tmpfs) {
    EXPECT_LT((*mapped)->ResidentBytes(), (*mapped)->MemoryBytes() / 4);
  }
  RowBlock x(layout), y(layout);
  x.Resize(1);
  y.Resize(1);
  for (int round = 0; round < 2; ++round) {
    for (const auto& [key, r] : ref) {
      ASSERT_TRUE((*mapped)->Lookup(key, &x, 0));
      ASSERT_TRUE(memory->Lookup(key, &y, 0));
      ASSERT_EQ(std::vector<float>(x.emb(0), x.emb(0) + layout.dim),
                std::vector<float>(y.emb(0), y.emb(0) + layout.dim));
      ASSERT_EQ(x.wide(0), y.wide(0));
      ASSERT_EQ(x.has_emb(0), y.has_emb(0));
    }
    EXPECT_FALSE((*mapped)->Lookup(1, &x, 0) && !ref.contains(1));
    // Every page was read: all resident. Trim to a small budget gives them back.
    const size_t before = (*mapped)->Trim(64 << 10);
    EXPECT_GT(before, (*mapped)->MemoryBytes() / 2);
    if (!tmpfs) {
      EXPECT_LT((*mapped)->ResidentBytes(), size_t{64} << 10);
    }
  }
  // A directory that does not exist is an error naming the file.
  ServedRows::Builder c(layout, false);
  c.Add(block);
  auto bad = c.Finish(dir.File("no/such/rows.bin"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rows.bin"), std::string::npos);
}

}  // namespace
}  // namespace ctrbox
