#include "io/text_format.h"

#include <gtest/gtest.h>

#include "io/text_scan.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

std::string CriteoLine(std::string label = "1") {
  std::string l = label;
  for (int j = 0; j < 13; ++j) l += "\t" + (j == 2 ? std::string() : std::to_string(j * 3 - 1));
  for (int s = 0; s < 26; ++s)
    l += "\t" + (s == 5 ? std::string() : "a1b2c3" + std::to_string(s % 10) + "f");
  return l;
}

ChunkParseResult Parse(const TextFormatOptions& opt, const std::string& data) {
  TextChunk chunk;
  chunk.file = "in.txt";
  chunk.data = data;
  chunk.first_line = 10;
  ChunkParseResult r;
  ParseTextChunk(opt, chunk, &r);
  return r;
}

TEST(CriteoTest, ParsesAValidLine) {
  TextFormatOptions opt;
  auto r = Parse(opt, CriteoLine() + "\n" + CriteoLine("0") + "\r\n");
  ASSERT_EQ(r.counts.good, 2u);
  EXPECT_EQ(r.counts.bad_total(), 0u);
  const Batch& b = r.batch;
  ASSERT_EQ(b.rows(), 2u);
  EXPECT_EQ(b.labels[0], 1.0f);
  EXPECT_EQ(b.labels[1], 0.0f);
  EXPECT_EQ(b.dense[0], -1.0f);
  EXPECT_EQ(b.dense[1], 2.0f);
  EXPECT_EQ(b.dense[2], 0.0f);  // empty
  ASSERT_EQ(b.keys.size(), 52u);
  EXPECT_EQ(b.keys[0], FeatureKey(0, std::string_view("a1b2c30f")));
  EXPECT_EQ(b.keys[5], FeatureKey(5, std::string_view("")));  // missing is its own value
  EXPECT_NE(b.keys[5], b.keys[26 + 6]);
}

struct BadCase {
  std::string line;
  BadKind kind;
  std::string detail_part;
};

TEST(CriteoTest, EveryMalformedKindIsCountedWithItsLine) {
  std::string too_few = CriteoLine().substr(0, CriteoLine().rfind('\t'));
  std::string bad_num = CriteoLine();
  bad_num.replace(bad_num.find("\t-1\t"), 4, "\t1x\t");
  std::string bad_utf8 = CriteoLine();
  bad_utf8.replace(bad_utf8.rfind("a1b2"), 4, "\xC3\x28zz");
  std::vector<BadCase> cases = {
      {too_few, BadKind::kFieldCount, "expected 40 tab-separated fields, found 39"},
      {"label,i1,i2,c1", BadKind::kFieldCount, "found 1 (the line has commas: a CSV file?"},
      {CriteoLine() + "\textra", BadKind::kFieldCount, "found 41"},
      {CriteoLine("2"), BadKind::kBadLabel, "label '2'"},
      {CriteoLine("yes"), BadKind::kBadLabel, "label 'yes'"},
      {bad_num, BadKind::kBadNumber, "I1 '1x'"},
      {bad_utf8, BadKind::kBadUtf8, "C26 is not valid UTF-8"},
      {"", BadKind::kFieldCount, "found 1"},
  };
  TextFormatOptions opt;
  for (const BadCase& c : cases) {
    auto r = Parse(opt, CriteoLine() + "\n" + c.line + "\n" + CriteoLine() + "\n");
    EXPECT_EQ(r.counts.good, 2u) << c.detail_part;
    EXPECT_EQ(r.counts.bad[static_cast<int>(c.kind)], 1u) << c.detail_part;
    ASSERT_EQ(r.samples.size(), 1u);
    EXPECT_EQ(r.samples[0].line, 11u);
    EXPECT_EQ(r.samples[0].file, "in.txt");
    EXPECT_NE(r.samples[0].detail.find(c.detail_part), std::string::npos) << r.samples[0].detail;
    EXPECT_EQ(r.bad_lines, (std::vector<uint64_t>{11}));
    EXPECT_EQ(r.batch.rows(), 2u);
  }
}

TEST(CriteoTest, OverlongLineAndOptionalLabel) {
  TextFormatOptions opt;
  opt.max_line_bytes = 100;
  auto r = Parse(opt, CriteoLine() + "\n");
  EXPECT_EQ(r.counts.bad[static_cast<int>(BadKind::kOverlongLine)], 1u);

  TextFormatOptions predict;
  predict.labels_optional = true;
  std::string unlabeled = CriteoLine().substr(2);  // drop "1\t"
  auto p = Parse(predict, unlabeled + "\n" + CriteoLine() + "\n");
  EXPECT_EQ(p.counts.good, 2u);
  EXPECT_EQ(p.batch.keys[0], p.batch.keys[26]);
}

