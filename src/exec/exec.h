// The executor contract, and HostExec: the host emulation of one GPU queue.
//
// Code that runs on a GPU is written once against an executor — one GPU's queue and memory —
// so that the same kernel bodies run on CUDA (CudaExec, exec/cuda_exec.cuh) and on host
// threads (HostExec, below: the CPU model's towers and mixture layers, the GPU step's
// emulation that the CPU-only tests run, the feature graph's device layers in emulation).
// Users: the GPU step (gpu/step.h), model/towers.h, model/cross_mix.h, feature/device_layers.
//
// An executor provides:
//
//   Buffer<T>                   memory of that GPU: data(), size() (elements); move-only
//   Event, Record(), Wait(e)    ordering between two executors' queues
//   Reserve(&buf, n)            buf holds >= n elements (contents unspecified; may reallocate)
//   Upload(&buf, src, n)        Reserve, then copy n host elements in (src reusable at return)
//   Download(dst, src, n)       copy n elements to host memory; returns once they are there
//   DownloadAsync(dst, src, n)  queue that copy; dst is valid after the next Synchronize
//   Copy(dst, src, n)           device to device on this queue; src may be a peer GPU's memory
//   Fill(p, value, n)
//   ForEach(n, f)               f(i) for every i in [0, n), concurrently, in any order: f is
//                               a CTRBOX_HD lambda capturing by value (one kernel launch)
//   Gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc)    row-major C = op(A) op(B)
//   ColumnSums(g, rows, n, out) out[j] = the sum over rows r of g[r * n + j] (one launch)
//   SegmentSums(vals, n, offsets, base, segments, width, out)
//                               out[u * width + j] = the sum over q in [offsets[u] - base,
//                               offsets[u + 1] - base) of vals[j * n + q]: per segment of
//                               rows and per column of a column-major [width x n] matrix
//                               (offsets: device memory, segments + 1 of them; one launch)
//   SegmentSums(vals, shape, offsets, max_segments, width, out)
//                               the same with n, base, segments and the offsets' first
//                               (offsets + shape->at) read from *shape, device memory, when the
//                               queue runs it (segments <= max_segments): for a replayed step
//   BeginCapture()              the calls that follow are recorded into a graph, not run,
//   EndCapture(&graph)          until EndCapture (a graph recorded before is replaced: on
//   Replay(graph)               CUDA updated in place where it can); Replay(graph) queues
//                               them all again as one launch. Inside a capture only ForEach, Fill,
//                               Gemm, ColumnSums, SegmentSums, Copy, Record and Wait may be called,
//                               and Reserve where it does not grow the buffer; anything else (an
//                               allocation, an upload, a download, a synchronization, a mark)
//                               fails the executor (status()). A recorded call keeps its
//                               arguments as they were: what must change from one replay to the
//                               next is read by the kernels from device memory
//   UseHostPool(pool)           host threads for the host side of later uploads and
//                               downloads (copies into and out of staging memory; null: the
//                               calling thread)
//   Recycle()                   waits for the queue, then reuses the uploads' staging memory
//   Synchronize()               waits until everything queued so far has run
//   Mark()                      a timing mark on the queue; Seconds(a, b) between two marks,
//                               valid once the queue passed b (after a Synchronize);
//                               ReleaseMarks() after reading them lets marks be reused
//   counters()                  ExecCounters: the calls above as a GPU would see them
//   status()                    the first error of any call (sticky; later calls do nothing)
//
// Memory spaces: every pointer passed to ForEach's f, Copy, Fill, Gemm and ColumnSums is the
// executor's device memory (a Buffer's data()); Upload's src and Download's dst are host
// memory. An executor is used by one thread at a time.
//
// Arithmetic: HostExec's ColumnSums and SegmentSums add in row order from +0, as the CPU
// model's bias and per-key gradients do, so that the emulated step is bit-identical to the CPU
// model; CudaExec's add in a fixed tree (deterministic from run to run; cuBLAS sums its GEMMs in
// its own order anyway: docs/gpu.md, "Precision"). Either sum starts from +0, so it is never -0.
#ifndef CTRBOX_EXEC_EXEC_H_
#define CTRBOX_EXEC_EXEC_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "util/blas.h"
#include "util/hd.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace ctrbox {

