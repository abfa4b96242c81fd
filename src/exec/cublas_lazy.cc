#include "exec/cublas_lazy.h"

#include <dlfcn.h>

#include <mutex>

namespace ctrbox::cublas_lazy {
namespace {

// The two libraries, opened together once: cuBLAS needs cuBLASLt anyway.
struct Libraries {
  void* blas = nullptr;
  void* lt = nullptr;
  std::string error;  // "" when both opened
};

void* Open(const char* stem, std::string* error) {
  const std::string names[] = {std::string(stem) + ".so." + std::to_string(CUBLAS_VER_MAJOR),
                               std::string(stem) + ".so"};
  for (const std::string& name : names) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* why = dlerror();
    *error += (error->empty() ? "" : "; ") + name + ": " + (why != nullptr ? why : "not found");
  }
  return nullptr;
}

std::once_flag opened;
Libraries* libraries = nullptr;

const Libraries& Get() {
  std::call_once(opened, [] {
    auto* l = new Libraries;  // (for the process's life: its symbols are called until exit)
    std::string error;
    l->lt = Open("libcublasLt", &error);
    if (l->lt != nullptr) l->blas = Open("libcublas", &error);
    if (l->lt == nullptr || l->blas == nullptr) l->error = "cuBLAS could not be loaded: " + error;
    libraries = l;
  });
  return *libraries;
}

template <class F>
F* Symbol(bool lt, const char* name) {
  const Libraries& l = Get();
  void* h = lt ? l.lt : l.blas;
  return h != nullptr ? reinterpret_cast<F*>(dlsym(h, name)) : nullptr;
}

}  // namespace

const std::string& LoadError() {
  static const std::string error = [] {
    std::string e = Get().error;
    // Every symbol the wrappers call, resolved now: a missing one is said here, not later.
    for (const char* name : {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                             "cublasGemmEx", "cublasGetStatusName", "cublasGetStatusString"}) {
      if (e.empty() && Symbol<void>(false, name) == nullptr) e = std::string("no ") + name;
    }
    for (const char* name :
         {"cublasLtCreate", "cublasLtDestroy", "cublasLtMatmul", "cublasLtMatmulAlgoGetHeuristic",
          "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy", "cublasLtMatmulDescSetAttribute",
          "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
          "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatrixLayoutCreate",
          "cublasLtMatrixLayoutDestroy"}) {
      if (e.empty() && Symbol<void>(true, name) == nullptr) e = std::string("no ") + name;
    }
    return e;
  }();
  return error;
}

bool Loaded() {
  // (Without opening them: RTLD_NOLOAD finds the library only if it is mapped already.)
  const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}

// Each wrapper calls the library's function of its own type (decltype of the wrapper, found
// first in this namespace; cublas_v2.h maps cublasCreate and friends to their _v2 symbols).
#define CTRBOX_CALL(lt, symbol, wrapper, ...)                    \
  static auto* const fn = Symbol<decltype(wrapper)>(lt, symbol); \
  return fn != nullptr ? fn(__VA_ARGS__) : CUBLAS_STATUS_NOT_INITIALIZED

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  CTRBOX_CALL(false, "cublasCreate_v2", cublasCreate, handle);
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  CTRBOX_CALL(false, "cublasDestroy_v2", cublasDestroy, handle);
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  CTRBOX_CALL(false, "cublasSetStream_v2", cublasSetStream, handle, stream);
}
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  CTRBOX_CALL(false, "cublasGemmEx", cublasGemmEx, handle, transa, transb, m, n, k, alpha, A, Atype,
              lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo);
}
const char* cublasGetStatusName(cublasStatus_t status) {
  static auto* const fn = Symbol<decltype(cublasGetStatusName)>(false, "cublasGetStatusName");
  return fn != nullptr ? fn(status) : "CUBLAS_NOT_LOADED";
}
const char* cublasGetStatusString(cublasStatus_t status) {
  static auto* const fn = Symbol<decltype(cublasGetStatusString)>(false, "cublasGetStatusString");
  return fn != nullptr ? fn(status) : LoadError().c_str();
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  CTRBOX_CALL(true, "cublasLtCreate", cublasLtCreate, handle);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  CTRBOX_CALL(true, "cublasLtDestroy", cublasLtDestroy, handle);
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  CTRBOX_CALL(true, "cublasLtMatmul", cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta,
              C, Cdesc, D, Ddesc, algo, workspace, workspaceSizeInBytes, stream);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  CTRBOX_CALL(true, "cublasLtMatmulAlgoGetHeuristic", cublasLtMatmulAlgoGetHeuristic, handle,
              operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
              heuristicResultsArray, returnAlgoCount);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  CTRBOX_CALL(true, "cublasLtMatmulDescCreate", cublasLtMatmulDescCreate, matmulDesc, computeType,
              scaleType);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  CTRBOX_CALL(true, "cublasLtMatmulDescDestroy", cublasLtMatmulDescDestroy, matmulDesc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  CTRBOX_CALL(true, "cublasLtMatmulDescSetAttribute", cublasLtMatmulDescSetAttribute, matmulDesc,
              attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  CTRBOX_CALL(true, "cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate, pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  CTRBOX_CALL(true, "cublasLtMatmulPreferenceDestroy", cublasLtMatmulPreferenceDestroy, pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  CTRBOX_CALL(true, "cublasLtMatmulPreferenceSetAttribute", cublasLtMatmulPreferenceSetAttribute,
              pref, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  CTRBOX_CALL(true, "cublasLtMatrixLayoutCreate", cublasLtMatrixLayoutCreate, matLayout, type, rows,
              cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  CTRBOX_CALL(true, "cublasLtMatrixLayoutDestroy", cublasLtMatrixLayoutDestroy, matLayout);
}

}  // namespace ctrbox::cublas_lazy
