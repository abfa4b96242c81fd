// The CUDA executor and the CUDA GpuTrainer (docs/gpu.md): GpuStep's calls queued on one
// compute and one copy stream per GPU, kernels from its CTRBOX_HD lambdas, cuBLAS GEMMs,
// memory from the stream-ordered allocator (cudaMallocAsync; never managed memory), uploads
// through pinned staging, and NCCL all-reduce when every GPU is its own device.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/cuda_backend.h"
#include "model/cuda_check.h"
#include "model/gpu_step.h"
#include "util/cuda_for_each.cuh"

namespace ctrbox {
namespace {

// The first error of a trainer's CUDA calls, shared by its executors (which run on the pull
// and the train threads); once set, the executors queue no more work.
class FirstError {
 public:
  void Record(Status s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> l(mu_);
    if (status_.ok()) (void)(status_ = std::move(s));
  }
  Status Get() const {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }
  bool ok() const {
    std::lock_guard<std::mutex> l(mu_);
    return status_.ok();
  }

 private:
  mutable std::mutex mu_;
  Status status_;
};

// Records the first failure; every later call is skipped.
#define CTRBOX_EXEC_CHECK(call) Check((call), #call, __FILE__, __LINE__)

// One GPU's queue: a stream on `device` (shared by the executors of one trainer).
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
        cudaFree(p_);  // the trainer synchronized its streams before
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

  CudaExec(int device, GemmPrecision precision, std::shared_ptr<FirstError> status)
      : device_(device), precision_(precision), status_(std::move(status)) {
    CTRBOX_EXEC_CHECK(cudaSetDevice(device_));
    CTRBOX_EXEC_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CTRBOX_EXEC_CHECK(cublasCreate(&blas_));
    CTRBOX_EXEC_CHECK(cublasSetStream(blas_, stream_));
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
    for (auto& b : staging_) cudaFreeHost(b.p);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaExec(const CudaExec&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  Status status() const { return status_->Get(); }

  template <class T>
  void Reserve(Buffer<T>* b, size_t n) {
    if (b->n_ >= n || !ok()) return;
    Use();
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
    Reserve(dst, n);
    if (n == 0 || !ok()) return;
    void* staged = Stage(src, n * sizeof(T));
    CTRBOX_EXEC_CHECK(
        cudaMemcpyAsync(dst->data(), staged, n * sizeof(T), cudaMemcpyHostToDevice, stream_));
  }
  template <class T>
  void Download(T* dst, const T* src, size_t n) {
    if (n == 0 || !ok()) return;
    Use();
    CTRBOX_EXEC_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    CTRBOX_EXEC_CHECK(cudaStreamSynchronize(stream_));
  }
  template <class T>
  void Copy(T* dst, const T* src, size_t n) {
    if (n == 0 || !ok()) return;
    Use();  // cudaMemcpyDefault: unified addressing finds a peer GPU's memory
    CTRBOX_EXEC_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDefault, stream_));
  }
  template <class T>
  void Fill(T* dst, T value, size_t n) {
    ForEach(n, [=] __device__(size_t i) { dst[i] = value; });
  }
  template <class F>
  void ForEach(size_t n, F f) {
    if (n == 0 || !ok()) return;
    Use();
    const size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, max_blocks_);
    ForEachKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(n, f);
    CTRBOX_EXEC_CHECK(cudaGetLastError());  // the launch (errors while it runs come later)
  }
  // Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T.
  void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
            float* c, int ldc) {
    if (m == 0 || n == 0 || !ok()) return;
    Use();
    const float one = 1.0f, zero = 0.0f;
    const cublasComputeType_t compute =
        precision_ == GemmPrecision::kTf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
        : precision_ == GemmPrecision::kBf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                             : CUBLAS_COMPUTE_32F;
    CTRBOX_EXEC_CHECK(cublasGemmEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_32F,
                                   ldb, a, CUDA_R_32F, lda, &zero, c, CUDA_R_32F, ldc, compute,
                                   CUBLAS_GEMM_DEFAULT));
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
    Use();
    CTRBOX_EXEC_CHECK(cudaStreamSynchronize(stream_));
    for (auto& b : staging_) b.used = 0;
  }
  void Synchronize() {
    Use();
    CTRBOX_EXEC_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  static constexpr int kThreads = 256;
  static constexpr size_t kEvents = 1024;
  static constexpr size_t kStagingBlock = size_t{64} << 20;
  struct Pinned {
    char* p = nullptr;
    size_t size = 0, used = 0;
  };

  template <class Code>
  void Check(Code code, const char* what, const char* file, int line) {
    status_->Record(CheckCall(code, what, file, line));
  }
  bool ok() const { return status_->ok(); }
  void Use() { cudaSetDevice(device_); }

  // Copies n bytes into pinned memory that stays untouched until the next Recycle.
  void* Stage(const void* src, size_t n) {
    Pinned* block = nullptr;
    for (auto& b : staging_) {
      if (b.size - b.used >= n) {
        block = &b;
        break;
      }
    }
    if (block == nullptr) {
      Pinned b;
      b.size = std::max(kStagingBlock, n);
      void* p = nullptr;
      CTRBOX_EXEC_CHECK(cudaHostAlloc(&p, b.size, cudaHostAllocPortable));
      if (!ok()) return nullptr;
      b.p = static_cast<char*>(p);
      staging_.push_back(b);
      block = &staging_.back();
    }
    char* dst = block->p + block->used;
    std::memcpy(dst, src, n);
    block->used += (n + 255) / 256 * 256;
    return dst;
  }

  const int device_;
  const GemmPrecision precision_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<cudaEvent_t> events_;
  size_t next_event_ = 0;
  int max_blocks_ = 1;
  std::vector<Pinned> staging_;
  std::shared_ptr<FirstError> status_;
};

