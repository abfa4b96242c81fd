// TieredTable (table/tiered_table.h) beside the differential tests of tiered_table_test.cc:
// a reopen keeps the digest, the delta filter, the rows a pull only pins, inserts over rows on
// disk and exports that stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "table/param_file.h"
#include "table/tiered_table.h"
#include "table/tiered_table_test_util.h"
#include "util/random.h"

namespace ctrbox {
namespace {

using namespace tiered_test;  // NOLINT: the tests' helpers

TEST(TieredTableTest, ReopenKeepsTheDigestAndNeedsACleanShutdown) {
  TempDir dir;
  CtrAccessor acc(kLayout, AccessorOptions{});
  TieredOptions o = Options(dir.path(), 64 << 10);
  uint64_t digest = 0;
  {
    auto table = Open(o);
    ASSERT_NO_FATAL_FAILURE(PullAndPushRounds(table.get(), acc, 5, 50, 1.0f));
    digest = *table->SparseDigest(nullptr);
    ASSERT_TRUE(table->Close().ok());
  }
  TieredOptions r = o;
  r.reopen = true;
  {
    auto table = Open(r);
    ASSERT_NE(table, nullptr);
    EXPECT_EQ(*table->SparseDigest(nullptr), digest);
    // Not closed: the INDEX was consumed at reopen, so this state cannot be reopened.
  }
  auto again = TieredTable::Open(Env::Posix(), r);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("not shut down cleanly"), std::string::npos);
}

TEST(TieredTableTest, DeltaFilterHoldsEveryKeyOfTheDeltaAndRulesOutMostOthers) {
  Random rng(17);
  int false_positives = 0, others = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint64_t> delta(1 + rng.Below(8));
    for (uint64_t& k : delta) k = rng.Next();
    GroupEntry e;
    e.delta = RecordLoc{1, 0, 100};
    e.delta_filter = DeltaFilterOf(delta);
    for (uint64_t k : delta) ASSERT_TRUE(e.DeltaMayHold(k));  // never a false negative
    const uint64_t other = rng.Next();
    false_positives += e.DeltaMayHold(other);
    ++others;
    e.delta = RecordLoc{};  // no delta: nothing may be in it
    EXPECT_FALSE(e.DeltaMayHold(delta[0]));
  }
  // Two bits per key of 64: at 1..8 keys (4.5 on average) about 2 % false positives.
  EXPECT_LT(false_positives, others / 20);
}

// Pull's `overwritten` rows: one found in memory is pinned (its push stores it) but not copied
// (out keeps what it held, with the key set); one loaded from disk or created is filled; the
// rest read as without the mask.
TEST(TieredTableTest, OverwrittenRowsInMemoryArePinnedNotCopied) {
  TempDir dir;
  CtrAccessor acc(kLayout, AccessorOptions{});
  auto table = Open(Options(dir.path(), 1 << 20));
  Random rng(9);
  const std::vector<uint64_t> keys = RandomKeys(&rng, 400, 1 << 30);
  const size_t half = keys.size() / 2;  // the first half on disk only, the second in memory
  Reference ref;
  for (const size_t from : {size_t{0}, half}) {
    std::vector<uint64_t> part(keys.begin() + from, keys.begin() + from + half);
    RowBlock rows(kLayout);
    auto pins = table->Pull(part.data(), part.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok());
    for (size_t i = 0; i < part.size(); ++i) {
      rows.show(i) = static_cast<float>(from + i);
      rows.emb(i)[0] = 0.5f;
      ref[part[i]] = Encode(rows, i);
    }
    ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
    if (from == 0) {
      ASSERT_TRUE(table->EvictAll().ok());
    }
  }
  std::vector<uint64_t> pulled = keys;
  const std::vector<uint64_t> added = RandomKeys(&rng, 50, 1 << 30);
  pulled.insert(pulled.end(), added.begin(), added.end());
  std::vector<uint8_t> overwritten(pulled.size());
  for (size_t i = 0; i < pulled.size(); ++i) overwritten[i] = i % 2;
  RowBlock rows(kLayout);
  rows.Resize(pulled.size());
  for (size_t i = 0; i < pulled.size(); ++i) rows.show(i) = -7.0f;  // what out held
  auto pins = table->Pull(pulled.data(), pulled.size(), &acc, &rows, nullptr, overwritten.data());
  ASSERT_TRUE(pins.ok());
  size_t uncopied = 0;
  for (size_t i = 0; i < pulled.size(); ++i) {
    ASSERT_EQ(rows.key(i), pulled[i]);
    auto it = ref.find(pulled[i]);
    if (it == ref.end()) {  // created: filled
      EXPECT_EQ(Encode(rows, i), InitialEncoding(acc, kLayout, pulled[i]));
    } else if (overwritten[i] && i >= half) {  // in memory: left for the caller
      EXPECT_EQ(rows.show(i), -7.0f) << i;
      ++uncopied;
      ASSERT_EQ(rows.DecodeRow(it->second.data(), it->second.size(), i), it->second.size());
    } else {  // read from memory, or loaded from disk (overwritten or not)
      EXPECT_EQ(Encode(rows, i), it->second) << i;
    }
  }
  EXPECT_EQ(uncopied, half / 2);
  // The caller's rows go back as usual: the pins were taken.
  for (size_t i = 0; i < pulled.size(); ++i) {
    rows.click(i) = 1.0f;
    ref[pulled[i]] = Encode(rows, i);
  }
  ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
  ASSERT_TRUE(table->EvictAll().ok());
  ExpectSame(*table, ref);
}

