// SsdStore (table/ssd_store.h): an append that rolls over to a new file, the Bloom filters'
// budget across files and a reopen, and a pull's reads of a base's pieces against whole-record
// reads.
#include "table/ssd_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "table/param_file.h"
#include "table/ssd_store_test_util.h"
#include "util/mem_env.h"
#include "util/random.h"
#include "util/temp_dir.h"

namespace ctrbox {
namespace {

constexpr ValueLayout kLayout{4, 4, 1};

// A record of ~3000 bytes (50 rows of 60 bytes) in group g.
RecordBuilder* Record3000(uint32_t g, uint64_t first_key) {
  static RecordBuilder b;
  Random rng(first_key);
  std::vector<uint64_t> keys(50);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = first_key + i;
  BuildRecord(kLayout, g, keys, true, &rng, &b);
  return &b;
}

// A store in env whose files take one 3000-byte record each (four groups).
std::unique_ptr<SsdStore> OneRecordPerFileStore(MemEnv* env) {
  SsdOptions o;
  o.dir = "/s";
  o.group_bits = 2;
  o.file_bytes = 4096;
  auto created = SsdStore::Create(env, o, kLayout);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  return created.ok() ? std::move(*created) : nullptr;
}

TEST(SsdStoreTest, AWriteBackThatRollsOverKeepsTheFileHoldingItsFirstRecords) {
  // A write-back appends its groups' records, then sets their entries. When an append rolls
  // over to a new file, the file it leaves may hold only records not yet in the index: it must
  // not be dropped as empty (it was, and setting the entry then used a deleted file; seen as a
  // rare crash in the I/O-error training test).
  MemEnv env;
  auto store = OneRecordPerFileStore(&env);
  ASSERT_NE(store, nullptr);
  RecordLoc a, b, c;
  ASSERT_TRUE(store->Append(Record3000(0, 1), &a).ok());
  ASSERT_TRUE(store->Append(Record3000(1, 100), &b).ok());  // rolls over
  ASSERT_NE(a.file, b.file);
  ASSERT_TRUE(store->FlushAppends().ok());
  store->Replace(0, BaseOnly(a));
  store->Replace(1, BaseOnly(b));
  EXPECT_NE(store->File(a.file), nullptr);
  EXPECT_EQ(store->Stats().files, 2u);
  EXPECT_EQ(store->Stats().live_bytes, a.length + b.length);
  // Once its record is superseded, the sealed file holds nothing live and is deleted.
  ASSERT_TRUE(store->Append(Record3000(0, 1), &c).ok());
  ASSERT_TRUE(store->FlushAppends().ok());
  store->Replace(0, BaseOnly(c));
  EXPECT_EQ(store->File(a.file), nullptr);
  EXPECT_NE(store->File(b.file), nullptr);
  EXPECT_EQ(store->Stats().files, 2u);
}

TEST(SsdStoreTest, AnAppendAfterAFailedRollOverTriesTheNewFileAgain) {
  // Rolling over closes the full file, then creates the next one. When the creation fails,
  // the append fails; the next append must make the new file, not write to the closed one.
  MemEnv env;
  auto store = OneRecordPerFileStore(&env);
  ASSERT_NE(store, nullptr);
  RecordLoc a, b;
  ASSERT_TRUE(store->Append(Record3000(0, 1), &a).ok());
  env.InjectFault(FaultOp::kOpen, 1, MemEnv::Eio("injected"));
  const Status failed = store->Append(Record3000(1, 100), &b);
  EXPECT_EQ(failed.code(), StatusCode::kIOError) << failed.ToString();
  const Status again = store->Append(Record3000(1, 100), &b);
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_NE(b.file, a.file);
  ASSERT_TRUE(store->FlushAppends().ok());
  store->Replace(0, BaseOnly(a));
  store->Replace(1, BaseOnly(b));
  EXPECT_EQ(store->Stats().live_bytes, a.length + b.length);
}

// A store of 20 files' worth of groups (16 records of 64 keys per file) whose Bloom filters
// get 5 bits for each of their keys, for the filter-budget tests.
struct BloomBudgetStore {
  static constexpr uint32_t kGroups = 320;
  MemEnv env;
  SsdOptions o = [] {
    SsdOptions o;
    o.dir = "/s";
    o.group_bits = 10;
    o.file_bytes = 64 << 10;             // 16 records of ~3900 bytes per file
    o.bloom_budget = 20 * 1024 * 5 / 8;  // 5 bits for each key of 20 files of 1024 keys
    return o;
  }();
  std::vector<uint64_t> keys = std::vector<uint64_t>(64);
  uint64_t next_key = 1;
  Random rng{5};
  RecordBuilder record;

