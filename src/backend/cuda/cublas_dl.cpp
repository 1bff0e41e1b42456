// cuBLAS loaded at run time (see cublas_dl.h).
#include "backend/cuda/cublas_dl.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <mutex>

#include "perfx/status.h"

namespace perfx::cuda {
namespace {

template <typename F>
void resolve(void* h, const std::string& lib, const char* sym, F& out) {
  dlerror();
  void* p = dlsym(h, sym);
  if (!p) {
    const char* why = dlerror();
    throw Error("cuBLAS library " + lib + " lacks " + sym + (why ? std::string(": ") + why : ""));
  }
  out = reinterpret_cast<F>(p);
}

/// The folder of the shared libcudart this program calls ("" when cudart is linked statically
/// or the address cannot be attributed).
std::string cudart_dir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) || !info.dli_fname) return "";
  const std::string f = info.dli_fname;
  if (f.find("libcudart") == std::string::npos) return "";
  const size_t slash = f.rfind('/');
  return slash == std::string::npos ? "" : f.substr(0, slash);
}

}  // namespace

std::string cublas_soname() {
  return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
}

CublasApi load_cublas(const std::string& lib) {
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    throw Error("cannot load cuBLAS (" + lib + "): " + (why ? why : "dlopen failed"));
  }
  CublasApi api;
  resolve(h, lib, "cublasCreate_v2", api.create);
  resolve(h, lib, "cublasDestroy_v2", api.destroy);
  resolve(h, lib, "cublasSetStream_v2", api.set_stream);
  resolve(h, lib, "cublasSetWorkspace_v2", api.set_workspace);
  resolve(h, lib, "cublasGemmEx", api.gemm_ex);
  return api;
}

const CublasApi& cublas() {
  static std::mutex mu;
  static CublasApi api;  // loaded once api.create is set (load_cublas sets all or throws)
  std::lock_guard<std::mutex> lock(mu);
  if (api.create) return api;
  const std::string name = cublas_soname();
  try {
    api = load_cublas(name);
  } catch (const Error& first) {
    const std::string dir = cudart_dir();
    if (dir.empty()) throw;
    try {
      api = load_cublas(dir + "/" + name);
    } catch (const Error& second) {
      throw Error(std::string(first.what()) + "; beside libcudart: " + second.what());
    }
  }
  return api;
}

}  // namespace perfx::cuda
