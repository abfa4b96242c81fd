// Code shared by the CPU and the CUDA backends (docs/gpu.md): CTRBOX_HD marks a function
// that nvcc compiles for the host and the device (plain C++ elsewhere), and the atomics the
// GPU working table and gradient scatter use, on the device (CUDA atomics) and on the host
// (std::atomic_ref, so the host emulation of a kernel runs on several threads too).
#ifndef CTRBOX_UTIL_HD_H_
#define CTRBOX_UTIL_HD_H_

#include <cstdint>

#if defined(__CUDACC__)
#define CTRBOX_HD __host__ __device__
#else
#define CTRBOX_HD
#endif

#if !defined(__CUDA_ARCH__)
#include <atomic>
#endif

namespace ctrbox {

// Stores desired at *p if it holds expected; returns the value *p held before.
CTRBOX_HD inline uint64_t AtomicCas64(uint64_t* p, uint64_t expected, uint64_t desired) {
#if defined(__CUDA_ARCH__)
  return atomicCAS(reinterpret_cast<unsigned long long*>(p), expected, desired);
#else
  std::atomic_ref<uint64_t>(*p).compare_exchange_strong(expected, desired,
                                                        std::memory_order_acq_rel);
  return expected;
#endif
}

CTRBOX_HD inline void AtomicAddFloat(float* p, float v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  std::atomic_ref<float>(*p).fetch_add(v, std::memory_order_relaxed);
#endif
}

CTRBOX_HD inline void AtomicAddU32(uint32_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  std::atomic_ref<uint32_t>(*p).fetch_add(v, std::memory_order_relaxed);
#endif
}

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_HD_H_
