#include "backend/opencl/cl_runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "backend/opencl/kernel_sources.h"
#include "backend/opencl/quiet_stderr.h"
#include "perfx/status.h"

namespace perfx::opencl {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

std::string platform_str(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (cl().clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (cl().clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string device_str(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (cl().clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (cl().clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

template <typename T>
T device_val(cl_device_id d, cl_device_info what) {
  T v{};
  if (cl().clGetDeviceInfo(d, what, sizeof(T), &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

DeviceInfo describe(cl_platform_id p, cl_device_id d) {
  DeviceInfo i;
  i.platform = p;
  i.id = d;
  i.platform_name = platform_str(p, CL_PLATFORM_NAME);
  i.platform_version = platform_str(p, CL_PLATFORM_VERSION);
  i.name = device_str(d, CL_DEVICE_NAME);
  i.vendor = device_str(d, CL_DEVICE_VENDOR);
  i.version = device_str(d, CL_DEVICE_VERSION);
  i.driver = device_str(d, CL_DRIVER_VERSION);
  i.c_version = device_str(d, CL_DEVICE_OPENCL_C_VERSION);
  i.extensions = " " + device_str(d, CL_DEVICE_EXTENSIONS) + " ";
  i.type = device_val<cl_device_type>(d, CL_DEVICE_TYPE);
  i.global_mem = device_val<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
  i.max_alloc = device_val<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  i.local_mem = device_val<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE);
  i.global_cache = device_val<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE);
  i.max_work_group = device_val<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  i.compute_units = device_val<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS);
  i.base_align = device_val<cl_uint>(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;
  i.images = device_val<cl_bool>(d, CL_DEVICE_IMAGE_SUPPORT) == CL_TRUE;
  i.image_buffer_pixels = device_val<size_t>(d, CL_DEVICE_IMAGE_MAX_BUFFER_SIZE);
  i.fp16 = i.has_extension("cl_khr_fp16");
  i.subgroups = i.has_extension("cl_khr_subgroups");
  return i;
}

int kind_rank(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return 0;
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return 1;
  return 2;
}

bool make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::access(path.c_str(), W_OK) == 0;
}

std::string default_cache_dir() {
  if (const char* c = std::getenv("PERFX_OPENCL_CACHE"); c && std::string(c) == "0") return "";
  std::string dir;
  if (const char* d = std::getenv("PERFX_OPENCL_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/perfx/opencl";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/perfx/opencl";
  } else {
    return "";
  }
  return make_dirs(dir) ? dir : "";
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

bool read_all(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

/// Writes via a temporary file and rename, so a concurrent reader never sees half a file.
void write_atomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f.write(data.data(), (std::streamsize)data.size());
    if (!f) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

/// The first lines of a build log joined by " | " (one error line).
std::string log_head(const std::string& log, int max_lines) {
  std::istringstream ss(log);
  std::string line, out;
  int n = 0;
  while (n < max_lines && std::getline(ss, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    out += (out.empty() ? "" : " | ") + line;
    ++n;
  }
  return out.empty() ? "(empty build log)" : out;
}

/// The embedded file `name` with its `#include "x.cl"` lines replaced by those files' text (the
/// OpenCL compiler sees one string and no file system).
std::string expand(const std::string& name, int depth) {
  const KernelSource* src = find_kernel_source(name);
  check(src != nullptr, "OpenCL kernel file " + name + " is not embedded in this build");
  check(depth < 8, "OpenCL kernel file " + name + ": #include nested too deeply");
  std::istringstream in(src->text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("#include \"", 0) == 0) {
      const size_t a = line.find('"') + 1, b = line.find('"', a);
      out += expand(line.substr(a, b - a), depth + 1) + "\n";
    } else {
      out += line + "\n";
    }
  }
  return out;
}

}  // namespace

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool DeviceInfo::has_extension(const std::string& e) const {
  return extensions.find(" " + e + " ") != std::string::npos;
}

std::string DeviceInfo::label() const {
  return name + " [" + platform_name + "]";
}

std::vector<DeviceInfo> list_devices() {
  const ClApi& api = cl();
  cl_uint np = 0;
  const cl_int e = api.clGetPlatformIDs(0, nullptr, &np);
  if (e == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (e == CL_SUCCESS && np == 0))
    throw Error(
        "no OpenCL platform: the OpenCL loader found no driver (no ICD in /etc/OpenCL/vendors; "
        "install one, e.g. Debian's pocl-opencl-icd)");
  cl_check(e, "clGetPlatformIDs");
  std::vector<cl_platform_id> plats(np);
  cl_check(api.clGetPlatformIDs(np, plats.data(), nullptr), "clGetPlatformIDs");
  const char* filter = std::getenv("PERFX_OPENCL_PLATFORM");
  const std::string want = filter ? lower(filter) : "";
  std::string names;
  std::vector<DeviceInfo> devs;
  bool any_platform = false;
  for (cl_platform_id p : plats) {
    const std::string pname = platform_str(p, CL_PLATFORM_NAME);
    names += (names.empty() ? "" : ", ") + pname;
    if (!want.empty() && lower(pname).find(want) == std::string::npos) continue;
    any_platform = true;
    cl_uint nd = 0;
    if (api.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0)
      continue;
    std::vector<cl_device_id> ids(nd);
    if (api.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ids.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id d : ids) devs.push_back(describe(p, d));
  }
  if (!any_platform)
    throw Error("no OpenCL platform matches PERFX_OPENCL_PLATFORM='" + std::string(filter) +
                "' (platforms: " + names + ")");
  if (devs.empty()) throw Error("no OpenCL device: the OpenCL platforms (" + names + ") have none");
  std::stable_sort(devs.begin(), devs.end(), [](const DeviceInfo& a, const DeviceInfo& b) {
    return kind_rank(a.type) < kind_rank(b.type);
  });
  return devs;
}

DeviceInfo select_device(int index) {
  auto devs = list_devices();
  if (index < 0 || index >= (int)devs.size()) {
    std::string all;
    for (size_t i = 0; i < devs.size(); ++i)
      all += (i ? ", " : "") + std::string("opencl:") + std::to_string(i) + " = " + devs[i].label();
    throw Error("device 'opencl:" + std::to_string(index) + "' is out of range: this machine has " +
                std::to_string(devs.size()) + " OpenCL device" + (devs.size() == 1 ? "" : "s") +
                " (" + all + ")");
  }
  return devs[(size_t)index];
}

Context::Context(DeviceInfo dev) : dev_(std::move(dev)) {
  const ClApi& api = cl();
  cl_int e = CL_SUCCESS;
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev_.platform,
                                         0};
  ctx_ = api.clCreateContext(props, 1, &dev_.id, nullptr, nullptr, &e);
  cl_check(e, "clCreateContext on " + dev_.label());
  queue_ = api.clCreateCommandQueue(ctx_, dev_.id, CL_QUEUE_PROFILING_ENABLE, &e);
  if (e != CL_SUCCESS) {
    api.clReleaseContext(ctx_);
    cl_check(e, "clCreateCommandQueue on " + dev_.label());
  }
  cache_dir_ = default_cache_dir();
  if (!cache_dir_.empty()) {
    std::string text;
    if (read_all(cache_dir_ + "/" + device_key() + ".tune", &text)) {
      // one "key value" per line, the value after the last space (a key may hold spaces); a
      // malformed line is skipped, never the rest of the file
      std::istringstream ss(text);
      std::string line;
      while (std::getline(ss, line)) {
        const size_t sp = line.rfind(' ');
        if (sp == std::string::npos || sp == 0) continue;
        try {
          size_t used = 0;
          const int v = std::stoi(line.substr(sp + 1), &used);
          if (used == line.size() - sp - 1) tuning_[line.substr(0, sp)] = v;
        } catch (const std::exception&) {
        }
      }
    }
  }
}

Context::~Context() {
  const ClApi& api = cl();
  for (auto& [k, kern] : kernels_) api.clReleaseKernel(kern);
  for (auto& [k, p] : programs_) api.clReleaseProgram(p);
  if (queue_) {
    api.clFinish(queue_);
    api.clReleaseCommandQueue(queue_);
  }
  if (ctx_) api.clReleaseContext(ctx_);
}

std::string Context::device_key() const {
  const std::string id = dev_.platform_name + "\n" + dev_.platform_version + "\n" + dev_.name +
                         "\n" + dev_.version + "\n" + dev_.driver;
  return hex(fnv1a(id));
}

int Context::tuned(const std::string& key) const {
  auto it = tuning_.find(key);
  return it == tuning_.end() ? -1 : it->second;
}

void Context::set_tuned(const std::string& key, int value) {
  tuning_[key] = value;
  if (cache_dir_.empty()) return;
  std::string text;
  for (const auto& [k, v] : tuning_) text += k + " " + std::to_string(v) + "\n";
  write_atomically(cache_dir_ + "/" + device_key() + ".tune", text);
}

std::string Context::source_tag(const std::string& file) const {
  std::string text = expand("common.cl", 0) + "\n" + expand(file, 0);
  if (const char* extra = std::getenv("PERFX_OPENCL_BUILD_OPTIONS"); extra && *extra)
    text += std::string("\n") + extra;
  return hex(fnv1a(text)).substr(0, 8);
}

cl_program Context::build(const std::string& file, const std::string& options) {
  const ClApi& api = cl();
  const std::string text = expand("common.cl", 0) + "\n" + expand(file, 0);
  std::string opts = "-cl-std=CL1.2 " + options;
  if (const char* extra = std::getenv("PERFX_OPENCL_BUILD_OPTIONS"); extra && *extra)
    opts += std::string(" ") + extra;
  const std::string key = hex(fnv1a(text + "\n" + opts, fnv1a(device_key()))) +
                          hex(fnv1a(opts + "\n" + text + device_key()));
  const std::string path = cache_dir_.empty() ? "" : cache_dir_ + "/" + key + ".bin";
  cl_int e = CL_SUCCESS;
  // 1) a cached binary
  std::string bin;
  if (!path.empty() && read_all(path, &bin) && !bin.empty()) {
    const unsigned char* bp = reinterpret_cast<const unsigned char*>(bin.data());
    const size_t bn = bin.size();
    cl_int status = CL_SUCCESS;
    cl_program p = api.clCreateProgramWithBinary(ctx_, 1, &dev_.id, &bn, &bp, &status, &e);
    if (e == CL_SUCCESS && status == CL_SUCCESS &&
        api.clBuildProgram(p, 1, &dev_.id, opts.c_str(), nullptr, nullptr) == CL_SUCCESS)
      return p;
    if (p) api.clReleaseProgram(p);
    std::remove(path.c_str());  // stale or foreign: rebuild from source below
  }
  // 2) the source
  const char* tp = text.c_str();
  const size_t tn = text.size();
  cl_program p = api.clCreateProgramWithSource(ctx_, 1, &tp, &tn, &e);
  cl_check(e, "clCreateProgramWithSource(" + file + ")");
  {
    QuietStderr quiet;
    e = api.clBuildProgram(p, 1, &dev_.id, opts.c_str(), nullptr, nullptr);
  }
  if (e != CL_SUCCESS) {
    size_t n = 0;
    std::string log;
    if (api.clGetProgramBuildInfo(p, dev_.id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) == CL_SUCCESS &&
        n > 1) {
      log.resize(n);
      api.clGetProgramBuildInfo(p, dev_.id, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
      while (!log.empty() && log.back() == '\0') log.pop_back();
    }
    api.clReleaseProgram(p);
    throw Error("OpenCL kernel " + file + " failed to build for " + dev_.label() + " (" +
                cl_error_name(e) + "): " + log_head(log, 3));
  }
  // 3) store the binary for the next process
  if (!path.empty()) {
    size_t bn = 0;
    if (api.clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bn, &bn, nullptr) == CL_SUCCESS &&
        bn > 0) {
      std::string out(bn, '\0');
      unsigned char* op = reinterpret_cast<unsigned char*>(out.data());
      if (api.clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof op, &op, nullptr) == CL_SUCCESS)
        write_atomically(path, out);
    }
  }
  return p;
}

cl_kernel Context::kernel(const std::string& file, const std::string& name,
                          const std::string& options) {
  const std::string pkey = file + "\n" + options;
  const std::string kkey = pkey + "\n" + name;
  if (auto it = kernels_.find(kkey); it != kernels_.end()) return it->second;
  auto pit = programs_.find(pkey);
  if (pit == programs_.end()) pit = programs_.emplace(pkey, build(file, options)).first;
  cl_int e = CL_SUCCESS;
  cl_kernel k = cl().clCreateKernel(pit->second, name.c_str(), &e);
  cl_check(e, "clCreateKernel(" + name + " of " + file + ")");
  kernels_[kkey] = k;
  return k;
}

size_t Context::kernel_max_work_group(cl_kernel k) const {
  size_t n = 0;
  cl_check(
      cl().clGetKernelWorkGroupInfo(k, dev_.id, CL_KERNEL_WORK_GROUP_SIZE, sizeof n, &n, nullptr),
      "clGetKernelWorkGroupInfo");
  return n;
}

void Launch::set(size_t size, const void* value) {
  const cl_int e = cl().clSetKernelArg(k_, index_, size, value);
  if (e != CL_SUCCESS)
    throw Error("OpenCL error setting argument " + std::to_string(index_) + ": " +
                cl_error_name(e));
  ++index_;
}

void Launch::run(int dims, const size_t* global, const size_t* local, const char* what,
                 cl_event* event) {
  size_t g[3];
  for (int i = 0; i < dims; ++i) {
    g[i] = (global[i] + local[i] - 1) / local[i] * local[i];
    if (g[i] == 0) return;  // nothing to do
  }
  const cl_int e = cl().clEnqueueNDRangeKernel(c_.queue(), k_, (cl_uint)dims, nullptr, g, local, 0,
                                               nullptr, event);
  if (e != CL_SUCCESS) throw Error(launch_error(e, c_.dev().label(), what));
}

std::string launch_error(cl_int e, const std::string& device, const std::string& what) {
  if (e == CL_MEM_OBJECT_ALLOCATION_FAILURE)
    return "out of device memory on " + device + " running " + what + " (" + cl_error_name(e) + ")";
  if (e == CL_OUT_OF_HOST_MEMORY)
    return "out of host memory running " + what + " on " + device + " (" + cl_error_name(e) + ")";
  if (e == CL_OUT_OF_RESOURCES)
    return device + " ran out of resources running " + what + " (" + cl_error_name(e) +
           ": device memory, or the registers or local memory of its work-group; some drivers "
           "also report an earlier kernel's fault this way)";
  return "OpenCL error in enqueueing " + what + ": " + cl_error_name(e);
}

}  // namespace perfx::opencl
