// Canonical sums (CtrModel::SumOrder): a minibatch trained on N simulated ranks — each
// computing its share's node sums, the nodes added up the pairwise tree — is the one-process
// step bit for bit, for every model shape and N = 1, 2, 3, 4, 6, 8 (24 sum blocks) and
// N = 1, 2, 4, 8 (16 blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "model/ctr_model.h"
#include "model/ctr_model_test_util.h"
#include "util/pairwise_sum.h"
#include "util/thread_pool.h"

namespace ctrbox::model_test {
namespace {

// Every key's row, encoded, by key.
std::map<uint64_t, std::string> Rows(const Fixture& f) {
  std::map<uint64_t, std::string> out;
  for (size_t i = 0; i < f.ws.keys.size(); ++i) f.rows.EncodeRow(i, &out[f.ws.keys[i]]);
  return out;
}

// Makes *f's pass rows [r0, r1) of whole's, each key's row whole's (f: the same model).
void TakeRows(const Fixture& whole, uint32_t r0, uint32_t r1, Fixture* f) {
  Batch mine;
  mine.Reset(kSchema);
  mine.AppendRows(whole.pass, r0, r1);
  f->pass = mine;
  BuildWorkingSet(f->pass, r1 - r0, nullptr, &f->ws);
  const std::map<uint64_t, std::string> init = Rows(whole);
  f->rows.Resize(f->ws.keys.size());
  for (size_t i = 0; i < f->ws.keys.size(); ++i) {
    const std::string& row = init.at(f->ws.keys[i]);
    f->rows.DecodeRow(row.data(), row.size(), i);
  }
}

// The model after one canonical step of the fixture's first minibatch on `ranks` simulated
// ranks (rank-order sums instead of the tree with pairwise = false), and its rows by key.
struct Stepped {
  std::vector<float> dense;
  std::map<uint64_t, std::string> rows;
};

Stepped StepOnRanks(const ModelOptions& shape, uint32_t batch, uint32_t ranks, bool pairwise) {
  OptimizerOptions sparse, dense;  // Adagrad and Adam, the defaults
  Fixture whole(sparse, dense, true, batch, shape, batch);
  const uint32_t share = batch / ranks;
  std::vector<std::pair<uint32_t, std::vector<float>>> nodes;  // (leaf, dense gradient)
  std::map<uint64_t, std::vector<std::pair<uint32_t, std::vector<float>>>> records;  // by key
  for (uint32_t r = 0; r < ranks; ++r) {
    Fixture f(sparse, dense, true, share, shape, batch);  // the same model and rows...
    TakeRows(whole, r * share, (r + 1) * share, &f);      // ... and this rank's of the minibatch
    f.model.set_sum_order({true, batch, r * share, /*block_rows=*/4, share});
    const Minibatch& mb = f.ws.batches[0];
    std::vector<float> p(mb.rows()), rec;
    f.model.ComputeGradients(f.pass, f.ws, mb, f.rows, nullptr, p.data(), batch, &rec);
    const uint32_t width = f.model.SparseRecordWidth();
    const std::vector<uint32_t>& leaves = f.model.sum_nodes();
    // (One node for a half, a quarter or an eighth of the 8 triples; several for the thirds
    // and sixths.)
    EXPECT_EQ(leaves.size() == 1, ranks == 1 || ranks == 2 || ranks == 4 || ranks == 8)
        << "rank " << r << " of " << ranks;
    for (size_t u = 0; u < mb.uniq.size(); ++u) {
      for (size_t i = 0; i < leaves.size(); ++i) {
        auto at = rec.begin() + (u * leaves.size() + i) * width;
        std::vector<float> one(at, at + width);
        if (one[f.model.SparseRecordWidth() - 2] == 0.0f) continue;  // no occurrence there
        records[f.ws.keys[mb.uniq[u]]].push_back({pairwise ? leaves[i] : r, one});
      }
    }
    for (size_t i = 0; i < leaves.size(); ++i) {
      EXPECT_TRUE(f.model.node_has_rows(i));
      nodes.push_back({leaves[i], f.model.node_grads(i)});
    }
  }
  // The dense gradient: each element up the tree over the nodes' leaves (or in rank order).
  const size_t n = whole.model.dense_grads().size();
  std::vector<float>& out = whole.model.dense_grads();
  for (size_t i = 0; i < n; ++i) {
    float slot[PairwiseStack::kMaxSlots];
    PairwiseStack stack;
    auto merge = [&](int a, int b) { slot[a] += slot[b]; };
    for (size_t k = 0; k < nodes.size(); ++k) {
      if (pairwise) {
        slot[stack.Push(nodes[k].first, merge)] = nodes[k].second[i];
      } else if (k == 0) {
        slot[stack.Push(0, merge)] = nodes[k].second[i];
      } else {
        slot[0] += nodes[k].second[i];
      }
    }
    stack.Finish(merge);
    out[i] = slot[0];
  }
  whole.model.ApplyDense(nullptr);
  // Each key's records up the tree over the ranks that touched it (or in rank order).
  const uint32_t width = whole.model.SparseRecordWidth();
  std::vector<uint32_t> locals;
  std::vector<float> summed;
  for (size_t i = 0; i < whole.ws.keys.size(); ++i) {
    auto it = records.find(whole.ws.keys[i]);
    if (it == records.end()) continue;
    std::vector<std::vector<float>> slot(PairwiseStack::kMaxSlots);
    PairwiseStack stack;
    auto merge = [&](int a, int b) {
      for (uint32_t d = 0; d < width; ++d) slot[a][d] += slot[b][d];
    };
    for (const auto& [leaf, rec] : it->second) {
      if (pairwise) {
        slot[stack.Push(leaf, merge)] = rec;
      } else if (stack.empty()) {
        slot[stack.Push(0, merge)] = rec;
      } else {
        for (uint32_t d = 0; d < width; ++d) slot[0][d] += rec[d];
      }
    }
    stack.Finish(merge);
    locals.push_back(static_cast<uint32_t>(i));
    summed.insert(summed.end(), slot[0].begin(), slot[0].end());
  }
  whole.model.ApplySparse(locals.data(), summed.data(), locals.size(), &whole.rows, whole.accessor,
                          nullptr);
  return {whole.model.dense_params(), Rows(whole)};
}

Stepped StepInOneProcess(const ModelOptions& shape, uint32_t batch, ThreadPool* pool) {
  OptimizerOptions sparse, dense;
  Fixture f(sparse, dense, true, batch, shape, batch);
  f.model.set_sum_order({true, batch, 0, /*block_rows=*/4});
  std::vector<float> p(batch);
  f.model.TrainMinibatch(f.pass, f.ws, f.ws.batches[0], &f.rows, f.accessor, pool, p.data());
  return {f.model.dense_params(), Rows(f)};
}

TEST(CtrModelSumsTest, RanksAddingUpThePairwiseTreeTrainTheOneProcessStep) {
  ThreadPool pool(3);
  int differs_in_rank_order = 0;
  struct Case {
    uint32_t batch;  // in blocks of 4 rows
    std::vector<uint32_t> ranks;
  };
  // 24 blocks (triples under a dyadic tree) and 16 (a dyadic tree).
  for (const Case& c : {Case{96, {1, 2, 3, 4, 6, 8}}, Case{64, {1, 2, 4, 8}}}) {
    for (const auto& [name, shape] : Shapes()) {
      SCOPED_TRACE(name + " batch " + std::to_string(c.batch));
      const Stepped one = StepInOneProcess(shape, c.batch, nullptr);
      const Stepped threads = StepInOneProcess(shape, c.batch, &pool);
      EXPECT_EQ(threads.dense, one.dense);
      EXPECT_EQ(threads.rows, one.rows);
      for (uint32_t ranks : c.ranks) {
        const Stepped got = StepOnRanks(shape, c.batch, ranks, /*pairwise=*/true);
        EXPECT_EQ(got.dense, one.dense) << ranks << " ranks";
        EXPECT_EQ(got.rows, one.rows) << ranks << " ranks";
        const Stepped rank_order = StepOnRanks(shape, c.batch, ranks, /*pairwise=*/false);
        differs_in_rank_order += rank_order.dense != one.dense || rank_order.rows != one.rows;
      }
    }
  }
  // (Adding the ranks' shares in rank order instead does not give the one-process step.)
  EXPECT_GT(differs_in_rank_order, 0);
}

// The canonical sums against a reference: each block's gradients computed alone (a model of
// default sums given only the block's rows: its dense gradient and its keys' records), added
// up the tree here; and a second call of ComputeGradients gives the same bits (the tree's
// pending sums start from zeros every time: their GEMMs add into them).
TEST(CtrModelSumsTest, TheCanonicalSumsAreTheTreeOfTheBlocksComputedAlone) {
  OptimizerOptions sparse, dense;
  constexpr uint32_t kBatch = 64, kBlock = 4, kBlocks = kBatch / kBlock;  // positions 0..15
  for (const auto& [name, shape] : Shapes()) {
    SCOPED_TRACE(name);
    Fixture whole(sparse, dense, true, kBatch, shape, kBatch);
    whole.model.set_sum_order({true, kBatch, 0, kBlock});
    const Minibatch& mb = whole.ws.batches[0];
    std::vector<float> p(mb.rows()), rec, again_rec;
    whole.model.ComputeGradients(whole.pass, whole.ws, mb, whole.rows, nullptr, p.data(), kBatch,
                                 &rec);
    const std::vector<float> got = whole.model.dense_grads();
    whole.model.ComputeGradients(whole.pass, whole.ws, mb, whole.rows, nullptr, p.data(), kBatch,
                                 &again_rec);
    EXPECT_EQ(whole.model.dense_grads(), got) << "a second call";
    EXPECT_EQ(again_rec, rec) << "a second call";
    // The leaves: each block alone, in default order (one row block of 4 rows).
    std::vector<std::vector<float>> leaf(kBlocks);
    std::map<uint64_t, std::vector<std::pair<uint32_t, std::vector<float>>>> records;
    const uint32_t width = whole.model.SparseRecordWidth();
    for (uint32_t b = 0; b < kBlocks; ++b) {
      Fixture f(sparse, dense, true, kBlock, shape, kBatch);
      TakeRows(whole, b * kBlock, (b + 1) * kBlock, &f);
      const Minibatch& fb = f.ws.batches[0];
      std::vector<float> fp(fb.rows()), frec;
      f.model.ComputeGradients(f.pass, f.ws, fb, f.rows, nullptr, fp.data(), kBatch, &frec);
      leaf[b] = f.model.dense_grads();
      for (size_t u = 0; u < fb.uniq.size(); ++u) {
        records[f.ws.keys[fb.uniq[u]]].push_back(
            {b, std::vector<float>(frec.begin() + u * width, frec.begin() + (u + 1) * width)});
      }
    }
    std::vector<float> want(got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      float slot[PairwiseStack::kMaxSlots];
      PairwiseStack stack;
      auto merge = [&](int a, int c) { slot[a] += slot[c]; };
      for (uint32_t b = 0; b < kBlocks; ++b) slot[stack.Push(b, merge)] = leaf[b][i];
      stack.Finish(merge);
      want[i] = slot[0];
    }
    EXPECT_EQ(got, want) << "the dense gradient";
    size_t differs = 0;
    for (size_t u = 0; u < mb.uniq.size(); ++u) {
      std::vector<std::vector<float>> slot(PairwiseStack::kMaxSlots);
      PairwiseStack stack;
      auto merge = [&](int a, int c) {
        for (uint32_t d = 0; d < width; ++d) slot[a][d] += slot[c][d];
      };
      for (const auto& [b, one] : records.at(whole.ws.keys[mb.uniq[u]])) {
        slot[stack.Push(b, merge)] = one;
      }
      stack.Finish(merge);
      differs += !std::equal(slot[0].begin(), slot[0].end(), rec.begin() + u * width);
    }
    EXPECT_EQ(differs, 0u) << "keys whose record is not the tree of its blocks' records";
  }
}

// What set_sum_order makes of a share is known without a model (CtrModel::ShareNodes and
// ShareLeaves: the GPU pass bound counts nodes from them): the nodes the model sums, and the
// leaves of the row blocks it cuts each prefix of the share into, for every rank of 24 blocks
// (triples), 16 and 8, and blocks of 128 rows (the jobs') over shares that are not whole blocks.
TEST(CtrModelSumsTest, ShareNodesAndLeavesAreTheModelsCut) {
  OptimizerOptions sparse, dense;
  Fixture f(sparse, dense, false, 8);
  struct Case {
    uint32_t batch, block;
    std::vector<uint32_t> ranks;
  };
  int checked = 0;
  for (const Case& c :
       {Case{96, 4, {1, 2, 3, 4, 6, 8}}, Case{64, 4, {1, 2, 4, 8}}, Case{2048, 128, {1, 2, 4}},
        Case{1536, 128, {1, 2, 3, 6}}, Case{1000, 128, {1}}}) {
    for (uint32_t ranks : c.ranks) {
      const uint32_t share = c.batch / ranks;
      for (uint32_t r = 0; r < ranks; ++r) {
        SCOPED_TRACE(std::to_string(c.batch) + " rows, " + std::to_string(ranks) + " ranks, rank " +
                     std::to_string(r));
        const CtrModel::SumOrder o{true, c.batch, r * share, c.block, share};
        f.model.set_sum_order(o);
        std::vector<uint32_t> firsts, ends;
        CtrModel::ShareNodes(o, &firsts, &ends);
        EXPECT_EQ(firsts, f.model.sum_nodes());
        EXPECT_EQ(ends, f.model.sum_node_ends());
        const std::vector<uint32_t> leaves = CtrModel::ShareLeaves(o);
        std::vector<uint32_t> blocks, got;
        f.model.SumBlocks(share, &blocks, &got);
        EXPECT_EQ(leaves, got);
        for (uint32_t rows = 1; rows < share; rows += 7) {  // a short last minibatch: a prefix
          f.model.SumBlocks(rows, &blocks, &got);
          ASSERT_LE(got.size(), leaves.size());
          EXPECT_TRUE(std::equal(got.begin(), got.end(), leaves.begin())) << rows << " rows";
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 24 + 15 + 7 + 12 + 1);  // every rank of every case
}

}  // namespace
}  // namespace ctrbox::model_test
