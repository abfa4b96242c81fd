#include "table/tiered_table.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "table/param_file.h"
#include "table/tiered_table_test_util.h"
#include "util/bf16.h"
#include "util/mem_env.h"
#include "util/random.h"
#include "util/sys.h"

namespace ctrbox {
namespace {

using namespace tiered_test;  // NOLINT: the tests' helpers

// A pulled row i changed as training does: counters, the wide weight, an embedding created or
// changed and put back on the quantizer's grid, bfloat16 state rounded.
void ChangeAsTraining(const CtrAccessor& acc, const Quantizer& quant, uint64_t seed, Random* rng_in,
                      RowBlock* rows_in, size_t i) {
  Random& rng = *rng_in;
  RowBlock& rows = *rows_in;
  const ValueLayout& layout = rows.layout();
  const uint64_t key = rows.key(i);
  rows.show(i) += static_cast<float>(rng.Below(3));
  rows.click(i) += static_cast<float>(rng.Below(2));
  rows.unseen(i) = 0;
  rows.wide(i) += 0.5f;
  acc.MaybeCreateEmbedding(&rows, i);
  if (rows.has_emb(i)) {
    const uint32_t dim = layout.DimOf(key);  // the key's table's (model.slot_dims)
    rows.emb(i)[rng.Below(dim)] += 1.0f;
    if (rng.Below(2)) rows.emb(i)[rng.Below(dim)] = static_cast<float>(rng.Uniform() - 0.5);
    // As the trainer does after every update: back onto the grid.
    quant.Round(rows.emb(i), dim, QuantRounding::kStochastic, seed, rng.Next());
    if (layout.state_bits == 16) {  // bfloat16 state, rounded as the trainer does
      float& s = rows.emb_state(i)[rng.Below(layout.StateOf(key))];
      s = RoundBf16(s + static_cast<float>(rng.Uniform()), static_cast<uint32_t>(rng.Next()));
    }
  }
}

// Shrink against the reference: the same rows decayed, the same deleted and their keys named.
void ShrinkAgainst(const CtrAccessor& acc, ThreadPool* pool, TieredTable* table, Reference* ref) {
  std::vector<uint64_t> deleted_keys, expect_keys;
  auto deleted = table->Shrink(acc, pool, &deleted_keys);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  uint64_t expect_deleted = 0;
  for (auto it = ref->begin(); it != ref->end();) {
    RowBlock r(acc.layout());
    r.Resize(1);
    r.DecodeRow(it->second.data(), it->second.size(), 0);
    if (acc.ShrinkRow(&r.show(0), &r.click(0), &r.unseen(0))) {
      it->second = Encode(r, 0);
      ++it;
    } else {
      expect_keys.push_back(it->first);
      it = ref->erase(it);
      ++expect_deleted;
    }
  }
  ASSERT_EQ(*deleted, expect_deleted);
  std::sort(deleted_keys.begin(), deleted_keys.end());
  std::sort(expect_keys.begin(), expect_keys.end());
  ASSERT_EQ(deleted_keys, expect_keys);  // the keys a serving delta deletes
}

// A random mix of every table operation against the reference; with a quantized layout the
// rows' embeddings are stored as codes in every tier and must come back as the same codes.
// serial_writeback: the write-back reads its batches one record at a time (its default where
// reads are fast), not in parallel from the second read on (the test options).
// reads: how the files are read (pread, O_DIRECT, mappings, or either by turns: kAuto with
// its chooser told to switch after every window of 8 reads, holds permitting). Whatever the
// way, the pulls' reads are taken to come from the device and from memory by turns (a window
// of 8 reads each), so that pulls read on either pool while other threads read.
enum class Reads { kPread, kDirect, kMapped, kAuto };
void RunDifferential(bool disk, uint64_t seed, const ValueLayout& layout = kLayout,
                     Reads reads = Reads::kPread, bool serial_writeback = false,
                     uint32_t stripe_bits = 3, uint32_t min_group_victims = 2) {
  const bool direct_reads = reads == Reads::kDirect;
  const bool mapped_reads = reads == Reads::kMapped || reads == Reads::kAuto;
  TempDir dir;
  AccessorOptions ao;
  ao.embedx_threshold = 0.25f;  // some keys without embeddings
  ao.delete_threshold = 0.3f;
  ao.decay = 0.9f;
  CtrAccessor acc(layout, ao);
  const Quantizer quant = layout.quantizer();
  // 60 KiB: about a quarter of the ~2 000 rows (the rest of the budget is the group index,
  // the Bloom filters and the stripes' fixed structures).
  TieredOptions o = Options(disk ? dir.path() : "", disk ? 60 << 10 : 0);
  o.layout = layout;
  o.stripe_bits = stripe_bits;
  o.ssd.direct_reads = direct_reads;
  o.ssd.mapped_reads = reads == Reads::kMapped ? MappedReads::kOn
                       : reads == Reads::kAuto ? MappedReads::kAuto
                                               : MappedReads::kOff;
  o.ssd.read_path = {.window = 8, .slow_nanos = 0, .to_pread = -1, .to_mapped = 2};
  o.ssd.device_watch = {.window = 8, .slow_nanos = 0, .to_device = -1, .to_memory = 2};
  if (serial_writeback) o.parallel_read_us = 1e12;
  o.min_group_victims = min_group_victims;
  auto table = Open(o);
  Reference ref;
  ThreadPool pool(3);
  Random rng(seed);
  std::map<std::string, uint64_t> traffic;  // storage counters summed over reopens
  auto add_traffic = [&] {
    const StorageStats rep = table->Storage();
    if (!rep.has_disk) return;
    if (rep.files > 0) {  // (how files are read is known once one was opened)
      EXPECT_EQ(rep.direct_reads, direct_reads);
      EXPECT_EQ(rep.mapped_reads, mapped_reads);
    }
    traffic["loaded_from_ssd"] += rep.loaded_from_ssd;
    traffic["evicted_dirty"] += rep.evicted_dirty;
    traffic["compactions"] += rep.compactions;
    traffic["bloom_prunes"] += rep.bloom_prunes;
    traffic["new_deltas"] += rep.new_deltas;
    traffic["merges"] += rep.merges;
    traffic["records_read"] += rep.records_read;
    traffic["writeback_reads"] += rep.writeback_reads;
    traffic["writeback_read_nanos"] += rep.writeback_read_nanos;
    traffic["parallel_writeback_batches"] += rep.parallel_writeback_batches;
    traffic["device_pulls"] += rep.device_pulls;
    traffic["device_read_switches"] += rep.device_read_switches;
    traffic["files_recycled"] += rep.files_recycled;
    traffic["mapped_records_read"] += rep.mapped_records_read;
    traffic["read_path_switches"] += rep.read_path_switches;
    traffic["spared_victims"] += rep.spared_victims;
    traffic["merge_bytes"] += rep.merge_bytes;
    traffic["first_base_bytes"] += rep.first_base_bytes;
    traffic["delta_bytes"] += rep.delta_bytes;
    traffic["new_delta_bytes"] += rep.new_delta_bytes;
    traffic["kept_rows"] += rep.kept_rows;
  };
  // Every record written is counted by its kind: what the store wrote besides them is its
  // files' headers. (Once closed: a write-back under way counts its kinds after its appends.)
  auto expect_bytes_by_kind = [&] {
    ASSERT_TRUE(table->Close().ok());
    const StorageStats rep = table->Storage();
    const uint64_t records = rep.merge_bytes + rep.first_base_bytes + rep.delta_bytes +
                             rep.new_delta_bytes + rep.shrink_bytes + rep.compaction_bytes;
    EXPECT_LE(records, rep.ssd_bytes_written);
    EXPECT_EQ((rep.ssd_bytes_written - records) % kParamFileHeaderBytes, 0u)
        << rep.ssd_bytes_written << " " << records;
    EXPECT_LE(rep.ssd_bytes_written - records, kParamFileHeaderBytes * 10000);
  };
  for (int step = 0; step < 400; ++step) {
    const int op = static_cast<int>(rng.Below(20));
    if (op < 12) {  // pull for training, change, push
      std::vector<uint64_t> keys = RandomKeys(&rng, rng.Below(120), 2000, layout.tables);
      // Half the pulls say a third of their rows are overwritten by the caller (as the
      // pipeline's train stage does with the rows of passes in flight): the table may leave
      // those it finds in memory uncopied; the caller puts the row in (here: the reference's).
      std::vector<uint8_t> overwritten;
      if (rng.Below(2)) {
        overwritten.resize(keys.size());
        for (uint8_t& o : overwritten) o = rng.Below(3) == 0;
      }
      RowBlock rows(layout);
      auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, rng.Below(2) ? &pool : nullptr,
                              overwritten.empty() ? nullptr : overwritten.data());
      ASSERT_TRUE(pins.ok()) << pins.status().ToString();
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(rows.key(i), keys[i]);
        auto it = ref.find(keys[i]);
        if (it != ref.end() && !overwritten.empty() && overwritten[i]) {
          ASSERT_EQ(rows.DecodeRow(it->second.data(), it->second.size(), i), it->second.size());
        } else if (it != ref.end()) {
          ASSERT_EQ(Encode(rows, i), it->second) << "step " << step;
        } else {  // created: filled, overwritten or not
          ASSERT_EQ(Encode(rows, i), InitialEncoding(acc, layout, keys[i]));
        }
        ChangeAsTraining(acc, quant, seed, &rng, &rows, i);
        ref[keys[i]] = Encode(rows, i);
      }
      ASSERT_TRUE(table->Push(&*pins, rows, rng.Below(2) ? &pool : nullptr).ok());
    } else if (op < 14) {  // lookups (eval): nothing changes, absent keys are not inserted
      std::vector<uint64_t> keys = RandomKeys(&rng, rng.Below(60), 4000, layout.tables);
      RowBlock rows(layout);
      auto pins = table->Pull(keys.data(), keys.size(), nullptr, &rows, &pool);
      ASSERT_TRUE(pins.ok());
      for (size_t i = 0; i < keys.size(); ++i) {
        auto it = ref.find(keys[i]);
        if (it != ref.end()) {
          ASSERT_EQ(Encode(rows, i), it->second);
        } else {
          ASSERT_FALSE(rows.has_emb(i));
          ASSERT_EQ(rows.show(i), 0.0f);
        }
      }
    } else if (op == 14) {
      ASSERT_NO_FATAL_FAILURE(ShrinkAgainst(acc, &pool, table.get(), &ref));
    } else if (op == 15) {
      ASSERT_TRUE(table->FlushAll().ok());
    } else if (op == 16) {
      ASSERT_TRUE(table->EvictAll().ok());
    } else if (op == 17) {
      ASSERT_TRUE(table->Compact(0).ok());
    } else if (op == 18 && disk) {  // clean shutdown and reopen
      add_traffic();
      expect_bytes_by_kind();  // (closes it)
      table.reset();
      TieredOptions r = o;
      r.reopen = true;
      table = Open(r);
      ASSERT_NE(table, nullptr);
    } else {
      ExpectSame(*table, ref);
    }
  }
  ExpectSame(*table, ref);
  if (disk) {
    add_traffic();
    expect_bytes_by_kind();
    // Most rows went to disk and came back, several times.
    EXPECT_GT(traffic["loaded_from_ssd"], ref.size());
    EXPECT_GT(traffic["evicted_dirty"], ref.size());
    EXPECT_GT(traffic["compactions"], 0u);
    EXPECT_GT(traffic["files_recycled"], 0u);  // files written over dead ones (and read so)
    // Records read out of mappings: all of them, some (by turns), or none.
    EXPECT_LE(traffic["mapped_records_read"], traffic["records_read"]);
    if (reads == Reads::kMapped) {  // (all but reads under way at a snapshot)
      EXPECT_GE(traffic["mapped_records_read"], traffic["records_read"] * 99 / 100);
    } else if (reads == Reads::kAuto) {
      EXPECT_GT(traffic["mapped_records_read"], 0u);
      EXPECT_LT(traffic["mapped_records_read"], traffic["records_read"]);
      EXPECT_GT(traffic["read_path_switches"], 4u);
    } else {
      EXPECT_EQ(traffic["mapped_records_read"], 0u);
    }
    EXPECT_GT(traffic["bloom_prunes"], 0u);
    // Group writes of every kind, and some carried rows of the old records.
    EXPECT_GT(traffic["merges"], 0u);
    EXPECT_GT(traffic["merge_bytes"], 0u);
    EXPECT_GT(traffic["first_base_bytes"], 0u);
    EXPECT_GT(traffic["delta_bytes"], 0u);
    EXPECT_GT(traffic["new_delta_bytes"], 0u);
    EXPECT_GT(traffic["kept_rows"], 0u);
    // Pulls read on the device's pool, while the watch said so (O_DIRECT reads: always).
    EXPECT_GT(traffic["device_pulls"], 0u);
    EXPECT_GT(traffic["device_read_switches"], 4u);
    // The write-back read the groups' old records (its share of the reads), and was timed.
    EXPECT_GT(traffic["writeback_reads"], 0u);
    EXPECT_LT(traffic["writeback_reads"], traffic["records_read"]);
    EXPECT_GT(traffic["writeback_read_nanos"], 0u);
    // Lone dirty victims stayed while clean rows left in their place (never at minimum 1).
    EXPECT_EQ(traffic["spared_victims"] > 0, min_group_victims > 1) << traffic["spared_victims"];
    if (serial_writeback) {
      EXPECT_EQ(traffic["parallel_writeback_batches"], 0u);
    } else {
      EXPECT_GT(traffic["parallel_writeback_batches"], 0u);
    }
  }
}

