// PassReader: passes of pass_examples examples, never spanning two epochs; Skip checks a
// resumed job's input against its checkpoint.
#include "pipeline/pass_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "io/batch_test_util.h"
#include "io/synth.h"
#include "table/value.h"
#include "util/hash.h"
#include "util/thread_pool.h"
#include "working/working_set.h"
#include "working/working_table.h"

namespace ctrbox {
namespace {

// Generated rows in blocks of 300 (so passes cut across blocks).
PassReader Reader(uint64_t rows, PassReaderOptions options, int* opens) {
  return PassReader(
      [=]() -> StatusOr<std::unique_ptr<BatchReader>> {
        ++*opens;
        SynthOptions o;
        o.seed = 5;
        return NewSynthReader(o, rows, 1, 300);
      },
      options);
}

PassReader Reader(uint64_t rows, uint64_t pass_examples, uint32_t epochs, int* opens) {
  PassReaderOptions o;
  o.pass_examples = pass_examples;
  o.epochs = epochs;
  return Reader(rows, o, opens);
}

// Sized passes' options: grid passes of 5000 examples cut between 128-example minibatches.
PassReaderOptions SizedOptions() {
  PassReaderOptions o;
  o.pass_examples = 5000;
  o.batch_size = 128;
  return o;
}

// The distinct keys of passes[p] and the `window` - 1 passes before it.
std::set<uint64_t> WindowKeys(const std::vector<Batch>& passes, size_t p, size_t window) {
  std::set<uint64_t> keys;
  for (size_t q = p + 1 >= window ? p + 1 - window : 0; q <= p; ++q) {
    keys.insert(passes[q].keys.begin(), passes[q].keys.end());
  }
  return keys;
}

std::vector<Batch> AllPasses(PassReader* r) {
  std::vector<Batch> passes;
  while (true) {
    Batch b;
    bool eof = false;
    EXPECT_TRUE(r->Next(&b, &eof).ok());
    if (eof) {
      EXPECT_EQ(b.rows(), 0u);
      return passes;
    }
    passes.push_back(std::move(b));
  }
}

TEST(PassReaderTest, CutsEachEpochIntoPassesThatNeverSpanTwoEpochs) {
  int opens = 0;
  PassReader r = Reader(2500, 1000, 2, &opens);
  ASSERT_TRUE(r.Open().ok());
  EXPECT_EQ(opens, 1);
  const std::vector<Batch> passes = AllPasses(&r);
  ASSERT_EQ(passes.size(), 6u);
  const size_t want[] = {1000, 1000, 500, 1000, 1000, 500};
  for (size_t p = 0; p < passes.size(); ++p) EXPECT_EQ(passes[p].rows(), want[p]) << p;
  EXPECT_EQ(opens, 2);  // a fresh reader per epoch
  // The second epoch reads the same examples in the same order.
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_EQ(passes[p].labels, passes[p + 3].labels) << p;
    EXPECT_EQ(passes[p].keys, passes[p + 3].keys) << p;
  }
  // Together, the first epoch's passes are the input's rows in order.
  int opens2 = 0;
  PassReader whole = Reader(2500, 1 << 20, 1, &opens2);
  ASSERT_TRUE(whole.Open().ok());
  const std::vector<Batch> one = AllPasses(&whole);
  ASSERT_EQ(one.size(), 1u);
  std::vector<float> labels;
  for (size_t p = 0; p < 3; ++p)
    labels.insert(labels.end(), passes[p].labels.begin(), passes[p].labels.end());
  EXPECT_EQ(labels, one[0].labels);
  EXPECT_EQ(r.counts().good, 5000u);
}

TEST(PassReaderTest, SkipChecksThePassesAResumedJobAlreadyTrained) {
  int opens = 0;
  PassReader r = Reader(2500, 1000, 1, &opens);
  ASSERT_TRUE(r.Open().ok());
  ASSERT_TRUE(r.Skip(2, 2000).ok());
  Batch b;
  bool eof = false;
  ASSERT_TRUE(r.Next(&b, &eof).ok());
  EXPECT_EQ(b.rows(), 500u);

  PassReader fewer = Reader(2500, 1000, 1, &opens);
  ASSERT_TRUE(fewer.Open().ok());
  Status s = fewer.Skip(2, 1999);  // the checkpoint counted other examples: the data changed
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("1999"), std::string::npos) << s.ToString();

