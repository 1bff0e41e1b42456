// The OpenCL backend (see opencl_backend.h and docs/OPENCL.md; the class is in
// opencl_backend_impl.h): construction, device memory behind host-address stand-ins, the batch
// layout on the device, events, and the entry points (create_opencl_backend, parse_bytes,
// measure_gemv_bandwidth).
#include "backend/opencl/opencl_backend.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "backend/opencl/opencl_backend_impl.h"

namespace perfx::opencl::backend_impl {

OpenClBackend::OpenClBackend(int index, DeviceInfo dev) : index_(index), ctx_(std::move(dev)) {
  const DeviceInfo& d = ctx_.dev();
  sh_ = std::make_shared<Shared>();
  sh_->ctx = ctx_.ctx();
  sh_->total = d.global_mem;
  sh_->max_one = d.max_alloc;
  sh_->label = "opencl:" + std::to_string(index_) + " (" + d.label() + ")";
  if (const char* cap = std::getenv("PERFX_OPENCL_MAX_ALLOC"); cap && *cap) {
    const uint64_t c = parse_bytes(cap, "--max-alloc / PERFX_OPENCL_MAX_ALLOC");
    if (c < sh_->max_one) {
      sh_->max_one = c;
      sh_->capped = true;
    }
  }
  const char* dt = std::getenv("PERFX_OPENCL_DTYPE");
  const std::string want = dt ? dt : "";
  check(want.empty() || want == "f16" || want == "f32",
        "PERFX_OPENCL_DTYPE must be f16 or f32, got '" + want + "'");
  act_ = want == "f16" ? DType::F16 : want == "f32" ? DType::F32 : d.fp16 ? DType::F16 : DType::F32;
  act_opt_ = act_ == DType::F16 ? " -DACT_F16" : "";
  images_ = d.images && !env_is("PERFX_OPENCL_IMAGES", "0") && image_format_supported();
  gpu_ = d.is_gpu();
  lanes_ = gpu_ ? 32 : 16;
  if (const char* l = std::getenv("PERFX_OPENCL_GEMV_LANES"); l && *l) {
    lanes_ = std::atoi(l);
    check(lanes_ >= 4 && lanes_ <= 256 && (lanes_ & (lanes_ - 1)) == 0,
          "PERFX_OPENCL_GEMV_LANES must be a power of two in 4..256");
  }
  tune_ = env_is("PERFX_OPENCL_TUNE", "1") || (gpu_ && !env_is("PERFX_OPENCL_TUNE", "0"));
  if (const char* sp = std::getenv("PERFX_OPENCL_ATTN_SPLIT"); sp && *sp) {
    forced_split_ = std::atoi(sp);
    check(forced_split_ >= 1 && forced_split_ <= (1 << 20),
          "PERFX_OPENCL_ATTN_SPLIT must be a number of keys per split (1..1048576)");
  }
  if (const char* r = std::getenv("PERFX_OPENCL_GEMV"); r && *r) forced_ = parse_gemv_shape(r);
  if (const char* e = std::getenv("PERFX_OPENCL_ACT_LOCAL"); e && *e) {
    check(std::string(e) == "0" || std::string(e) == "1",
          "PERFX_OPENCL_ACT_LOCAL must be 0 or 1, got '" + std::string(e) + "'");
    act_local_ = std::string(e) == "1";
  }
  norm_wg_ = (int)std::min<size_t>(gpu_ ? 256 : 64, prev_pow2(d.max_work_group));
  setup_act_q8(d);
  // Sub-group reductions in the norms where the device has cl_khr_subgroups
  // (PERFX_OPENCL_SUBGROUPS=0 / 1 forces them off / on).
  const bool subgroups = env_is("PERFX_OPENCL_SUBGROUPS", "1") ||
                         (d.subgroups && !env_is("PERFX_OPENCL_SUBGROUPS", "0"));
  norm_opts_ = act_opt_;
  if (subgroups) {
    // A driver may report the extension yet not expose its built-ins to OpenCL C 1.2 (PoCL
    // 3.1 when forced): then the local-memory reduction it is.
    try {
      for (const char* k : {"rms_norm", "add_rms_norm"})
        ctx_.kernel("rms_norm.cl", k, act_opt_ + " -DUSE_SUBGROUPS");
      norm_opts_ = act_opt_ + " -DUSE_SUBGROUPS";
    } catch (const Error& e) {
      if (env_is("PERFX_OPENCL_VERBOSE", "1"))
        std::fprintf(stderr, "perfx: %s: no sub-group reductions: %s\n", sh_->label.c_str(),
                     e.what());
    }
  }
  // Every kernel a model needs is built now (weight-format ones at load), so a kernel that fails
  // to build on this device fails the load, before any output.
  for (const char* k : {"rms_norm", "add_rms_norm"}) ctx_.kernel("rms_norm.cl", k, norm_opts_);
  for (const char* f : {"embedding", "rope_kv_store", "silu_mul", "gather_rows"})
    ctx_.kernel(std::string(f) + ".cl", f, act_opt_);
  for (const char* k : {"attention", "attention_combine"})
    ctx_.kernel("attention.cl", k, attention_opts());
  ctx_.kernel("sample.cl", "argmax_rows", sample_opts());
  if (env_is("PERFX_OPENCL_VERBOSE", "1"))
    std::fprintf(stderr,
                 "perfx: %s: %s activations, images %s, GEMV lanes %d, tuning %s, largest buffer "
                 "%s, kernel cache %s\n",
                 sh_->label.c_str(), act_ == DType::F16 ? "fp16" : "fp32", images_ ? "on" : "off",
                 lanes_, tune_ ? "on" : "off", mib(sh_->max_one).c_str(),
                 ctx_.cache_dir().empty() ? "off" : ctx_.cache_dir().c_str());
}

bool OpenClBackend::device_memory(size_t* free_b, size_t* total_b) const {
  std::lock_guard<std::mutex> lk(sh_->mu);
  *free_b = (size_t)(sh_->total - std::min(sh_->used, sh_->total));
  *total_b = (size_t)sh_->total;
  return true;
}

std::unique_ptr<Buffer> OpenClBackend::alloc(size_t bytes) {
  return std::make_unique<OclBuffer>(sh_, bytes);
}

void OpenClBackend::to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const auto [a, off] = find(dst, bytes, "to_device");
  cl_check(cl().clEnqueueWriteBuffer(ctx_.queue(), a->mem, CL_TRUE, off, bytes, src, 0, nullptr,
                                     nullptr),
           "clEnqueueWriteBuffer (to_device)");
}

