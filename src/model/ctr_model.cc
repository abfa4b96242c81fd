#include "model/ctr_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "model/blas.h"
#include "util/hash.h"

namespace ctrbox {
namespace {

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Binary cross-entropy from the logit, stable for large |z|.
double LogLoss(float z, float y) {
  double zd = z;
  return std::max(zd, 0.0) - zd * y + std::log1p(std::exp(-std::fabs(zd)));
}

}  // namespace

CtrModel::CtrModel(Schema schema, ModelOptions model, OptimizerOptions sparse,
                   OptimizerOptions dense, uint64_t seed)
    : schema_(schema),
      options_(std::move(model)),
      sparse_opt_(sparse),
      mlp_(schema.num_dense + schema.num_slots * options_.embedding_dim, options_.mlp),
      params_(mlp_.num_params()),
      grads_(mlp_.num_params()),
      dense_opt_(dense, mlp_.num_params()),
      input_width_(schema.num_dense + schema.num_slots * options_.embedding_dim),
      quant_(options_.quant.bits, options_.quant.range),
      quant_seed_(Mix64(seed ^ 0x51A7'0000'0000'0002ULL)) {
  blas::UseSingleThreadedBlas();
  mlp_.Init(params_.data(), seed);
  for (uint32_t l = 0; l < mlp_.num_layers(); ++l) {
    for (uint32_t c0 = 0; c0 < mlp_.out(l); c0 += kTileColumns) {
      tiles_.push_back(Tile{l, c0, std::min(mlp_.out(l), c0 + kTileColumns)});
    }
  }
  std::stable_sort(tiles_.begin(), tiles_.end(), [&](const Tile& a, const Tile& b) {
    return uint64_t{mlp_.in(a.layer)} * (a.c1 - a.c0) > uint64_t{mlp_.in(b.layer)} * (b.c1 - b.c0);
  });
}

ValueLayout CtrModel::LayoutFor(const ModelOptions& model, const OptimizerOptions& sparse) {
  const SparseOptimizer opt(sparse);
  return ValueLayout{model.embedding_dim, opt.StateFloats(model.embedding_dim),
                     opt.StateFloats(1),  model.quant.bits,
                     model.quant.range,   sparse.state_bits};
}

ValueLayout CtrModel::value_layout() const { return LayoutFor(options_, sparse_opt_.options()); }

void CtrModel::EnsureBuffers(uint32_t rows) {
  if (rows <= capacity_) return;
  capacity_ = rows;
  const uint32_t hidden = mlp_.num_layers() - 1;
  x_.resize(size_t{rows} * input_width_);
  logits_.resize(rows);
  dlogit_.resize(rows);
  wide_sum_.resize(rows);
  dx_.resize(size_t{rows} * schema_.num_slots * options_.embedding_dim);
  acts_.resize(hidden);
  grads_hidden_.resize(hidden);
  act_ptrs_.resize(hidden);
  grad_ptrs_.resize(hidden);
  for (uint32_t l = 0; l < hidden; ++l) {
    acts_[l].resize(size_t{rows} * mlp_.out(l));
    grads_hidden_[l].resize(size_t{rows} * mlp_.out(l));
  }
}

void CtrModel::BuildInputs(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                           const RowBlock& rows, uint32_t r0, uint32_t r1) {
  const uint32_t D = schema_.num_dense, S = schema_.num_slots, dim = options_.embedding_dim;
  const bool weighted = pass.has_weights();
  for (uint32_t r = r0; r < r1; ++r) {
    const size_t R = size_t{mb.row_begin} + r;
    float* xr = x_.data() + size_t{r} * input_width_;
    const float* dense = pass.dense.data() + R * D;
    for (uint32_t j = 0; j < D; ++j) {
      xr[j] = options_.dense_log1p ? std::log1p(std::max(dense[j], 0.0f)) : dense[j];
    }
    float wide = 0.0f;
    for (uint32_t s = 0; s < S; ++s) {
      float* dst = xr + D + s * dim;
      std::memset(dst, 0, dim * sizeof(float));
      for (uint32_t p = pass.offsets[R * S + s]; p < pass.offsets[R * S + s + 1]; ++p) {
        const uint32_t l = ws.local[p];
        const float w = weighted ? pass.weights[p] : 1.0f;
        wide += w * rows.wide(l);
        if (!rows.has_emb(l)) continue;
        const float* e = rows.emb(l);
        for (uint32_t d = 0; d < dim; ++d) dst[d] += w * e[d];
      }
    }
    wide_sum_[r] = options_.wide ? wide : 0.0f;
  }
}

void CtrModel::ForwardBlock(uint32_t r0, uint32_t r1) {
  const uint32_t hidden = mlp_.num_layers() - 1;
  std::vector<float*> acts(hidden);
  for (uint32_t l = 0; l < hidden; ++l) acts[l] = acts_[l].data() + size_t{r0} * mlp_.out(l);
  mlp_.Forward(params_.data(), x_.data() + size_t{r0} * input_width_, static_cast<int>(r1 - r0),
               acts.data(), logits_.data() + r0);
  for (uint32_t r = r0; r < r1; ++r) logits_[r] += wide_sum_[r];
}

StepStats CtrModel::TrainMinibatch(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                   RowBlock* rows, const CtrAccessor& accessor, ThreadPool* pool,
                                   float* predictions) {
  const uint32_t B = mb.rows();
  EnsureBuffers(B);
  const uint32_t hidden = mlp_.num_layers() - 1, D = schema_.num_dense;
  const size_t blocks = (B + kRowBlock - 1) / kRowBlock;
  std::vector<double> block_loss(blocks, 0.0);

  // Phase A (row blocks): inputs, forward, loss gradient, backward to the inputs.
  RunParallel(pool, blocks, [&](size_t blk, int) {
    const uint32_t r0 = static_cast<uint32_t>(blk * kRowBlock), r1 = std::min(B, r0 + kRowBlock);
    BuildInputs(pass, ws, mb, *rows, r0, r1);
    ForwardBlock(r0, r1);
    double loss = 0;
    for (uint32_t r = r0; r < r1; ++r) {
      const float y = pass.labels[mb.row_begin + r];
      const float p = Sigmoid(logits_[r]);
      predictions[r] = p;
      loss += LogLoss(logits_[r], y);
      dlogit_[r] = (p - y) / static_cast<float>(B);
    }
    block_loss[blk] = loss;
    std::vector<const float*> acts(hidden);
    std::vector<float*> grads(hidden);
    for (uint32_t l = 0; l < hidden; ++l) {
      acts[l] = acts_[l].data() + size_t{r0} * mlp_.out(l);
      grads[l] = grads_hidden_[l].data() + size_t{r0} * mlp_.out(l);
    }
    const uint32_t emb_width = input_width_ - D;
    mlp_.Backward(params_.data(), acts.data(), dlogit_.data() + r0, static_cast<int>(r1 - r0),
                  grads.data(), dx_.data() + size_t{r0} * emb_width, D);
  });

  // Phase B: weight-gradient tiles with their dense updates, and sparse updates by key chunk.
  dense_opt_.BeginStep();
  const size_t chunks = (mb.uniq.size() + kSparseChunk - 1) / kSparseChunk;
  std::vector<uint32_t> created(chunks, 0);
  RunParallel(pool, tiles_.size() + chunks, [&](size_t task, int) {
    if (task < tiles_.size()) {
      DenseTile(task, B);
      return;
    }
    const size_t c = task - tiles_.size();
    UpdateSparseChunk(pass, ws, mb, c * kSparseChunk,
                      std::min(mb.uniq.size(), (c + 1) * kSparseChunk), rows, accessor,
                      &created[c]);
  });

  StepStats stats;
  for (double l : block_loss) stats.loss_sum += l;
  for (uint32_t c : created) stats.embeddings_created += c;
  return stats;
}

void CtrModel::DenseTile(size_t t, uint32_t batch_rows) {
  const Tile& tile = tiles_[t];
  const uint32_t l = tile.layer, last = mlp_.num_layers() - 1;
  const float* xin = l == 0 ? x_.data() : acts_[l - 1].data();
  const float* g = l == last ? dlogit_.data() : grads_hidden_[l].data();
  mlp_.TileGrad(l, tile.c0, tile.c1, xin, g, static_cast<int>(batch_rows), grads_.data());
  const uint32_t n_out = mlp_.out(l), width = tile.c1 - tile.c0;
  for (uint32_t i = 0; i < mlp_.in(l); ++i) {
    dense_opt_.Update(params_.data(), grads_.data(), mlp_.w_offset(l) + size_t{i} * n_out + tile.c0,
                      width);
  }
  dense_opt_.Update(params_.data(), grads_.data(), mlp_.b_offset(l) + tile.c0, width);
}

void CtrModel::UpdateSparseChunk(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                 size_t u0, size_t u1, RowBlock* rows, const CtrAccessor& accessor,
                                 uint32_t* created) {
  const uint32_t S = schema_.num_slots, dim = options_.embedding_dim;
  const bool weighted = pass.has_weights();
  std::vector<float> g(dim);
  for (size_t u = u0; u < u1; ++u) {
    const uint32_t l = mb.uniq[u];
    std::fill(g.begin(), g.end(), 0.0f);
    float g_wide = 0.0f, clicks = 0.0f;
    for (uint32_t q = mb.occ_begin[u]; q < mb.occ_begin[u + 1]; ++q) {
      const uint32_t p = mb.key_begin + mb.occ[q];
      const uint32_t cell = ws.cell[p], r = cell / S;
      const float w = weighted ? pass.weights[p] : 1.0f;
      const float* gx = dx_.data() + size_t{cell} * dim;
      for (uint32_t d = 0; d < dim; ++d) g[d] += w * gx[d];
      g_wide += w * dlogit_[r];
      clicks += pass.labels[mb.row_begin + r];
    }
    rows->show(l) += static_cast<float>(mb.occ_begin[u + 1] - mb.occ_begin[u]);
    rows->click(l) += clicks;
    rows->unseen(l) = 0;
    if (rows->has_emb(l)) {
      sparse_opt_.Update(rows->emb(l), rows->emb_state(l), g.data(), dim);
      // x <- Q(x + update): u drawn from (seed, key, step), independent of the threads.
      quant_.Round(rows->emb(l), dim, options_.quant.rounding, quant_seed_,
                   Mix64(rows->key(l)) + dense_opt_.step());
      // The state likewise, on another stream (a no-op unless state_bits is 16).
      sparse_opt_.RoundState(rows->emb_state(l), rows->layout().emb_state, quant_seed_ ^ kStateSalt,
                             Mix64(rows->key(l)) + dense_opt_.step());
    }
    if (options_.wide) sparse_opt_.Update(&rows->wide(l), rows->wide_state(l), &g_wide, 1);
    if (accessor.MaybeCreateEmbedding(rows, l)) ++*created;
  }
}

void CtrModel::Predict(const Batch& examples, const WorkingSet& ws, const Minibatch& mb,
                       const RowBlock& rows, ThreadPool* pool, float* predictions) {
  const uint32_t B = mb.rows();
  EnsureBuffers(B);
  const size_t blocks = (B + kRowBlock - 1) / kRowBlock;
  RunParallel(pool, blocks, [&](size_t blk, int) {
    const uint32_t r0 = static_cast<uint32_t>(blk * kRowBlock), r1 = std::min(B, r0 + kRowBlock);
    BuildInputs(examples, ws, mb, rows, r0, r1);
    ForwardBlock(r0, r1);
    for (uint32_t r = r0; r < r1; ++r) predictions[r] = Sigmoid(logits_[r]);
  });
}

}  // namespace ctrbox