  // Writes group g's record of 64 new keys as its base (its old record becomes stale); the
  // filters stay within a quarter over their budget.
  void Append(SsdStore* store, uint32_t g) {
    for (uint64_t& k : keys) k = next_key++;
    BuildRecord(kLayout, g, keys, true, &rng, &record);
    RecordLoc loc;
    ASSERT_TRUE(store->Append(&record, &loc).ok());
    ASSERT_TRUE(store->FlushAppends().ok());
    GroupEntry e;
    e.base = loc;
    e.base_rows = e.unique_rows = static_cast<uint32_t>(keys.size());
    store->Replace(g, e);
    EXPECT_LE(store->Stats().bloom_bytes, o.bloom_budget + o.bloom_budget / 4) << g;
  }
  // Every file holding a live record rules out most keys never written.
  void ExpectEveryFileFiltered(const SsdStore& store) const {
    std::set<uint32_t> files;
    for (uint32_t g = 0; g < kGroups; ++g) files.insert(store.entry(g).base.file);
    EXPECT_GE(files.size(), 20u);
    for (uint32_t id : files) {
      const std::shared_ptr<ParamFile> f = store.File(id);
      ASSERT_NE(f, nullptr);
      int maybe = 0;
      for (uint64_t k = next_key; k < next_key + 1000; ++k) maybe += SsdStore::MayHold(f.get(), k);
      EXPECT_LT(maybe, 200) << "file " << id << " (" << f->bloom->num_bits() << " filter bits)";
    }
  }
};

TEST(SsdStoreTest, EveryFileGetsAFilterWithinTheBloomBudget) {
  // The filters share storage.bloom_share of the budget. Granting each new file its full bits
  // while the budget lasted left the files opened after that with no filter once the store
  // was full: each of their keys then cost a record read (18 % of the first-time keys'
  // lookups in store_bench). Each file now gets the bits the budget gives every key in the
  // files. Filters never shrink, so files opened while the store grew keep more bits (and the
  // last ones before the budget's quarter of headroom runs out may get none) until their
  // records are rewritten; after that, as here after the store's records were rewritten
  // twice, every file rules out most absent keys and the filters stay within a quarter over
  // the budget.
  BloomBudgetStore t;
  auto created = SsdStore::Create(&t.env, t.o, kLayout);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  for (uint32_t i = 0; i < 3 * t.kGroups; ++i) t.Append(created->get(), i % t.kGroups);
  t.ExpectEveryFileFiltered(**created);
}

TEST(SsdStoreTest, AReopenedStoreKeepsSharingTheBloomBudget) {
  // The INDEX keeps no count of the keys added to each file's filter; a reopened store
  // estimates it from the live records' rows. As in EveryFileGetsAFilterWithinTheBloomBudget,
  // once the records are rewritten every file has a filter and the filters stay within a
  // quarter over the budget, across the reopen.
  BloomBudgetStore t;
  {
    auto created = SsdStore::Create(&t.env, t.o, kLayout);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    for (uint32_t g = 0; g < t.kGroups; ++g) t.Append(created->get(), g);
    ASSERT_TRUE((*created)->WriteIndex().ok());
  }
  auto reopened = SsdStore::Reopen(&t.env, t.o, kLayout);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  for (uint32_t i = 0; i < 2 * t.kGroups; ++i) t.Append(reopened->get(), i % t.kGroups);
  t.ExpectEveryFileFiltered(**reopened);
}

// Each stripe's sum of its groups' unique_rows (what the table's key count adds per stripe)
// follows every Replace, and is rebuilt from the INDEX on reopen.
TEST(SsdStoreTest, KeepsTheDistinctKeysOfEachStripesGroups) {
  BloomBudgetStore t;
  t.o.stripe_bits = 3;  // 8 stripes of 128 groups
  auto expect_sums = [](const SsdStore& store) {
    for (size_t s = 0; s < 8; ++s) {
      uint64_t sum = 0;
      for (uint32_t g = s * 128; g < (s + 1) * 128; ++g) sum += store.entry(g).unique_rows;
      EXPECT_EQ(store.UniqueRowsOfStripe(s), sum) << "stripe " << s;
    }
  };
  {
    auto created = SsdStore::Create(&t.env, t.o, kLayout);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    SsdStore& store = **created;
    for (uint32_t i = 0; i < 2 * t.kGroups; ++i) t.Append(&store, (i * 7) % t.kGroups);
    for (uint32_t g = 0; g < t.kGroups; g += 3) {  // newer rows of keys on disk: fewer distinct
      GroupEntry e = store.entry(g);
      e.unique_rows -= g % 5;
      store.Replace(g, e);
    }
    expect_sums(store);
    EXPECT_GT(store.UniqueRowsOfStripe(1), 0u);
    EXPECT_EQ(store.UniqueRowsOfStripe(7), 0u);
    ASSERT_TRUE(store.WriteIndex().ok());
  }
  auto reopened = SsdStore::Reopen(&t.env, t.o, kLayout);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  expect_sums(**reopened);
}

// A pull reads only the pieces of a base that may hold its keys (ReadPieces, chosen by the
// group entry's fences); the write-back, compaction and scans read records whole (ReadRecord).
// Over records of 1 to 1500 rows (up to ~90 KB: pieces past the fences' eight), appended at
// the offsets a file's records land at, in a float layout and a quantized one, the pieces read
// for a key must hold its row, decoded as the whole record's, exactly when the record holds it.
TEST(SsdStoreTest, PieceReadsFindTheRowsOfTheWholeRecord) {
  for (const ValueLayout& layout : {ValueLayout{4, 4, 1}, ValueLayout{8, 1, 1, 8, 1.0f}}) {
    MemEnv env;
    SsdOptions o;
    o.dir = "/s";
    o.group_bits = 3;
    o.file_bytes = 1 << 18;  // several files
    auto created = SsdStore::Create(&env, o, layout);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    SsdStore& store = **created;
    Random rng(9);
    std::vector<std::vector<uint64_t>> by_group(8);
    while (by_group[7].size() < 3000 || by_group[0].size() < 3000) {
      const uint64_t key = rng.Next() >> 8;
      by_group[GroupOfKey(layout, o.group_bits, key)].push_back(key);
    }
    size_t multi_piece = 0, past_fences = 0;
    for (uint32_t g = 0; g < 8; ++g) {
      for (const uint32_t n : {1u, 2u, 17u, 120u, 1500u}) {
        SCOPED_TRACE("group " + std::to_string(g) + ", " + std::to_string(n) + " rows");
        const std::vector<uint64_t> held(by_group[g].begin(), by_group[g].begin() + n);
        RecordBuilder b;
        BuildRecord(layout, g, held, false, &rng, &b);
        RecordLoc loc;
        Fences fences;
        ASSERT_TRUE(store.Append(&b, &loc, &fences).ok());
        ASSERT_TRUE(store.FlushAppends().ok());
        auto file = store.File(loc.file);
        ASSERT_NE(file, nullptr);
        RecordView whole;
        ASSERT_TRUE(store.ReadRecord(*file, loc, g, &whole).ok());
        ASSERT_EQ(whole.rows(), n);
        const size_t pieces = RecordPieces(loc.offset, loc.length, store.page_bytes());
        multi_piece += pieces > 1;
        past_fences += pieces > kBaseFences + 1;
        // Every key of the record, and as many of the group that it does not hold.
        const std::vector<uint64_t> keys(by_group[g].begin(), by_group[g].begin() + 2 * n);
        RecordView part;
        for (const uint64_t key : keys) {
          const PieceRange r = PiecesFor(fences, pieces, RowFingerprint(key));
          ASSERT_LE(r.first, r.last);
          ASSERT_LT(r.last, pieces);
          ASSERT_TRUE(store.ReadPieces(*file, loc, g, r, &part).ok()) << key;
          const auto at = std::find(whole.keys.begin(), whole.keys.end(), key);
          const auto in_part = std::find(part.keys.begin(), part.keys.end(), key);
          ASSERT_EQ(in_part != part.keys.end(), at != whole.keys.end()) << key;
          if (at == whole.keys.end()) continue;
          EXPECT_EQ(part.row(in_part - part.keys.begin()), whole.row(at - whole.keys.begin()));
          if (pieces > 1 && r.last <= kBaseFences) {
            EXPECT_LE(r.last - r.first, 1u);  // one page, or two around a shared fingerprint
          }
        }
        // Each piece alone parses, and those past the first begin with their fence.
        size_t rows = 0;
        for (size_t i = 0; i < pieces; ++i) {
          ASSERT_TRUE(store.ReadPieces(*file, loc, g, PieceRange{i, i}, &part).ok()) << i;
          rows += part.rows();
          if (i >= 1 && i <= kBaseFences) {
            ASSERT_GT(part.rows(), 0u);
            EXPECT_EQ(RowFingerprint(part.keys[0]), fences[i - 1]) << i;
          }
        }
        EXPECT_EQ(rows, n);
      }
    }
    EXPECT_GT(multi_piece, 8u);
    EXPECT_GT(past_fences, 4u);
  }
}

// The layout alone, at every 4-byte file offset of a page (records start anywhere): a record
// laid out by RecordBuilder::Lay parses whole (RecordView::Parse), its fences are the first
// fingerprints of its pieces, and the pieces PiecesFor names for a key hold its row exactly
// when the record does, each piece verified alone (ParsePieces). Offsets whose header ends
// within a segment header of a cut leave piece 0 without rows: piece 1 then starts the rows.
TEST(SsdStoreTest, RecordsLaidOutAtEveryOffsetReadBackByPieces) {
  const ValueLayout layout = kLayout;
  const size_t page = PageBytes(layout);
  ASSERT_EQ(page, 4096u);
  Random rng(11);
  std::vector<uint64_t> held, absent;
  for (uint64_t k = 1; held.size() < 150; ++k) {
    (GroupOfKey(layout, 1, k) == 0 ? held : absent).push_back(k);
  }
  RecordBuilder b;
  size_t rowless_first = 0;
  for (const size_t n : {1u, 5u, 150u}) {
    BuildRecord(layout, 0, std::vector<uint64_t>(held.begin(), held.begin() + n), false, &rng, &b);
    for (uint64_t offset = 40; offset < 40 + page; offset += 4) {
      SCOPED_TRACE(std::to_string(n) + " rows at offset " + std::to_string(offset));
      Fences fences;
      RecordView whole;
      whole.bytes = std::string(b.Lay(offset, page, &fences));
      ASSERT_TRUE(whole.Parse(layout, 1, 0, offset, page).ok());
      ASSERT_EQ(whole.rows(), n);
      const uint64_t length = whole.bytes.size();
      const size_t pieces = RecordPieces(offset, length, page);
      RecordView part;
      auto read = [&](PieceRange r) {
        const PieceSpan first = RecordPiece(offset, length, page, r.first);
        const PieceSpan last = RecordPiece(offset, length, page, r.last);
        part.bytes = whole.bytes.substr(first.begin - offset, last.end - first.begin);
        return part.ParsePieces(layout, 1, 0, offset, length, page, r);
      };
      for (size_t i = 0; i < pieces; ++i) {
        ASSERT_TRUE(read(PieceRange{i, i}).ok()) << i;
        if (i == 0) rowless_first += part.rows() == 0 && pieces > 1;
        if (i >= 1 && i <= kBaseFences) {
          ASSERT_GT(part.rows(), 0u) << i;
          EXPECT_EQ(RowFingerprint(part.keys[0]), fences[i - 1]) << i;
        }
      }
      for (size_t w = 0; w < 2 * n; ++w) {
        const uint64_t key = w < n ? held[w] : held[n - 1] + 1 + w;  // (absent ones too)
        const PieceRange r = PiecesFor(fences, pieces, RowFingerprint(key));
        ASSERT_TRUE(read(r).ok()) << key;
        const auto at = std::find(whole.keys.begin(), whole.keys.end(), key);
        const auto in_part = std::find(part.keys.begin(), part.keys.end(), key);
        ASSERT_EQ(in_part != part.keys.end(), at != whole.keys.end()) << key;
        if (at != whole.keys.end()) {
          EXPECT_EQ(part.row(in_part - part.keys.begin()), whole.row(at - whole.keys.begin()));
        }
      }
    }
  }
  EXPECT_GT(rowless_first, 0u);  // the case above was met
}

// A record's rows are laid in (fingerprint, key) order, the order its fences and piece reads
// rely on, whatever order they were added in: against a reference sort, with keys that share
// a fingerprint, and again after more rows are added to a record already laid out.
TEST(SsdStoreTest, RowsAreLaidInFingerprintThenKeyOrder) {
  const ValueLayout layout = kLayout;
  const size_t page = PageBytes(layout);
  std::vector<uint64_t> held;
  for (uint64_t k = 1; held.size() < 4000; ++k) {
    if (GroupOfKey(layout, 1, k) == 0) held.push_back(k);
  }
  // Keys of group 0 whose fingerprint another of them has (16-bit fingerprints: many among
  // 4 000 keys), and as many others.
  std::vector<uint64_t> by_print = held;
  std::sort(by_print.begin(), by_print.end(), [](uint64_t a, uint64_t b) {
    return std::make_pair(RowFingerprint(a), a) < std::make_pair(RowFingerprint(b), b);
  });
  std::vector<uint64_t> keys;
  for (size_t i = 0; i + 1 < by_print.size() && keys.size() < 60; ++i) {
    if (RowFingerprint(by_print[i]) != RowFingerprint(by_print[i + 1])) continue;
    keys.push_back(by_print[i]);
    keys.push_back(by_print[i + 1]);
    ++i;
  }
  ASSERT_GE(keys.size(), 20u);
  const size_t shared = keys.size();
  for (size_t i = 0; keys.size() < 2 * shared; i += 7) keys.push_back(held[i]);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  Random rng(5);
  for (size_t i = keys.size(); i > 1; --i) std::swap(keys[i - 1], keys[rng.Below(i)]);
  auto reference = [](std::vector<uint64_t> k) {
    std::sort(k.begin(), k.end(), [](uint64_t a, uint64_t b) {
      return std::make_pair(RowFingerprint(a), a) < std::make_pair(RowFingerprint(b), b);
    });
    return k;
  };
  RecordBuilder b;
  for (const size_t n : {size_t{1}, size_t{2}, keys.size() / 2, keys.size()}) {
    SCOPED_TRACE(std::to_string(n) + " rows");
    const std::vector<uint64_t> some(keys.begin(), keys.begin() + n);
    BuildRecord(layout, 0, some, true, &rng, &b);
    RecordView view;
    view.bytes = std::string(b.Lay(64, page, nullptr));
    ASSERT_TRUE(view.Parse(layout, 1, 0, 64, page).ok());
    EXPECT_EQ(view.keys, reference(some));
  }
  // Rows added after a layout: the next layout orders them all again.
  BuildRecord(layout, 0, std::vector<uint64_t>(keys.begin(), keys.begin() + 10), true, &rng, &b);
  (void)b.Lay(64, page, nullptr);
  RowBlock more(layout);
  more.Resize(keys.size() - 10);
  for (size_t i = 10; i < keys.size(); ++i) {
    more.ClearRow(i - 10, keys[i]);
    b.AddRow(more, i - 10);
  }
  RecordView view;
  view.bytes = std::string(b.Lay(64, page, nullptr));
  ASSERT_TRUE(view.Parse(layout, 1, 0, 64, page).ok());
  EXPECT_EQ(view.keys, reference(keys));
}

// A flipped bit in a piece is caught by that piece's CRC when it is read alone, and by a whole
// read; the other pieces still read. A stale location (another record's) is never served.
TEST(SsdStoreTest, APieceReadVerifiesItsSegment) {
  MemEnv env;
  SsdOptions o;
  o.dir = "/s";
  o.group_bits = 1;
  auto created = SsdStore::Create(&env, o, kLayout);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  SsdStore& store = **created;
  Random rng(3);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; keys.size() < 300; ++k) {
    if (GroupOfKey(kLayout, 1, k) == 1) keys.push_back(k);
  }
  RecordBuilder b;
  BuildRecord(kLayout, 1, keys, true, &rng, &b);
  RecordLoc loc, other;
  ASSERT_TRUE(store.Append(&b, &loc).ok());
  BuildRecord(kLayout, 1, {keys[0]}, true, &rng, &b);
  ASSERT_TRUE(store.Append(&b, &other).ok());
  ASSERT_TRUE(store.FlushAppends().ok());
  const size_t pieces = RecordPieces(loc.offset, loc.length, store.page_bytes());
  ASSERT_GE(pieces, 4u);
  // Flip a bit in the middle of piece 2's rows.
  const PieceSpan span = RecordPiece(loc.offset, loc.length, store.page_bytes(), 2);
  auto file = store.File(loc.file);
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(env.FlipBit(file->path, (span.begin + span.end) / 2 * 8 + 3).ok());
  RecordView view;
  const Status bad = store.ReadPieces(*file, loc, 1, PieceRange{2, 2}, &view);
  EXPECT_EQ(bad.code(), StatusCode::kCorruption) << bad.ToString();
  EXPECT_NE(bad.message().find("segment CRC mismatch"), std::string::npos) << bad.ToString();
  EXPECT_NE(bad.message().find(file->path), std::string::npos) << bad.ToString();
  EXPECT_EQ(store.ReadRecord(*file, loc, 1, &view).code(), StatusCode::kCorruption);
  EXPECT_TRUE(store.ReadPieces(*file, loc, 1, PieceRange{1, 1}, &view).ok());
  EXPECT_TRUE(store.ReadPieces(*file, loc, 1, PieceRange{3, pieces - 1}, &view).ok());
  // The other record's place with this record's length: not a record of the group's index.
  const RecordLoc stale{other.file, other.offset, loc.length};
  EXPECT_NE(store.ReadPieces(*file, stale, 1, PieceRange{0, 0}, &view).code(), StatusCode::kOk);
}

}  // namespace
}  // namespace ctrbox
