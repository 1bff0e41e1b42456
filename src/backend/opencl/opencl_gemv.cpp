// The OpenCL backend (opencl_backend_impl.h): the decode GEMV — int8 activations and the
// dot-product instruction, per-device tuning of its shape, and the bandwidth probe
// (measure_gemv_bandwidth).

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/qlinear.h"
#include "backend/opencl/opencl_backend_impl.h"

namespace perfx::opencl::backend_impl {

BandwidthReport OpenClBackend::measure(int64_t out, int64_t in, size_t copy_bytes) {
  check(copy_bytes >= (1u << 20) && out > 0 && in > 0 && in % 128 == 0,
        "measure_gemv_bandwidth: needs a copy of at least 1 MiB and in a multiple of 128");
  BandwidthReport rep;
  // the int4 g128 weight (enough copies of it to defeat the last-level cache are made below)
  auto m = std::make_shared<Int4Matrix>();
  m->out = out;
  m->in = in;
  m->group_size = 128;
  m->q.resize((size_t)(out * in / 8));
  m->scales.resize((size_t)(out * in / 128));
  m->zeros.resize(m->scales.size());
  uint32_t s = 12345;
  for (auto& v : m->q) v = (s = s * 1664525u + 1013904223u);
  for (auto& v : m->scales)
    v = fp32_to_fp16(0.001f + (float)((s = s * 1664525u + 1013904223u) >> 24) * 1e-5f);
  for (auto& v : m->zeros) v = (uint8_t)((s = s * 1664525u + 1013904223u) >> 28);
  const size_t wbytes = m->bytes();
  // copy kernel
  const size_t n4 = copy_bytes / 16;
  DevMem a(sh_, n4 * 16, "the copy test"), b(sh_, n4 * 16, "the copy test");
  cl_check(cl().clEnqueueFillBuffer(ctx_.queue(), a.get(), "\0\0\0\0", 4, 0, n4 * 16, 0, nullptr,
                                    nullptr),
           "clEnqueueFillBuffer");
  cl_kernel ck = ctx_.kernel("copy.cl", "copy_f4", "");
  // copies n float4s at float4 offset off; its event in *ev
  auto enqueue_copy = [&](size_t n, cl_long off, cl_event* ev) {
    const size_t g[1] = {(n + 255) / 256 * 256}, l[1] = {256};
    Launch(ctx_, ck).arg(a.get()).arg(b.get()).arg((int)n).arg(off).run(1, g, l, "copy", ev);
  };
  // median device seconds of 12 copies of n float4s, the k-th at offset off(k)
  auto time_copy = [&](size_t n, auto off) {
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
      cl_event ev = nullptr;
      enqueue_copy(n, (cl_long)off(i), &ev);
      t.push_back(event_seconds(ev));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  rep.copy_gbs = 2.0 * (double)(n4 * 16) / time_copy(n4, [](int) { return 0; }) / 1e9;
  rep.empty_us = time_copy(1, [](int) { return 0; }) * 1e6;
  const size_t n4s = std::min(wbytes / 32, n4 / 2);  // the GEMV's bytes: half read, half written
  auto same_off = [&](int i) { return (cl_long)((size_t)i * n4s % (n4 - n4s + 1)); };
  rep.copy_same_gbs = 2.0 * (double)(n4s * 16) / time_copy(n4s, same_off) / 1e9;
  {  // the same copies back to back
    EventList evs;
    for (int i = 0; i < 96; ++i) {
      cl_event ev = nullptr;
      enqueue_copy(n4s, same_off(i), &ev);
      evs.v.push_back(ev);
    }
    rep.copy_same_stream_gbs = 2.0 * (double)(n4s * 16) * 96 / events_span_seconds(evs.v) / 1e9;
  }
  a.reset();
  b.reset();
  // At least 4x the reported cache and 256 MiB in all (drivers report L1 or L2 here; an H200's L2
  // is 50 MiB), so every GEMV reads its weights from memory.
  const uint64_t span = std::max<uint64_t>(4 * ctx_.dev().global_cache, 256ull << 20);
  const int copies = (int)std::clamp<uint64_t>(span / wbytes + 1, 2, 24);
  LinearSource src;
  src.int4 = m;
  src.out = out;
  src.in = in;
  std::vector<std::unique_ptr<Weight>> ws;
  for (int i = 0; i < copies; ++i) ws.push_back(load_linear({src}));
  auto xb = alloc((size_t)in * 4 + 256), yb = alloc((size_t)out * 4 + 256);
  std::vector<float> xh((size_t)in, 0.01f);
  Tensor x{xb->data(), act_, 1, in, in}, y{yb->data(), act_, 1, out, out};
  if (act_ == DType::F16) {
    std::vector<uint16_t> xh16((size_t)in, fp32_to_fp16(0.01f));
    to_device(xb->data(), xh16.data(), xh16.size() * 2);
  } else {
    to_device(xb->data(), xh.data(), xh.size() * 4);
  }
  for (auto& w : ws) linear(x, *w, nullptr, y);  // tunes on first use
  synchronize();
  std::vector<double> us;
  for (int rep_i = 0; rep_i < 8; ++rep_i)
    for (auto& w : ws) {
      profile_ = true;
      linear(x, *w, nullptr, y);
      profile_ = false;
      us.push_back(last_kernel_seconds_ * 1e6);
    }
  std::sort(us.begin(), us.end());
  rep.gemv_us = us[us.size() / 2];
  // back to back, as in a decode step: the span of 8 rounds over the copies, per GEMV
  EventList evs;
  keep_events_ = &evs.v;
  try {
    for (int rep_i = 0; rep_i < 8; ++rep_i)
      for (auto& w : ws) linear(x, *w, nullptr, y);
  } catch (...) {
    keep_events_ = nullptr;
    throw;
  }
  keep_events_ = nullptr;
  rep.gemv_stream_us = events_span_seconds(evs.v) / (8.0 * (double)ws.size()) * 1e6;
  rep.gemv_gbs = (double)wbytes / (rep.gemv_us * 1e-6) / 1e9;
  rep.gemv_stream_gbs = (double)wbytes / (rep.gemv_stream_us * 1e-6) / 1e9;
  rep.config = last_gemv_config_;
  return rep;
}

int OpenClBackend::parse_gemv_shape(const std::string& r) const {
  int a = 0, b = 0, u = 2, used = 0;
  bool g = false, ok = std::sscanf(r.c_str(), "%dx%d%n", &a, &b, &used) == 2;
  std::string rest = ok ? r.substr((size_t)used) : "";
  if (ok && !rest.empty() && rest[0] == 'g') {
    g = true;
    rest.erase(0, 1);
  }
  if (ok && !rest.empty()) {
    int n = 0;
    ok = std::sscanf(rest.c_str(), "u%d%n", &u, &n) == 1 && (size_t)n == rest.size();
  }
  GemvConfig c;
  c.rows = a;
  c.rpt = b;
  c.u = u;
  c.global_scales = g;
  check(ok && c.valid(lanes_),
        "PERFX_OPENCL_GEMV must be ROWSxRPT[g][uU] (powers of two, ROWS <= 64, RPT <= 8; g: "
        "scales from global memory; U: chunks per lane and step, 1..8), got '" +
            r + "'");
  return c.code();
}

void OpenClBackend::setup_act_q8(const DeviceInfo& d) {
  bool asked = false;  // PERFX_OPENCL_ACT_Q8=1: a build failure is an error, not a fallback
  if (const char* e = std::getenv("PERFX_OPENCL_ACT_Q8"); e && *e) {
    const std::string v = e;
    check(v == "0" || v == "1", "PERFX_OPENCL_ACT_Q8 must be 0 or 1, got '" + v + "'");
    act_q8_ = asked = v == "1";
  } else {
    act_q8_ = cpu::act_quant_enabled();
  }
  if (!act_q8_) return;
  try {
    choose_dp4a(d);
  } catch (const Error& e) {
    if (asked) throw;
    // the default on a driver that cannot build the int8 kernels: the activations' own path
    act_q8_ = false;
    if (env_is("PERFX_OPENCL_VERBOSE", "1"))
      std::fprintf(stderr, "perfx: %s: int8 activations off, their kernels do not build: %s\n",
                   sh_->label.c_str(), e.what());
    return;
  }
  if (env_is("PERFX_OPENCL_VERBOSE", "1"))
    std::fprintf(stderr, "perfx: %s: int8-activation GEMV with the %s dot product\n",
                 sh_->label.c_str(), dp4a_mode_.c_str());
}

void OpenClBackend::choose_dp4a(const DeviceInfo& d) {
  // candidates in order of preference; the first whose GEMV builds is used
  std::vector<std::string> modes;
  if (const char* e = std::getenv("PERFX_OPENCL_DP4A"); e && *e) {
    const std::string m = e;
    check(m == "khr" || m == "ptx" || m == "generic",
          "PERFX_OPENCL_DP4A must be khr, ptx or generic, got '" + m + "'");
    modes.push_back(m);
  } else {
    if (d.has_extension("cl_khr_integer_dot_product")) modes.push_back("khr");
    if (d.platform_name.find("NVIDIA") != std::string::npos) modes.push_back("ptx");
  }
  if (modes.empty() || modes.back() != "generic") modes.push_back("generic");
  ctx_.kernel("act_q8.cl", "quantize_act_q8", act_opt_);
  const std::string probe = " -DWF=4 -DGS=128 -DLANES=" + std::to_string(lanes_) +
                            " -DROWS=1 -DRPT=1 -DACT_Q8" + act_opt_;
  for (const std::string& m : modes) {
    const std::string opt = m == "khr" ? " -DDP4A_KHR" : m == "ptx" ? " -DDP4A_PTX" : "";
    try {
      ctx_.kernel("gemv.cl", "gemv", probe + opt);
    } catch (const Error& e) {
      if (m == "generic") throw;
      if (env_is("PERFX_OPENCL_VERBOSE", "1"))
        std::fprintf(stderr, "perfx: %s: the %s dot product does not build: %s\n",
                     sh_->label.c_str(), m.c_str(), e.what());
      continue;
    }
    dp4a_opt_ = opt;
    dp4a_mode_ = m;
    break;
  }
  try {  // the variant that quantizes x itself; a driver that cannot build it quantizes apart
    ctx_.kernel("gemv.cl", "gemv", probe + dp4a_opt_ + " -DACT_LOCAL");
  } catch (const Error& e) {
    act_local_ = false;
    if (env_is("PERFX_OPENCL_VERBOSE", "1"))
      std::fprintf(stderr, "perfx: %s: the int8 GEMV quantizes x apart: %s\n", sh_->label.c_str(),
                   e.what());
  }
}

void OpenClBackend::quantize_act_q8(const Arg& x, int64_t in, cl_event* ev) {
  const size_t nc = (size_t)(in / 32);
  if (q8x_.size() < nc * 32) q8x_.alloc(sh_, nc * 32, "int8 activations");
  if (q8s_.size() < nc * 8) q8s_.alloc(sh_, nc * 8, "int8 activation scales");
  const size_t wg = std::min<size_t>(64, ctx_.dev().max_work_group);
  const size_t g[1] = {(nc + wg - 1) / wg * wg}, l[1] = {wg};
  Launch(ctx_, ctx_.kernel("act_q8.cl", "quantize_act_q8", act_opt_))
      .arg(x.mem)
      .arg(x.off)
      .arg((int)in)
      .arg(q8x_.get())
      .arg(q8s_.get())
      .run(1, g, l, "quantize activations (int8)", ev);
}

std::string OpenClBackend::gemv_opts(const OclWeight& w, const GemvConfig& c) const {
  std::string o = weight_opts(w) + " -DLANES=" + std::to_string(lanes_) +
                  " -DROWS=" + std::to_string(c.rows) + " -DRPT=" + std::to_string(c.rpt) +
                  " -DGEMV_U=" + std::to_string(c.u) + act_opt_;
  if (c.image) o += " -DUSE_IMAGE";
  if (c.local_scales) o += " -DLOCAL_SCALES";
  if (c.act_q8) o += " -DACT_Q8" + dp4a_opt_;
  if (c.act_local) o += " -DACT_LOCAL";
  return o;
}

bool OpenClBackend::gemv_fits(const OclWeight& w, GemvConfig& c) {
  const bool quant = w.wf >= kQ4;
  const size_t groups = quant ? (size_t)(w.in / w.gs) : 0;
  if (!c.valid(lanes_)) return false;  // e.g. a corrupted tuning file's code
  const size_t red = (size_t)c.rows * c.rpt * lanes_ * 4;
  if ((size_t)(lanes_ * c.rows) > ctx_.dev().max_work_group || red > ctx_.dev().local_mem / 2)
    return false;
  for (bool local_x : {true, false}) {
    c.act_local = local_x && c.act_q8 && act_local_ && !c.act_global;
    if (local_x && !c.act_local) continue;  // the same as the second pass
    const size_t act = gemv_act_local(w, c);
    if (red + act > ctx_.dev().local_mem / 2) continue;
    const size_t local = red + act + (size_t)c.rows * c.rpt * groups * 8;
    c.local_scales = quant && !c.global_scales && local <= ctx_.dev().local_mem / 2;
    cl_kernel k = ctx_.kernel("gemv.cl", "gemv", gemv_opts(w, c));
    if (ctx_.kernel_max_work_group(k) >= (size_t)(lanes_ * c.rows)) return true;
  }
  return false;
}

void OpenClBackend::run_gemv(const OclWeight& w, const Slab& s, const GemvConfig& c, const Arg& x,
                             cl_mem ximg, cl_mem bias, bool has_bias, const Arg& y, int y_f32,
                             cl_event* ev) {
  cl_kernel k = ctx_.kernel("gemv.cl", "gemv", gemv_opts(w, c));
  const int per_wg = c.rows * c.rpt;
  const size_t g[2] = {(size_t)lanes_, (size_t)((s.rows + per_wg - 1) / per_wg * c.rows)},
               l[2] = {(size_t)lanes_, (size_t)c.rows};
  const size_t groups = w.wf >= kQ4 ? (size_t)(w.in / w.gs) : 0;
  Launch L(ctx_, k);
  L.arg(s.mem.get())
      .arg((cl_long)s.q_off)
      .arg((cl_long)s.s_off)
      .arg((cl_long)s.z_off)
      .arg((int)w.in)
      .arg((int)s.rows);
  if (c.act_q8 && !c.act_local) {  // x quantized by quantize_act_q8 (q8x_: xq then xs)
    L.arg(q8x_.get()).arg(q8s_.get()).arg(x.off);  // x_off: unused there
  } else {
    if (c.image) L.arg(ximg);
    L.arg(x.mem).arg(x.off);
  }
  L.arg(bias)
      .arg((int)s.row0)
      .arg(has_bias ? 1 : 0)
      .arg(y.mem)
      .arg((cl_long)y.off + s.row0)
      .arg(y_f32);
  L.local(std::max<size_t>(
      gemv_act_local(w, c) + (c.local_scales ? (size_t)c.rows * c.rpt * groups * 8 : 0), 16));
  L.run(2, g, l, "linear (GEMV)", ev);
}

void OpenClBackend::gemv(const OclWeight& w, const Arg& x, cl_mem bias, bool has_bias, const Arg& y,
                         int y_f32) {
  GemvConfig c;
  cl_mem ximg = nullptr;
  c.act_q8 = act_q8_ && (w.wf == kQ4 || w.wf == kQ4M);
  if (!c.act_q8 && images_ && x.off % 4 == 0) ximg = image_of(x.alloc);
  c.image = ximg != nullptr;
  const std::string key = "gemv:wf" + std::to_string(w.wf) + ":gs" + std::to_string(w.gs) + ":in" +
                          std::to_string(w.in) + ":out" + std::to_string(w.out) + ":lanes" +
                          std::to_string(lanes_) +
                          (c.act_q8  ? ":q8a-" + dp4a_mode_ + (act_local_ ? "" : "-apart")
                           : c.image ? ":img"
                                     : ":buf") +
                          (act_ == DType::F16 ? ":f16" : ":f32") + ":" + gemv_tag();
  int code = -1;
  if (auto it = gemv_rows_.find(key); it != gemv_rows_.end()) {
    code = it->second;
  } else if (forced_ > 0) {
    GemvConfig t = c;
    t.set(forced_);
    check(gemv_fits(w, t), "PERFX_OPENCL_GEMV=" + std::string(std::getenv("PERFX_OPENCL_GEMV")) +
                               " does not fit in a work-group on " + ctx_.dev().label());
    code = gemv_rows_[key] = forced_;
  } else {
    code = ctx_.tuned(key);
    GemvConfig t = c;
    t.set(std::max(code, 0));
    if (code <= 0 || !gemv_fits(w, t)) {
      code = tune_ ? tune_gemv(w, c, x, ximg, bias, has_bias, y, y_f32, key) : -1;
    }
    if (code <= 0) {  // the default, smaller when the kernel does not fit
      for (int d : {kGemvDefault, 202, 201, 101}) {
        t.set(d);
        if (gemv_fits(w, t)) {
          code = d;
          break;
        }
      }
    }
    check(code > 0, "the OpenCL GEMV kernel does not fit in a work-group on " + ctx_.dev().label());
    gemv_rows_[key] = code;
  }
  c.set(code);
  gemv_fits(w, c);  // sets local_scales
  last_gemv_config_ = gemv_opts(w, c);
  double dev_s = 0;
  if (c.act_q8 && !c.act_local) {  // the quantization counts as part of the GEMV
    cl_event qev = nullptr;
    quantize_act_q8(x, w.in, profile_ || keep_events_ ? &qev : nullptr);
    if (profile_)
      dev_s += event_seconds(qev);
    else if (keep_events_)
      keep_events_->push_back(qev);
  }
  for (const auto& s : w.slabs) {
    cl_event ev = nullptr;
    run_gemv(w, s, c, x, ximg, bias, has_bias, y, y_f32, profile_ || keep_events_ ? &ev : nullptr);
    if (profile_)
      dev_s += event_seconds(ev);
    else if (keep_events_)
      keep_events_->push_back(ev);
  }
  last_kernel_seconds_ = dev_s;
}

int OpenClBackend::tune_gemv(const OclWeight& w, const GemvConfig& base, const Arg& x, cl_mem ximg,
                             cl_mem bias, bool has_bias, const Arg& y, int y_f32,
                             const std::string& key) {
  int best = -1;
  double best_t = 1e30;
  std::vector<int> codes;
  // U 4 on the int8 path only, and not beside 8 rows per work-item: its two pipelined steps
  // would hold 2 · 4 · 8 uint4 of weights per work-item
  for (int u : base.act_q8 ? std::vector<int>{2, 4} : std::vector<int>{2})
    for (int shape : {101, 102, 104, 108, 201, 202, 204, 208, 401, 402, 404, 408, 801, 802, 804}) {
      GemvConfig c;
      c.set(shape);
      c.u = u;
      if (u == 4 && c.rpt == 8) continue;
      for (bool global_scales : {false, true}) {  // scales staged, or from global memory
        if (global_scales && w.wf < kQ4) continue;
        c.global_scales = global_scales;
        for (bool apart : {false, true}) {  // x quantized by the separate kernel
          if (apart && !base.act_q8) continue;
          c.act_global = apart;
          codes.push_back(c.code());
        }
      }
    }
  // Each timed run starts with the weight out of the device's cache, as in a decode step, where
  // the model's other weights pass between two uses of one: a fill of max(4 × the weight, 2 ×
  // the global memory cache) bytes goes first (the H200's 50 MB L2 holds a 23.6 MB weight, and
  // a shape timed from L2 need not be the fastest from DRAM); at most 256 MiB and 1/8 of the
  // device's memory, and none where that does not fit.
  const size_t flush_bytes =
      std::min<size_t>(
          {std::max<size_t>(4 * w.slabs[0].mem.size(), 2 * (size_t)ctx_.dev().global_cache),
           (size_t)256 << 20, (size_t)(ctx_.dev().global_mem / 8)}) /
      64 * 64;
  DevMem flush;
  try {  // best effort: a device with no room left for it tunes from its cache
    if (gpu_ && flush_bytes >= 64) flush.alloc(sh_, flush_bytes, "the GEMV tuner's cache flush");
  } catch (const Error&) {
  }
  for (int code : codes) {
    GemvConfig c = base;
    c.set(code);
    if (!gemv_fits(w, c)) continue;
    if (c.act_global) {  // the same as its code without the flag unless that one quantizes
      GemvConfig own = c;
      own.act_global = false;
      if (gemv_fits(w, own) && !own.act_local) continue;
    }
    // x quantized by its own kernel: timed from that kernel's start to the GEMV's end, the
    // gap between the two included (NVIDIA's OpenCL: ~6 µs, more than either's own time)
    const bool apart = c.act_q8 && !c.act_local;
    std::vector<double> t;
    for (int i = 0; i < 6; ++i) {
      if (flush.get()) try {  // a driver that allocates on first use may fail only here
          cl_check(cl().clEnqueueFillBuffer(ctx_.queue(), flush.get(), "\0\0\0\0", 4, 0,
                                            flush_bytes, 0, nullptr, nullptr),
                   "clEnqueueFillBuffer");
        } catch (const Error&) {
          flush.reset();
        }
      EventList evs;
      evs.v.assign(apart ? 2 : 1, nullptr);
      if (apart) quantize_act_q8(x, w.in, &evs.v[0]);
      run_gemv(w, w.slabs[0], c, x, ximg, bias, has_bias, y, y_f32, &evs.v.back());
      const double span = events_span_seconds(evs.v);
      if (i > 0) t.push_back(span);  // the first run warms up
    }
    std::sort(t.begin(), t.end());
    if (t[t.size() / 2] < best_t) {
      best_t = t[t.size() / 2];
      best = code;
    }
  }
  if (best > 0) ctx_.set_tuned(key, best);
  if (env_is("PERFX_OPENCL_VERBOSE", "1") && best > 0) {
    GemvConfig c;
    c.set(best);
    std::fprintf(stderr,
                 "perfx: %s: tuned %s -> %dx%d%s u%d%s (work-group height x rows per item, "
                 "%.1f us)\n",
                 sh_->label.c_str(), key.c_str(), c.rows, c.rpt,
                 c.global_scales ? " global scales" : "", c.u,
                 c.act_global ? " x quantized apart" : "", best_t * 1e6);
  }
  return best;
}

}  // namespace perfx::opencl::backend_impl
