#include "io/key_hashing.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "io/test_util.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

using testing::RandomBatch;

// OP+OSRP of one (row, slot) written plainly: a map from bin to z, read in the order the
// bins first appear.
std::vector<uint64_t> ReferenceOpOsrp(const std::vector<uint64_t>& keys,
                                      const std::vector<float>& weights, uint64_t k) {
  std::map<uint64_t, double> z;
  std::vector<uint64_t> order;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t bin = Mix64(keys[i] ^ kOpOsrpPermutationSeed) % k;
    const double sign = (Mix64(keys[i] ^ kOpOsrpSignSeed) >> 63) ? 1.0 : -1.0;
    if (!z.count(bin)) order.push_back(bin);
    z[bin] += weights[i] * sign;
  }
  std::vector<uint64_t> out;
  for (uint64_t bin : order) {
    if (z[bin] > 0) out.push_back(2 * bin + 1);
    if (z[bin] < 0) out.push_back(2 * bin);
  }
  return out;
}

TEST(KeyHashingTest, OpOsrpEqualsARowAtATimeReference) {
  for (bool weights : {false, true}) {
    for (uint64_t k : {uint64_t{1}, uint64_t{7}, uint64_t{1000}, uint64_t{1} << 40}) {
      const Batch in = RandomBatch(Schema{5, 2}, 300, k + weights, /*multi_hot=*/true, weights);
      Batch out = in;
      HashBatchKeys({HashingMethod::kOpOsrp, k}, &out);
      ASSERT_EQ(out.rows(), in.rows());
      EXPECT_EQ(out.dense, in.dense);
      EXPECT_EQ(out.labels, in.labels);
      EXPECT_FALSE(out.has_weights());
      ASSERT_EQ(out.offsets.size(), in.offsets.size());
      for (size_t rs = 0; rs + 1 < in.offsets.size(); ++rs) {
        std::vector<uint64_t> keys(in.keys.begin() + in.offsets[rs],
                                   in.keys.begin() + in.offsets[rs + 1]);
        std::vector<float> w(keys.size(), 1.0f);
        if (in.has_weights()) {
          w.assign(in.weights.begin() + in.offsets[rs], in.weights.begin() + in.offsets[rs + 1]);
        }
        const std::vector<uint64_t> got(out.keys.begin() + out.offsets[rs],
                                        out.keys.begin() + out.offsets[rs + 1]);
        EXPECT_EQ(got, ReferenceOpOsrp(keys, w, k)) << "k " << k << " row-slot " << rs;
        for (uint64_t key : got) EXPECT_LT(key, 2 * k);
      }
    }
  }
}

TEST(KeyHashingTest, OpposedSignsInOneBinCancelAndModuloKeepsWeights) {
  // Two keys of one bin with opposite signs: z = 0, the slot gets no key.
  const uint64_t k = 3;
  uint64_t a = 0, b = 0;
  for (uint64_t x = 1; b == 0; ++x) {
    if (a == 0) {
      a = x;
    } else if (Mix64(x ^ kOpOsrpPermutationSeed) % k == Mix64(a ^ kOpOsrpPermutationSeed) % k &&
               (Mix64(x ^ kOpOsrpSignSeed) >> 63) != (Mix64(a ^ kOpOsrpSignSeed) >> 63)) {
      b = x;
    }
  }
  Batch batch;
  batch.Reset(Schema{2, 0});
  BatchBuilder builder(&batch);
  builder.BeginRow(1);
  builder.AddKey(0, a);
  builder.AddKey(0, b);
  builder.AddKey(1, a);
  builder.EndRow();
  Batch osrp = batch;
  HashBatchKeys({HashingMethod::kOpOsrp, k}, &osrp);
  EXPECT_EQ(osrp.offsets, (std::vector<uint32_t>{0, 0, 1}));
  ASSERT_EQ(osrp.keys.size(), 1u);
  EXPECT_EQ(osrp.keys[0] / 2, Mix64(a ^ kOpOsrpPermutationSeed) % k);

  const Batch in = RandomBatch(Schema{4, 0}, 200, 5, true, /*weights=*/true);
  Batch mod = in;
  HashBatchKeys({HashingMethod::kModulo, 97}, &mod);
  EXPECT_EQ(mod.offsets, in.offsets);
  EXPECT_EQ(mod.weights, in.weights);
  for (size_t i = 0; i < in.keys.size(); ++i) EXPECT_EQ(mod.keys[i], in.keys[i] % 97);
  Batch none = in;
  HashBatchKeys({}, &none);
  EXPECT_EQ(none.keys, in.keys);
}