TEST(TieredTableTest, DifferentialInMemory) { RunDifferential(false, 1); }
TEST(TieredTableTest, DifferentialOverSsdFiles) {
  for (uint64_t seed : {2, 3, 4}) RunDifferential(true, seed);
  RunDifferential(true, 5, kLayout, Reads::kPread, /*serial_writeback=*/true);
  // Every dirty victim written (storage.min_group_victims 1), and more of them kept (3).
  RunDifferential(true, 8, kLayout, Reads::kPread, false, 3, /*min_group_victims=*/1);
  RunDifferential(true, 9, kLayout, Reads::kPread, false, 3, /*min_group_victims=*/3);
}
// One stripe: a pull's or push's keys of a stripe (up to 120 here) span more than one of the
// chunks whose cache lines are fetched together (tiered_table_pull.cc, kChunk = 64), the
// second chunk's keys found, loaded or created after the first chunk's rows were inserted.
TEST(TieredTableTest, DifferentialInOneStripe) {
  RunDifferential(false, 6, kLayout, Reads::kPread, false, /*stripe_bits=*/0);
  RunDifferential(true, 7, kLayout, Reads::kPread, false, /*stripe_bits=*/0);
}
// The same with the files read around the page cache (O_DIRECT, storage.direct_reads): records
// read back while their pages are still being written, compactions' header walks, reopens.
TEST(TieredTableTest, DifferentialOverSsdFilesReadDirect) {
  {
    TempDir dir;
    auto table = Open(Options(dir.path(), 60 << 10));
    ASSERT_NE(table, nullptr);
    std::vector<uint64_t> keys = {1, 2, 3};
    RowBlock rows(kLayout);
    CtrAccessor acc(kLayout, AccessorOptions{});
    auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
    ASSERT_TRUE(pins.ok());
    ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
    ASSERT_TRUE(table->FlushAll().ok());
    auto probe = Env::Posix()->GetChildren(dir.path());
    ASSERT_TRUE(probe.ok());
    bool direct_ok = false;
    for (const std::string& name : *probe) {
      if (name.rfind("params-", 0) == 0) {
        direct_ok = Env::Posix()->NewDirectRandomAccessFile(JoinPath(dir.path(), name)).ok();
      }
    }
    if (!direct_ok) GTEST_SKIP() << dir.path() << ": the file system takes no O_DIRECT reads";
  }
  for (uint64_t seed : {2, 5}) RunDifferential(true, seed, kLayout, Reads::kDirect);
}
// The same with the files read out of mappings (storage.mapped_reads): records read from the
// file being appended to, from recycled files (mapped at their old size, written over and
// cut when sealed), compactions' header walks, reopens; with the write-back's reads serial
// and parallel.
TEST(TieredTableTest, DifferentialOverSsdFilesReadFromMappings) {
  for (uint64_t seed : {2, 5}) RunDifferential(true, seed, kLayout, Reads::kMapped);
  RunDifferential(true, 8, kLayout, Reads::kMapped, /*serial_writeback=*/true);
}
// The same with reads out of mappings and with pread by turns (storage.mapped_reads=auto, its
// chooser switching after every window of 8 reads): a switch while other threads read.
TEST(TieredTableTest, DifferentialOverSsdFilesReadByTurnsFromMappingsAndPread) {
  for (uint64_t seed : {3, 6}) RunDifferential(true, seed, kLayout, Reads::kAuto);
}
TEST(TieredTableTest, QuantizedCodesSurviveEveryTier) {
  // Rows through the cache stripes, group records in the SSD files, compaction and an INDEX
  // reopen: the reference compares canonical encodings, so the integer codes must be exact.
  for (uint32_t bits : {8u, 16u}) {
    ValueLayout q = kLayout;
    q.quant_bits = bits;
    q.quant_range = 0.75f;
    RunDifferential(false, 10 + bits, q);
    RunDifferential(true, 20 + bits, q);
  }
}