  PassReader shorter = Reader(2500, 1000, 1, &opens);
  ASSERT_TRUE(shorter.Open().ok());
  s = shorter.Skip(4, 4000);  // the input ends after 3 passes
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("ended after 3 passes"), std::string::npos) << s.ToString();
}

// Passes sized by keys: every pass lies within one pass of pass_examples (so within one
// epoch) and starts at a minibatch boundary of it (the trainer's minibatches are unchanged),
// and the distinct keys of any window_passes consecutive passes stay within window_keys (a
// pass of one minibatch may exceed it through the older passes only: its pull waits for their
// push); together the passes are the input, in order.
TEST(PassReaderTest, KeySizedPassesKeepEveryWindowWithinItsKeys) {
  for (uint32_t window : {1u, 3u, 5u}) {
    // 1000: about a minibatch's keys, so that nearly every minibatch is a pass of its own,
    // the epoch's last one included.
    for (uint64_t keys : {uint64_t{1000}, uint64_t{9000}, uint64_t{20000}, uint64_t{200000}}) {
      SCOPED_TRACE(::testing::Message() << "window " << window << " keys " << keys);
      PassReaderOptions o = SizedOptions();
      o.epochs = 2;
      o.window_keys = keys;
      o.window_passes = window;
      int opens = 0;
      PassReader r = Reader(7000, o, &opens);
      ASSERT_TRUE(r.Open().ok());
      const std::vector<Batch> passes = AllPasses(&r);
      ASSERT_FALSE(passes.empty());
      uint64_t rows = 0;
      std::vector<uint64_t> all_keys;
      for (size_t p = 0; p < passes.size(); ++p) {
        const Batch& b = passes[p];
        const uint64_t at = rows % 7000;  // in its epoch
        EXPECT_EQ((at % 5000) % 128, 0u) << "pass " << p << " starts within a minibatch";
        EXPECT_EQ(at / 5000, (at + b.rows() - 1) / 5000) << "pass " << p << " spans two";
        EXPECT_LE(at + b.rows(), 7000u) << "pass " << p << " spans two epochs";
        const std::set<uint64_t> window_keys = WindowKeys(passes, p, window),
                                 own(b.keys.begin(), b.keys.end());
        if (b.rows() > 128) {  // a pass of one minibatch may exceed the window
          EXPECT_LE(own.size(), keys) << "pass " << p;
          EXPECT_LE(window_keys.size(), keys) << "pass " << p;
        }
        rows += b.rows();
        if (rows <= 7000) all_keys.insert(all_keys.end(), b.keys.begin(), b.keys.end());
      }
      EXPECT_EQ(rows, 14000u);
      int opens2 = 0;
      PassReader whole = Reader(7000, 1 << 20, 1, &opens2);
      ASSERT_TRUE(whole.Open().ok());
      EXPECT_EQ(AllPasses(&whole)[0].keys, all_keys);
      const PassSizingStats& z = r.sizing();
      EXPECT_EQ(z.passes, passes.size());
      if (keys > 1000) {
        EXPECT_LE(z.max_pass_keys, keys);
      }
      if (keys == 9000) {
        EXPECT_GT(z.closed_by_keys, 0u);
      }
      if (keys == 200000) {
        EXPECT_EQ(z.closed_by_keys, 0u);  // cut by pass_examples only
      }
    }
  }
}

// model.slot_dims: keys tagged with their slots' tables (PassReaderOptions::key_tables) and
// weighed by their tables' row bytes. Every window of more than one minibatch stays within
// window_bytes by weight, and the passes hold more keys than the widest row's bound allows.
TEST(PassReaderTest, PassesOfSeveralTablesKeepEveryWindowWithinItsBytes) {
  PassReaderOptions o = SizedOptions();
  o.key_tables.slot_table = {1, 1, 1, 2, 2};  // slots 5.. table 0
  o.table_row_bytes = {120, 400, 60};
  o.window_keys = 1;  // on (the weighted bound decides)
  o.window_bytes = 2000000;
  o.window_passes = 3;
  int opens = 0;
  PassReader r = Reader(7000, o, &opens);
  ASSERT_TRUE(r.Open().ok());
  const std::vector<Batch> passes = AllPasses(&r);
  uint64_t rows = 0, most_keys = 0;
  for (size_t p = 0; p < passes.size(); ++p) {
    const std::set<uint64_t> window_keys = WindowKeys(passes, p, o.window_passes);
    uint64_t bytes = 0;
    for (uint64_t k : window_keys) {
      ASSERT_LT(k >> kTableShift, 3u);
      bytes += o.table_row_bytes[k >> kTableShift];
    }
    if (passes[p].rows() > 128) {  // a pass of one minibatch may exceed it (the others' rows)
      EXPECT_LE(bytes, o.window_bytes) << "pass " << p;
    }
    most_keys = std::max<uint64_t>(most_keys, window_keys.size());
    rows += passes[p].rows();
  }
  EXPECT_EQ(rows, 7000u);
  EXPECT_GT(r.sizing().closed_by_keys, 0u);
  EXPECT_GT(r.sizing().max_window_row_bytes, o.window_bytes / 2);  // reported
  EXPECT_GT(most_keys, o.window_bytes / 400);  // more than the widest row's bound
  // A minibatch whose own rows exceed max_bytes is refused.
  PassReaderOptions tight = o;
  tight.window_bytes = 1000;
  tight.max_bytes = 1000;
  PassReader small = Reader(7000, tight, &opens);
  ASSERT_TRUE(small.Open().ok());
  Batch b;
  bool eof = false;
  Status st = small.Next(&b, &eof);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
}

