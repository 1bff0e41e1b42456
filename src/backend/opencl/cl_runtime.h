// OpenCL plumbing under the backend: which devices exist (and in what order `opencl:N` names
// them), one context + in-order queue per backend, kernels built from the embedded sources once
// per device and cached on disk, a per-device tuning file, and a small kernel-launch helper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/opencl/cl_api.h"

namespace perfx::opencl {

/// What the backend needs to know about one device.
struct DeviceInfo {
  cl_platform_id platform = nullptr;
  cl_device_id id = nullptr;
  std::string platform_name, platform_version;
  std::string name, vendor, version, driver, c_version, extensions;
  cl_device_type type = 0;
  uint64_t global_mem = 0;         // CL_DEVICE_GLOBAL_MEM_SIZE
  uint64_t max_alloc = 0;          // CL_DEVICE_MAX_MEM_ALLOC_SIZE
  uint64_t local_mem = 0;          // CL_DEVICE_LOCAL_MEM_SIZE
  uint64_t global_cache = 0;       // CL_DEVICE_GLOBAL_MEM_CACHE_SIZE
  size_t max_work_group = 0;       // CL_DEVICE_MAX_WORK_GROUP_SIZE
  unsigned compute_units = 0;      // CL_DEVICE_MAX_COMPUTE_UNITS
  unsigned base_align = 0;         // CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes
  bool images = false;             // CL_DEVICE_IMAGE_SUPPORT
  size_t image_buffer_pixels = 0;  // CL_DEVICE_IMAGE_MAX_BUFFER_SIZE
  bool fp16 = false;               // cl_khr_fp16
  bool subgroups = false;          // cl_khr_subgroups
  bool is_gpu() const { return (type & CL_DEVICE_TYPE_GPU) != 0; }
  bool has_extension(const std::string& e) const;
  /// "NVIDIA H200 [NVIDIA CUDA]".
  std::string label() const;
};

/// Every OpenCL device of every platform, in `opencl:N` order: GPUs first, then accelerators, then
/// CPUs, each kind in platform then device order. $PERFX_OPENCL_PLATFORM (a case-insensitive
/// substring of the platform name, e.g. "nvidia" or "portable") keeps only matching platforms.
/// Throws perfx::Error "no OpenCL platform ..." / "no OpenCL device ..." (one line each).
std::vector<DeviceInfo> list_devices();

/// Device `index` of list_devices(); perfx::Error naming the devices there when out of range.
DeviceInfo select_device(int index);

/// A context and one in-order queue (profiling enabled) on one device, plus its kernels.
class Context {
 public:
  explicit Context(DeviceInfo dev);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& dev() const { return dev_; }
  cl_context ctx() const { return ctx_; }
  cl_command_queue queue() const { return queue_; }

  /// Kernel `kernel` of kernels/<file> (common.cl is prepended) built with `options` (-D...). The
  /// program is built once per (file, options) in this process, and its binary is cached on disk
  /// under cache_dir() keyed by platform, device, driver, source text and options. Throws
  /// perfx::Error "OpenCL kernel <file> failed to build for <device>: <first log lines>".
  cl_kernel kernel(const std::string& file, const std::string& kernel, const std::string& options);
  /// The kernel's CL_KERNEL_WORK_GROUP_SIZE (the largest work-group it can run with).
  size_t kernel_max_work_group(cl_kernel k) const;

  /// $PERFX_OPENCL_CACHE_DIR, else $XDG_CACHE_HOME/perfx/opencl, else ~/.cache/perfx/opencl;
  /// empty when caching is off (PERFX_OPENCL_CACHE=0) or no folder can be made.
  const std::string& cache_dir() const { return cache_dir_; }

  /// A tuned value stored for this device under `key`, or -1. Tuning results live in one text file
  /// per device beside the cached binaries ("key value" lines).
  int tuned(const std::string& key) const;
  void set_tuned(const std::string& key, int value);
  /// A short hash of kernel file `file` as built (with common.cl and its #includes) and of
  /// $PERFX_OPENCL_BUILD_OPTIONS: tuning keys carry it, so a changed kernel is tuned again.
  std::string source_tag(const std::string& file) const;

 private:
  cl_program build(const std::string& file, const std::string& options);
  std::string device_key() const;

  DeviceInfo dev_;
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::string cache_dir_;
  std::map<std::string, cl_program> programs_;  // file + options
  std::map<std::string, cl_kernel> kernels_;    // file + options + kernel
  std::map<std::string, int> tuning_;
};

/// Sets a kernel's arguments in order and enqueues it: Launch(ctx, k).arg(buf).arg(n).run(...).
class Launch {
 public:
  Launch(Context& c, cl_kernel k) : c_(c), k_(k) {}
  template <typename T>
  Launch& arg(const T& v) {
    set(sizeof(T), &v);
    return *this;
  }
  /// A __local buffer of `bytes`.
  Launch& local(size_t bytes) {
    set(bytes, nullptr);
    return *this;
  }
  /// Enqueues over `global` work-items (each rounded up to a multiple of `local`) in work-groups of
  /// `local`; `dims` 1..3. `event`: when not null, receives the command's event (caller releases).
  void run(int dims, const size_t* global, const size_t* local, const char* what,
           cl_event* event = nullptr);

 private:
  void set(size_t size, const void* value);
  Context& c_;
  cl_kernel k_;
  cl_uint index_ = 0;
};

/// The one-line message for an enqueue of `what` on device `device` (its label) that returned `e`:
/// CL_MEM_OBJECT_ALLOCATION_FAILURE reads "out of device memory on ...", CL_OUT_OF_HOST_MEMORY
/// "out of host memory running ...";
/// CL_OUT_OF_RESOURCES "... ran out of resources ...", naming what that code covers (device memory,
/// the work-group's registers or local memory, and on some drivers an earlier kernel's fault),
/// since it is not always memory; any other code "OpenCL error in enqueueing <what>: <name>".
std::string launch_error(cl_int e, const std::string& device, const std::string& what);

/// 64-bit FNV-1a of `s`, continuing from `h`.
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull);

}  // namespace perfx::opencl
