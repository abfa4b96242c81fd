// HostExec: the host emulation of one GPU for the GPU backend's step (model/gpu_step.h).
//
// GpuStep is written once against an executor; an executor is one GPU's stream and memory:
//
//   Buffer<T>                   memory of that GPU (data(), size())
//   Event, Record(), Wait(e)    ordering between two executors' queues
//   Reserve(&buf, n)            buf holds >= n elements (contents unspecified)
//   Upload(&buf, src, n)        Reserve, then copy n host elements in (src reusable at return)
//   Download(dst, src, n)       copy n elements out to the host; returns when they are there
//   Copy(dst, src, n)           within this GPU's queue; src may be a peer GPU's memory
//   Fill(p, value, n)
//   ForEach(n, f)               f(i) for every i in [0, n), concurrently, in any order
//   Gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc)    row-major C = op(A) op(B)
//   Recycle()                   waits for the queued uploads, then reuses their staging memory
//   status()                    the first error of any call (sticky)
//
// The CUDA executor (CudaExec in model/cuda_backend.cu) queues every call on a stream and
// runs f in a kernel; HostExec runs each call at once on the calling thread or a pool, so the
// step's logic — lookups, pooling, the exchange, the sparse and dense updates — is tested on
// machines without a GPU, against the CPU model (model/gpu_trainer_test.cc).
#ifndef CTRBOX_MODEL_HOST_EXEC_H_
#define CTRBOX_MODEL_HOST_EXEC_H_

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/blas.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace ctrbox {

class HostExec {
 public:
  template <class T>
  class Buffer {
   public:
    T* data() { return v_.data(); }
    const T* data() const { return v_.data(); }
    size_t size() const { return v_.size(); }

   private:
    friend class HostExec;
    std::vector<T> v_;
  };
  struct Event {};

  // pool: the threads ForEach runs on (null: the calling thread).
  explicit HostExec(ThreadPool* pool = nullptr) : pool_(pool) { blas::UseSingleThreadedBlas(); }

  template <class T>
  void Reserve(Buffer<T>* b, size_t n) {
    if (b->v_.size() < n) b->v_.resize(n);
  }
  template <class T>
  void Upload(Buffer<T>* dst, const T* src, size_t n) {
    Reserve(dst, n);
    if (n > 0) std::memcpy(dst->data(), src, n * sizeof(T));
  }
  template <class T>
  void Download(T* dst, const T* src, size_t n) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(T));
  }
  template <class T>
  void Copy(T* dst, const T* src, size_t n) {
    if (n > 0) std::memmove(dst, src, n * sizeof(T));
  }
  template <class T>
  void Fill(T* dst, T value, size_t n) {
    std::fill(dst, dst + n, value);
  }
  template <class F>
  void ForEach(size_t n, F f) {
    constexpr size_t kChunk = 2048;
    if (pool_ == nullptr || n <= kChunk) {
      for (size_t i = 0; i < n; ++i) f(i);
      return;
    }
    pool_->ParallelFor((n + kChunk - 1) / kChunk, [&](size_t c, int) {
      const size_t end = std::min(n, (c + 1) * kChunk);
      for (size_t i = c * kChunk; i < end; ++i) f(i);
    });
  }
  void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
            float* c, int ldc) {
    blas::Sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  }
  Event Record() { return {}; }
  void Recycle() {}
  void Wait(const Event&) {}
  Status status() const { return Status::OK(); }

 private:
  ThreadPool* pool_;
};

}  // namespace ctrbox

#endif  // CTRBOX_MODEL_HOST_EXEC_H_