TEST(LibsvmTest, ParsesLabelsAndWeights) {
  TextFormatOptions opt;
  opt.format = DataFormat::kLibsvm;
  opt.schema = SchemaForFormat(DataFormat::kLibsvm, 0, 0);
  auto r = Parse(opt, "+1 3:0.5 7:1\n-1 2:2e-1\n0  4:1\t9:3\n1\n");
  ASSERT_EQ(r.counts.good, 4u);
  EXPECT_EQ(r.batch.labels, (std::vector<float>{1, 0, 0, 1}));
  EXPECT_EQ(r.batch.keys[0], FeatureKey(0, uint64_t{3}));
  EXPECT_EQ(r.batch.weights, (std::vector<float>{0.5f, 1.0f, 0.2f, 1.0f, 3.0f}));
  EXPECT_EQ(r.batch.offsets, (std::vector<uint32_t>{0, 2, 3, 5, 5}));

  auto bad = Parse(opt, "2 3:1\n1 3\n1 x:1\n1 3:y\n1 1:2:3\n");
  EXPECT_EQ(bad.counts.good, 0u);
  EXPECT_EQ(bad.counts.bad[static_cast<int>(BadKind::kBadLabel)], 1u);
  EXPECT_EQ(bad.counts.bad[static_cast<int>(BadKind::kBadSlot)], 2u);
  EXPECT_EQ(bad.counts.bad[static_cast<int>(BadKind::kBadNumber)], 2u);
}

TEST(LibffmTest, FieldsBecomeSlots) {
  TextFormatOptions opt;
  opt.format = DataFormat::kLibffm;
  opt.schema = SchemaForFormat(DataFormat::kLibffm, 3, 0);
  auto r = Parse(opt, "1 2:5:1 0:7:0.25 2:6:1\n0 3:1:1\n0 1:2\n");
  ASSERT_EQ(r.counts.good, 1u);
  EXPECT_EQ(r.batch.keys,
            (std::vector<uint64_t>{FeatureKey(0, uint64_t{7}), FeatureKey(2, uint64_t{5}),
                                   FeatureKey(2, uint64_t{6})}));
  EXPECT_EQ(r.batch.offsets, (std::vector<uint32_t>{0, 1, 1, 3}));
  EXPECT_EQ(r.counts.bad[static_cast<int>(BadKind::kBadSlot)], 2u);
  // A libFM line read as libffm: the message names the format that reads it.
  ASSERT_FALSE(r.samples.empty());
  bool hinted = false;
  for (const BadRecord& b : r.samples) {
    hinted |= b.detail.find(
                  "(the line reads as libfm (label idx:val, as libsvm): --format "
                  "libfm)") != std::string::npos;
  }
  EXPECT_TRUE(hinted) << r.samples[0].detail;
}