class CudaGpuTrainer : public GpuStepTrainer<CudaExec> {
 public:
  CudaGpuTrainer(const GpuOptions& options, int devices) : options_(options), devices_(devices) {}

  Status Init(CtrModel* model, const CtrAccessor& accessor) {
    const uint32_t n = options_.gpus;
    for (uint32_t g = 0; g < n; ++g) {
      const int device = DeviceOf(g);
      CTRBOX_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      // Keep freed memory in the pool: passes reallocate similar sizes.
      cudaMemPool_t pool;
      CTRBOX_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
      uint64_t keep = ~uint64_t{0};
      CTRBOX_CUDA_RETURN_IF_ERROR(
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
      compute_.push_back(std::make_unique<CudaExec>(device, options_.precision, status_));
      copy_.push_back(std::make_unique<CudaExec>(device, options_.precision, status_));
    }
    // Peer access between distinct devices, where the hardware allows it (copies work
    // without it, through the host).
    for (uint32_t ga = 0; ga < std::min<uint32_t>(devices_, n); ++ga) {
      for (uint32_t gb = 0; gb < std::min<uint32_t>(devices_, n); ++gb) {
        const int a = DeviceOf(ga), b = DeviceOf(gb);
        int can = 0;
        if (a != b && cudaDeviceCanAccessPeer(&can, a, b) == cudaSuccess && can) {
          cudaSetDevice(a);
          const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
          if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
            CTRBOX_CUDA_RETURN_IF_ERROR(e);
          }
          cudaGetLastError();  // clears cudaErrorPeerAccessAlreadyEnabled
        }
      }
    }
    // NCCL when every GPU is its own device (one communicator per device).
    if (n > 1 && static_cast<int>(n) <= devices_) {
      comms_.resize(n);
      std::vector<int> list(n);
      for (uint32_t g = 0; g < n; ++g) list[g] = DeviceOf(g);
      CTRBOX_CUDA_RETURN_IF_ERROR(ncclCommInitAll(comms_.data(), static_cast<int>(n), list.data()));
    }
    RETURN_IF_ERROR(status_->Get());
    std::vector<CudaExec*> compute, copy;
    for (auto& e : compute_) compute.push_back(e.get());
    for (auto& e : copy_) copy.push_back(e.get());
    step_ = std::make_unique<GpuStep<CudaExec>>(model, accessor, options_, compute, copy,
                                                comms_.empty() ? nullptr : &NcclAllReduce, this);
    for (auto& e : compute_) e->Synchronize();
    return compute_[0]->status();
  }

  ~CudaGpuTrainer() override {
    for (auto& e : compute_) e->Synchronize();
    for (auto& e : copy_) e->Synchronize();
    step_.reset();
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }

  std::string Describe() const override {
    std::string out;
    for (uint32_t g = 0; g < std::min<uint32_t>(devices_, options_.gpus); ++g) {
      const int d = DeviceOf(g);
      cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
      if (!out.empty()) out += ", ";
      out += std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
             std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 30) +
             " GiB)";
    }
    return std::to_string(options_.gpus) + " GPU partition" + (options_.gpus == 1 ? "" : "s") +
           " on " + out + ", gemm " + std::string(GemmPrecisionName(options_.precision)) +
           ", scatter " + std::string(ScatterModeName(options_.scatter)) +
           (comms_.empty() ? "" : ", NCCL all-reduce");
  }

  static bool NcclAllReduce(void* ctx, const std::vector<float*>& ptrs, size_t n) {
    auto* self = static_cast<CudaGpuTrainer*>(ctx);
    self->status_->Record(CheckCall(ncclGroupStart(), "ncclGroupStart()", __FILE__, __LINE__));
    for (size_t g = 0; g < ptrs.size(); ++g) {
      cudaSetDevice(self->compute_[g]->device());
      self->status_->Record(CheckCall(ncclAllReduce(ptrs[g], ptrs[g], n, ncclFloat, ncclSum,
                                                    self->comms_[g], self->compute_[g]->stream()),
                                      "ncclAllReduce(grads)", __FILE__, __LINE__));
    }
    self->status_->Record(CheckCall(ncclGroupEnd(), "ncclGroupEnd()", __FILE__, __LINE__));
    return true;
  }

 private:
  GpuOptions options_;
  // The device of logical GPU g.
  int DeviceOf(uint32_t g) const {
    return static_cast<int>((options_.first_device + g) % devices_);
  }
  int devices_;
  std::shared_ptr<FirstError> status_ = std::make_shared<FirstError>();
  std::vector<std::unique_ptr<CudaExec>> compute_, copy_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

