// perfx_opencl_check [N]: lists the OpenCL devices, then runs a few ops of backend.h on opencl:N
// (default 0) against the CPU backend — int4 / Q4_0 / F16 linear layers at 1 and 7 tokens,
// RMSNorm, SwiGLU — and prints one line per check. Needs only perfx_backend, so it is what a cross
// build (aarch64 Linux, Android: docs/OPENCL.md) produces to try a phone's GPU.
// perfx_opencl_check --bandwidth [N]: the device's copy bandwidth (an OpenCL copy kernel) and the
// int4 g128 GEMV at Llama-2-7B's 4096 -> 11008 and 11008 -> 4096, device time from events.
// Exit status: 0 all checks pass, 1 an error (printed as one "perfx: error:" line), 2 a mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/opencl/cl_runtime.h"
#include "backend/opencl/opencl_backend.h"
#include "core/quantized.h"
#include "perfx/status.h"

namespace {

using namespace perfx;

/// A device tensor [rows, cols] holding `v` in the backend's activation dtype.
Tensor put(Backend& be, std::vector<std::unique_ptr<Buffer>>& keep, const std::vector<float>& v,
           int64_t rows, int64_t cols) {
  const DType a = be.act_dtype();
  std::vector<uint8_t> b(v.size() * dtype_block_bytes(a));
  for (size_t i = 0; i < v.size(); ++i) {
    if (a == DType::F32) {
      std::memcpy(&b[4 * i], &v[i], 4);
    } else {
      const uint16_t h = fp32_to_fp16(v[i]);
      std::memcpy(&b[2 * i], &h, 2);
    }
  }
  keep.push_back(be.alloc(b.size()));
  be.to_device(keep.back()->data(), b.data(), b.size());
  return Tensor{keep.back()->data(), a, rows, cols, cols};
}

std::vector<float> get(Backend& be, const Tensor& t) {
  std::vector<uint8_t> b(t.span_bytes());
  be.synchronize();
  be.to_host(b.data(), t.data, b.size());
  std::vector<float> v((size_t)(t.rows * t.cols));
  float_to_f32(t.dtype, b.data(), v.data(), (int64_t)v.size());
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (double)(a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Checker {
  Backend& dev;
  Backend& cpu;
  double tol;
  int failed = 0, passed = 0;
  void report(const std::string& what, double err) {
    const bool ok = err <= tol;
    std::printf("  %-36s rel err %.2e  %s\n", what.c_str(), err, ok ? "ok" : "MISMATCH");
    ok ? ++passed : ++failed;
  }
  /// Rounds through the device's activation dtype so both backends see the same inputs.
  std::vector<float> rounded(std::vector<float> v) const {
    if (dev.act_dtype() == DType::F16)
      for (auto& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
    return v;
  }
  void linear(const std::string& name, const LinearSource& src, int T, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x((size_t)(T * src.in));
    for (auto& v : x) v = nd(rng);
    x = rounded(x);
    std::vector<std::unique_ptr<Buffer>> kd, kc;
    auto wd = dev.load_linear({src});
    auto wc = cpu.load_linear({src});
    Tensor xd = put(dev, kd, x, T, src.in),
           yd = put(dev, kd, std::vector<float>((size_t)(T * src.out)), T, src.out);
    Tensor xc = put(cpu, kc, x, T, src.in),
           yc = put(cpu, kc, std::vector<float>((size_t)(T * src.out)), T, src.out);
    dev.linear(xd, *wd, nullptr, yd);
    cpu.linear(xc, *wc, nullptr, yc);
    report("linear " + name + " T=" + std::to_string(T), rel_err(get(dev, yd), get(cpu, yc)));
  }
};

int run(int index) {
  const auto devs = opencl::list_devices();
  std::printf("OpenCL devices:\n");
  for (size_t i = 0; i < devs.size(); ++i)
    std::printf("  opencl:%zu  %s (%s; %s; %llu MiB, largest buffer %llu MiB%s%s)\n", i,
                devs[i].label().c_str(), devs[i].version.c_str(), devs[i].driver.c_str(),
                (unsigned long long)(devs[i].global_mem >> 20),
                (unsigned long long)(devs[i].max_alloc >> 20), devs[i].fp16 ? ", fp16" : "",
                devs[i].images ? ", images" : "");
  const std::string name = "opencl:" + std::to_string(index);
  auto dev = create_backend(name, 1);
  auto cpu = create_backend("cpu", 1);
  Checker c{*dev, *cpu, dev->act_dtype() == DType::F16 ? 3e-3 : 2e-5};
  std::printf("%s: %s activations\n", name.c_str(),
              dev->act_dtype() == DType::F16 ? "fp16" : "fp32");
  std::mt19937 rng(1);

  // int4 g128 (AWQ), GGUF Q4_0, fp16 weights [out, in]
  const int64_t out = 96, in = 256;
  auto m = std::make_shared<Int4Matrix>();
  m->out = out;
  m->in = in;
  m->group_size = 128;
  m->q.resize((size_t)(out * in / 8));
  for (auto& v : m->q) v = (uint32_t)rng();
  m->scales.resize((size_t)(out * in / 128));
  for (auto& s : m->scales) s = fp32_to_fp16(0.01f + 0.01f * (float)(rng() % 100) / 100.0f);
  m->zeros.resize(m->scales.size());
  for (auto& z : m->zeros) z = (uint8_t)(rng() % 16);
  LinearSource s4;
  s4.int4 = m;
  s4.out = out;
  s4.in = in;
  std::vector<uint8_t> q40(dtype_row_bytes(DType::Q4_0, in) * out);
  for (auto& b : q40) b = (uint8_t)rng();
  for (size_t at = 0; at < q40.size(); at += 18) {
    const uint16_t d = fp32_to_fp16(0.02f);
    std::memcpy(&q40[at], &d, 2);
  }
  LinearSource sq;
  sq.weight = TensorView{"q4_0", DType::Q4_0, {out, in}, q40.data(), q40.size()};
  sq.out = out;
  sq.in = in;
  std::vector<uint16_t> f16((size_t)(out * in));
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (auto& h : f16) h = fp32_to_fp16(nd(rng));
  LinearSource sf;
  sf.weight = TensorView{"f16", DType::F16, {out, in}, f16.data(), f16.size() * 2};
  sf.out = out;
  sf.in = in;
  for (int T : {1, 7}) {
    c.linear("int4 g128", s4, T, rng);
    c.linear("Q4_0", sq, T, rng);
    c.linear("F16", sf, T, rng);
  }

  // RMSNorm and SwiGLU
  {
    const int T = 3, n = 200;
    std::vector<float> x((size_t)(T * n)), wv((size_t)n);
    for (auto& v : x) v = nd(rng);
    for (auto& v : wv) v = 1.0f + nd(rng);
    x = c.rounded(x);
    const TensorView wview{"norm", DType::F32, {n}, wv.data(), wv.size() * 4};
    std::vector<std::unique_ptr<Buffer>> kd, kc;
    auto wd = dev->load_vector(wview);
    auto wc = cpu->load_vector(wview);
    Tensor xd = put(*dev, kd, x, T, n), od = put(*dev, kd, x, T, n);
    Tensor xc = put(*cpu, kc, x, T, n), oc = put(*cpu, kc, x, T, n);
    dev->rms_norm(xd, *wd, 1e-5f, od);
    cpu->rms_norm(xc, *wc, 1e-5f, oc);
    c.report("rms_norm", rel_err(get(*dev, od), get(*cpu, oc)));
    Tensor hd = put(*dev, kd, std::vector<float>((size_t)(T * n / 2)), T, n / 2);
    Tensor hc = put(*cpu, kc, std::vector<float>((size_t)(T * n / 2)), T, n / 2);
    dev->silu_mul(xd, hd);
    cpu->silu_mul(xc, hc);
    c.report("silu_mul", rel_err(get(*dev, hd), get(*cpu, hc)));
  }
  std::printf("%s: %d checks passed, %d failed\n", name.c_str(), c.passed, c.failed);
  return c.failed ? 2 : 0;
}

/// Prints the copy bandwidth and the two GEMV shapes as a share of it.
int bandwidth(int index) {
  const std::string name = "opencl:" + std::to_string(index);
  auto be = create_backend(name, 1);
  const auto dev = opencl::select_device(index);
  const size_t copy =
      (size_t)std::min<uint64_t>({1ull << 30, dev.max_alloc / 2, dev.global_mem / 8});
  std::printf("%s %s, %s activations\n", name.c_str(), dev.label().c_str(),
              be->act_dtype() == DType::F16 ? "fp16" : "fp32");
  for (auto [out, in] : {std::pair<int64_t, int64_t>{11008, 4096}, {4096, 11008}}) {
    const auto r = opencl::measure_gemv_bandwidth(*be, out, in, copy);
    std::printf(
        "gemv int4 g128 %5lld -> %5lld: %8.1f us  %7.1f GB/s  copy %7.1f GB/s  %5.1f%% of copy  "
        "[%s]\n",
        (long long)in, (long long)out, r.gemv_us, r.gemv_gbs, r.copy_gbs,
        100.0 * r.gemv_gbs / r.copy_gbs, r.config.c_str());
    std::printf(
        "  the copy kernel moving the same bytes: %7.1f GB/s (%5.1f%% of copy); a one-element "
        "kernel: %.1f us\n",
        r.copy_same_gbs, 100.0 * r.copy_same_gbs / r.copy_gbs, r.empty_us);
    std::printf(
        "  back to back (span / count, as in a decode step): gemv %8.1f us %7.1f GB/s %5.1f%% of "
        "copy; the copy moving the same bytes %7.1f GB/s %5.1f%% of copy\n",
        r.gemv_stream_us, r.gemv_stream_gbs, 100.0 * r.gemv_stream_gbs / r.copy_gbs,
        r.copy_same_stream_gbs, 100.0 * r.copy_same_stream_gbs / r.copy_gbs);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // --bandwidth times the default GEMV (int8 activations; PERFX_OPENCL_ACT_Q8=0: the dtype's)
    if (argc > 1 && std::string(argv[1]) == "--bandwidth")
      return bandwidth(argc > 2 ? std::atoi(argv[2]) : 0);
    // The check's reference is the CPU backend's exact fp32-activation path, and the OpenCL side
    // runs its exact path too (int8 activations differ from fp32 by ~0.5 %, more than this
    // check's tolerance; PERFX_ACT_QUANT=off turns them off on both backends).
    setenv("PERFX_ACT_QUANT", "off", 1);
    return run(argc > 1 ? std::atoi(argv[1]) : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perfx: error: %s\n", e.what());
    return 1;
  }
}
