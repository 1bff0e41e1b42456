// The OpenCL API, loaded at run time. The backend never links libOpenCL: it dlopen()s the ICD
// loader (or, on Android, the vendor's libOpenCL.so) on first use and looks up the OpenCL 1.2
// functions it calls. A binary built with -DPERFX_OPENCL=ON therefore starts on a machine with no
// OpenCL at all and reports "no OpenCL platform" in one line when asked for an OpenCL device, and
// cross builds (aarch64, Android) need only the Khronos headers.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120  // the API this backend uses (OpenCL 1.2)
#endif
#include <CL/cl.h>

#include <string>

namespace perfx::opencl {

// Every OpenCL entry point the backend uses (all OpenCL 1.2 core).
#define PERFX_CL_FUNCTIONS(X)   \
  X(clGetPlatformIDs)           \
  X(clGetPlatformInfo)          \
  X(clGetDeviceIDs)             \
  X(clGetDeviceInfo)            \
  X(clCreateContext)            \
  X(clReleaseContext)           \
  X(clCreateCommandQueue)       \
  X(clReleaseCommandQueue)      \
  X(clCreateBuffer)             \
  X(clCreateImage)              \
  X(clGetSupportedImageFormats) \
  X(clReleaseMemObject)         \
  X(clCreateProgramWithSource)  \
  X(clCreateProgramWithBinary)  \
  X(clBuildProgram)             \
  X(clGetProgramBuildInfo)      \
  X(clGetProgramInfo)           \
  X(clReleaseProgram)           \
  X(clCreateKernel)             \
  X(clReleaseKernel)            \
  X(clSetKernelArg)             \
  X(clGetKernelWorkGroupInfo)   \
  X(clEnqueueNDRangeKernel)     \
  X(clEnqueueWriteBuffer)       \
  X(clEnqueueReadBuffer)        \
  X(clEnqueueCopyBuffer)        \
  X(clEnqueueFillBuffer)        \
  X(clFinish)                   \
  X(clFlush)                    \
  X(clWaitForEvents)            \
  X(clGetEventProfilingInfo)    \
  X(clReleaseEvent)

/// Function pointers into the loaded library, named as the OpenCL functions they point to.
struct ClApi {
#define PERFX_CL_DECLARE(f) decltype(&::f) f = nullptr;
  PERFX_CL_FUNCTIONS(PERFX_CL_DECLARE)
#undef PERFX_CL_DECLARE
};

/// The loaded API. The library is found, in order: $PERFX_OPENCL_LIBRARY, libOpenCL.so.1,
/// libOpenCL.so, then Android's vendor paths (/vendor/lib64/libOpenCL.so, ...). Loaded once per
/// process. Throws perfx::Error "no OpenCL platform: ..." when no library loads or one lacks a
/// function (naming the paths tried or the function).
const ClApi& cl();

/// "CL_OUT_OF_RESOURCES (-5)" for an OpenCL status code.
std::string cl_error_name(cl_int code);

/// Throws perfx::Error "OpenCL error in <what>: <name>" when code != CL_SUCCESS.
void cl_check(cl_int code, const std::string& what);

}  // namespace perfx::opencl