// What an executor did, counted as a GPU would see it. launches: kernels and GEMMs (ForEach,
// Fill, Gemm, ColumnSums, SegmentSums) the host launched one by one; copies: host <-> device
// and device <-> device copies likewise; syncs: the calls that block the host until the queue
// has run (Download, Recycle, Synchronize); allocations: buffers (re)allocated by Reserve or
// Upload. gemm_calls: the launches that were GEMMs. replays: graphs replayed (Replay), each
// one launch for the host; replayed_ops: the kernels, GEMMs and copies those replays ran
// (not in launches or copies). On CUDA also the host's time inside the kernel launches and
// inside the GEMM calls (cuBLAS's own host work included), and inside the replays: where a
// step whose queue runs dry spends its time.
struct ExecCounters {
  uint64_t launches = 0, copies = 0, syncs = 0, gemm_calls = 0, allocations = 0, replays = 0,
           replayed_ops = 0;
  double launch_host_seconds = 0, gemm_host_seconds = 0;
  void Add(const ExecCounters& o) {
    launches += o.launches;
    copies += o.copies;
    syncs += o.syncs;
    gemm_calls += o.gemm_calls;
    allocations += o.allocations;
    replays += o.replays;
    replayed_ops += o.replayed_ops;
    launch_host_seconds += o.launch_host_seconds;
    gemm_host_seconds += o.gemm_host_seconds;
  }
  // What happened between `before` and this (both of one executor).
  ExecCounters Since(const ExecCounters& before) const {
    ExecCounters d = *this;
    d.launches -= before.launches;
    d.copies -= before.copies;
    d.syncs -= before.syncs;
    d.gemm_calls -= before.gemm_calls;
    d.allocations -= before.allocations;
    d.replays -= before.replays;
    d.replayed_ops -= before.replayed_ops;
    d.launch_host_seconds -= before.launch_host_seconds;
    d.gemm_host_seconds -= before.gemm_host_seconds;
    return d;
  }
};