// Insert (loading a model or a checkpoint chain) of keys whose rows were written to disk since
// an earlier Insert: each is that row's newer version, counted once by Stats, CountKeys and
// the groups' unique rows, before and after the write-back, and it reads back as inserted.
// (A blind insert counted it twice, and a checkpoint's delta then failed its key count.)
TEST(TieredTableTest, InsertOverRowsOnDiskCountsThemOnce) {
  TempDir dir;
  CtrAccessor acc(kLayout, AccessorOptions{});
  auto table = Open(Options(dir.path(), 1 << 20));
  Random rng(8);
  const std::vector<uint64_t> keys = RandomKeys(&rng, 3000, 1 << 30);
  RowBlock rows(kLayout);
  ASSERT_NO_FATAL_FAILURE(InsertNewRows(table.get(), acc, keys, &rows));
  ASSERT_TRUE(table->EvictAll().ok());  // every row on disk only
  const uint64_t pulled = table->Storage().pulled_keys;
  // A newer version of every other row, and 500 new keys.
  RowBlock newer(kLayout);
  std::vector<uint64_t> again;
  for (size_t i = 0; i < keys.size(); i += 2) again.push_back(keys[i]);
  const std::vector<uint64_t> added = RandomKeys(&rng, 500, 1 << 30);
  again.insert(again.end(), added.begin(), added.end());
  {
    auto pins = table->Pull(again.data(), again.size(), &acc, &newer, nullptr);
    ASSERT_TRUE(pins.ok());
  }
  for (size_t i = 0; i < newer.size(); ++i) newer.emb(i)[0] = 1000.0f + static_cast<float>(i);
  ASSERT_TRUE(table->EvictAll().ok());
  ASSERT_TRUE(table->Insert(newer, nullptr).ok());
  EXPECT_EQ(table->Storage().pulled_keys, pulled + again.size());  // Insert's lookups not counted
  std::set<uint64_t> distinct(keys.begin(), keys.end());
  distinct.insert(added.begin(), added.end());
  EXPECT_EQ(table->Stats().keys, distinct.size());
  EXPECT_EQ(table->CountKeys(), distinct.size());
  ASSERT_TRUE(table->EvictAll().ok());
  EXPECT_EQ(table->Stats().keys, distinct.size());
  EXPECT_EQ(table->CountKeys(), distinct.size());
  RowBlock got(kLayout);
  auto pins = table->Pull(again.data(), again.size(), nullptr, &got, nullptr);
  ASSERT_TRUE(pins.ok());
  for (size_t i = 0; i < again.size(); ++i) {
    ASSERT_EQ(got.key(i), again[i]);
    EXPECT_EQ(got.emb(i)[0], 1000.0f + static_cast<float>(i)) << i;
  }
}

// Exporting streams a stripe: rows on disk and in memory in blocks of the size asked, and a
// sink's error ends the export with that error.
TEST(TieredTableTest, ExportStreamsAStripeInBlocksAndStopsAtTheSinksError) {
  TempDir dir;
  CtrAccessor acc(kLayout, AccessorOptions{});
  auto table = Open(Options(dir.path(), 1 << 20));
  Random rng(9);
  const std::vector<uint64_t> keys = RandomKeys(&rng, 4000, 1 << 30);
  RowBlock rows(kLayout);
  ASSERT_NO_FATAL_FAILURE(InsertNewRows(table.get(), acc, keys, &rows));
  ASSERT_TRUE(table->EvictAll().ok());
  {  // half of them resident again
    std::vector<uint64_t> half(keys.begin(), keys.begin() + 2000);
    auto pins = table->Pull(half.data(), half.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok());
    ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
  }
  std::set<uint64_t> seen;
  RowBlock block(kLayout);
  for (size_t s = 0; s < table->num_stripes(); ++s) {
    ASSERT_TRUE(table
                    ->ExportStripeBlocks(s, 5, &block,
                                         [&](RowBlock& b) {
                                           EXPECT_LE(b.size(), 5u);
                                           for (size_t i = 0; i < b.size(); ++i) {
                                             EXPECT_TRUE(seen.insert(b.key(i)).second);
                                           }
                                           return Status::OK();
                                         })
                    .ok());
  }
  EXPECT_EQ(seen, std::set<uint64_t>(keys.begin(), keys.end()));
  size_t s = 0;
  RowBlock whole(kLayout);
  while (s < table->num_stripes()) {
    ASSERT_TRUE(table->ExportStripe(s, &whole).ok());
    if (whole.size() > 10) break;
    ++s;
  }
  ASSERT_LT(s, table->num_stripes());
  int calls = 0;
  const Status st = table->ExportStripeBlocks(s, 5, &block, [&](RowBlock&) {
    return ++calls == 2 ? InternalError("the sink's error") : Status::OK();
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(st.message(), "the sink's error");
  EXPECT_TRUE(table->ExportStripe(s, &whole).ok());  // the table is fine
}

}  // namespace
}  // namespace ctrbox
