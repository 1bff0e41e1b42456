#include "backend/backend.h"

#include <map>
#include <mutex>

#include "backend/cpu/cpu_backend.h"
#ifdef PERFX_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#ifdef PERFX_HAVE_OPENCL
#include "backend/opencl/opencl_backend.h"
#endif
#include "perfx/status.h"

namespace perfx {

Tensor Tensor::cols_view(int64_t c0, int64_t n) const {
  check(c0 >= 0 && c0 + n <= cols, "Tensor::cols_view out of range");
  Tensor t = *this;
  t.data = static_cast<char*>(data) + c0 * (int64_t)dtype_block_bytes(dtype);
  t.cols = n;
  return t;
}

double Backend::kv_bytes_per_token(int n_kv_heads, int head_dim, const KvCacheTypes& types) const {
  auto elem = [&](std::optional<DType> t) {
    const DType d = t.value_or(act_dtype());
    return (double)dtype_block_bytes(d) / (double)dtype_block_elems(d);
  };
  return (double)n_kv_heads * head_dim * (elem(types.k) + elem(types.v));
}

void Backend::sample_begin(Tensor, const std::vector<SampleRow>&) {
  throw Error(name() + " does not sample ahead (overlapped decode)");
}

void Backend::sample_end(int32_t*) {
  throw Error(name() + " does not sample ahead (overlapped decode)");
}

void Backend::check_fed_rows(const BatchLayout& b, int n_fed) {
  if (!b.fed()) return;
  PERFX_CHECK((int)b.fed_rows.size() == b.n_tokens,
              "prepare_batch: fed_rows has " + std::to_string(b.fed_rows.size()) + " entries for " +
                  std::to_string(b.n_tokens) + " tokens");
  PERFX_CHECK(n_fed > 0, "prepare_batch: fed_rows without a sample_begin before it");
  for (int t = 0; t < b.n_tokens; ++t) {
    const int32_t r = b.fed_rows[(size_t)t];
    PERFX_CHECK(r >= -1 && r < n_fed, "prepare_batch: token " + std::to_string(t) +
                                          " is fed from row " + std::to_string(r) +
                                          " of a sample of " + std::to_string(n_fed) + " rows");
  }
}

Tensor Tensor::rows_view(int64_t r0, int64_t n) const {
  check(r0 >= 0 && r0 + n <= rows, "Tensor::rows_view out of range");
  Tensor t = *this;
  t.data = static_cast<char*>(data) + r0 * stride * (int64_t)dtype_block_bytes(dtype);
  t.rows = n;
  return t;
}

size_t Tensor::span_bytes() const {
  if (rows <= 0 || cols <= 0) return 0;
  return (size_t)((rows - 1) * stride + cols) * dtype_block_bytes(dtype);
}

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, BackendFactory>& registry() {
  static std::map<std::string, BackendFactory> r;
  return r;
}

/// The backends compiled into this build: one line each.
void builtin_backends(std::map<std::string, BackendFactory>& r) {
  r.emplace("cpu", [](int, int n_threads) { return cpu::create_cpu_backend(n_threads); });
#ifdef PERFX_HAVE_CUDA
  r.emplace("cuda", [](int index, int) { return cuda::create_cuda_backend(index); });
#endif
#ifdef PERFX_HAVE_OPENCL
  r.emplace("opencl", [](int index, int) { return opencl::create_opencl_backend(index); });
#endif
}

}  // namespace

void register_backend(const std::string& name, BackendFactory make) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  registry()[name] = std::move(make);
}

std::unique_ptr<Backend> create_backend(const std::string& device, int n_threads) {
  std::map<std::string, BackendFactory> all;
  builtin_backends(all);
  {
    std::lock_guard<std::mutex> lk(registry_mutex());
    for (const auto& [k, v] : registry()) all[k] = v;
  }
  std::string available;
  for (const auto& [k, v] : all) available += (available.empty() ? "" : ", ") + k;
  std::string name = device;
  int index = 0;
  if (const size_t colon = device.find(':'); colon != std::string::npos) {
    name = device.substr(0, colon);
    const std::string num = device.substr(colon + 1);
    bool ok = !num.empty() && num.size() <= 4;
    for (char c : num) ok = ok && c >= '0' && c <= '9';
    check(ok,
          "device '" + device + "': the index after ':' must be a number (e.g. " + name + ":0)");
    index = std::stoi(num);
  }
  const auto it = all.find(name);
  if (it == all.end()) {
    if (name == "cuda" || name == "opencl")
      throw Error("device '" + device +
                  "' is not compiled into this build (available: " + available +
                  "; configure with -DPERFX_" + (name == "cuda" ? "CUDA" : "OPENCL") + "=ON)");
    throw Error("unknown device '" + device + "' (available: " + available + ")");
  }
  check(name != "cpu" || index == 0,
        "device '" + device + "': there is one CPU device (cpu or cpu:0)");
  return it->second(index, n_threads);
}

}  // namespace perfx