// A pass's shape counted plainly: distinct keys by std::set, minibatches of batch_size rows.
PassShape ShapeOf(const Batch& b, uint32_t batch_size) {
  PassShape s;
  s.content_bytes = b.ContentBytes() - sizeof(uint32_t);
  s.key_uses = b.keys.size();
  s.keys = std::set<uint64_t>(b.keys.begin(), b.keys.end()).size();
  const uint32_t S = b.schema.num_slots;
  for (size_t r = 0; r < b.rows(); r += batch_size) {
    const size_t end = std::min<size_t>(b.rows(), r + batch_size);
    s.batches += 1;
    const uint64_t own =
        std::set<uint64_t>(b.keys.begin() + b.offsets[r * S], b.keys.begin() + b.offsets[end * S])
            .size();
    s.batch_keys += own;
    s.max_batch_keys = std::max(s.max_batch_keys, own);
    s.rows += end - r;
  }
  return s;
}

// Passes sized by memory as well: every memory_passes consecutive passes' bytes (PassBytes of
// their shapes, counted here) stay within pass_memory unless the last of them is one
// minibatch; passes still start at minibatch boundaries and together are the input.
TEST(PassReaderTest, MemorySizedPassesKeepEveryAliveWindowWithinPassMemory) {
  const uint64_t row_bytes = RowBlock::BytesPerRow(ValueLayout{});
  for (uint32_t alive : {1u, 4u, 7u}) {
    for (uint64_t memory :
         {uint64_t{1} << 20, uint64_t{4} << 20, uint64_t{16} << 20, uint64_t{1} << 30}) {
      SCOPED_TRACE(::testing::Message() << "alive " << alive << " memory " << memory);
      PassReaderOptions o = SizedOptions();
      o.epochs = 2;
      o.window_keys = 1 << 30;  // only the memory cuts
      o.window_passes = 3;
      o.pass_memory = memory;
      o.memory_passes = alive;
      o.row_bytes = row_bytes;
      int opens = 0;
      PassReader r = Reader(7000, o, &opens);
      ASSERT_TRUE(r.Open().ok());
      const std::vector<Batch> passes = AllPasses(&r);
      uint64_t rows = 0, most = 0, cut_inside = 0;
      std::vector<uint64_t> bytes;
      for (size_t p = 0; p < passes.size(); ++p) {
        const Batch& b = passes[p];
        const uint64_t at = rows % 7000;
        EXPECT_EQ((at % 5000) % 128, 0u) << "pass " << p << " starts within a minibatch";
        EXPECT_EQ(at / 5000, (at + b.rows() - 1) / 5000) << "pass " << p << " spans two";
        EXPECT_EQ(b.MemoryBytes(), b.ContentBytes()) << "pass " << p << " is shrunk to fit";
        bytes.push_back(PassBytes(ShapeOf(b, 128), row_bytes));
        uint64_t window = 0;
        for (size_t q = p + 1 >= alive ? p + 1 - alive : 0; q <= p; ++q) window += bytes[q];
        if (b.rows() > 128) {
          EXPECT_LE(window, memory) << "pass " << p;
        }
        most = std::max(most, window);
        const uint64_t end = at + b.rows();
        cut_inside += end % 5000 != 0 && end != 7000;  // inside its grid pass: by memory
        rows += b.rows();
      }
      EXPECT_EQ(rows, 14000u);
      const PassSizingStats& z = r.sizing();
      EXPECT_EQ(z.max_window_bytes, most);  // the reader counts what this test counts
      EXPECT_EQ(z.closed_by_keys, 0u);
      EXPECT_EQ(z.closed_by_memory, cut_inside);
      if (memory == uint64_t{1} << 30) {
        EXPECT_EQ(passes.size(), 4u);  // 5000 + 2000 an epoch
      }
      if (memory == uint64_t{1} << 20) {
        EXPECT_GT(cut_inside, 10u);
      }
    }
  }
}

