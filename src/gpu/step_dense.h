// GpuStep (gpu/step.h), the dense half of a minibatch: the slices' weight gradients summed
// over the GPUs (NCCL, or through GPU 0 in GPU order), then the same optimizer step on every
// replica. Included by gpu/step_impl.h only.
#ifndef CTRBOX_GPU_STEP_DENSE_H_
#define CTRBOX_GPU_STEP_DENSE_H_

#include "gpu/step.h"

namespace ctrbox {

template <class Exec>
void GpuStep<Exec>::AllReduceDense() {
  const uint32_t N = gpus_;
  if (N == 1) return;
  const size_t P = NumParams();
  std::vector<float*> ptrs(N);
  for (uint32_t g = 0; g < N; ++g) ptrs[g] = replicas_[g].grads.data();
  if (all_reduce_ != nullptr && all_reduce_(all_reduce_ctx_, ptrs, P)) return;
  // Through GPU 0, in GPU order: the same sum for every replica.
  Exec& e0 = *compute_[0];
  float* sum = replicas_[0].sum.data();
  for (uint32_t g = 1; g < N; ++g) {
    e0.Wait(compute_[g]->Record());
    e0.Copy(sum + g * P, ptrs[g], P);
  }
  float* g0 = ptrs[0];
  const uint32_t n = N;
  e0.ForEach(P, [=] CTRBOX_HD(size_t i) {
    float acc = g0[i];
    for (uint32_t g = 1; g < n; ++g) acc += sum[g * P + i];
    g0[i] = acc;
  });
  BroadcastDense();
}

// GPU 0's dense gradient to the other replicas.
template <class Exec>
void GpuStep<Exec>::BroadcastDense() {
  const auto done = compute_[0]->Record();
  const float* g0 = replicas_[0].grads.data();
  for (uint32_t g = 1; g < gpus_; ++g) {
    compute_[g]->Wait(done);
    compute_[g]->Copy(replicas_[g].grads.data(), g0, NumParams());
  }
}

// The optimizer's constants of the minibatch are read from the current arguments.
template <class Exec>
void GpuStep<Exec>::DenseUpdate(uint32_t g) {
  Replica& r = replicas_[g];
  const GpuMinibatchArgs* now = r.now.data();
  float *p = r.params.data(), *gr = r.grads.data();
  float* m = r.m.size() > 0 ? r.m.data() : nullptr;
  float* v = r.v.size() > 0 ? r.v.data() : nullptr;
  compute_[g]->ForEach(NumParams(), [=] CTRBOX_HD(size_t i) {
    now->step.Apply(p + i, gr[i], m == nullptr ? nullptr : m + i, v == nullptr ? nullptr : v + i);
  });
}

}  // namespace ctrbox

#endif  // CTRBOX_GPU_STEP_DENSE_H_