// SegmentSums' shape read from device memory (exec.h's contract, the second SegmentSums).
struct SegmentShape {
  uint32_t at = 0;        // the segments' offsets start at offsets + at
  uint32_t base = 0;      // subtracted from every offset
  uint32_t segments = 0;  // <= the call's max_segments
  uint32_t n = 0;         // the column stride of vals
};

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
  using Clock = std::chrono::steady_clock;
  using TimeMark = Clock::time_point;
  // A recorded step: the calls between BeginCapture and EndCapture, each with its arguments.
  class Graph {
   public:
    bool empty() const { return ops_.empty(); }
    // The calls recorded, counted as they would have been.
    const ExecCounters& counted() const { return counted_; }

   private:
    friend class HostExec;
    std::vector<std::function<void()>> ops_;
    ExecCounters counted_;
  };

  // pool: the threads ForEach runs on (null: the calling thread).
  explicit HostExec(ThreadPool* pool = nullptr) : pool_(pool) { blas::UseSingleThreadedBlas(); }

  template <class T>
  void Reserve(Buffer<T>* b, size_t n) {
    if (b->v_.size() >= n) return;
    if (Refuse("Reserve growing a buffer")) return;
    ++counters_.allocations;
    b->v_.resize(n);
  }
  template <class T>
  void Upload(Buffer<T>* dst, const T* src, size_t n) {
    if (Refuse("Upload")) return;
    Reserve(dst, n);
    if (n == 0) return;
    ++counters_.copies;
    ParallelCopy(host_pool_, dst->data(), src, n * sizeof(T));
  }
  template <class T>
  void Download(T* dst, const T* src, size_t n) {
    if (n == 0 || Refuse("Download")) return;
    ++counters_.copies;
    ++counters_.syncs;
    ParallelCopy(host_pool_, dst, src, n * sizeof(T));
  }
  template <class T>
  void DownloadAsync(T* dst, const T* src, size_t n) {
    if (n == 0 || Refuse("DownloadAsync")) return;
    ++counters_.copies;
    ParallelCopy(host_pool_, dst, src, n * sizeof(T));
  }
  template <class T>
  void Copy(T* dst, const T* src, size_t n) {
    if (n == 0) return;
    Queue(false, false, [=] { std::memmove(dst, src, n * sizeof(T)); });
  }
  template <class T>
  void Fill(T* dst, T value, size_t n) {
    if (n == 0) return;
    Queue(true, false, [=] { std::fill(dst, dst + n, value); });
  }
  template <class F>
  void ForEach(size_t n, F f) {
    if (n == 0) return;
    Queue(true, false, [this, n, f] { RunForEach(n, f); });
  }
  void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
            float* c, int ldc) {
    if (m == 0 || n == 0) return;
    Queue(true, true, [=] { blas::Sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc); });
  }
  // In row order (the CPU model's bias gradients).
  void ColumnSums(const float* g, uint32_t rows, uint32_t n, float* out) {
    ForEach(n, [=](size_t j) {
      float acc = 0.0f;
      for (uint32_t r = 0; r < rows; ++r) acc += g[size_t{r} * n + j];
      out[j] = acc;
    });
  }
  // In row order.
  void SegmentSums(const float* vals, size_t n, const uint32_t* offsets, uint32_t base,
                   uint32_t segments, uint32_t width, float* out) {
    ForEach(size_t{segments} * width, [=](size_t i) {
      const size_t u = i / width, j = i % width;
      float acc = 0.0f;
      for (uint32_t q = offsets[u] - base; q < offsets[u + 1] - base; ++q) acc += vals[j * n + q];
      out[i] = acc;
    });
  }
  // In row order, the shape read when it runs.
  void SegmentSums(const float* vals, const SegmentShape* shape, const uint32_t* offsets,
                   uint32_t max_segments, uint32_t width, float* out) {
    ForEach(size_t{max_segments} * width, [=](size_t i) {
      const SegmentShape sh = *shape;
      const size_t u = i / width, j = i % width;
      if (u >= sh.segments) return;
      const uint32_t* off = offsets + sh.at;
      float acc = 0.0f;
      for (uint32_t q = off[u] - sh.base; q < off[u + 1] - sh.base; ++q) {
        acc += vals[j * size_t{sh.n} + q];
      }
      out[i] = acc;
    });
  }
  void BeginCapture() {
    if (capture_ != nullptr) {
      Fail("BeginCapture inside a capture");
      return;
    }
    capture_ = std::make_unique<Graph>();
  }
  void EndCapture(Graph* g) {
    if (capture_ == nullptr) {
      Fail("EndCapture without BeginCapture");
      return;
    }
    *g = std::move(*capture_);
    capture_.reset();
  }
  void Replay(const Graph& g) {
    if (Refuse("Replay")) return;
    ++counters_.replays;
    counters_.replayed_ops += g.counted_.launches + g.counted_.copies;
    for (const auto& op : g.ops_) op();
  }
  void UseHostPool(ThreadPool* pool) { host_pool_ = pool; }
  Event Record() { return {}; }
  void Wait(const Event&) {}
  void Recycle() {
    if (!Refuse("Recycle")) ++counters_.syncs;
  }
  void Synchronize() {
    if (!Refuse("Synchronize")) ++counters_.syncs;
  }
  TimeMark Mark() {
    Refuse("Mark");
    return Clock::now();
  }
  static double Seconds(const TimeMark& a, const TimeMark& b) {
    return std::chrono::duration<double>(b - a).count();
  }
  void ReleaseMarks() {}
  const ExecCounters& counters() const { return counters_; }
  Status status() const { return status_; }

 private:
  template <class F>
  void RunForEach(size_t n, const F& f) {
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
  // Runs op now, or records it into the capture; counted as a launch (a GEMM's if gemm) or a
  // copy.
  template <class Op>
  void Queue(bool launch, bool gemm, Op op) {
    ExecCounters& c = capture_ != nullptr ? capture_->counted_ : counters_;
    ++(launch ? c.launches : c.copies);
    if (gemm) ++c.gemm_calls;
    if (capture_ != nullptr) {
      capture_->ops_.emplace_back(std::move(op));
    } else {
      op();
    }
  }
  void Fail(const std::string& what) {
    if (status_.ok()) (void)(status_ = InternalError("host executor: " + what));
  }
  // True (and the executor failed) when `what` is called inside a capture.
  bool Refuse(const char* what) {
    if (capture_ == nullptr) return false;
    Fail(std::string(what) + " inside a capture");
    return true;
  }

  ThreadPool* pool_;
  ThreadPool* host_pool_ = nullptr;
  ExecCounters counters_;
  std::unique_ptr<Graph> capture_;
  Status status_;
};

}  // namespace ctrbox

#endif  // CTRBOX_EXEC_EXEC_H_