int CudaDevices(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable GPU: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    cudaGetLastError();
    return 0;
  }
  if (n == 0) *why = "no CUDA device found";
  return n;
}

uint64_t CudaTotalMemory(int device, std::string* why) {
  cudaDeviceProp prop;
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    *why = std::string("cannot read the GPU's properties: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e);
    cudaGetLastError();
    return 0;
  }
  return prop.totalGlobalMem;
}

namespace {

// A device copy of a hash index over `keys` (row i for keys[i]), built by concurrent inserts.
struct DeviceIndex {
  CudaExec::Buffer<uint64_t> keys, slot_keys;
  CudaExec::Buffer<uint32_t> slot_rows, special, failed;
  HbmIndex view;

  void Build(CudaExec& e, const std::vector<uint64_t>& host_keys) {
    e.Upload(&keys, host_keys.data(), host_keys.size());
    const size_t cap = HbmCapacity(host_keys.size());
    e.Reserve(&slot_keys, cap);
    e.Reserve(&slot_rows, cap);
    e.Reserve(&special, 1);
    e.Reserve(&failed, 1);
    view = HbmIndex{slot_keys.data(), slot_rows.data(), special.data(), cap - 1};
    Insert(e, host_keys.size());
  }
  void Insert(CudaExec& e, size_t n) {
    const size_t cap = view.mask + 1;
    e.Fill(slot_keys.data(), kEmptyKey, cap);
    e.Fill(special.data(), kNoRow, 1);
    e.Fill(failed.data(), 0u, 1);
    const HbmIndex idx = view;
    const uint64_t* k = keys.data();
    uint32_t* bad = failed.data();
    e.ForEach(n, [=] __device__(size_t i) {
      if (!idx.Insert(k[i], static_cast<uint32_t>(i))) AtomicAddU32(bad, 1);
    });
  }
};

}  // namespace

Status CudaIndexCheck(const std::vector<uint64_t>& keys, const std::vector<uint64_t>& probes,
                      std::vector<uint32_t>* found, std::vector<float>* acc) {
  std::string why;
  if (CudaDevices(&why) == 0) return FailedPreconditionError(why);
  auto status = std::make_shared<FirstError>();
  CudaExec e(0, GemmPrecision::kFp32, status);
  {
    DeviceIndex index;
    index.Build(e, keys);
    CudaExec::Buffer<uint64_t> p;
    CudaExec::Buffer<uint32_t> rows;
    CudaExec::Buffer<float> sums;
    e.Upload(&p, probes.data(), probes.size());
    e.Reserve(&rows, probes.size());
    e.Reserve(&sums, keys.size());
    e.Fill(sums.data(), 0.0f, keys.size());
    const HbmIndex idx = index.view;
    const uint64_t* pk = p.data();
    uint32_t* out = rows.data();
    float* s = sums.data();
    e.ForEach(probes.size(), [=] __device__(size_t i) {
      out[i] = idx.Find(pk[i]);
      const float one = 1.0f;
      idx.Accumulate(pk[i], &one, 1, s, 1);
    });
    uint32_t failed = 0;
    e.Download(&failed, index.failed.data(), 1);
    if (failed != 0) return InternalError(std::to_string(failed) + " inserts failed");
    found->resize(probes.size());
    acc->resize(keys.size());
    e.Download(found->data(), rows.data(), probes.size());
    e.Download(acc->data(), sums.data(), keys.size());
    e.Synchronize();
  }
  return status->Get();
}

