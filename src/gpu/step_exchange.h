// GpuStep (gpu/step.h), the exchange between owners and asking GPUs: rows out to the GPUs
// whose slices use them, gradients back to their owners. Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_EXCHANGE_H_
#define CTRBOX_GPU_STEP_EXCHANGE_H_

#include "gpu/step.h"

namespace ctrbox {

// Step 1 of minibatch b: owners gather the rows each GPU asked for; the exchange copies them
// over. With one GPU the owner gathers straight into its own fetch buffer.
template <class Exec>
void GpuStep<Exec>::ExchangeRows(Staged& s, size_t b) {
  const HbmPlan& plan = s.plan;
  const uint32_t N = gpus_;
  for (uint32_t o = 0; o < N; ++o) GatherRows(s, o);
  if (N == 1) return;
  std::vector<Event> gathered(N);
  for (uint32_t o = 0; o < N; ++o) gathered[o] = compute_[o]->Record();
  for (uint32_t g = 0; g < N; ++g) {
    Exec& e = *compute_[g];
    const HbmSlice& sl = plan.slice(b, g);
    for (uint32_t o = 0; o < N; ++o) {
      // Always waited for, also with nothing to copy: o's queue then is past its reads of
      // this GPU's buffers from the minibatch before.
      if (o != g) e.Wait(gathered[o]);
      const uint32_t n = sl.seg[o + 1] - sl.seg[o];
      if (n == 0) continue;
      const Part& part = s.parts[o];
      const size_t from = part.recv_base[b * N + g] - part.recv_base[b * N];
      e.Copy(s.feeds[g].fetch.data() + size_t{sl.seg[o]} * FetchStride(),
             part.send.data() + from * FetchStride(), size_t{n} * FetchStride());
    }
  }
}

// Owner o's rows asked for in the current minibatch (embedding, wide, has-embedding flag), in
// the order of the asking GPUs' segments (first and count read from the current arguments).
template <class Exec>
void GpuStep<Exec>::GatherRows(Staged& s, uint32_t o) {
  Exec& e = *compute_[o];
  Part& part = s.parts[o];
  const uint32_t N = gpus_;
  const GpuMinibatchArgs* now = replicas_[o].now.data();
  const uint32_t* recv_rows = part.recv_rows.data();
  const uint32_t dim = RowDim(), stride = FetchStride();
  const float *emb = part.rows.emb.data(), *wide = part.rows.wide.data();
  const uint16_t* flags = part.rows.flags.data();
  // One GPU asks for its slice's keys in its uniq order: they go to its fetch buffer as such.
  float* out = N == 1 ? s.feeds[0].fetch.data() : part.send.data();
  e.ForEach(size_t{s.extents.recv[o]} * stride, [=] CTRBOX_HD(size_t i) {
    const size_t k = i / stride, j = i % stride;
    if (k >= now->gather_n) return;
    const size_t r = recv_rows[now->gather_first + k];
    float v;
    if (j < dim) {
      v = emb[r * dim + j];
    } else if (j == dim) {
      v = wide[r];
    } else {
      v = (flags[r] & kFlagHasEmb) ? 1.0f : 0.0f;
    }
    out[i] = v;
  });
}

// An event on every GPU's compute queue, recorded now.
template <class Exec>
std::vector<typename GpuStep<Exec>::Event> GpuStep<Exec>::RecordAll() {
  std::vector<Event> events(gpus_);
  for (uint32_t g = 0; g < gpus_; ++g) events[g] = compute_[g]->Record();
  return events;
}

// Owner o, step 4 of minibatch b: the GPUs' gradients copied over (the reverse exchange,
// after each GPU's `reduced` event, recorded past its backward), then summed per touched
// row into acc in GPU order (or with atomics).
template <class Exec>
void GpuStep<Exec>::SumGradients(Staged& s, size_t b, uint32_t o,
                                 const std::vector<Event>& reduced) {
  const HbmPlan& plan = s.plan;
  const uint32_t N = gpus_;
  Exec& e = *compute_[o];
  Part& part = s.parts[o];
  for (uint32_t g = 0; g < N; ++g) {
    if (g != o) e.Wait(reduced[g]);
    const HbmSlice& sl = plan.slice(b, g);
    const uint32_t n = sl.seg[o + 1] - sl.seg[o];
    if (n == 0) continue;
    const size_t to = part.recv_base[b * N + g] - part.recv_base[b * N];
    e.Copy(part.recv_grad.data() + to * GradStride(),
           s.feeds[g].grad.data() + size_t{sl.seg[o]} * GradStride(), size_t{n} * GradStride());
  }
  const uint32_t gs = GradStride();
  const uint32_t t0 = plan.touched_begin[o][b], nt = plan.touched_begin[o][b + 1] - t0;
  if (nt == 0) return;
  const uint32_t* touched = part.touched.data() + t0;
  float* acc = part.acc.data();
  e.ForEach(size_t{nt} * gs,
            [=] CTRBOX_HD(size_t i) { acc[size_t{touched[i / gs]} * gs + i % gs] = 0.0f; });
  const uint32_t base = part.recv_base[b * N];
  const uint32_t* rows = part.recv_rows.data();
  const float* in = part.recv_grad.data();
  if (options_.scatter == ScatterMode::kSegment) {
    for (uint32_t g = 0; g < N; ++g) {  // a GPU's keys are distinct: no two threads meet
      const uint32_t from = part.recv_base[b * N + g], n = part.recv_base[b * N + g + 1] - from;
      e.ForEach(size_t{n} * gs, [=] CTRBOX_HD(size_t i) {
        const size_t k = from + i / gs, j = i % gs;
        acc[size_t{rows[k]} * gs + j] += in[(k - base) * gs + j];
      });
    }
  } else {
    const uint32_t n = part.recv_base[(b + 1) * N] - base;
    const HbmIndex idx = part.index;
    const uint64_t* keys = part.recv_keys.data();
    e.ForEach(
        n, [=] CTRBOX_HD(size_t k) { idx.Accumulate(keys[base + k], in + k * gs, gs, acc, gs); });
  }
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_EXCHANGE_H_
