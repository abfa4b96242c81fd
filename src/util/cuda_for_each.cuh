// The grid-stride kernel behind every executor's ForEach (model/cuda_backend.cu,
// feature/cuda_layers.cu): f(i) for every i in [0, n), whatever the grid. CUDA sources only.
#ifndef CTRBOX_UTIL_CUDA_FOR_EACH_CUH_
#define CTRBOX_UTIL_CUDA_FOR_EACH_CUH_

#include <cstddef>

namespace ctrbox {

template <class F>
__global__ void ForEachKernel(size_t n, F f) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    f(i);
  }
}

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_CUDA_FOR_EACH_CUH_
