#include "io/reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "io/shard.h"
#include "io/synth.h"
#include "io/test_util.h"

namespace ctrbox {
namespace {

using testing::SameBatch;
using testing::TempDir;

std::string CriteoText(uint64_t rows, uint64_t seed) {
  SynthOptions o;
  o.seed = seed;
  SynthGenerator g(o);
  std::string text;
  g.GenerateText(0, rows, &text, nullptr);
  return text;
}

using testing::ReadAll;

TEST(ReaderTest, ThreadCountAndChunkSizeDoNotChangeTheStream) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("a.tsv"), CriteoText(3000, 1)).ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("b.tsv"), CriteoText(1234, 2)).ok());
  DataOptions base;
  base.paths = {dir.path()};  // a directory: its files in name order
  base.threads = 1;
  auto expect = ReadAll(base);
  ASSERT_TRUE(expect.ok()) << expect.status().ToString();
  ASSERT_EQ(expect->rows(), 4234u);
  for (int threads : {2, 4}) {
    for (size_t chunk : {size_t{4096}, size_t{1} << 20}) {
      DataOptions o = base;
      o.threads = threads;
      o.chunk_bytes = chunk;
      auto got = ReadAll(o);
      ASSERT_TRUE(got.ok());
      EXPECT_TRUE(SameBatch(*got, *expect)) << threads << " " << chunk;
    }
  }
}

// Reads everything, checking that progress only grows, never passes its total, and ends at
// it; returns the total (0: unknown).
uint64_t ReadCheckingProgress(const DataOptions& o) {
  auto reader = OpenReader(Env::Posix(), o);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return 0;
  Batch b;
  bool eof = false;
  uint64_t last = 0;
  size_t blocks = 0;
  EXPECT_EQ((*reader)->progress().done, 0u);
  while (true) {
    EXPECT_TRUE((*reader)->Next(&b, &eof).ok());
    if (eof) break;
    ++blocks;
    const InputProgress p = (*reader)->progress();
    EXPECT_GE(p.done, last);
    if (p.known()) {
      EXPECT_LE(p.done, p.total);
    }
    last = p.done;
  }
  const InputProgress p = (*reader)->progress();
  EXPECT_GE(blocks, 1u);
  if (p.known()) {
    EXPECT_EQ(p.done, p.total);
  }
  return p.total;
}

// The parts of a file by bytes hold each of its lines exactly once, in order, whatever the
// number of parts and wherever the boundaries fall: inside a line, on a newline, in a line
// longer than the scan buffer, past a last line without a newline, or in a part holding no
// line start at all.
TEST(ReaderTest, ByteRangesOfAFileHoldEachLineExactlyOnce) {
  TempDir dir;
  // Slots lines of very different lengths, one of them over 200 KB, and no final newline.
  std::string text;
  for (int i = 0; i < 400; ++i) {
    text += std::to_string(i % 2);
    const int keys = i == 150 ? 30000 : 1 + (i * 7919) % 23;
    for (int k = 0; k < keys; ++k) text += " " + std::to_string(k % 3) + ":" + std::to_string(i);
    if (i < 399) text += "\n";
  }
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("a.slots"), text).ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("b.slots"), "1 0:5\n0 1:6\n").ok());
  DataOptions base;
  base.format = DataFormat::kSlots;
  base.num_slots = 3;
  base.paths = {dir.File("a.slots"), dir.File("b.slots")};
  base.chunk_bytes = 4096;
  auto whole = ReadAll(base);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_EQ(whole->rows(), 402u);
  for (uint32_t count : {2u, 3u, 7u, 16u, 401u}) {
    // Part p of every file, parts in order: file a's lines, then b's, each exactly once.
    std::vector<Batch> parts;
    uint64_t rows = 0;
    for (uint32_t p = 0; p < count; ++p) {
      DataOptions o = base;
      o.byte_share = {p, count};
      o.threads = 1 + p % 3;
      auto got = ReadAll(o);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      rows += got->rows();
      parts.push_back(std::move(*got));
    }
    ASSERT_EQ(rows, whole->rows()) << count << " parts";
    // Reassemble in file order: a's lines of every part, then b's.
    Batch again;
    again.Reset(whole->schema);
    for (int file = 0; file < 2; ++file) {
      for (const Batch& b : parts) {
        // Rows of file a have 1 to 30000 keys; file b's two rows are labelled 1, 0 with key i=5,6.
        for (size_t r = 0; r < b.rows(); ++r) {
          const bool from_b = b.offsets[(r + 1) * 3] - b.offsets[r * 3] == 1 &&
                              (b.keys[b.offsets[r * 3]] == whole->keys[whole->offsets[400 * 3]] ||
                               b.keys[b.offsets[r * 3]] == whole->keys[whole->offsets[401 * 3]]);
          if (from_b == (file == 1)) again.AppendRows(b, r, r + 1);
        }
      }
    }
    EXPECT_TRUE(SameBatch(again, *whole)) << count << " parts";
  }
  // A compressed file cannot be split: the error names it and says what to do.
  DataOptions gz = base;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("c.slots"), "\x1f\x8b\x08rest").ok());
  gz.paths = {dir.File("c.slots")};
  gz.byte_share = {1, 2};
  auto refused = ReadAll(gz);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("c.slots: compressed"), std::string::npos)
      << refused.status().message();
}

