#include "working/hbm_plan.h"

#include <cassert>
#include <limits>

#include "working/hbm_table.h"

namespace ctrbox {

void BuildHbmPlan(const Batch& pass, const WorkingSet& ws, uint32_t gpus, HbmPlan* out) {
  assert(gpus >= 1);
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  const size_t n = ws.keys.size();
  const uint32_t S = pass.schema.num_slots;
  out->gpus = gpus;
  out->row_of.resize(n);
  out->locals.assign(gpus, {});
  for (uint32_t l = 0; l < n; ++l) {
    auto& mine = out->locals[OwnerOf(ws.keys[l], gpus)];
    out->row_of[l] = static_cast<uint32_t>(mine.size());
    mine.push_back(l);
  }
  out->slices.clear();
  out->fetch_pos.assign(pass.keys.size(), 0);
  out->uniq_local.clear();
  out->uniq_occ_begin.clear();
  out->uniq_occ.clear();
  out->touched.assign(gpus, {});
  out->touched_begin.assign(gpus, std::vector<uint32_t>{0});

  std::vector<uint32_t> seen(n, kNone), touched_in(n, kNone), pos(n);
  std::vector<uint32_t> first, counts, fill;
  for (size_t b = 0; b < ws.batches.size(); ++b) {
    const Minibatch& mb = ws.batches[b];
    const uint32_t B = mb.rows();
    for (uint32_t g = 0; g < gpus; ++g) {
      const uint32_t stamp = static_cast<uint32_t>(out->slices.size());
      HbmSlice s;
      s.row_begin = mb.row_begin + static_cast<uint32_t>(uint64_t{B} * g / gpus);
      s.row_end = mb.row_begin + static_cast<uint32_t>(uint64_t{B} * (g + 1) / gpus);
      s.occ_begin = pass.offsets[size_t{s.row_begin} * S];
      s.occ_end = pass.offsets[size_t{s.row_end} * S];
      s.uniq_begin = static_cast<uint32_t>(out->uniq_local.size());
      // The slice's distinct keys in first-occurrence order, with their occurrence counts.
      first.clear();
      counts.clear();
      for (uint32_t p = s.occ_begin; p < s.occ_end; ++p) {
        const uint32_t l = ws.local[p];
        if (seen[l] != stamp) {
          seen[l] = stamp;
          pos[l] = static_cast<uint32_t>(first.size());
          first.push_back(l);
          counts.push_back(0);
        }
        ++counts[pos[l]];
      }
      // Grouped by owner (stable): the segments the exchange sends.
      s.seg.assign(gpus + 1, 0);
      for (uint32_t l : first) ++s.seg[OwnerOf(ws.keys[l], gpus) + 1];
      for (uint32_t o = 0; o < gpus; ++o) s.seg[o + 1] += s.seg[o];
      fill.assign(s.seg.begin(), s.seg.end() - 1);
      out->uniq_local.resize(s.uniq_begin + first.size());
      const size_t occ_base = out->uniq_occ.size();
      const size_t off_base = out->uniq_occ_begin.size();
      out->uniq_occ_begin.resize(off_base + first.size() + 1);
      uint32_t* off = out->uniq_occ_begin.data() + off_base;
      for (size_t i = 0; i < first.size(); ++i) {
        const uint32_t l = first[i];
        const uint32_t u = fill[OwnerOf(ws.keys[l], gpus)]++;
        out->uniq_local[s.uniq_begin + u] = l;
        off[u + 1] = counts[i];
        pos[l] = u;
      }
      off[0] = static_cast<uint32_t>(occ_base);
      for (size_t u = 0; u < first.size(); ++u) off[u + 1] += off[u];
      // The occurrence lists, in occurrence order.
      out->uniq_occ.resize(occ_base + (s.occ_end - s.occ_begin));
      fill.assign(off, off + first.size());
      for (uint32_t p = s.occ_begin; p < s.occ_end; ++p) {
        const uint32_t u = pos[ws.local[p]];
        out->fetch_pos[p] = u;
        out->uniq_occ[fill[u]++] = p;
      }
      // The rows this minibatch updates on each owner.
      for (uint32_t u = 0; u < first.size(); ++u) {
        const uint32_t l = out->uniq_local[s.uniq_begin + u];
        if (touched_in[l] == b) continue;
        touched_in[l] = static_cast<uint32_t>(b);
        out->touched[OwnerOf(ws.keys[l], gpus)].push_back(out->row_of[l]);
      }
      out->slices.push_back(std::move(s));
    }
    for (uint32_t o = 0; o < gpus; ++o) {
      out->touched_begin[o].push_back(static_cast<uint32_t>(out->touched[o].size()));
    }
  }
}

}  // namespace ctrbox
