// CudaExec: the executor contract of exec/exec.h on one CUDA stream — kernels from CTRBOX_HD
// lambdas (a grid-stride kernel), cuBLAS GEMMs, memory from the stream-ordered allocator
// (cudaMallocAsync; never managed memory), uploads through pinned staging blocks, and every
// call through the one checked path (exec/cuda_check.h). The GPU step (gpu/cuda_trainer.cu)
// and the feature graph's device layers (feature/cuda_layers.cu) run on it.
// Include only from CUDA sources.
#ifndef CTRBOX_EXEC_CUDA_EXEC_CUH_
#define CTRBOX_EXEC_CUDA_EXEC_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exec/cuda_check.h"
#include "exec/cuda_gemm.cuh"
#include "exec/exec.h"
#include "exec/options.h"
#include "exec/staging.h"

namespace ctrbox {

// f(i) for every i in [0, n), whatever the grid.
template <class F>
__global__ void ForEachKernel(size_t n, F f) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    f(i);
  }
}

// out[j] = sum over r < rows of g[r * n + j]: block (32 columns x 32 row groups); each thread
// sums its row group's rows of one column, then the block adds the 32 partial sums in a fixed
// order (deterministic from run to run).
template <class T>
__global__ void ColumnSumsKernel(const T* g, uint32_t rows, uint32_t n, T* out) {
  __shared__ T part[32][33];
  const uint32_t j = blockIdx.x * 32 + threadIdx.x;
  T acc = 0;
  if (j < n) {
    for (uint32_t r = threadIdx.y; r < rows; r += 32) acc += g[size_t{r} * n + j];
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    T s = 0;
    for (int y = 0; y < 32; ++y) s += part[y][threadIdx.x];
    out[j] = s;
  }
}

// out[u * width + j] = the sum over q in [offsets[u] - base, offsets[u + 1] - base) of
// vals[j * n + q], one warp per segment: a short segment's columns by the lanes, each summing
// in row order; a long one's rows strided over the lanes, each column's 32 partial sums then
// added in a fixed shuffle tree (deterministic from run to run).
template <class T>
__device__ void SegmentSumsBody(const T* vals, size_t n, const uint32_t* offsets, uint32_t base,
                                uint32_t segments, uint32_t width, T* out) {
  constexpr uint32_t kShort = 32;
  const uint32_t lane = threadIdx.x & 31;
  const size_t warps = (size_t{gridDim.x} * blockDim.x) >> 5;
  for (size_t u = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5; u < segments; u += warps) {
    const uint32_t begin = offsets[u] - base, end = offsets[u + 1] - base;
    if (end - begin <= kShort) {
      for (uint32_t j = lane; j < width; j += 32) {
        T acc = 0;
        for (uint32_t q = begin; q < end; ++q) acc += vals[j * n + q];
        out[u * width + j] = acc;
      }
      continue;
    }
    for (uint32_t j = 0; j < width; ++j) {
      const T* col = vals + j * n;
      T acc = 0;
      for (uint32_t q = begin + lane; q < end; q += 32) acc += col[q];
      for (int d = 16; d > 0; d >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, d);
      if (lane == 0) out[u * width + j] = acc;
    }
  }
}
template <class T>
__global__ void SegmentSumsKernel(const T* vals, size_t n, const uint32_t* offsets, uint32_t base,
                                  uint32_t segments, uint32_t width, T* out) {
  SegmentSumsBody(vals, n, offsets, base, segments, width, out);
}
// The same, its shape read from device memory (a replayed step's).
template <class T>
__global__ void ShapedSegmentSumsKernel(const T* vals, const SegmentShape* shape,
                                        const uint32_t* offsets, uint32_t width, T* out) {
  const SegmentShape sh = *shape;
  SegmentSumsBody(vals, size_t{sh.n}, offsets + sh.at, sh.base, sh.segments, width, out);
}

// Records the first failure; every later call is skipped.
#define CTRBOX_EXEC_CHECK(call) Check((call), #call, __FILE__, __LINE__)