void OpenClBackend::to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const auto [a, off] = find(src, bytes, "to_host");
  cl_check(
      cl().clEnqueueReadBuffer(ctx_.queue(), a->mem, CL_TRUE, off, bytes, dst, 0, nullptr, nullptr),
      "clEnqueueReadBuffer (to_host; a kernel of this step may have failed)");
}

void OpenClBackend::synchronize() {
  cl_check(cl().clFinish(ctx_.queue()), "clFinish (a kernel failed)");
}

void OpenClBackend::prepare_batch(const BatchLayout& b) {
  const int T = b.n_tokens;
  PERFX_CHECK(T >= 0 && (b.token_ids.empty() || (int)b.token_ids.size() == T) &&
                  (b.positions.empty() || (int)b.positions.size() == T) &&
                  (b.slots.empty() || (int)b.slots.size() == T) &&
                  (b.token_seq.empty() || (int)b.token_seq.size() == T) &&
                  (int)b.block_tables.size() == b.n_seqs * b.max_blocks,
              "prepare_batch: inconsistent batch layout");
  for (int32_t id : b.token_ids)
    PERFX_CHECK(id >= 0 && (vocab_ == 0 || id < vocab_), "token id " + std::to_string(id) +
                                                             " is outside the vocabulary of " +
                                                             std::to_string(vocab_));
  max_pos_ = 0;
  for (int32_t p : b.positions) {
    PERFX_CHECK(p >= 0, "prepare_batch: negative position");
    max_pos_ = std::max(max_pos_, p);
  }
  for (int32_t s : b.token_seq)
    PERFX_CHECK(s >= 0 && s < b.n_seqs, "prepare_batch: token sequence index out of range");
  for (int32_t r : b.logit_rows)
    PERFX_CHECK(r >= 0 && r < T, "prepare_batch: logit row out of range");
  staging_.clear();
  auto put = [&](const std::vector<int32_t>& v) {
    const int off = (int)staging_.size();
    staging_.insert(staging_.end(), v.begin(), v.end());
    return off;
  };
  o_ids_ = put(b.token_ids);
  o_pos_ = put(b.positions);
  o_slots_ = put(b.slots);
  o_seq_ = put(b.token_seq);
  o_rows_ = put(b.logit_rows);
  o_tab_ = put(b.block_tables);
  staging_.push_back(0);  // never empty
  const size_t bytes = staging_.size() * 4;
  if (batch_mem_.size() < bytes) {  // the new buffer first: a failure keeps the old one
    DevMem grown;
    grown.alloc(sh_, std::max(bytes, batch_mem_.size() * 2), "the batch layout");
    batch_mem_ = std::move(grown);
  }
  write(batch_mem_.get(), 0, staging_.data(), bytes);
}

std::pair<Shared::Alloc*, size_t> OpenClBackend::find(const void* p, size_t bytes,
                                                      const char* what) const {
  std::lock_guard<std::mutex> lk(sh_->mu);
  const uintptr_t a = (uintptr_t)p;
  auto it = sh_->allocs.upper_bound(a);
  if (it != sh_->allocs.begin()) {
    --it;
    const size_t off = a - it->first;
    if (off + bytes <= it->second->size) return {it->second, off};
  }
  throw Error(std::string("OpenCL backend: ") + what +
              ": the address is not inside a buffer of this backend (or the range runs past it)");
}

Arg OpenClBackend::arg(const Tensor& t, const char* what) const {
  const size_t es = dtype_block_bytes(t.dtype);
  const auto [a, off] = find(t.data, std::max<size_t>(t.span_bytes(), 1), what);
  PERFX_CHECK(off % es == 0 && off / es <= (size_t)INT_MAX && t.stride <= INT_MAX,
              std::string(what) + ": misaligned or too large a tensor for the OpenCL kernels");
  return Arg{a->mem, (int)(off / es), (int)t.stride, a};
}

