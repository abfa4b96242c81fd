#include "gpu/hbm_plan.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include "gpu/hbm_index.h"

namespace ctrbox {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

// One minibatch's slices as planned alone: each slice's uniq list (local ids) and its
// occurrence-count offsets relative to the slice (from 0), and the rows each owner updates.
struct MinibatchPlan {
  std::vector<HbmSlice> slices;                // uniq_begin unset
  std::vector<std::vector<uint32_t>> uniq;     // [gpu]
  std::vector<std::vector<uint32_t>> offsets;  // [gpu]: uniq + 1, from 0
  std::vector<std::vector<uint32_t>> touched;  // [owner]
  std::vector<std::vector<uint32_t>> sources;  // [owner]: touched.size() * gpus (options.sources)
};

// Per thread: marks over the pass's local ids. seen/pos are stamped per slice (its global
// index), touched_in per minibatch, so a thread's marks never need clearing.
struct Scratch {
  std::vector<uint32_t> seen, touched_in, pos, touched_at;
  std::vector<uint32_t> first, counts, fill, starts;
  void Size(size_t n) {
    if (seen.size() >= n) return;
    seen.assign(n, kNone);
    touched_in.assign(n, kNone);
    pos.resize(n);
    touched_at.resize(n);
  }
};

// Plans minibatch b; writes the pass-indexed outputs (fetch_pos, uniq_occ: each occurrence's
// place is its own) straight into *out.
void PlanMinibatch(const Batch& pass, const WorkingSet& ws, uint32_t gpus, size_t b,
                   const HbmPlanOptions& options, Scratch* sc, MinibatchPlan* mp, HbmPlan* out) {
  const uint32_t S = pass.schema.num_slots;
  const Minibatch& mb = ws.batches[b];
  const uint32_t B = mb.rows();
  std::vector<uint32_t>& starts = sc->starts;
  if (options.cut) {
    options.cut(B, &starts);
    assert(starts.size() == gpus + 1 && starts[0] == 0 && starts[gpus] == B);
  } else {
    starts.resize(gpus + 1);
    for (uint32_t g = 0; g <= gpus; ++g) starts[g] = static_cast<uint32_t>(uint64_t{B} * g / gpus);
  }
  mp->slices.resize(gpus);
  mp->uniq.resize(gpus);
  mp->offsets.resize(gpus);
  mp->touched.assign(gpus, {});
  for (uint32_t g = 0; g < gpus; ++g) {
    const uint32_t stamp = static_cast<uint32_t>(b * gpus + g);
    HbmSlice& s = mp->slices[g];
    s.row_begin = mb.row_begin + starts[g];
    s.row_end = mb.row_begin + starts[g + 1];
    s.occ_begin = pass.offsets[size_t{s.row_begin} * S];
    s.occ_end = pass.offsets[size_t{s.row_end} * S];
    // The slice's distinct keys in first-occurrence order, with their occurrence counts.
    std::vector<uint32_t>& first = sc->first;
    std::vector<uint32_t>& counts = sc->counts;
    first.clear();
    counts.clear();
    for (uint32_t p = s.occ_begin; p < s.occ_end; ++p) {
      const uint32_t l = ws.local[p];
      if (sc->seen[l] != stamp) {
        sc->seen[l] = stamp;
        sc->pos[l] = static_cast<uint32_t>(first.size());
        first.push_back(l);
        counts.push_back(0);
      }
      ++counts[sc->pos[l]];
    }
    // Grouped by owner (stable): the segments the exchange sends.
    s.seg.assign(gpus + 1, 0);
    for (uint32_t l : first) ++s.seg[OwnerOf(ws.keys[l], gpus) + 1];
    for (uint32_t o = 0; o < gpus; ++o) s.seg[o + 1] += s.seg[o];
    std::vector<uint32_t>& fill = sc->fill;
    fill.assign(s.seg.begin(), s.seg.end() - 1);
    std::vector<uint32_t>& uniq = mp->uniq[g];
    std::vector<uint32_t>& off = mp->offsets[g];
    uniq.resize(first.size());
    off.assign(first.size() + 1, 0);
    for (size_t i = 0; i < first.size(); ++i) {
      const uint32_t l = first[i];
      const uint32_t u = fill[OwnerOf(ws.keys[l], gpus)]++;
      uniq[u] = l;
      off[u + 1] = counts[i];
      sc->pos[l] = u;
    }
    for (size_t u = 0; u < first.size(); ++u) off[u + 1] += off[u];
    // The occurrence lists, in occurrence order: slice s's list takes the pass's occurrence
    // range [occ_begin, occ_end) of uniq_occ (the slices tile the occurrences in order).
    fill.assign(off.begin(), off.end() - 1);
    for (uint32_t p = s.occ_begin; p < s.occ_end; ++p) {
      const uint32_t u = sc->pos[ws.local[p]];
      out->fetch_pos[p] = u;
      out->uniq_occ[s.occ_begin + fill[u]++] = p;
    }
    // The rows this minibatch updates on each owner.
    for (uint32_t u = 0; u < first.size(); ++u) {
      const uint32_t l = uniq[u];
      if (sc->touched_in[l] == b) continue;
      sc->touched_in[l] = static_cast<uint32_t>(b);
      std::vector<uint32_t>& t = mp->touched[OwnerOf(ws.keys[l], gpus)];
      sc->touched_at[l] = static_cast<uint32_t>(t.size());
      t.push_back(out->row_of[l]);
    }
  }
  if (!options.sources) return;
  // Each touched row's place in each GPU's segment of its owner (a slice's keys are distinct).
  mp->sources.resize(gpus);
  for (uint32_t o = 0; o < gpus; ++o) {
    mp->sources[o].assign(mp->touched[o].size() * gpus, HbmPlan::kNoSource);
  }
  for (uint32_t g = 0; g < gpus; ++g) {
    const HbmSlice& s = mp->slices[g];
    for (uint32_t o = 0; o < gpus; ++o) {
      for (uint32_t u = s.seg[o]; u < s.seg[o + 1]; ++u) {
        mp->sources[o][size_t{sc->touched_at[mp->uniq[g][u]]} * gpus + g] = u - s.seg[o];
      }
    }
  }
}

}  // namespace