TEST(TieredTableTest, Bf16StateSurvivesEveryTier) {
  // optimizer.sparse.state_bits: 16 stores the state in two bytes: the cache stripes, the group
  // records, compaction and reopen must give back the same bfloat16 values (with 8-bit codes
  // too: the two packings side by side in a record).
  for (uint32_t bits : {0u, 8u}) {
    ValueLayout h = kLayout;
    h.state_bits = 16;
    h.quant_bits = bits;
    h.quant_range = 0.75f;
    RunDifferential(false, 30 + bits, h);
    RunDifferential(true, 40 + bits, h);
  }
}

// model.slot_dims: three tables of 4, 6 and 2 values in one table, rows 6 wide in a RowBlock.
ValueLayout MultiLayout() {
  ValueLayout l{6, 6, 1};
  l.tables = 3;
  const uint32_t dims[] = {4, 6, 2};
  for (uint32_t t = 0; t < 3; ++t) l.table_dim[t] = l.table_state[t] = dims[t];
  return l;
}

TEST(TieredTableTest, TablesOfSeveralDimensionsSurviveEveryTier) {
  // Each row at its own table's size in the cache stripes, the group records (a group holds one
  // table's rows), compaction and an INDEX reopen; the byte counts exact per table.
  RunDifferential(false, 50, MultiLayout());
  RunDifferential(true, 51, MultiLayout());
  ValueLayout q = MultiLayout();  // with 8-bit codes and bfloat16 state
  q.quant_bits = 8;
  q.quant_range = 0.75f;
  q.state_bits = 16;
  RunDifferential(true, 52, q);
}