void OpenClBackend::write(cl_mem m, size_t off, const void* src, size_t bytes) {
  if (bytes == 0) return;
  cl_check(
      cl().clEnqueueWriteBuffer(ctx_.queue(), m, CL_TRUE, off, bytes, src, 0, nullptr, nullptr),
      "clEnqueueWriteBuffer");
}

cl_mem OpenClBackend::dummy() {
  if (!dummy_.get()) dummy_.alloc(sh_, 64, "a placeholder");
  return dummy_.get();
}

bool OpenClBackend::image_format_supported() {
  const cl_channel_type want = act_ == DType::F16 ? CL_HALF_FLOAT : CL_FLOAT;
  cl_uint n = 0;
  if (cl().clGetSupportedImageFormats(ctx_.ctx(), CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE1D_BUFFER, 0,
                                      nullptr, &n) != CL_SUCCESS ||
      n == 0)
    return false;
  std::vector<cl_image_format> f(n);
  if (cl().clGetSupportedImageFormats(ctx_.ctx(), CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE1D_BUFFER, n,
                                      f.data(), nullptr) != CL_SUCCESS)
    return false;
  for (const auto& x : f)
    if (x.image_channel_order == CL_RGBA && x.image_channel_data_type == want) return true;
  return false;
}

cl_mem OpenClBackend::image_of(Shared::Alloc* a) {
  if (a->image_tried) return a->image;
  a->image_tried = true;
  const size_t px_bytes = 4 * dtype_block_bytes(act_);
  const size_t width = a->size / px_bytes;
  if (width == 0 || width > ctx_.dev().image_buffer_pixels) return nullptr;
  cl_image_format fmt{
      CL_RGBA, act_ == DType::F16 ? (cl_channel_type)CL_HALF_FLOAT : (cl_channel_type)CL_FLOAT};
  cl_image_desc desc{};
  desc.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER;
  desc.image_width = width;
  desc.buffer = a->mem;
  cl_int e = CL_SUCCESS;
  cl_mem img = cl().clCreateImage(ctx_.ctx(), CL_MEM_READ_ONLY, &fmt, &desc, nullptr, &e);
  if (e != CL_SUCCESS) return nullptr;
  a->image = img;
  return img;
}

double OpenClBackend::events_span_seconds(std::vector<cl_event>& evs) {
  check(!evs.empty(), "events_span_seconds: no events");
  cl_check(cl().clWaitForEvents((cl_uint)evs.size(), evs.data()), "clWaitForEvents");
  cl_ulong a = 0, b = 0;
  cl().clGetEventProfilingInfo(evs.front(), CL_PROFILING_COMMAND_START, sizeof a, &a, nullptr);
  cl().clGetEventProfilingInfo(evs.back(), CL_PROFILING_COMMAND_END, sizeof b, &b, nullptr);
  for (cl_event e : evs) cl().clReleaseEvent(e);
  evs.clear();
  return (double)(b - a) * 1e-9;
}

double OpenClBackend::event_seconds(cl_event ev) {
  cl_check(cl().clWaitForEvents(1, &ev), "clWaitForEvents");
  cl_ulong a = 0, b = 0;
  cl().clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, nullptr);
  cl().clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, nullptr);
  cl().clReleaseEvent(ev);
  return (double)(b - a) * 1e-9;
}

}  // namespace perfx::opencl::backend_impl

namespace perfx::opencl {

uint64_t parse_bytes(const std::string& s, const std::string& what) {
  size_t i = 0;
  while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
  std::string unit = s.substr(i);
  for (char& c : unit) c = (char)std::tolower((unsigned char)c);
  uint64_t mul = 0;
  if (unit.empty() || unit == "b")
    mul = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb")
    mul = 1ull << 10;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    mul = 1ull << 20;
  else if (unit == "g" || unit == "gib" || unit == "gb")
    mul = 1ull << 30;
  check(i > 0 && i <= 15 && mul != 0,
        what + ": '" + s + "' is not a byte count (e.g. 1GiB, 512MiB, 1048576)");
  const uint64_t n = std::stoull(s.substr(0, i));
  check(n <= UINT64_MAX / mul, what + ": '" + s + "' is more bytes than 64 bits hold");
  const uint64_t v = n * mul;
  check(v > 0, what + ": must be more than 0 bytes");
  return v;
}

std::unique_ptr<Backend> create_opencl_backend(int index) {
  return std::make_unique<backend_impl::OpenClBackend>(index, select_device(index));
}

BandwidthReport measure_gemv_bandwidth(Backend& be, int64_t out, int64_t in, size_t copy_bytes) {
  auto* b = dynamic_cast<backend_impl::OpenClBackend*>(&be);
  check(b != nullptr, "measure_gemv_bandwidth: not an OpenCL backend");
  return b->measure(out, in, copy_bytes);
}

}  // namespace perfx::opencl