StatusOr<IndexBench> CudaIndexBenchmark(size_t n_keys, size_t n_probes, uint32_t dim, int reps) {
  std::string why;
  if (CudaDevices(&why) == 0) return FailedPreconditionError(why);
  auto status = std::make_shared<FirstError>();
  IndexBench out;
  cudaDeviceProp prop;
  CTRBOX_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  out.device = prop.name;
  CudaExec e(0, GemmPrecision::kFp32, status);
  // Distinct keys (a bijective mix of 0..n-1), probes uniform over them.
  std::vector<uint64_t> keys(n_keys), probes(n_probes);
  for (size_t i = 0; i < n_keys; ++i) keys[i] = Mix64(i * 2 + 1);
  for (size_t i = 0; i < n_probes; ++i) probes[i] = keys[Mix64(~i) % n_keys];
  DeviceIndex index;
  index.Build(e, keys);
  CudaExec::Buffer<uint64_t> p;
  CudaExec::Buffer<uint32_t> rows;
  CudaExec::Buffer<float> emb, out_emb, grad, acc, copy_a, copy_b;
  e.Upload(&p, probes.data(), n_probes);
  e.Reserve(&rows, n_probes);
  e.Reserve(&emb, n_keys * dim);
  e.Reserve(&acc, n_keys * dim);
  e.Reserve(&out_emb, n_probes * dim);
  e.Reserve(&grad, n_probes * dim);
  e.Fill(emb.data(), 0.5f, n_keys * dim);
  e.Fill(acc.data(), 0.0f, n_keys * dim);
  e.Fill(grad.data(), 0.25f, n_probes * dim);
  const size_t copy_n = size_t{256} << 20;  // 1 GiB of floats
  e.Reserve(&copy_a, copy_n);
  e.Reserve(&copy_b, copy_n);
  e.Fill(copy_a.data(), 1.0f, copy_n);
  RETURN_IF_ERROR(status->Get());

  cudaEvent_t t0, t1;
  CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t0));
  CTRBOX_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t1));
  auto time = [&](auto&& body) -> double {  // median seconds of reps runs after a warm-up
    std::vector<double> s;
    for (int r = 0; r <= reps; ++r) {
      cudaEventRecord(t0, e.stream());
      body();
      cudaEventRecord(t1, e.stream());
      cudaEventSynchronize(t1);
      float ms = 0;
      cudaEventElapsedTime(&ms, t0, t1);
      if (r > 0) s.push_back(ms / 1e3);
    }
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  };
  const HbmIndex idx = index.view;
  const uint64_t* pk = p.data();
  uint32_t* row_out = rows.data();
  const float* e_in = emb.data();
  float* e_out = out_emb.data();
  const float* g_in = grad.data();
  float* a = acc.data();
  const size_t np = n_probes;
  const uint32_t d = dim;
  const double insert_s = time([&] { index.Insert(e, n_keys); });
  const double find_s =
      time([&] { e.ForEach(np, [=] __device__(size_t i) { row_out[i] = idx.Find(pk[i]); }); });
  // One thread per (probe, element): the lookup repeats per element, as the gather of the
  // step's exchange does (rows found once per pass there; here every time).
  const double gather_s = time([&] {
    e.ForEach(np * d, [=] __device__(size_t i) {
      const size_t k = i / d, j = i % d;
      const uint32_t r = idx.Find(pk[k]);
      e_out[i] = e_in[size_t{r} * d + j];
    });
  });
  const double acc_s = time([&] {
    e.ForEach(np, [=] __device__(size_t i) { idx.Accumulate(pk[i], g_in + i * d, d, a, d); });
  });
  const float* ca = copy_a.data();
  float* cb = copy_b.data();
  const double copy_s = time([&] {
    cudaMemcpyAsync(cb, ca, copy_n * sizeof(float), cudaMemcpyDeviceToDevice, e.stream());
  });
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  RETURN_IF_ERROR(status->Get());
  // Minimum bytes: the probe key (8), the slot's key and row (12), then the row's floats.
  const double row_bytes = 4.0 * dim;
  out.insert_keys_per_s = n_keys / insert_s;
  out.find_keys_per_s = np / find_s;
  out.gather_keys_per_s = np / gather_s;
  out.gather_bytes_per_s = np * (20.0 + 2 * row_bytes) / gather_s;  // read row, write copy
  out.accumulate_keys_per_s = np / acc_s;
  out.accumulate_bytes_per_s = np * (20.0 + 3 * row_bytes) / acc_s;  // read grad, row RMW
  out.copy_bytes_per_s = 2.0 * copy_n * sizeof(float) / copy_s;
  return out;
}

StatusOr<std::unique_ptr<GpuTrainer>> CreateCudaTrainer(CtrModel* model,
                                                        const CtrAccessor& accessor,
                                                        const GpuOptions& options) {
  std::string why;
  const int devices = CudaDevices(&why);
  if (devices == 0) return FailedPreconditionError("device: gpu: " + why);
  auto trainer = std::make_unique<CudaGpuTrainer>(options, devices);
  RETURN_IF_ERROR(trainer->Init(model, accessor));
  return std::unique_ptr<GpuTrainer>(std::move(trainer));
}

}  // namespace ctrbox