// Issue 44: `--format libfm` read libFFM's field:idx:val, not libFM's own `label idx:val`
// files, and nothing took a token's position as its field (Frappe's one-hot files).
TEST(LibfmTest, LibfmReadsLibfmFilesAndThePositionCanBeTheSlot) {
  TextFormatOptions opt;
  opt.format = DataFormat::kLibfm;
  opt.schema = SchemaForFormat(DataFormat::kLibfm, 0, 0);
  EXPECT_EQ(opt.schema, (Schema{1, 0}));
  const std::string lines = "1 266:1 4967:1 5000:1\n-1 12:1 4967:1 5001:0.5\n";
  auto one = Parse(opt, lines);
  ASSERT_EQ(one.counts.good, 2u);
  EXPECT_EQ(one.batch.keys[0], FeatureKey(0, uint64_t{266}));
  EXPECT_EQ(one.batch.offsets, (std::vector<uint32_t>{0, 3, 6}));
  // The same as libsvm's reading, key for key.
  TextFormatOptions svm = opt;
  svm.format = DataFormat::kLibsvm;
  EXPECT_EQ(Parse(svm, lines).batch.keys, one.batch.keys);

  opt.slot_from = SlotFrom::kPosition;
  opt.schema = SchemaForFormat(DataFormat::kLibfm, 3, 0, SlotFrom::kPosition);
  EXPECT_EQ(opt.schema, (Schema{3, 0}));
  auto pos = Parse(opt, lines + "1 1:1 2:1 3:1 4:1\n");
  ASSERT_EQ(pos.counts.good, 2u);
  EXPECT_EQ(pos.batch.keys,
            (std::vector<uint64_t>{FeatureKey(0, uint64_t{266}), FeatureKey(1, uint64_t{4967}),
                                   FeatureKey(2, uint64_t{5000}), FeatureKey(0, uint64_t{12}),
                                   FeatureKey(1, uint64_t{4967}), FeatureKey(2, uint64_t{5001})}));
  EXPECT_EQ(pos.batch.offsets, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(pos.batch.weights[5], 0.5f);
  ASSERT_EQ(pos.counts.bad[static_cast<int>(BadKind::kBadSlot)], 1u);
  EXPECT_NE(pos.samples[0].detail.find("token 4 of the row ('4:1'), but data.num_slots is 3"),
            std::string::npos)
      << pos.samples[0].detail;
}

TEST(GuessFormatTest, NamesTheFormatWhoseGrammarALineFollows) {
  EXPECT_EQ(GuessFormat("1 266:1 4967:1"), "libfm (label idx:val, as libsvm)");
  EXPECT_EQ(GuessFormat("0 2:266:1 3:4967:0.5"), "libffm");
  EXPECT_EQ(GuessFormat("1 dense:1,2 0:5 3:7"), "slots");
  EXPECT_EQ(GuessFormat("1" + std::string(39, '\t')), "criteo");
  EXPECT_EQ(GuessFormat("hello world"), "");
  EXPECT_EQ(GuessFormat("1 2:3 4:5:6"), "");  // mixed: no guess
}

// model.shared_slots: a group's slots key raw ids with the group's first slot, so one id in two
// slots of a group is one key; slots outside a group keep their own.
TEST(SlotsTest, SharedSlotsKeyAGroupWithItsFirstSlot) {
  TextFormatOptions o;
  o.format = DataFormat::kSlots;
  o.schema = {3, 0};
  TextChunk chunk;
  chunk.file = "f";
  chunk.data = "1 0:7 1:7 2:7\n";
  ChunkParseResult own, shared;
  ParseTextChunk(o, chunk, &own);
  o.key_slots = {0, 1, 0};  // groups {0, 2}; slot 1 alone
  ParseTextChunk(o, chunk, &shared);
  ASSERT_EQ(own.batch.keys.size(), 3u);
  ASSERT_EQ(shared.batch.keys.size(), 3u);
  EXPECT_NE(own.batch.keys[0], own.batch.keys[2]);
  EXPECT_EQ(shared.batch.keys[0], shared.batch.keys[2]);
  EXPECT_EQ(shared.batch.keys[0], own.batch.keys[0]);  // the group's first slot's key
  EXPECT_EQ(shared.batch.keys[1], own.batch.keys[1]);
  EXPECT_EQ(KeySlotOf({0, 1, 0}, 7), 7u);  // past the map: its own
}

TEST(SlotsTest, MultiHotAndDense) {
  TextFormatOptions opt;
  opt.format = DataFormat::kSlots;
  opt.schema = Schema{3, 2};
  auto r = Parse(opt, "1 dense:1.5,3 0:11 2:5 0:12\n0 1:18446744073709551615\n");
  ASSERT_EQ(r.counts.good, 2u);
  EXPECT_EQ(r.batch.dense, (std::vector<float>{1.5f, 3, 0, 0}));
  EXPECT_EQ(r.batch.keys[0], FeatureKey(0, uint64_t{11}));
  EXPECT_EQ(r.batch.keys[1], FeatureKey(0, uint64_t{12}));
  EXPECT_EQ(r.batch.offsets, (std::vector<uint32_t>{0, 2, 2, 3, 3, 4, 4}));

  auto bad = Parse(opt, "1 3:1\n1 0:-4\n1 dense:1\n1 dense:1,2,3\n1 dense:1,z\n7 0:1\n1 0\n");
  EXPECT_EQ(bad.counts.good, 0u);
  EXPECT_EQ(bad.counts.bad[static_cast<int>(BadKind::kBadSlot)], 2u);
  EXPECT_EQ(bad.counts.bad[static_cast<int>(BadKind::kBadNumber)], 2u);
  EXPECT_EQ(bad.counts.bad[static_cast<int>(BadKind::kFieldCount)], 2u);
  EXPECT_EQ(bad.counts.bad[static_cast<int>(BadKind::kBadLabel)], 1u);
}

// Issue 45: invalid UTF-8 in a record was echoed raw into the log (and could not be written
// into a JSON report). A quoted record escapes every byte that is not well-formed UTF-8 or is
// a control byte, and keeps well-formed characters as they are, whatever the sequence length.
TEST(TextScanTest, PrintableEscapesEveryByteThatIsNotWellFormedUtf8) {
  using text_scan::Printable;
  EXPECT_EQ(Printable("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(Printable("a\xFF"
                      "b"),
            "a\\xff"
            "b");
  EXPECT_EQ(Printable("\xC3\x28"), "\\xc3(");               // a lead byte without its tail
  EXPECT_EQ(Printable("\xC0\xAF"), "\\xc0\\xaf");           // an overlong '/'
  EXPECT_EQ(Printable("\xED\xA0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(Printable("x\xE2\x82"), "x\\xe2\\x82");         // cut mid-sequence
  EXPECT_EQ(Printable("\xEF\xBB\xBFid\t\x1b"), "\\uFEFFid\\x09\\x1b");
  // Whatever the bytes, the result is valid UTF-8 without control bytes.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (int shift = 0; shift < 4; ++shift) {
    const std::string out = Printable(std::string_view(all).substr(shift));
    EXPECT_TRUE(text_scan::ValidUtf8(out));
    for (char c : out) EXPECT_GE(static_cast<unsigned char>(c), 0x20);
  }
}

}  // namespace
}  // namespace ctrbox
