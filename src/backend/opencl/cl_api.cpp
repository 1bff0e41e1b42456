#include "backend/opencl/cl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "perfx/status.h"

namespace perfx::opencl {
namespace {

struct Loaded {
  ClApi api;
  std::string error;  // empty when loaded
};

Loaded load() {
  Loaded l;
  std::vector<std::string> paths;
  const char* env = std::getenv("PERFX_OPENCL_LIBRARY");
  if (env && *env) {
    paths.emplace_back(env);  // an explicit choice: nothing else
  } else {
    for (const char* p : {"libOpenCL.so.1", "libOpenCL.so", "/vendor/lib64/libOpenCL.so",
                          "/system/vendor/lib64/libOpenCL.so", "/system/lib64/libOpenCL.so"})
      paths.emplace_back(p);
  }
  void* h = nullptr;
  std::string tried;
  for (const auto& p : paths) {
    h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) break;
    tried += (tried.empty() ? "" : ", ") + p;
  }
  if (!h) {
    l.error = "no OpenCL platform: no OpenCL library could be loaded (tried " + tried +
              (env && *env ? " from PERFX_OPENCL_LIBRARY)"
                           : "; install an ICD loader and a driver, e.g. Debian's "
                             "pocl-opencl-icd, or set PERFX_OPENCL_LIBRARY)");
    return l;
  }
#define PERFX_CL_LOAD(f)                                                           \
  l.api.f = reinterpret_cast<decltype(&::f)>(::dlsym(h, #f));                      \
  if (!l.api.f && l.error.empty())                                                 \
    l.error = std::string("no OpenCL platform: the OpenCL library has no ") + #f + \
              " (it is older than OpenCL 1.2)";
  PERFX_CL_FUNCTIONS(PERFX_CL_LOAD)
#undef PERFX_CL_LOAD
  return l;  // the handle stays open for the life of the process
}

}  // namespace

const ClApi& cl() {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) throw Error(loaded.error);
  return loaded.api;
}

std::string cl_error_name(cl_int code) {
  const char* n = nullptr;
  switch (code) {
#define PERFX_CASE(c) \
  case c:             \
    n = #c;           \
    break;
    PERFX_CASE(CL_SUCCESS)
    PERFX_CASE(CL_DEVICE_NOT_FOUND)
    PERFX_CASE(CL_DEVICE_NOT_AVAILABLE)
    PERFX_CASE(CL_COMPILER_NOT_AVAILABLE)
    PERFX_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    PERFX_CASE(CL_OUT_OF_RESOURCES)
    PERFX_CASE(CL_OUT_OF_HOST_MEMORY)
    PERFX_CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
    PERFX_CASE(CL_MEM_COPY_OVERLAP)
    PERFX_CASE(CL_IMAGE_FORMAT_MISMATCH)
    PERFX_CASE(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    PERFX_CASE(CL_BUILD_PROGRAM_FAILURE)
    PERFX_CASE(CL_MAP_FAILURE)
    PERFX_CASE(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    PERFX_CASE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    PERFX_CASE(CL_COMPILE_PROGRAM_FAILURE)
    PERFX_CASE(CL_LINKER_NOT_AVAILABLE)
    PERFX_CASE(CL_LINK_PROGRAM_FAILURE)
    PERFX_CASE(CL_INVALID_VALUE)
    PERFX_CASE(CL_INVALID_DEVICE_TYPE)
    PERFX_CASE(CL_INVALID_PLATFORM)
    PERFX_CASE(CL_INVALID_DEVICE)
    PERFX_CASE(CL_INVALID_CONTEXT)
    PERFX_CASE(CL_INVALID_QUEUE_PROPERTIES)
    PERFX_CASE(CL_INVALID_COMMAND_QUEUE)
    PERFX_CASE(CL_INVALID_HOST_PTR)
    PERFX_CASE(CL_INVALID_MEM_OBJECT)
    PERFX_CASE(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    PERFX_CASE(CL_INVALID_IMAGE_SIZE)
    PERFX_CASE(CL_INVALID_SAMPLER)
    PERFX_CASE(CL_INVALID_BINARY)
    PERFX_CASE(CL_INVALID_BUILD_OPTIONS)
    PERFX_CASE(CL_INVALID_PROGRAM)
    PERFX_CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    PERFX_CASE(CL_INVALID_KERNEL_NAME)
    PERFX_CASE(CL_INVALID_KERNEL_DEFINITION)
    PERFX_CASE(CL_INVALID_KERNEL)
    PERFX_CASE(CL_INVALID_ARG_INDEX)
    PERFX_CASE(CL_INVALID_ARG_VALUE)
    PERFX_CASE(CL_INVALID_ARG_SIZE)
    PERFX_CASE(CL_INVALID_KERNEL_ARGS)
    PERFX_CASE(CL_INVALID_WORK_DIMENSION)
    PERFX_CASE(CL_INVALID_WORK_GROUP_SIZE)
    PERFX_CASE(CL_INVALID_WORK_ITEM_SIZE)
    PERFX_CASE(CL_INVALID_GLOBAL_OFFSET)
    PERFX_CASE(CL_INVALID_EVENT_WAIT_LIST)
    PERFX_CASE(CL_INVALID_EVENT)
    PERFX_CASE(CL_INVALID_OPERATION)
    PERFX_CASE(CL_INVALID_BUFFER_SIZE)
    PERFX_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
    PERFX_CASE(CL_INVALID_PROPERTY)
    PERFX_CASE(CL_INVALID_IMAGE_DESCRIPTOR)
    PERFX_CASE(CL_INVALID_COMPILER_OPTIONS)
    PERFX_CASE(CL_INVALID_LINKER_OPTIONS)
    PERFX_CASE(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef PERFX_CASE
    case -1001:
      n = "CL_PLATFORM_NOT_FOUND_KHR";
      break;
    default:
      n = "unknown OpenCL error";
  }
  return std::string(n) + " (" + std::to_string(code) + ")";
}

void cl_check(cl_int code, const std::string& what) {
  if (code != CL_SUCCESS) throw Error("OpenCL error in " + what + ": " + cl_error_name(code));
}

}  // namespace perfx::opencl