// Passes sized by GPU memory alone (device: gpu without a memory budget: no key window): each
// pass's bytes stay within device_pass_bytes unless it is one minibatch; passes start at
// minibatch boundaries and together are the input.
TEST(PassReaderTest, GpuSizedPassesStayWithinTheirShareWithoutAKeyWindow) {
  const uint64_t row_bytes = RowBlock::BytesPerRow(ValueLayout{});
  for (uint64_t share : {uint64_t{200} << 10, uint64_t{1} << 20, uint64_t{1} << 30}) {
    SCOPED_TRACE(::testing::Message() << "share " << share);
    PassReaderOptions o = SizedOptions();
    o.device_pass_bytes = share;
    o.device_bytes = [row_bytes](const PassShape& s) { return PassBytes(s, row_bytes) + s.rows; };
    o.row_bytes = row_bytes;
    o.window_passes = 3;
    int opens = 0;
    PassReader r = Reader(7000, o, &opens);
    ASSERT_TRUE(r.Open().ok());
    const std::vector<Batch> passes = AllPasses(&r);
    uint64_t rows = 0, cut_inside = 0;
    std::vector<uint64_t> keys;
    for (size_t p = 0; p < passes.size(); ++p) {
      const Batch& b = passes[p];
      EXPECT_EQ((rows % 5000) % 128, 0u) << "pass " << p << " starts within a minibatch";
      if (b.rows() > 128) {
        EXPECT_LE(o.device_bytes(ShapeOf(b, 128)), share) << "pass " << p;
      }
      const uint64_t end = rows + b.rows();
      cut_inside += end % 5000 != 0 && end != 7000;
      rows = end;
      keys.insert(keys.end(), b.keys.begin(), b.keys.end());
    }
    EXPECT_EQ(rows, 7000u);
    int opens2 = 0;
    PassReader whole = Reader(7000, 1 << 20, 1, &opens2);
    ASSERT_TRUE(whole.Open().ok());
    EXPECT_EQ(AllPasses(&whole)[0].keys, keys);
    const PassSizingStats& z = r.sizing();
    EXPECT_EQ(z.closed_by_device, cut_inside);
    EXPECT_EQ(z.closed_by_keys, 0u);
    EXPECT_EQ(z.closed_by_memory, 0u);
    if (share == uint64_t{1} << 30) {
      EXPECT_EQ(passes.size(), 2u);
    } else {
      EXPECT_GT(cut_inside, 2u);
    }
  }
}

