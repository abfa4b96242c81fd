#include "table/value.h"

#include <gtest/gtest.h>

#include <cstring>

#include "table/accessor.h"
#include "util/bf16.h"

namespace ctrbox {
namespace {

TEST(ValueTest, EncodeDecodeRoundTrip) {
  ValueLayout l{4, 4, 1};
  RowBlock a(l), b(l);
  a.Resize(2);
  b.Resize(2);
  CtrAccessor acc(l, AccessorOptions{});
  acc.InitRow(&a, 0, 77);
  a.show(0) = 3;
  a.click(0) = 1;
  a.wide(0) = -0.5f;
  a.wide_state(0)[0] = 0.25f;
  a.emb_state(0)[2] = 9;
  a.ClearRow(1, 78);  // no embedding
  a.unseen(1) = 4;
  std::string enc;
  a.EncodeRow(0, &enc);
  ASSERT_EQ(enc.size(), l.EncodedBytes(true));
  a.EncodeRow(1, &enc);
  ASSERT_EQ(enc.size(), l.EncodedBytes(true) + l.EncodedBytes(false));
  size_t used = b.DecodeRow(enc.data(), enc.size(), 0);
  ASSERT_EQ(used, l.EncodedBytes(true));
  ASSERT_EQ(b.DecodeRow(enc.data() + used, enc.size() - used, 1), l.EncodedBytes(false));
  std::string again;
  b.EncodeRow(0, &again);
  b.EncodeRow(1, &again);
  EXPECT_EQ(again, enc);
  EXPECT_TRUE(b.has_emb(0));
  EXPECT_FALSE(b.has_emb(1));
  EXPECT_EQ(b.unseen(1), 4);
  // Truncated input and unknown flags are rejected.
  EXPECT_EQ(b.DecodeRow(enc.data(), l.EncodedBytes(true) - 1, 0), 0u);
  std::string bad = enc;
  bad[18] = 0x06;
  EXPECT_EQ(b.DecodeRow(bad.data(), bad.size(), 0), 0u);
}

// A row's values without its optimizer state (what a holder trains with under owner updates):
// they round trip exactly, float32 and quantized codes alike, the holder's state stays as it
// was, and a short or malformed buffer is rejected.
TEST(ValueTest, ValuesWithoutStateRoundTripAndLeaveTheStateAlone) {
  for (uint32_t bits : {0u, 8u}) {
    SCOPED_TRACE(bits);
    ValueLayout l{4, 4, 1};
    l.quant_bits = bits;
    RowBlock a(l), b(l);
    a.Resize(2);
    b.Resize(2);
    CtrAccessor acc(l, AccessorOptions{});
    acc.InitRow(&a, 0, 77);  // on the grid with codes
    a.show(0) = 3;
    a.click(0) = 1;
    a.unseen(0) = 2;
    a.wide(0) = -0.5f;
    a.wide_state(0)[0] = 0.25f;
    a.ClearRow(1, 78);  // no embedding
    b.ClearRow(0, 5);
    b.ClearRow(1, 6);
    b.wide_state(0)[0] = 7;
    b.emb_state(0)[1] = 8;
    std::string enc;
    a.EncodeValues(0, &enc);
    const size_t first = enc.size();
    EXPECT_EQ(first, 24 + 4 * (bits == 0 ? 4u : 1u));
    a.EncodeValues(1, &enc);
    EXPECT_EQ(enc.size() - first, 24u);
    ASSERT_EQ(b.DecodeValues(enc.data(), enc.size(), 0), first);
    ASSERT_EQ(b.DecodeValues(enc.data() + first, enc.size() - first, 1), 24u);
    for (size_t i : {0, 1}) {
      EXPECT_EQ(b.key(i), a.key(i));
      EXPECT_EQ(b.show(i), a.show(i));
      EXPECT_EQ(b.click(i), a.click(i));
      EXPECT_EQ(b.unseen(i), a.unseen(i));
      EXPECT_EQ(b.flags(i), a.flags(i));
      EXPECT_EQ(b.wide(i), a.wide(i));
      EXPECT_EQ(0, std::memcmp(b.emb(i), a.emb(i), 4 * l.dim));
    }
    EXPECT_EQ(b.wide_state(0)[0], 7.0f);
    EXPECT_EQ(b.emb_state(0)[1], 8.0f);
    EXPECT_EQ(b.DecodeValues(enc.data(), first - 1, 0), 0u);
    std::string bad = enc;
    bad[18] = 0x06;
    EXPECT_EQ(b.DecodeValues(bad.data(), bad.size(), 0), 0u);
  }
}

// model.slot_dims: a row of a multi-table layout encodes at its own table's size (key, counters,
// wide part, then its table's embedding and state), decodes with the rest of the row zero, and
// a key naming no table of the layout does not decode.
TEST(ValueTest, RowsOfSeveralTablesEncodeAtTheirOwnSize) {
  ValueLayout l{8, 8, 1};
  l.tables = 2;
  l.table_dim[0] = l.table_state[0] = 8;
  l.table_dim[1] = l.table_state[1] = 3;
  EXPECT_EQ(l.Table(1).EncodedBytes(true), l.TableEncodedBytes(1, true));
  EXPECT_EQ(l.TableEncodedBytes(1, true), 8u + 16 + 4 + 3 * 4 * 2);
  EXPECT_EQ(l.TableEncodedBytes(0, true), l.EncodedBytes(true));
  CtrAccessor acc(l, AccessorOptions{});
  RowBlock a(l), b(l);
  a.Resize(2);
  b.Resize(2);
  const uint64_t small = TableKey(Mix64(1), 1), big = TableKey(Mix64(2), 0);
  acc.InitRow(&a, 0, small);
  acc.InitRow(&a, 1, big);
  for (uint32_t d = 0; d < 8; ++d) {
    EXPECT_EQ(a.emb(0)[d] != 0.0f, d < 3) << d;  // drawn for its 3 values only
    EXPECT_NE(a.emb(1)[d], 0.0f) << d;
  }
  a.emb_state(0)[2] = 5;
  std::string enc;
  a.EncodeRow(0, &enc);
  ASSERT_EQ(enc.size(), l.EncodedBytesOf(small, true));
  a.EncodeRow(1, &enc);
  ASSERT_EQ(enc.size(), l.EncodedBytesOf(small, true) + l.EncodedBytesOf(big, true));
  for (uint32_t d = 0; d < 8; ++d) b.emb(0)[d] = b.emb_state(0)[d] = 7;  // stale values
  const size_t used = b.DecodeRow(enc.data(), enc.size(), 0);
  ASSERT_EQ(used, l.EncodedBytesOf(small, true));
  ASSERT_EQ(b.DecodeRow(enc.data() + used, enc.size() - used, 1), l.EncodedBytesOf(big, true));
  for (uint32_t d = 0; d < 8; ++d) {
    EXPECT_EQ(b.emb(0)[d], a.emb(0)[d]) << d;
    EXPECT_EQ(b.emb_state(0)[d], a.emb_state(0)[d]) << d;
    EXPECT_EQ(b.emb(1)[d], a.emb(1)[d]) << d;
  }
  std::string foreign = enc.substr(0, used);
  const uint64_t bad = TableKey(Mix64(1), 2);
  std::memcpy(foreign.data(), &bad, 8);
  EXPECT_EQ(b.DecodeRow(foreign.data(), foreign.size(), 0), 0u);
}

// bfloat16 state (optimizer.sparse.state_bits: 16): two bytes per state value in the encoding,
// exact for values on the bfloat16 grid (the trainer rounds the state after every update).
TEST(ValueTest, Bf16StateEncodesInTwoBytesExactly) {
  ValueLayout l{4, 4, 1};
  ValueLayout h = l;
  h.state_bits = 16;
  EXPECT_EQ(h.EncodedBytes(true), l.EncodedBytes(true) - 8);
  EXPECT_EQ(h.EncodedBytes(false), l.EncodedBytes(false));
  EXPECT_EQ(h.StateBytes(), 8u);
  RowBlock a(h), b(h);
  a.Resize(1);
  b.Resize(1);
  CtrAccessor acc(h, AccessorOptions{});
  acc.InitRow(&a, 0, 5);
  a.flags(0) |= kFlagHasEmb;
  const float state[4] = {0.0f, 1.5f, FloatOfBf16(0x3A83), FloatOfBf16(0x4B00)};
  for (int d = 0; d < 4; ++d) a.emb_state(0)[d] = state[d];
  a.emb(0)[1] = 0.123456f;  // the embedding stays float32
  std::string enc;
  a.EncodeRow(0, &enc);
  ASSERT_EQ(enc.size(), h.EncodedBytes(true));
  ASSERT_EQ(b.DecodeRow(enc.data(), enc.size(), 0), enc.size());
  for (int d = 0; d < 4; ++d) EXPECT_EQ(b.emb_state(0)[d], state[d]) << d;
  EXPECT_EQ(b.emb(0)[1], 0.123456f);
  // The header word: quant bits low, state bits high (older files have 0 there).
  ValueLayout back;
  SetRowCodes(RowCodesWord(h), &back);
  EXPECT_EQ(back.state_bits, 16u);
  EXPECT_EQ(back.quant_bits, 0u);
  SetRowCodes(8, &back);
  EXPECT_EQ(back.state_bits, 0u);
  EXPECT_EQ(back.quant_bits, 8u);
}

TEST(AccessorTest, LazyEmbeddingAndShrinkRules) {
  ValueLayout l{8, 8, 1};
  AccessorOptions o;
  o.embedx_threshold = 1.0f;
  o.delete_threshold = 0.5f;
  o.delete_after_unseen_passes = 2;
  o.decay = 0.5f;
  CtrAccessor acc(l, o);
  RowBlock r(l);
  r.Resize(1);
  acc.InitRow(&r, 0, 5);
  EXPECT_FALSE(r.has_emb(0));  // score 0 < 1
  r.show(0) = 5;               // score (5-0)*0.1 = 0.5
  EXPECT_FALSE(acc.MaybeCreateEmbedding(&r, 0));
  r.click(0) = 1;  // score 4*0.1 + 1 = 1.4
  EXPECT_TRUE(acc.MaybeCreateEmbedding(&r, 0));
  for (int d = 0; d < 8; ++d) EXPECT_LE(std::abs(r.emb(0)[d]), o.init_range);
  EXPECT_NE(r.emb(0)[0], r.emb(0)[1]);

  float show = 4, click = 1;
  uint16_t unseen = 0;
  EXPECT_TRUE(acc.ShrinkRow(&show, &click, &unseen));  // 2, 0.5 -> score 0.65
  EXPECT_EQ(show, 2.0f);
  EXPECT_EQ(unseen, 1);
  EXPECT_FALSE(acc.ShrinkRow(&show, &click, &unseen));  // 1, 0.25 -> 0.325 < 0.5
  show = 100, click = 50, unseen = 2;
  EXPECT_FALSE(acc.ShrinkRow(&show, &click, &unseen));  // unseen 3 > 2
}

}  // namespace
}  // namespace ctrbox
