// The TieredTable tests' helpers (tiered_table_test.cc, tiered_table_rows_test.cc,
// tiered_table_budget_test.cc): small
// table options, the reference (key -> canonical row encoding) and
// random keys.
#ifndef CTRBOX_TABLE_TIERED_TABLE_TEST_UTIL_H_
#define CTRBOX_TABLE_TIERED_TABLE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "table/tiered_table.h"
#include "util/random.h"
#include "util/temp_dir.h"

namespace ctrbox::tiered_test {

using ::ctrbox::testing::TempDir;  // util/temp_dir.h

constexpr ValueLayout kLayout{4, 4, 1};

inline TieredOptions Options(const std::string& dir, uint64_t budget, uint32_t group_bits = 8,
                             uint64_t file_bytes = 64 << 10) {
  TieredOptions o;
  o.layout = kLayout;
  o.stripe_bits = 3;
  o.memory_budget = budget;
  o.ssd.dir = dir;
  o.ssd.group_bits = group_bits;
  o.ssd.file_bytes = file_bytes;
  o.io_threads = 2;
  o.device_io_threads = 3;  // a pool of its own for the pulls whose reads come from the device
  o.parallel_read_us = 0;   // a write-back batch reads in parallel from its second read on
  o.min_evict_rows = 4;
  return o;
}

inline std::unique_ptr<TieredTable> Open(const TieredOptions& o) {
  auto t = TieredTable::Open(Env::Posix(), o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

inline std::string Encode(const RowBlock& rows, size_t i) {
  std::string e;
  rows.EncodeRow(i, &e);
  return e;
}

// The canonical encoding of the row a pull creates for a new key.
inline std::string InitialEncoding(const CtrAccessor& acc, const ValueLayout& layout,
                                   uint64_t key) {
  RowBlock fresh(layout);
  fresh.Resize(1);
  acc.InitRow(&fresh, 0, key);
  return Encode(fresh, 0);
}

// The reference: key -> canonical encoding.
using Reference = std::unordered_map<uint64_t, std::string>;

inline void ExpectSame(TieredTable& table, const Reference& ref) {
  std::map<uint64_t, std::string> got;
  RowBlock rows(table.layout());
  for (size_t s = 0; s < table.num_stripes(); ++s) {
    ASSERT_TRUE(table.ExportStripe(s, &rows).ok());
    // Blocks of 7 rows: every block full but the last, the stripe's rows (the order may differ:
    // the worker may have moved rows between memory and disk in between).
    RowBlock block(table.layout());
    std::map<uint64_t, std::string> blocked, whole;
    size_t blocks = 0, short_blocks = 0;
    ASSERT_TRUE(table
                    .ExportStripeBlocks(s, 7, &block,
                                        [&](RowBlock& b) {
                                          ++blocks;
                                          short_blocks += b.size() != 7;
                                          EXPECT_GT(b.size(), 0u);
                                          EXPECT_LE(b.size(), 7u);
                                          for (size_t i = 0; i < b.size(); ++i) {
                                            blocked.emplace(b.key(i), Encode(b, i));
                                          }
                                          return Status::OK();
                                        })
                    .ok());
    for (size_t i = 0; i < rows.size(); ++i) whole.emplace(rows.key(i), Encode(rows, i));
    EXPECT_EQ(blocked, whole);
    EXPECT_EQ(blocks, (rows.size() + 6) / 7);
    EXPECT_LE(short_blocks, 1u);
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_TRUE(got.emplace(rows.key(i), Encode(rows, i)).second)
          << "duplicate key " << rows.key(i);
    }
  }
  ASSERT_EQ(got.size(), ref.size());
  uint64_t value_bytes = 0, with_emb = 0;
  for (const auto& [k, v] : got) {
    auto it = ref.find(k);
    ASSERT_NE(it, ref.end()) << k;
    ASSERT_EQ(it->second, v) << k;
    value_bytes += v.size() - 8;
    with_emb += v.size() == table.layout().EncodedBytesOf(k, true);
  }
  TableStats st = table.Stats();
  EXPECT_EQ(st.keys, ref.size());
  EXPECT_EQ(table.CountKeys(), ref.size());
  EXPECT_EQ(st.value_bytes, value_bytes);
  EXPECT_EQ(st.keys_with_emb, with_emb);
}

// Distinct random keys from a small space, so they repeat across steps; with several tables
// (model.slot_dims) spread over them as the readers tag them.
inline std::vector<uint64_t> RandomKeys(Random* rng, size_t n, uint64_t space,
                                        uint32_t tables = 1) {
  std::vector<uint64_t> keys;
  std::map<uint64_t, bool> seen;
  while (keys.size() < n) {
    uint64_t k = Mix64(rng->Below(space));
    if (tables > 1) k = TableKey(k, static_cast<uint32_t>((k >> 7) % tables));
    if (!seen[k]) {
      seen[k] = true;
      keys.push_back(k);
    }
  }
  return keys;
}

// `rounds` pulls of 100 random keys of [0, 5000) (Random(seed)), each pushed back with the
// rows' show counter raised by `bump`.
inline void PullAndPushRounds(TieredTable* table, const CtrAccessor& acc, uint64_t seed, int rounds,
                              float bump) {
  Random rng(seed);
  for (int round = 0; round < rounds; ++round) {
    std::vector<uint64_t> keys = RandomKeys(&rng, 100, 5000);
    RowBlock rows(table->layout());
    auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok()) << pins.status().ToString();
    for (size_t i = 0; i < keys.size(); ++i) rows.show(i) += bump;
    ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
  }
}

// `keys`' new rows as a pull creates them, into *rows, then inserted (the pins let go first).
inline void InsertNewRows(TieredTable* table, const CtrAccessor& acc,
                          const std::vector<uint64_t>& keys, RowBlock* rows) {
  {
    auto pins = table->Pull(keys.data(), keys.size(), &acc, rows, nullptr);
    ASSERT_TRUE(pins.ok());
  }
  ASSERT_TRUE(table->Insert(*rows, nullptr).ok());
}

}  // namespace ctrbox::tiered_test

#endif  // CTRBOX_TABLE_TIERED_TABLE_TEST_UTIL_H_