void BuildHbmPlan(const Batch& pass, const WorkingSet& ws, uint32_t gpus, ThreadPool* pool,
                  HbmPlan* out, const HbmPlanOptions& options) {
  assert(gpus >= 1);
  const size_t n = ws.keys.size();
  out->gpus = gpus;
  // Owners' rows: local ids in ascending order per owner. In chunks: each chunk counts its
  // keys per owner, then writes them at its offsets.
  out->row_of.resize(n);
  out->locals.assign(gpus, {});
  constexpr size_t kChunk = 1 << 16;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint32_t> chunk_counts(chunks * gpus, 0);
  RunParallel(pool, chunks, [&](size_t c, int) {
    for (size_t l = c * kChunk; l < std::min(n, (c + 1) * kChunk); ++l) {
      ++chunk_counts[c * gpus + OwnerOf(ws.keys[l], gpus)];
    }
  });
  for (uint32_t o = 0; o < gpus; ++o) {
    uint32_t at = 0;
    for (size_t c = 0; c < chunks; ++c) {
      const uint32_t k = chunk_counts[c * gpus + o];
      chunk_counts[c * gpus + o] = at;
      at += k;
    }
    out->locals[o].resize(at);
  }
  RunParallel(pool, chunks, [&](size_t c, int) {
    for (size_t l = c * kChunk; l < std::min(n, (c + 1) * kChunk); ++l) {
      const uint32_t o = OwnerOf(ws.keys[l], gpus);
      const uint32_t row = chunk_counts[c * gpus + o]++;
      out->row_of[l] = row;
      out->locals[o][row] = static_cast<uint32_t>(l);
    }
  });
  // Minibatches in parallel, each planned alone; then the per-slice lists concatenated.
  const size_t batches = ws.batches.size();
  out->fetch_pos.assign(pass.keys.size(), 0);
  out->uniq_occ.resize(pass.keys.size());
  std::vector<MinibatchPlan> plans(batches);
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  std::vector<Scratch> scratch(threads);
  RunParallel(pool, batches, [&](size_t b, int t) {
    scratch[t].Size(n);
    PlanMinibatch(pass, ws, gpus, b, options, &scratch[t], &plans[b], out);
  });
  out->slices.resize(batches * gpus);
  std::vector<uint32_t> slice_uniq(batches * gpus + 1, 0);  // prefix of the uniq counts
  out->touched.assign(gpus, {});
  out->touched_begin.assign(gpus, std::vector<uint32_t>(batches + 1, 0));
  for (size_t b = 0; b < batches; ++b) {
    for (uint32_t g = 0; g < gpus; ++g) {
      const size_t si = b * gpus + g;
      slice_uniq[si + 1] = slice_uniq[si] + static_cast<uint32_t>(plans[b].uniq[g].size());
      out->touched_begin[g][b + 1] =
          out->touched_begin[g][b] + static_cast<uint32_t>(plans[b].touched[g].size());
    }
  }
  out->uniq_local.resize(slice_uniq.back());
  out->uniq_occ_begin.resize(slice_uniq.back() + batches * gpus);
  for (uint32_t o = 0; o < gpus; ++o) out->touched[o].resize(out->touched_begin[o][batches]);
  out->touched_src.assign(options.sources ? gpus : 0, {});
  for (uint32_t o = 0; o < out->touched_src.size(); ++o) {
    out->touched_src[o].resize(size_t{out->touched_begin[o][batches]} * gpus);
  }
  RunParallel(pool, batches, [&](size_t b, int) {
    MinibatchPlan& mp = plans[b];
    for (uint32_t g = 0; g < gpus; ++g) {
      const size_t si = b * gpus + g;
      HbmSlice& s = mp.slices[g];
      s.uniq_begin = slice_uniq[si];
      std::copy(mp.uniq[g].begin(), mp.uniq[g].end(), out->uniq_local.begin() + s.uniq_begin);
      // Slice si's offsets sit at uniq_begin + si (one closing entry per slice before it),
      // as absolute indices into uniq_occ.
      uint32_t* off = out->uniq_occ_begin.data() + s.uniq_begin + si;
      for (size_t u = 0; u < mp.offsets[g].size(); ++u) off[u] = s.occ_begin + mp.offsets[g][u];
      out->slices[si] = std::move(s);
      std::copy(mp.touched[g].begin(), mp.touched[g].end(),
                out->touched[g].begin() + out->touched_begin[g][b]);
      if (options.sources) {
        std::copy(mp.sources[g].begin(), mp.sources[g].end(),
                  out->touched_src[g].begin() + size_t{out->touched_begin[g][b]} * gpus);
      }
    }
  });
}

}  // namespace ctrbox