TEST(ReaderTest, ProgressCountsTheBytesAsStoredOrTheGeneratedRows) {
  TempDir dir;
  const std::string a = CriteoText(3000, 1), b = CriteoText(1234, 2);
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("a.tsv"), a).ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("b.tsv"), b).ok());
  DataOptions o;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("empty.tsv"), "").ok());
  o.paths = {dir.File("a.tsv"), dir.File("empty.tsv"), dir.File("b.tsv")};
  o.threads = 3;
  o.chunk_bytes = 64 << 10;
  EXPECT_EQ(ReadCheckingProgress(o), a.size() + b.size());  // an empty file is known too
  // Compressed: the compressed bytes, which the decompressor reads as it goes.
  ASSERT_EQ(std::system(("gzip -k " + dir.File("a.tsv")).c_str()), 0);
  o.paths = {dir.File("a.tsv.gz")};
  auto gz = Env::Posix()->GetFileSize(dir.File("a.tsv.gz"));
  ASSERT_TRUE(gz.ok());
  EXPECT_EQ(ReadCheckingProgress(o), *gz);
  // A shard file: its bytes, block by block.
  {
    DataOptions text_options;
    text_options.paths = {dir.File("a.tsv")};
    auto text = ReadAll(text_options);
    ASSERT_TRUE(text.ok());
    ShardWriterOptions so;
    so.block_rows = 500;
    auto w = ShardWriter::Open(Env::Posix(), dir.File("a.ctrshard"), text->schema, so);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add(*text).ok());
    ASSERT_TRUE((*w)->Finish().ok());
    DataOptions s;
    s.paths = {dir.File("a.ctrshard")};
    s.format = DataFormat::kShards;
    EXPECT_EQ(ReadCheckingProgress(s), *Env::Posix()->GetFileSize(dir.File("a.ctrshard")));
  }
  // A command's output has no known size.
  DataOptions c;
  c.command = "cat " + dir.File("a.tsv");
  c.chunk_bytes = 64 << 10;
  EXPECT_EQ(ReadCheckingProgress(c), 0u);
  // Generated rows: rows.
  auto synth = NewSynthReader(SynthOptions{}, 50000, 2, 4096);
  Batch batch;
  bool eof = false;
  uint64_t rows = 0;
  while (synth->Next(&batch, &eof).ok() && !eof) {
    rows += batch.rows();
    EXPECT_EQ(synth->progress().done, rows);
  }
  EXPECT_EQ(synth->progress().total, 50000u);
}

// A rank's share of generated rows (docs/distributed.md): blocks q = r, r + n, ... of `unit`
// rows, in order; the shares of all ranks together are every row once. Chunks of the share
// hold several of its blocks (block_rows 4096 and 250), or one (100 and 50).
TEST(ReaderTest, ARanksShareOfGeneratedRowsIsItsBlocksInOrder) {
  constexpr uint64_t kRows = 1050, kUnit = 100;
  auto all_rows = [](BatchReader* r) {
    Batch all, b;
    all.Reset(r->schema());
    bool eof = false;
    while (r->Next(&b, &eof).ok() && !eof) all.AppendRows(b, 0, b.rows());
    return all;
  };
  Batch whole = all_rows(NewSynthReader(SynthOptions{}, kRows, 1).get());
  ASSERT_EQ(whole.rows(), kRows);
  for (uint64_t block_rows : {4096, 250, 100, 50}) {
    SCOPED_TRACE("block_rows " + std::to_string(block_rows));
    uint64_t total = 0;
    for (uint32_t r = 0; r < 3; ++r) {
      auto reader = NewSynthReader(SynthOptions{}, kRows, 2, block_rows, RowShare{r, 3, kUnit});
      Batch mine = all_rows(reader.get());
      EXPECT_EQ(reader->progress().total, mine.rows());
      EXPECT_EQ(reader->progress().done, mine.rows());
      total += mine.rows();
      uint64_t at = 0;
      for (uint64_t q = r; q * kUnit < kRows; q += 3) {
        for (uint64_t row = q * kUnit; row < std::min(kRows, (q + 1) * kUnit); ++row, ++at) {
          ASSERT_LT(at, mine.rows());
          EXPECT_EQ(mine.labels[at], whole.labels[row]);
          EXPECT_TRUE(std::equal(mine.keys.begin() + mine.offsets[at * 26],
                                 mine.keys.begin() + mine.offsets[(at + 1) * 26],
                                 whole.keys.begin() + whole.offsets[row * 26]));
          EXPECT_TRUE(std::equal(mine.dense.begin() + at * 13, mine.dense.begin() + (at + 1) * 13,
                                 whole.dense.begin() + row * 13));
        }
      }
      EXPECT_EQ(at, mine.rows());
    }
    EXPECT_EQ(total, kRows);
  }
}

