// GpuStep (gpu/step.h), the sparse half of a minibatch: each slice's per-key gradient
// records (embedding gradient, wide gradient, shows, clicks of its distinct keys), and each
// owner's update of the rows the minibatch touched. Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_SPARSE_H_
#define CTRBOX_GPU_STEP_SPARSE_H_

#include "gpu/step.h"

namespace ctrbox {

// One key occurrence's gradient record in a slice: the slot's columns of dx (the key's
// table's dimension; beyond it zero), the wide gradient, a show, a click. Device pointers;
// the slice's place in the pass (cell_shift, row0) is read from the current arguments.
struct OccurrenceRecord {
  const uint32_t* cells;
  const GpuMinibatchArgs* now;
  uint32_t S;
  const float* weights;
  bool weighted;
  uint32_t rd, dim;
  bool multi;
  const uint32_t *slot_dim, *slot_col;
  const float* dx;
  uint32_t E;
  const float *dlogit, *labels;

  CTRBOX_HD float operator()(uint32_t p, uint32_t j) const {
    const uint32_t cell = cells[p] - now->cell_shift, r = cell / S, slot = cell % S;
    const float w = weighted ? weights[p] : 1.0f;
    if (j < rd) {
      const uint32_t sd = multi ? slot_dim[slot] : dim;
      if (j >= sd) return 0.0f;
      return w * dx[size_t{r} * E + (multi ? slot_col[slot] : slot * dim) + j];
    }
    if (j == rd) return w * dlogit[r];
    if (j == rd + 1) return 1.0f;
    return labels[now->row0 + r];
  }
};

// The slice's distinct keys' gradient records into its feed's grad buffer (uniq order; with
// canonical sums one per node of the rank's share: key u's node n at u * nodes + n), by
// gpu.scatter: `segment` writes every occurrence's record (its key's occurrence-list order)
// and sums each key's in that order (Exec::SegmentSums: the CPU model's order in the host
// emulation); `atomic` adds every occurrence's record into its key's with atomics.
// The slice's counts (distinct keys, occurrences) are read from the current arguments; the
// kernels span the pass's largest slice (GpuPassExtents).
template <class Exec>
void GpuStep<Exec>::KeyGradients(Staged& s, const Batch& pass, const SliceRun& run) {
  const uint32_t gs = GradStride();
  const uint32_t max_uniq = s.extents.uniq, max_occ = s.extents.occ;
  if (run.B == 0 || max_uniq == 0) return;
  Exec& e = *compute_[run.g];
  Replica& rep = replicas_[run.g];
  Feed& f = s.feeds[run.g];
  const ModelOptions& mo = model_->options();
  const uint32_t S = pass.schema.num_slots, dim = mo.embedding_dim, rd = RowDim();
  const uint32_t E = model_->emb_width();
  const GpuMinibatchArgs* now = rep.now.data();
  const uint32_t *slot_col = rep.slot_col.data(), *slot_dim = rep.slot_dim.data();
  const bool multi = mo.MultiTable(), weighted = pass.has_weights();
  const float *dx = run.dx != nullptr ? run.dx : rep.dx.data(),
              *dlogit = run.dlogit != nullptr ? run.dlogit : rep.dlogit.data(),
              *labels = f.labels.data(), *weights = f.weights.data();
  const uint32_t *cells = f.cell.data(), *fetch_pos = f.fetch_pos.data();
  const OccurrenceRecord record{cells, now,      S,        weights, weighted, rd,     dim,
                                multi, slot_dim, slot_col, dx,      E,        dlogit, labels};
  float* grad = f.grad.data();
  if (options_.scatter == ScatterMode::kSegment) {
    const uint32_t* uniq_occ = f.uniq_occ.data();
    float* vals = rep.occ_grads.data();  // column-major: record column j of occurrence q at
                                         // j * n_occ + q
    e.ForEach(size_t{max_occ} * gs, [=] CTRBOX_HD(size_t i) {
      const uint32_t n_occ = now->n_occ;
      if (i >= size_t{n_occ} * gs) return;
      vals[i] = record(uniq_occ[now->occ_first + i % n_occ], static_cast<uint32_t>(i / n_occ));
    });
    if (Canonical()) {  // per key: its blocks' sums added up the tree, a record per node
      CanonicalKeySums(s, pass, run);
    } else {
      e.SegmentSums(vals, &now->seg, f.uniq_occ_begin.data(), max_uniq, gs, grad);
    }
  } else {
    e.Fill(grad, 0.0f, size_t{max_uniq} * gs);
    e.ForEach(size_t{max_occ} * gs, [=] CTRBOX_HD(size_t i) {
      if (i >= size_t{now->occ_n} * gs) return;
      const uint32_t p = now->occ0 + static_cast<uint32_t>(i / gs);
      const uint32_t j = static_cast<uint32_t>(i % gs);
      if (j < rd) {
        const uint32_t slot = (cells[p] - now->cell_shift) % S;
        if (j >= (multi ? slot_dim[slot] : dim)) return;  // beyond the key's table: zero
      }
      AtomicAddFloat(grad + size_t{fetch_pos[p]} * gs + j, record(p, j));
    });
  }
}

// Owner o, after SumGradients: one update per row minibatch b touched: counters, optimizer,
// quantization, creation. The records are read from the owner's accumulators (by row), or
// from in_touched_order (by touched row): one GPU's own feed, whose uniq order is the touched
// order (the same values: a sum that starts at +0 is never -0, so 0 + record is the record),
// or the owner's canonical sums (CanonicalOwnerSums).
// The rows touched (first, count) and the optimizer's step are read from the current
// arguments; the kernel spans the owner's most touched minibatch of the pass.
template <class Exec>
void GpuStep<Exec>::UpdateRows(Staged& s, uint32_t o, const float* in_touched_order) {
  Exec& e = *compute_[o];
  Part& part = s.parts[o];
  const uint32_t gs = GradStride();
  const GpuMinibatchArgs* now = replicas_[o].now.data();
  const uint32_t* touched = part.touched.data();
  const bool by_touched = in_touched_order != nullptr;
  const float* acc = by_touched ? in_touched_order : part.acc.data();
  const SparseOptimizer opt = model_->sparse_optimizer();
  const CtrAccessor accessor = accessor_;
  const QuantRounding rounding = model_->options().quant.rounding;
  const Quantizer quant(model_->options().quant.bits, model_->options().quant.range);
  const uint64_t quant_seed = model_->quant_seed();
  const bool wide_on = model_->options().wide;
  const uint32_t rd = RowDim();
  const ValueLayout L = accessor_.layout();
  const uint32_t es = L.emb_state, ws = L.wide_state;
  DeviceRows& R = part.rows;
  float *show = R.show.data(), *click = R.click.data(), *wide = R.wide.data(),
        *wide_state = R.wide_state.data(), *emb = R.emb.data(), *emb_state = R.emb_state.data();
  uint16_t *unseen = R.unseen.data(), *flags = R.flags.data();
  const uint64_t* keys = part.keys.data();
  uint32_t* created = part.created.data();
  e.ForEach(s.extents.touched[o], [=] CTRBOX_HD(size_t i) {
    if (i >= now->nt) return;
    const uint64_t t = now->t;
    const size_t r = touched[now->t0 + i];
    const float* g = acc + (by_touched ? i : r) * gs;
    show[r] += g[rd + 1];
    click[r] += g[rd + 2];
    unseen[r] = 0;
    if (flags[r] & kFlagHasEmb) {
      // The key's table's dimension and state (model.slot_dims; else the row's).
      const uint32_t dim = L.DimOf(keys[r]);
      opt.Update(emb + r * rd, emb_state + r * es, g, dim);
      quant.Round(emb + r * rd, dim, rounding, quant_seed, Mix64(keys[r]) + t);
      opt.RoundState(emb_state + r * es, L.StateOf(keys[r]), quant_seed ^ CtrModel::kStateSalt,
                     Mix64(keys[r]) + t);
    }
    if (wide_on) opt.Update(wide + r, wide_state + r * ws, g + rd, 1);
    if (accessor.MaybeCreateEmbedding(keys[r], show[r], click[r], flags + r, emb + r * rd,
                                      emb_state + r * es)) {
      AtomicAddU32(created, 1);
    }
  });
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_SPARSE_H_