// One GPU queue: a stream on `device`. Used by one thread at a time; the FirstError may be
// shared with other executors.
class CudaExec {
 public:
  template <class T>
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& o) noexcept : p_(o.p_), n_(o.n_), device_(o.device_) {
      o.p_ = nullptr;
      o.n_ = 0;
    }
    Buffer& operator=(Buffer&& o) noexcept {
      std::swap(p_, o.p_);
      std::swap(n_, o.n_);
      std::swap(device_, o.device_);
      return *this;
    }
    Buffer(const Buffer&) = delete;
    ~Buffer() {
      if (p_ != nullptr) {
        cudaSetDevice(device_);
        cudaFree(p_);  // the owner synchronized its streams before
      }
    }
    T* data() { return p_; }
    const T* data() const { return p_; }
    size_t size() const { return n_; }

   private:
    friend class CudaExec;
    T* p_ = nullptr;
    size_t n_ = 0;
    int device_ = 0;
  };
  struct Event {
    cudaEvent_t e = nullptr;
  };
  using TimeMark = cudaEvent_t;
  // A captured step (a CUDA graph, instantiated), replayed by Replay.
  class Graph {
   public:
    Graph() = default;
    Graph(Graph&& o) noexcept : exec_(o.exec_), counted_(o.counted_) { o.exec_ = nullptr; }
    Graph& operator=(Graph&& o) noexcept {
      std::swap(exec_, o.exec_);
      std::swap(counted_, o.counted_);
      return *this;
    }
    Graph(const Graph&) = delete;
    ~Graph() {
      if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    }
    bool empty() const { return exec_ == nullptr; }
    const ExecCounters& counted() const { return counted_; }

   private:
    friend class CudaExec;
    cudaGraphExec_t exec_ = nullptr;
    ExecCounters counted_;
  };

  CudaExec(int device, GemmPrecision precision, std::shared_ptr<FirstError> errors)
      : device_(device), errors_(std::move(errors)), gemms_(precision, errors_) {
    CTRBOX_EXEC_CHECK(cudaSetDevice(device_));
    CTRBOX_EXEC_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    events_.resize(kEvents);
    for (auto& e : events_) CTRBOX_EXEC_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaDeviceProp prop;
    CTRBOX_EXEC_CHECK(cudaGetDeviceProperties(&prop, device_));
    max_blocks_ = std::max(1, prop.multiProcessorCount * 16);
  }
  ~CudaExec() {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (auto& e : events_) cudaEventDestroy(e);
    for (auto& e : marks_) cudaEventDestroy(e);
    for (auto& b : staging_) cudaFreeHost(b.p);
    gemms_.Destroy();  // before the stream its handles use
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaExec(const CudaExec&) = delete;
  CudaExec& operator=(const CudaExec&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  Status status() const { return errors_->Get(); }
  const ExecCounters& counters() const { return counters_; }

  template <class T>
  void Reserve(Buffer<T>* b, size_t n) {
    if (b->n_ >= n || !ok() || Refuse("Reserve growing a buffer")) return;
    Use();
    ++counters_.allocations;
    if (b->p_ != nullptr) CTRBOX_EXEC_CHECK(cudaFreeAsync(b->p_, stream_));
    b->p_ = nullptr;
    b->n_ = 0;
    const size_t cap = n + n / 4;  // room to grow without a reallocation every pass
    void* p = nullptr;
    CTRBOX_EXEC_CHECK(cudaMallocAsync(&p, cap * sizeof(T), stream_));
    if (!ok()) return;
    b->p_ = static_cast<T*>(p);
    b->n_ = cap;
    b->device_ = device_;
  }
  template <class T>
  void Upload(Buffer<T>* dst, const T* src, size_t n) {
    if (Refuse("Upload")) return;
    Reserve(dst, n);
    if (n == 0 || !ok()) return;
    void* staged = Stage(src, n * sizeof(T));
    if (staged == nullptr) return;
    ++counters_.copies;
    CTRBOX_EXEC_CHECK(
        cudaMemcpyAsync(dst->data(), staged, n * sizeof(T), cudaMemcpyHostToDevice, stream_));
  }
  template <class T>
  void Download(T* dst, const T* src, size_t n) {
    if (n == 0 || !ok()) return;
    DownloadAsync(dst, src, n);
    Synchronize();
  }
  template <class T>
  void DownloadAsync(T* dst, const T* src, size_t n) {
    if (n == 0 || !ok() || Refuse("DownloadAsync")) return;
    Use();
    ++counters_.copies;
    CTRBOX_EXEC_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream_));
  }
  template <class T>
  void Copy(T* dst, const T* src, size_t n) {
    if (n == 0 || !ok()) return;
    Use();  // cudaMemcpyDefault: unified addressing finds a peer GPU's memory
    ++count().copies;
    CTRBOX_EXEC_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDefault, stream_));
  }
  template <class T>
  void Fill(T* dst, T value, size_t n) {
    ForEach(n, [=] __device__(size_t i) { dst[i] = value; });
  }
  template <class F>
  void ForEach(size_t n, F f) {
    if (n == 0 || !ok()) return;
    const HostClock clock(&counters_.launch_host_seconds);
    Use();
    ++count().launches;
    const size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, max_blocks_);
    ForEachKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(n, f);
    CTRBOX_EXEC_CHECK(cudaGetLastError());  // the launch (errors while it runs come later)
  }
  void ColumnSums(const float* g, uint32_t rows, uint32_t n, float* out) {
    if (n == 0 || !ok()) return;
    const HostClock clock(&counters_.launch_host_seconds);
    Use();
    ++count().launches;
    ColumnSumsKernel<float><<<(n + 31) / 32, dim3(32, 32), 0, stream_>>>(g, rows, n, out);
    CTRBOX_EXEC_CHECK(cudaGetLastError());
  }
  void SegmentSums(const float* vals, size_t n, const uint32_t* offsets, uint32_t base,
                   uint32_t segments, uint32_t width, float* out) {
    if (segments == 0 || width == 0 || !ok()) return;
    const HostClock clock(&counters_.launch_host_seconds);
    Use();
    ++count().launches;
    const size_t blocks = std::min<size_t>((size_t{segments} + 7) / 8, max_blocks_);
    SegmentSumsKernel<float><<<static_cast<unsigned>(blocks), 256, 0, stream_>>>(
        vals, n, offsets, base, segments, width, out);
    CTRBOX_EXEC_CHECK(cudaGetLastError());
  }
  void SegmentSums(const float* vals, const SegmentShape* shape, const uint32_t* offsets,
                   uint32_t max_segments, uint32_t width, float* out) {
    if (max_segments == 0 || width == 0 || !ok()) return;
    const HostClock clock(&counters_.launch_host_seconds);
    Use();
    ++count().launches;
    const size_t blocks = std::min<size_t>((size_t{max_segments} + 7) / 8, max_blocks_);
    ShapedSegmentSumsKernel<float>
        <<<static_cast<unsigned>(blocks), 256, 0, stream_>>>(vals, shape, offsets, width, out);
    CTRBOX_EXEC_CHECK(cudaGetLastError());
  }
  // Stream capture into a CUDA graph (thread-local mode: this thread may not call an
  // unsafe API meanwhile); EndCapture into a graph that holds one updates it. cuBLASLt's handle and
  // workspace and cuBLAS's handle are made before, since their allocations may not be captured.
  void BeginCapture() {
    if (!ok()) return;
    if (capturing_) {
      Fail("BeginCapture inside a capture");
      return;
    }
    Use();
    gemms_.MakeHandles(stream_);
    if (!ok()) return;
    CTRBOX_EXEC_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = ok();
    captured_ = ExecCounters();
  }
  void EndCapture(Graph* g) {
    if (!capturing_) {
      Fail("EndCapture without BeginCapture");
      return;
    }
    capturing_ = false;
    Use();
    cudaGraph_t graph = nullptr;
    CTRBOX_EXEC_CHECK(cudaStreamEndCapture(stream_, &graph));
    if (graph == nullptr) return;
    // A graph recorded again (the next pass's step of the same shape: the same calls, some
    // with other buffers) updates the instantiated one in place where CUDA can (much cheaper
    // than instantiating); otherwise it is instantiated anew.
    if (g->exec_ != nullptr) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(g->exec_, graph, &info) == cudaSuccess) {
        cudaGraphDestroy(graph);
        g->counted_ = captured_;
        return;
      }
      (void)cudaGetLastError();  // a refused update is not an error: instantiate instead
      cudaGraphExecDestroy(g->exec_);
      g->exec_ = nullptr;
    }
    cudaGraphExec_t exec = nullptr;
    CTRBOX_EXEC_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    if (!ok()) return;
    g->exec_ = exec;
    g->counted_ = captured_;
  }
  void Replay(const Graph& g) {
    if (g.exec_ == nullptr || !ok() || Refuse("Replay")) return;
    const HostClock clock(&counters_.launch_host_seconds);
    Use();
    ++counters_.replays;
    counters_.replayed_ops += g.counted_.launches + g.counted_.copies;
    CTRBOX_EXEC_CHECK(cudaGraphLaunch(g.exec_, stream_));
  }
  void UseHostPool(ThreadPool* pool) { host_pool_ = pool; }
  // Row-major C = op(A) op(B) (exec/cuda_gemm.cuh: cuBLASLt with the algorithm kept per
  // shape, cublasGemmEx where it has none).
  void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
            float* c, int ldc) {
    if (m == 0 || n == 0 || !ok()) return;
    const HostClock clock(&counters_.gemm_host_seconds);
    Use();
    if (!gemms_.Run(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, stream_)) return;
    ++count().launches;
    ++count().gemm_calls;
  }
  Event Record() {
    Event e{events_[next_event_++ % kEvents]};
    Use();
    CTRBOX_EXEC_CHECK(cudaEventRecord(e.e, stream_));
    return e;
  }
  void Wait(const Event& e) {
    if (e.e == nullptr) return;
    Use();
    CTRBOX_EXEC_CHECK(cudaStreamWaitEvent(stream_, e.e, 0));
  }
  void Recycle() {
    if (Refuse("Recycle")) return;
    Synchronize();
    for (auto& b : staging_) b.used = 0;
  }
  void Synchronize() {
    if (Refuse("Synchronize")) return;
    Use();
    ++counters_.syncs;
    CTRBOX_EXEC_CHECK(cudaStreamSynchronize(stream_));
  }
  // Timing marks: events with timing, from a pool that ReleaseMarks makes reusable.
  TimeMark Mark() {
    if (Refuse("Mark")) return nullptr;
    Use();
    if (next_mark_ == marks_.size()) {
      cudaEvent_t e = nullptr;
      CTRBOX_EXEC_CHECK(cudaEventCreate(&e));
      marks_.push_back(e);
    }
    cudaEvent_t e = marks_[next_mark_++];
    CTRBOX_EXEC_CHECK(cudaEventRecord(e, stream_));
    return e;
  }
  static double Seconds(TimeMark a, TimeMark b) {
    float ms = 0;
    return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms * 1e-3 : 0.0;
  }
  // The marks handed out may be recorded again. REQUIRES: their Seconds were read.
  void ReleaseMarks() { next_mark_ = 0; }

 private:
  static constexpr int kThreads = 256;
  // Adds the host time of its scope to *sum.
  struct HostClock {
    explicit HostClock(double* sum) : sum_(sum), start_(std::chrono::steady_clock::now()) {}
    ~HostClock() {
      *sum_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    double* sum_;
    std::chrono::steady_clock::time_point start_;
  };
  static constexpr size_t kEvents = 1024;
  struct Pinned : StagingBlock {  // exec/staging.h: where each copy goes
    char* p = nullptr;
  };

  template <class Code>
  void Check(Code code, const char* what, const char* file, int line) {
    errors_->Record(CheckCall(code, what, file, line));
  }
  bool ok() const { return errors_->ok(); }
  void Use() { cudaSetDevice(device_); }
  // Where a launch or copy is counted: the capture's graph while capturing.
  ExecCounters& count() { return capturing_ ? captured_ : counters_; }
  void Fail(const char* what) {
    errors_->Record(InternalError(std::string("CUDA executor: ") + what));
  }
  // True (and the executor failed) when `what` is called inside a capture.
  bool Refuse(const char* what) {
    if (!capturing_) return false;
    Fail((std::string(what) + " inside a capture").c_str());
    return true;
  }

  // Copies n bytes into pinned memory that stays untouched until the next Recycle.
  void* Stage(const void* src, size_t n) {
    Pinned* block = nullptr;
    for (auto& b : staging_) {
      if (b.Fits(n)) {
        block = &b;
        break;
      }
    }
    if (block == nullptr) {
      Pinned b;
      b.size = StagingBlock::SizeFor(n);
      void* p = nullptr;
      CTRBOX_EXEC_CHECK(cudaHostAlloc(&p, b.size, cudaHostAllocPortable));
      if (!ok()) return nullptr;
      b.p = static_cast<char*>(p);
      staging_.push_back(b);
      block = &staging_.back();
    }
    char* dst = block->p + block->Take(n);
    ParallelCopy(host_pool_, dst, src, n);
    return dst;
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  size_t next_event_ = 0;
  std::vector<cudaEvent_t> marks_;
  size_t next_mark_ = 0;
  int max_blocks_ = 1;
  std::vector<Pinned> staging_;
  std::shared_ptr<FirstError> errors_;
  CudaGemms gemms_;  // after errors_, which it shares
  ExecCounters counters_;
  ThreadPool* host_pool_ = nullptr;
  bool capturing_ = false;
  ExecCounters captured_;
};

#undef CTRBOX_EXEC_CHECK

}  // namespace ctrbox

#endif  // CTRBOX_EXEC_CUDA_EXEC_CUH_