TEST(ReaderTest, StopsPastTheErrorRateNamingTheFirstBadLine) {
  TempDir dir;
  std::string text = CriteoText(2000, 3);
  // Corrupt 3 % of the lines (every 33rd) by cutting them short.
  std::string bad;
  size_t start = 0;
  for (int line = 1; start < text.size(); ++line) {
    size_t nl = text.find('\n', start);
    std::string l = text.substr(start, nl - start);
    if (line % 33 == 0) l = l.substr(0, 10);
    bad += l + "\n";
    start = nl + 1;
  }
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("bad.tsv"), bad).ok());
  DataOptions o;
  o.paths = {dir.File("bad.tsv")};
  o.chunk_bytes = 8192;
  auto got = ReadAll(o);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("bad.tsv:33: field_count"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("data.max_error_rate=1%"), std::string::npos);

  o.bad_input.max_error_rate = 0.05;  // tolerated: the bad lines are skipped and counted
  auto reader = OpenReader(Env::Posix(), o);
  ASSERT_TRUE(reader.ok());
  uint64_t rows = 0;
  while (true) {
    Batch b;
    bool eof = false;
    ASSERT_TRUE((*reader)->Next(&b, &eof).ok());
    if (eof) break;
    rows += b.rows();
  }
  EXPECT_EQ(rows, 2000u - 2000 / 33);
  EXPECT_EQ((*reader)->counts().bad[static_cast<int>(BadKind::kFieldCount)], 2000u / 33);
}

TEST(ReaderTest, MissingPathsAndSchemasAreClearErrors) {
  TempDir dir;
  DataOptions o;
  o.paths = {dir.File("nope.tsv")};
  auto r = OpenReader(Env::Posix(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nope.tsv"), std::string::npos);

  o.paths = {dir.path()};
  o.format = DataFormat::kSlots;
  ASSERT_TRUE(WriteFileAtomic(Env::Posix(), dir.File("x"), "1 0:1\n").ok());
  r = OpenReader(Env::Posix(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("data.num_slots"), std::string::npos);

  o.format = DataFormat::kShards;
  r = OpenReader(Env::Posix(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("SHARDS"), std::string::npos);
}

// DataFileFingerprint: every byte of a small file counts; of a large one, the size, both ends
// and the sampled blocks do, and the same content gives the same fingerprint wherever it is.
TEST(ReaderTest, FingerprintsSeeEditsThatKeepTheSize) {
  TempDir dir;
  Env* env = Env::Posix();
  Random rng(7);
  for (size_t size : {size_t{0}, size_t{1000}, size_t{3} << 20, size_t{9} << 20}) {
    std::string content(size, '\0');
    for (char& c : content) c = static_cast<char>('a' + rng.Below(26));
    ASSERT_TRUE(WriteFileAtomic(env, dir.File("f"), content).ok());
    ASSERT_TRUE(WriteFileAtomic(env, dir.File("copy"), content).ok());
    auto base = DataFileFingerprint(env, dir.File("f"));
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    EXPECT_EQ(*DataFileFingerprint(env, dir.File("copy")), *base);
    if (size == 0) continue;
    std::vector<size_t> at = {0, size - 1, size / 2};
    if (size > (4 << 20)) at = {0, (1 << 20) - 1, size - 1, size - (1 << 20)};  // the ends
    for (size_t i : at) {
      std::string edited = content;
      edited[i] = edited[i] == 'z' ? 'y' : 'z';
      ASSERT_TRUE(WriteFileAtomic(env, dir.File("f"), edited).ok());
      EXPECT_NE(*DataFileFingerprint(env, dir.File("f")), *base) << size << " at " << i;
    }
    ASSERT_TRUE(WriteFileAtomic(env, dir.File("f"), content + "x").ok());
    EXPECT_NE(*DataFileFingerprint(env, dir.File("f")), *base) << size;
  }
}

// A data.command that stalls: a read gives up soon after `cancel` is set, and closing a reader
// whose command still runs neither waits for it nor leaves it running.
TEST(ReaderTest, AStalledCommandIsCancelledAndStoppedOnClose) {
  DataOptions o;
  o.format = DataFormat::kLibsvm;
  o.command = "printf '1 1:1\\n0 2:1\\n'; exec sleep 30";
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  auto reader = OpenReader(Env::Posix(), o);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel.store(true);
  });
  const auto start = std::chrono::steady_clock::now();
  Batch b;
  bool eof = false;
  Status s = (*reader)->Next(&b, &eof);
  stopper.join();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  o.cancel = nullptr;
  reader = OpenReader(Env::Posix(), o);
  ASSERT_TRUE(reader.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto close_start = std::chrono::steady_clock::now();
  reader->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - close_start, std::chrono::seconds(5));

  // A command that fails is an error at the end of its output, naming it.
  o.command = "printf '1 1:1\\n'; exit 3";
  auto failed = ReadAll(o);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("exit status 3"), std::string::npos)
      << failed.status().ToString();
}

}  // namespace
}  // namespace ctrbox
