// CtrModel (model/ctr_model.h): a minibatch's inputs, forward and backward by row blocks,
// and the dense weights' gradients and updates by column tiles.
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "exec/exec.h"
#include "model/ctr_model.h"
#include "model/ctr_model_internal.h"
#include "util/blas.h"
#include "util/hash.h"
#include "util/pairwise_sum.h"
#include "util/random.h"

namespace ctrbox {

using model_internal::LogLoss;
using model_internal::Sigmoid;

void CtrModel::BuildInputs(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                           const RowBlock& rows, uint32_t r0, uint32_t r1, uint32_t at) {
  const uint32_t D = schema_.num_dense, S = schema_.num_slots;
  const bool weighted = pass.has_weights();
  for (uint32_t r = r0; r < r1; ++r) {
    const size_t R = size_t{mb.row_begin} + r;
    float* xr = x_.data() + size_t{at + r} * input_width_;
    const float* dense = pass.dense.data() + R * D;
    // The dense features into the input, or into the bottom MLP's (which writes z there).
    float* fx = bottom_.num_layers() > 0 ? bottom_in_.data() + size_t{at + r} * D : xr;
    for (uint32_t j = 0; j < D; ++j) {
      fx[j] = options_.dense_log1p ? std::log1p(std::max(dense[j], 0.0f)) : dense[j];
    }
    float wide = 0.0f;
    for (uint32_t s = 0; s < S; ++s) {
      const uint32_t dim = slot_dim_[s];  // the slot's table's (model.slot_dims)
      float* dst = xr + dense_width_ + slot_col_[s];
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
    wide_sum_[at + r] = options_.wide ? wide : 0.0f;
  }
}

void CtrModel::ForwardBlock(uint32_t r0, uint32_t r1) {
  const uint32_t hidden = towers_.on() ? 0 : mlp_.num_layers() - 1;
  std::vector<float*> acts(hidden);
  for (uint32_t l = 0; l < hidden; ++l) acts[l] = acts_[l].data() + size_t{r0} * mlp_.out(l);
  if (bottom_.num_layers() > 0) BottomForward(r0, r1);
  if (cross_.layers > 0 || mix_.layers > 0 || options_.dot) InteractionsForward(r0, r1);
  if (towers_.on()) {
    HostExec e;  // this thread, as every row block's work
    TowersForward(e, towers_, params_.data(), TowerBlock(r0), r1 - r0, logits_.data() + r0);
  } else {
    mlp_.Forward(params_.data(), MlpInput() + size_t{r0} * mlp_.in(0), static_cast<int>(r1 - r0),
                 acts.data(), logits_.data() + r0);
  }
  for (uint32_t r = r0; r < r1; ++r) logits_[r] += wide_sum_[r];
  if (options_.fm) {
    const uint32_t S = schema_.num_slots, dim = options_.embedding_dim;
    for (uint32_t r = r0; r < r1; ++r) {
      logits_[r] += FmTerm(x_.data() + size_t{r} * input_width_ + dense_width_, S, dim);
    }
  }
}

StepStats CtrModel::TrainMinibatch(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                   RowBlock* rows, const CtrAccessor& accessor, ThreadPool* pool,
                                   float* predictions) {
  const uint32_t B = mb.rows();
  assert(sum_nodes_.size() == 1);  // (one process: the whole batch)
  StepStats stats;
  stats.loss_sum = ForwardBackward(pass, ws, mb, *rows, pool, predictions, B);

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

  for (uint32_t c : created) stats.embeddings_created += c;
  return stats;
}

double CtrModel::ForwardBackward(const Batch& pass, const WorkingSet& ws, const Minibatch& mb,
                                 const RowBlock& rows, ThreadPool* pool, float* predictions,
                                 uint32_t loss_rows) {
  const uint32_t B = mb.rows();
  EnsureBuffers(std::max(B, 1u));
  const uint32_t hidden = towers_.on() ? 0 : mlp_.num_layers() - 1, D = schema_.num_dense;
  RowBlocks(B, &step_blocks_, &step_leaves_);  // (the tiles' sums read them too)
  if (sum_order_.canonical) MarkNodeRows();
  const std::vector<uint32_t>& bounds = step_blocks_;
  const size_t blocks = bounds.size() - 1;
  std::vector<double> block_loss(blocks, 0.0);

  // Phase A (row blocks): inputs, forward, loss gradient, backward to the inputs.
  RunParallel(pool, blocks, [&](size_t blk, int) {
    const uint32_t r0 = bounds[blk], r1 = bounds[blk + 1];
    BuildInputs(pass, ws, mb, rows, r0, r1);
    ForwardBlock(r0, r1);
    double loss = 0;
    for (uint32_t r = r0; r < r1; ++r) {
      const float y = pass.labels[mb.row_begin + r];
      const float p = Sigmoid(logits_[r]);
      predictions[r] = p;
      loss += LogLoss(logits_[r], y);
      dlogit_[r] = (p - y) / static_cast<float>(loss_rows);
    }
    block_loss[blk] = loss;
    if (towers_.on()) {
      // Into the embedding columns (dx_), or with interactions the MLP input's from dmi_begin_.
      HostExec e;
      const bool inter = options_.HasInteractions();
      const uint32_t begin = inter ? dmi_begin_ : D;
      float* dbase = inter ? dmi_.data() + size_t{r0} * (mlp_.in(0) - dmi_begin_)
                           : dx_.data() + size_t{r0} * (input_width_ - D);
      TowersBackward(e, towers_, params_.data(), TowerBlock(r0), r1 - r0, dlogit_.data() + r0,
                     dbase, begin);
      if (!inter) return;
      InteractionsBackward(r0, r1);
      if (bottom_.num_layers() > 0) BottomBackward(r0, r1);
      return;
    }
    std::vector<const float*> acts(hidden);
    std::vector<float*> grads(hidden);
    for (uint32_t l = 0; l < hidden; ++l) {
      acts[l] = acts_[l].data() + size_t{r0} * mlp_.out(l);
      grads[l] = grads_hidden_[l].data() + size_t{r0} * mlp_.out(l);
    }
    if (!options_.HasInteractions()) {
      const uint32_t emb_width = input_width_ - D;
      mlp_.Backward(params_.data(), acts.data(), dlogit_.data() + r0, static_cast<int>(r1 - r0),
                    grads.data(), dx_.data() + size_t{r0} * emb_width, D);
      return;
    }
    const uint32_t mw = mlp_.in(0) - dmi_begin_;
    mlp_.Backward(params_.data(), acts.data(), dlogit_.data() + r0, static_cast<int>(r1 - r0),
                  grads.data(), dmi_.data() + size_t{r0} * mw, dmi_begin_);
    InteractionsBackward(r0, r1);
    if (bottom_.num_layers() > 0) BottomBackward(r0, r1);
  });

  double loss = 0;
  for (double l : block_loss) loss += l;
  return loss;
}

void CtrModel::DenseTile(size_t t, uint32_t batch_rows) {
  DenseTileGrad(t, batch_rows);
  DenseTileUpdate(t);
}

void CtrModel::DenseTileGrad(size_t t, uint32_t batch_rows) {
  if (!sum_order_.canonical) {
    DenseTileRows(t, 0, batch_rows, grads_.data());
    return;
  }
  // By sum blocks (the step's, cut by ForwardBackward), added up the pairwise tree, one tree
  // per node of this rank's share: slot 0 is the node's gradient itself. The pending sums'
  // slots (sum_slots_) hold zeros outside a tree: a merge zeroes the slot it adds, so that a
  // block's GEMMs add into zeros and need no pass that zeroes their output.
  const std::vector<uint32_t>& blocks = step_blocks_;
  const std::vector<uint32_t>& leaf = step_leaves_;
  assert(blocks.back() == batch_rows);
  size_t i = 0;  // the next block
  for (size_t node = 0; node < sum_nodes_.size(); ++node) {
    float* out = node_grads(node).data();
    auto slot = [&](int s) { return s == 0 ? out : sum_slots_[s - 1].data(); };
    auto merge = [&](int into, int from) {  // (from > into >= 0: a pending sum's slot)
      float* a = slot(into);
      float* b = slot(from);
      ForTileRanges(t, [&](size_t at, size_t n) {
        for (size_t k = at; k < at + n; ++k) {
          a[k] += b[k];
          b[k] = 0.0f;
        }
      });
    };
    PairwiseStack stack;
    for (; i + 1 < blocks.size() && (node + 1 == sum_nodes_.size() || leaf[i] < node_end_[node]);
         ++i) {
      const int s = stack.Push(leaf[i], merge);
      DenseTileRows(t, blocks[i], blocks[i + 1], slot(s), /*into_zeros=*/s != 0);
    }
    if (stack.empty()) {  // no rows: a zero gradient
      ForTileRanges(t, [&](size_t at, size_t n) { std::fill(out + at, out + at + n, 0.0f); });
    }
    stack.Finish(merge);
  }
}

void CtrModel::DenseTileRows(size_t t, uint32_t r0, uint32_t r1, float* out, bool into_zeros) {
  const Tile& tile = tiles_[t];
  const uint32_t l = tile.layer, c0 = tile.c0, c1 = tile.c1, width = c1 - c0;
  const uint32_t batch_rows = r1 - r0;
  const int B = static_cast<int>(batch_rows);
  const size_t r = r0;                          // every row-major buffer from row r0
  const float beta = into_zeros ? 1.0f : 0.0f;  // (the cross layers' GEMMs)
  switch (tile.kind) {
    case TileKind::kMlp: {
      const uint32_t last = mlp_.num_layers() - 1;
      const float* xin = (l == 0 ? MlpInput() : acts_[l - 1].data()) + r * mlp_.in(l);
      const float* g = (l == last ? dlogit_.data() : grads_hidden_[l].data()) + r * mlp_.out(l);
      mlp_.TileGrad(l, c0, c1, xin, g, B, out, into_zeros);
      return;
    }
    case TileKind::kTower: {
      const uint32_t t = tile.tower;
      const Mlp& m = towers_.tower(t);
      const float* xin = (l == 0 ? tw_tin_[t].data() : tw_acts_[t][l - 1].data()) + r * m.in(l);
      m.TileGrad(l, c0, c1, xin, tw_grads_[t][l].data() + r * m.out(l), B, out + towers_.base(t),
                 into_zeros);
      return;
    }
    case TileKind::kTowerOut: {  // dw_t = hL_t^T dlogit, db = the sum of dlogit in row order
      for (uint32_t t = 0; t < towers_.count(); ++t) {
        const uint32_t last = towers_.last(t);
        blas::Sgemm(true, false, static_cast<int>(last), 1, B, 1.0f,
                    tw_acts_[t][towers_.layers(t) - 1].data() + r * last, static_cast<int>(last),
                    dlogit_.data() + r, 1, 0.0f, out + towers_.out_w() + towers_.out_begin(t), 1);
      }
      float db = 0.0f;
      for (uint32_t i = r0; i < r1; ++i) db += dlogit_[i];
      out[towers_.out_b()] = db;
      return;
    }
    case TileKind::kMixExpert: {
      HostExec e;
      MixExpertGrads(e, mix_, MixBlock(r0), batch_rows, l, tile.tower, out);
      return;
    }
    case TileKind::kMixLayer: {
      HostExec e;
      MixLayerGrads(e, mix_, MixBlock(r0), batch_rows, l, out);
      return;
    }
    case TileKind::kBottom: {
      const float* xin =
          (l == 0 ? bottom_in_.data() : bottom_acts_[l - 1].data()) + r * bottom_.in(l);
      bottom_.TileGrad(l, c0, c1, xin, bottom_grads_[l].data() + r * bottom_.out(l), B,
                       out + bottom_base_, into_zeros);
      return;
    }
    case TileKind::kCross: {
      // dW_l = x_l^T gu_l (full rank) or dU_l = (x_l V_l)^T gu_l, db_l = column sums of gu_l.
      const uint32_t W0 = cross_.width, R = cross_.rank;
      const float* gu = cross_gu_[l].data() + r * W0;
      const uint32_t k = R > 0 ? R : W0;  // the matrix's rows
      const float* in = (R > 0 ? cross_low_[l].data() : CrossInput(l)) + r * k;
      const size_t w = R > 0 ? cross_.u_offset(l) : cross_.w_offset(l);
      blas::Sgemm(true, false, k, width, B, 1.0f, in, k, gu + c0, W0, beta, out + w + c0, W0);
      float* db = out + cross_.b_offset(l) + c0;
      std::memset(db, 0, width * sizeof(float));
      for (uint32_t i = 0; i < batch_rows; ++i) {
        const float* gr = gu + size_t{i} * W0 + c0;
        for (uint32_t j = 0; j < width; ++j) db[j] += gr[j];
      }
      return;
    }
    case TileKind::kCrossV: {  // dV_l = x_l^T (gu_l U_l^T): columns [c0, c1) of r
      const uint32_t W0 = cross_.width, R = cross_.rank;
      blas::Sgemm(true, false, W0, width, B, 1.0f, CrossInput(l) + r * W0, W0,
                  cross_glow_[l].data() + r * R + c0, R, beta, out + cross_.w_offset(l) + c0, R);
      return;
    }
  }
}

// The parameter ranges of a tile: `rows` rows of columns [c0, c1) of the matrix at `matrix`
// (row stride ld), then the bias's columns unless kNoBias.
namespace {
void MatrixRanges(size_t matrix, uint32_t rows, uint32_t ld, size_t bias, uint32_t c0, uint32_t c1,
                  const std::function<void(size_t, size_t)>& fn) {
  for (uint32_t i = 0; i < rows; ++i) fn(matrix + size_t{i} * ld + c0, c1 - c0);
  if (bias != ~size_t{0}) fn(bias + c0, c1 - c0);
}
}  // namespace

void CtrModel::ForTileRanges(size_t t, const std::function<void(size_t, size_t)>& fn) const {
  const Tile& tile = tiles_[t];
  const uint32_t l = tile.layer, c0 = tile.c0, c1 = tile.c1;
  switch (tile.kind) {
    case TileKind::kMlp:
      MatrixRanges(mlp_.w_offset(l), mlp_.in(l), mlp_.out(l), mlp_.b_offset(l), c0, c1, fn);
      return;
    case TileKind::kBottom:
      MatrixRanges(bottom_base_ + bottom_.w_offset(l), bottom_.in(l), bottom_.out(l),
                   bottom_base_ + bottom_.b_offset(l), c0, c1, fn);
      return;
    case TileKind::kTower: {
      const Mlp& m = towers_.tower(tile.tower);
      const size_t base = towers_.base(tile.tower);
      MatrixRanges(base + m.w_offset(l), m.in(l), m.out(l), base + m.b_offset(l), c0, c1, fn);
      return;
    }
    case TileKind::kTowerOut:
      MatrixRanges(towers_.out_w(), towers_.out_width(), 1, towers_.out_b(), 0, 1, fn);
      return;
    case TileKind::kMixExpert:
      fn(mix_.v_offset(l, tile.tower), mix_.expert_params());
      return;
    case TileKind::kMixLayer:
      fn(mix_.g_offset(l), size_t{mix_.width} * (mix_.experts + 1));
      return;
    case TileKind::kCross: {
      const uint32_t R = cross_.rank;
      MatrixRanges(R > 0 ? cross_.u_offset(l) : cross_.w_offset(l), R > 0 ? R : cross_.width,
                   cross_.width, cross_.b_offset(l), c0, c1, fn);
      return;
    }
    case TileKind::kCrossV:
      MatrixRanges(cross_.w_offset(l), cross_.width, cross_.rank, kNoBias, c0, c1, fn);
      return;
  }
}

void CtrModel::DenseTileUpdate(size_t t) {
  ForTileRanges(
      t, [&](size_t at, size_t n) { dense_opt_.Update(params_.data(), grads_.data(), at, n); });
}

}  // namespace ctrbox
