// cuBLAS loaded at run time (src/backend/cuda/cublas_dl.h): not mapped into a program of the CUDA
// build until the backend asks for it, every entry point resolved then, and a clear error naming
// the library when it cannot be loaded or is not cuBLAS. Needs the CUDA toolkit's libcublas (the
// CUDA build's own requirement), no GPU.
#include "backend/cuda/cublas_dl.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "perfx/status.h"

namespace perfx::cuda {
namespace {

bool cublas_mapped() {
  std::ifstream f("/proc/self/maps");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str().find("libcublas") != std::string::npos;
}

std::string error_of(const std::string& lib) {
  try {
    (void)load_cublas(lib);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CublasDl, NotMappedUntilLoadedThenEveryEntryPointResolves) {
  // Linking libcublas (as the backend did) maps it, and runs libcublasLt's ~0.5 s of static
  // initializers, at every start of every program of the build.
  ASSERT_FALSE(cublas_mapped()) << "libcublas is mapped before the backend asked for it";
  const CublasApi& api = cublas();
  EXPECT_TRUE(cublas_mapped());
  // Each entry is the symbol of its own name in the library now loaded (a table that resolved
  // one name into another's slot, or left one null, fails here).
  void* h = dlopen(cublas_soname().c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr) << "cublas() returned, but " << cublas_soname() << " is not loaded";
  EXPECT_EQ(reinterpret_cast<void*>(api.create), dlsym(h, "cublasCreate_v2"));
  EXPECT_EQ(reinterpret_cast<void*>(api.destroy), dlsym(h, "cublasDestroy_v2"));
  EXPECT_EQ(reinterpret_cast<void*>(api.set_stream), dlsym(h, "cublasSetStream_v2"));
  EXPECT_EQ(reinterpret_cast<void*>(api.set_workspace), dlsym(h, "cublasSetWorkspace_v2"));
  EXPECT_EQ(reinterpret_cast<void*>(api.gemm_ex), dlsym(h, "cublasGemmEx"));
  dlclose(h);  // drops only the reference RTLD_NOLOAD took
  EXPECT_EQ(&cublas(), &api);
  EXPECT_EQ(cublas_soname(), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
}

TEST(CublasDl, ErrorsNameTheLibraryAndTheReason) {
  const std::string missing = error_of("libperfx_no_such_cublas.so.1");
  EXPECT_NE(missing.find("cannot load cuBLAS (libperfx_no_such_cublas.so.1)"), std::string::npos)
      << missing;
  const std::string not_cublas = error_of("libm.so.6");  // loads, but is not cuBLAS
  EXPECT_NE(not_cublas.find("libm.so.6 lacks cublasCreate_v2"), std::string::npos) << not_cublas;
}

}  // namespace
}  // namespace perfx::cuda