// Passes sized by GPU memory alone take minibatches uncounted while the pass's bound with
// every key use distinct fits (PassReader::DeviceOnly): the passes are those the counted cut
// makes (forced here by a key window too large to cut anything), for shares that cut often,
// now and then, and never.
TEST(PassReaderTest, UncountedGpuSizedPassesAreTheCountedOnes) {
  const uint64_t row_bytes = RowBlock::BytesPerRow(ValueLayout{});
  for (uint64_t share :
       {uint64_t{120} << 10, uint64_t{400} << 10, uint64_t{1} << 20, uint64_t{1} << 30}) {
    SCOPED_TRACE(::testing::Message() << "share " << share);
    std::vector<std::vector<Batch>> runs;
    std::vector<uint64_t> closed;
    for (bool counted : {false, true}) {
      PassReaderOptions o = SizedOptions();
      o.device_pass_bytes = share;
      o.device_bytes = [row_bytes](const PassShape& s) { return PassBytes(s, row_bytes) + s.rows; };
      o.row_bytes = row_bytes;
      o.window_passes = 3;
      if (counted) o.window_keys = uint64_t{1} << 40;  // counts every minibatch, cuts nothing
      int opens = 0;
      PassReader r = Reader(7000, o, &opens);
      ASSERT_TRUE(r.Open().ok());
      runs.push_back(AllPasses(&r));
      closed.push_back(r.sizing().closed_by_device);
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    for (size_t p = 0; p < runs[0].size(); ++p) {
      EXPECT_EQ(runs[0][p].rows(), runs[1][p].rows()) << "pass " << p;
      EXPECT_EQ(runs[0][p].keys, runs[1][p].keys) << "pass " << p;
    }
    EXPECT_EQ(closed[0], closed[1]);
  }
}

// The read stage reads every pass into one batch, the last pass's, gathered on its pool: the
// same passes as fresh batches read on one thread, for fixed, key-sized and GPU-sized passes
// (minibatches of 128 rows over blocks of 300: some span two blocks).
TEST(PassReaderTest, PassesReadIntoAReusedBatchOnAPoolAreTheSame) {
  const uint64_t row_bytes = RowBlock::BytesPerRow(ValueLayout{});
  std::vector<PassReaderOptions> configs(3, SizedOptions());
  configs[1].window_keys = 9000;
  configs[1].window_passes = 2;
  configs[2].device_pass_bytes = uint64_t{400} << 10;
  configs[2].device_bytes = [row_bytes](const PassShape& s) { return PassBytes(s, row_bytes); };
  configs[2].row_bytes = row_bytes;
  ThreadPool pool(3);
  for (size_t c = 0; c < configs.size(); ++c) {
    SCOPED_TRACE(::testing::Message() << "config " << c);
    int opens = 0;
    PassReader plain = Reader(7000, configs[c], &opens);
    ASSERT_TRUE(plain.Open().ok());
    const std::vector<Batch> want = AllPasses(&plain);
    PassReader pooled = Reader(7000, configs[c], &opens);
    ASSERT_TRUE(pooled.Open().ok());
    Batch reused;
    SynthGenerator(SynthOptions{}).GenerateBatch(0, 9000, &reused, nullptr);  // stale, larger
    for (size_t p = 0;; ++p) {
      bool eof = false;
      ASSERT_TRUE(pooled.Next(&reused, &eof, nullptr, &pool).ok());
      if (eof) {
        EXPECT_EQ(p, want.size());
        EXPECT_EQ(reused.rows(), 0u);
        break;
      }
      ASSERT_LT(p, want.size());
      SCOPED_TRACE(::testing::Message() << "pass " << p);
      ExpectSameBatch(reused, want[p]);
    }
  }
}

// PassBytes bounds what a pass holds as Pass::Gauge counts it (examples, working set,
// working table and its rows, built the way the read stage builds them), and not loosely.
TEST(PassReaderTest, PassBytesBoundsWhatAPassHolds) {
  for (ValueLayout layout : {ValueLayout{}, ValueLayout{8, 1, 1, 16, 1.0f}}) {
    const uint64_t row_bytes = RowBlock::BytesPerRow(layout);
    PassReaderOptions o;
    o.pass_examples = 3000;
    o.window_keys = 1 << 30;
    o.batch_size = 256;
    o.pass_memory = 3 << 20;
    o.memory_passes = 2;
    o.row_bytes = row_bytes;
    int opens = 0;
    PassReader r = Reader(12000, o, &opens);
    ASSERT_TRUE(r.Open().ok());
    for (const Batch& b : AllPasses(&r)) {
      WorkingSet ws;
      BuildWorkingSet(b, 256, nullptr, &ws);
      WorkingTable table(layout);
      table.Build(ws.keys, nullptr);
      const uint64_t held =
          b.MemoryBytes() + ws.MemoryBytes() + table.MemoryBytes() + table.rows().MemoryBytes();
      const uint64_t bound = PassBytes(ShapeOf(b, 256), row_bytes);
      EXPECT_LE(held, bound) << b.rows() << " rows";
      EXPECT_GE(held, bound * 0.6) << b.rows() << " rows";
    }
  }
}

TEST(PassReaderTest, AMinibatchWithMoreKeysThanTheBudgetHoldsIsAnErrorWithTheHint) {
  PassReaderOptions o;
  o.window_keys = 100;
  o.window_passes = 2;
  o.batch_size = 256;
  o.max_keys = 150;
  o.key_limit_hint = [](uint64_t keys) { return "need " + std::to_string(keys); };
  int opens = 0;
  PassReader r = Reader(1000, o, &opens);
  ASSERT_TRUE(r.Open().ok());
  Batch b;
  bool eof = false;
  Status s = r.Next(&b, &eof);
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("a minibatch of 256 examples holds"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("more than the 150 rows"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("; need "), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ctrbox