TEST(TieredTableTest, TablesStoreEachRowAtItsOwnSizeAndRefuseForeignKeys) {
  const ValueLayout l = MultiLayout();
  CtrAccessor acc(l, AccessorOptions{});
  TieredOptions o = Options("", 0);
  o.layout = l;
  auto table = Open(o);
  ASSERT_NE(table, nullptr);
  std::vector<uint64_t> keys;
  for (uint32_t t = 0; t < 3; ++t) {
    for (uint64_t i = 0; i < 100; ++i) keys.push_back(TableKey(Mix64(i * 3 + t), t));
  }
  RowBlock rows(l);
  auto pins = table->Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
  ASSERT_TRUE(pins.ok()) << pins.status().ToString();
  const uint32_t want_dims[] = {4, 6, 2};
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t dim = l.DimOf(keys[i]);
    ASSERT_EQ(dim, want_dims[i / 100]);
    for (uint32_t d = 0; d < 6; ++d) {  // its own values drawn, the rest zero
      if (d < dim) {
        EXPECT_NE(rows.emb(i)[d], 0.0f);
      } else {
        EXPECT_EQ(rows.emb(i)[d], 0.0f);
      }
    }
  }
  ASSERT_TRUE(table->Push(&*pins, rows, nullptr).ok());
  // Value bytes: 16 + 4 (wide state) per row, and 2 x dim x 4 for embedding and state.
  EXPECT_EQ(table->Stats().value_bytes, 300u * 20 + 100u * (32 + 48 + 16));
  // A key naming a table the layout does not have is refused, naming the table.
  const uint64_t foreign = TableKey(99, 5);
  RowBlock one(l);
  auto bad = table->Pull(&foreign, 1, &acc, &one, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("names table 5"), std::string::npos);
}

}  // namespace
}  // namespace ctrbox