TEST(KeyHashingTest, ManyKeysFillEveryBinWithBothSigns) {
  Batch batch;
  batch.Reset(Schema{1, 0});
  BatchBuilder builder(&batch);
  for (uint64_t i = 0; i < 100000; ++i) {
    builder.BeginRow(0);
    builder.AddKey(0, Mix64(i + 1));
    builder.EndRow();
  }
  HashBatchKeys({HashingMethod::kOpOsrp, 1000}, &batch);
  std::set<uint64_t> distinct(batch.keys.begin(), batch.keys.end());
  EXPECT_EQ(distinct.size(), 2000u);  // 50 keys per hashed key on average: all are hit
}

TEST(KeyHashingTest, MethodNames) {
  for (HashingMethod m : {HashingMethod::kNone, HashingMethod::kModulo, HashingMethod::kOpOsrp}) {
    HashingMethod back;
    ASSERT_TRUE(ParseHashingMethod(HashingMethodName(m), &back));
    EXPECT_EQ(back, m);
  }
  HashingMethod m;
  EXPECT_FALSE(ParseHashingMethod("osrp", &m));
}

// model.slot_dims: each key gets its slot's table in its top bits (slots past the map: table 0),
// after the hashing when both are on; equal low bits in two tables stay two keys.
TEST(KeyHashingTest, TableTagsFollowTheSlotAfterTheHashing) {
  Batch batch;
  batch.Reset(Schema{3, 0});
  BatchBuilder builder(&batch);
  for (uint64_t i = 0; i < 50; ++i) {
    builder.BeginRow(0);
    for (uint32_t s = 0; s < 3; ++s) builder.AddKey(s, Mix64(i * 3 + s));
    builder.AddKey(1, Mix64(i));  // multi-hot
    builder.EndRow();
  }
  const Batch in = batch;
  const KeyTables tables{{2, 1}};  // slot 0 -> 2, slot 1 -> 1, slot 2 -> 0
  ModelKeys({}, tables, &batch);
  for (size_t r = 0; r < batch.rows(); ++r) {
    for (uint32_t s = 0; s < 3; ++s) {
      for (uint32_t p = batch.offsets[r * 3 + s]; p < batch.offsets[r * 3 + s + 1]; ++p) {
        EXPECT_EQ(batch.keys[p] >> kTableShift, s == 0 ? 2u : s == 1 ? 1u : 0u);
        EXPECT_EQ(batch.keys[p] & kTableKeyMask, in.keys[p] & kTableKeyMask);
      }
    }
  }
  Batch hashed = in, expect = in;
  ModelKeys({HashingMethod::kModulo, 7}, tables, &hashed);
  HashBatchKeys({HashingMethod::kModulo, 7}, &expect);
  TagTableKeys(tables, &expect);
  EXPECT_EQ(hashed.keys, expect.keys);
  EXPECT_EQ(TableKey(5, 1), TableKey(TableKey(5, 3), 1));  // retagging is idempotent
  EXPECT_NE(TableKey(5, 1), TableKey(5, 2));
  Batch untouched = in;
  ModelKeys({}, KeyTables{}, &untouched);  // one table: the keys as they are
  EXPECT_EQ(untouched.keys, in.keys);
}

}  // namespace
}  // namespace ctrbox
