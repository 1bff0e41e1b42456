// The OpenCL C sources of src/backend/opencl/kernels/, embedded into the binary at build time
// (cmake/embed_opencl.cmake writes the definitions into build/generated/).
#pragma once

#include <string>

namespace perfx::opencl {

/// One embedded kernel file: its file name ("gemv.cl") and full text.
struct KernelSource {
  const char* name;
  const char* text;
};

/// The embedded file called `name` (e.g. "common.cl"), or nullptr when there is none.
const KernelSource* find_kernel_source(const std::string& name);

}  // namespace perfx::opencl
