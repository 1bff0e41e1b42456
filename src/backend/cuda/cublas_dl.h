// cuBLAS loaded at run time (dlopen) by the CUDA backend the first time it is created, instead of
// linked into every program. libcublas pulls in libcublasLt, whose static initializers cost
// ~0.5 s at each start of any program linked against it (an empty main linked with -lcublasLt:
// 0.50 s; with -lcudart alone: 0.012 s), so a CUDA build paid that on `perfx --help`,
// `--device cpu` runs and every server start. The backend uses five entry points (dense fp16 /
// bf16 weights' GEMM); nothing else of cuBLAS.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace perfx::cuda {

/// The cuBLAS entry points the backend calls (cublas_v2.h's functions, as its macros name them).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // cublasGemmEx is overloaded in C++ (an inline cudaDataType-compute variant): the C signature.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                            const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) = nullptr;
};

/// The soname this build was compiled against: "libcublas.so.<CUBLAS_VER_MAJOR>".
std::string cublas_soname();

/// dlopens `lib` (a soname, searched as the dynamic loader searches, or a path) and resolves the
/// five entry points. Throws perfx::Error naming `lib` and dlerror()'s reason when the library
/// cannot be loaded or lacks one of them. The handle is never closed.
CublasApi load_cublas(const std::string& lib);

/// The process's cuBLAS, loaded on the first call (thread-safe; later calls return the same
/// table): cublas_soname() from the loader's search path, else the same file beside the
/// libcudart this program uses (a toolkit's lib folder holds both). Throws perfx::Error naming the
/// library and both attempts' reasons when neither loads; a later call tries again.
const CublasApi& cublas();

}  // namespace perfx::cuda
