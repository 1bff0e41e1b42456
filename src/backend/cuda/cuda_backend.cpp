// The CUDA backend (see cuda_backend.h; the class is in cuda_backend_impl.h): construction and
// teardown, device memory, the batch layout's staging, CUDA-graph capture / replay of decode
// steps, the per-op profile (PERFX_CUDA_PROFILE=1), and create_cuda_backend().
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"

namespace perfx::cuda::backend_impl {

CudaBackend::CudaBackend(int dev)
    : dev_(dev), blas_(&cublas()), gen_(std::make_shared<Generation>()) {  // cuBLAS first
  cuda_ok(cudaSetDevice(dev_), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, dev_), "cudaGetDeviceProperties");
  gpu_name_ = prop.name;
  check(prop.major >= 8, "cuda:" + std::to_string(dev_) + " (" + gpu_name_ +
                             ", compute capability " + std::to_string(prop.major) + "." +
                             std::to_string(prop.minor) +
                             ") is older than sm_80, which the CUDA backend needs");
  const char* dt = std::getenv("PERFX_CUDA_DTYPE");
  const std::string d = dt ? dt : "f16";
  check(d == "f16" || d == "bf16", "PERFX_CUDA_DTYPE must be f16 or bf16, got '" + d + "'");
  act_ = d == "bf16" ? DType::BF16 : DType::F16;
  const char* g = std::getenv("PERFX_CUDA_GRAPHS");
  graphs_enabled_ = !(g && std::string(g) == "0");
  const char* dw = std::getenv("PERFX_CUDA_DENSE_WEIGHTS");
  const std::string dws = dw && *dw ? dw : "auto";
  check(dws == "auto" || dws == "0" || dws == "1",
        "PERFX_CUDA_DENSE_WEIGHTS must be auto, 0 or 1, got '" + dws + "'");
  dense_budget_ = dws == "0"   ? 0
                  : dws == "1" ? SIZE_MAX
                               : (size_t)((double)prop.totalGlobalMem * kDenseShare);
  // PERFX_CUDA_L2_PREFETCH=MiB: the GEMV right after attention reads the first MiB of the next
  // linear's weight into L2 before its PDL wait (for one token), whatever that weight's size;
  // 0: never; unset: kL2WarmAutoMiB, for a next weight of at most twice that, on Hopper (sm_90,
  // where it was measured: docs/cuda_linear_notes.md §26).
  if (const char* pf = std::getenv("PERFX_CUDA_L2_PREFETCH"); pf && *pf) {
    const std::string v = pf;
    const bool digits = v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 4;
    const int mib = digits ? std::stoi(v) : -1;
    check(mib >= 0 && mib <= 1024,
          "PERFX_CUDA_L2_PREFETCH must be a whole number of MiB from 0 to 1024, got '" + v + "'");
    l2_prefetch_cap_ = (size_t)mib << 20;
    l2_prefetch_auto_ = false;
  }
  if (l2_prefetch_auto_ && prop.major != 9) l2_prefetch_cap_ = 0;  // measured on Hopper only
  // PERFX_CUDA_SKIP=op[,op...] (profiling only: the output is wrong): leaves out every launch of
  // the named ops — norm (rms_norm, add_rms_norm), rope (rope_kv_store), attn (attention),
  // linear (linear, linear_silu_mul) — so a decode benchmark shows what each costs inside the
  // captured step (docs/cuda_linear_notes.md §12). Two more bound what the work between two
  // replayed steps costs (§33): upload (with PERFX_CUDA_ASIDE_COPIES=0 only: a replayed step's
  // layout goes up on a second stream, not ordered before the graph) and ids (the graph
  // argmax's ids are not copied to the host).
  if (const char* sk = std::getenv("PERFX_CUDA_SKIP"); sk && *sk) {
    std::string v = sk;
    for (size_t p = 0; p <= v.size();) {
      const size_t e = std::min(v.find(',', p), v.size());
      const std::string op = v.substr(p, e - p);
      const int bit = op == "norm"     ? kSkipNorm
                      : op == "rope"   ? kSkipRope
                      : op == "attn"   ? kSkipAttn
                      : op == "linear" ? kSkipLinear
                      : op == "upload" ? kSkipUpload
                      : op == "ids"    ? kSkipIds
                                       : 0;
      check(bit != 0,
            "PERFX_CUDA_SKIP takes norm, rope, attn, linear, upload and ids, comma-separated; "
            "got '" +
                op + "'");
      skip_ |= bit;
      p = e + 1;
    }
  }
  rope_fused_ = env_switch("PERFX_CUDA_ROPE_FUSED");
  aside_ = env_switch("PERFX_CUDA_ASIDE_COPIES");
  check(!(aside_ && (skip_ & kSkipUpload)),
        "PERFX_CUDA_SKIP=upload bounds the stream-ordered upload: it needs "
        "PERFX_CUDA_ASIDE_COPIES=0");
  if (skip_)
    std::fprintf(stderr, "perfx: PERFX_CUDA_SKIP=%s: those ops are not run (timing only)\n",
                 std::getenv("PERFX_CUDA_SKIP"));
  (void)qkv_trigger_pct();  // PERFX_CUDA_QKV_TRIGGER: a bad value is refused here, not mid-run
  (void)qkv_grid_free();    // PERFX_CUDA_QKV_GRID_FREE: likewise
  attn_merge_ = env_switch("PERFX_CUDA_ATTN_MERGE");
  {  // PERFX_CUDA_NORM_FUSE=1: linear_add_rms_norm_linear as two linked GEMVs (off by default)
    const char* e = std::getenv("PERFX_CUDA_NORM_FUSE");
    const std::string v = e ? e : "";
    check(v.empty() || v == "0" || v == "1",
          "PERFX_CUDA_NORM_FUSE must be 0 or 1, got '" + v + "'");
    norm_fuse_ = v == "1";
  }
  const char* prof = std::getenv("PERFX_CUDA_PROFILE");
  profile_ = prof && std::string(prof) == "1";
  if (profile_) graphs_enabled_ = false;   // per-op events need eager launches
  trace_ = std::make_unique<TraceRing>();  // PERFX_CUDA_TRACE=FILE (trace builds only)
  cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int p = 0; p < 2; ++p)
    for (cudaEvent_t* e : {&staged_[p], &used_[p], &ids_copied_[p]})
      cuda_ok(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
  cuda_ok(cudaEventCreateWithFlags(&fwd_done_, cudaEventDisableTiming), "cudaEventCreate");
  if (aside_) {
    cuda_ok(cudaStreamCreateWithFlags(&up_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  cublas_ok(blas_->create(&cublas_), "cublasCreate");
  cublas_ok(blas_->set_stream(cublas_, stream_), "cublasSetStream");
  cublas_ws_.alloc(32u << 20, "the cuBLAS workspace");
  cublas_ok(blas_->set_workspace(cublas_, cublas_ws_.get(), cublas_ws_.size()),
            "cublasSetWorkspace");
  guarded("init", [] {
    linear_kernels_init();
    paged_attention_init();
  });
}

CudaBackend::~CudaBackend() {
  (void)cudaSetDevice(dev_);
  abandon_capture();
  (void)sync_streams();
  if (profile_) print_profile();
  trace_.reset();  // writes the PERFX_CUDA_TRACE file
  clear_graphs();
  for (void* h : pinned_)
    if (h) (void)cudaFreeHost(h);
  for (SampleSlot& sl : slots_) {
    if (sl.host) (void)cudaFreeHost(sl.host);
    if (sl.done) (void)cudaEventDestroy(sl.done);
  }
  if (cublas_) (void)blas_->destroy(cublas_);
  for (int p = 0; p < 2; ++p)
    for (cudaEvent_t e : {staged_[p], used_[p], ids_copied_[p]})
      if (e) (void)cudaEventDestroy(e);
  if (fwd_done_) (void)cudaEventDestroy(fwd_done_);
  for (cudaStream_t st : {up_stream_, copy_stream_, side_stream_})
    if (st) (void)cudaStreamDestroy(st);
  (void)cudaStreamDestroy(stream_);
}

bool CudaBackend::device_memory(size_t* free_b, size_t* total_b) const {
  return cudaSetDevice(dev_) == cudaSuccess && cudaMemGetInfo(free_b, total_b) == cudaSuccess;
}

void CudaBackend::use_device() const {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == dev_) return;
  cuda_ok(cudaSetDevice(dev_), "cudaSetDevice");
}

std::unique_ptr<Buffer> CudaBackend::alloc(size_t bytes) {
  use_device();
  gen_->value++;  // a new scratch generation: graphs captured over the old one must not replay
  return std::make_unique<CudaBuffer>(bytes, gen_);
}

void CudaBackend::to_device(void* dst, const void* src, size_t bytes) {
  use_device();
  finish_forward();
  cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync(to_device)");
  cuda_ok(cudaStreamSynchronize(stream_), "to_device");
}

void CudaBackend::to_host(void* dst, const void* src, size_t bytes) {
  use_device();
  finish_forward();
  cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync(to_host)");
  cuda_ok(cudaStreamSynchronize(stream_), "to_host (a kernel of this step failed)");
}

void CudaBackend::synchronize() {
  use_device();
  finish_forward();
  cuda_ok(sync_streams(), "synchronize (a kernel failed)");
}

cudaError_t CudaBackend::sync_streams() {
  cudaError_t e = cudaStreamSynchronize(stream_);
  for (cudaStream_t st : {up_stream_, copy_stream_, side_stream_})
    if (st) {
      const cudaError_t e2 = cudaStreamSynchronize(st);
      if (e == cudaSuccess) e = e2;
    }
  return e;
}

void CudaBackend::prepare_batch(const BatchLayout& b) {
  use_device();
  finish_forward();
  if (aside_) {  // the step just queued has read layout buffer par_ and written ids_[par_ ^ 1]
    cuda_ok(cudaEventRecord(used_[par_], stream_), "cudaEventRecord");
    par_ ^= 1;
  }
  last_linear_ = nullptr;    // a new forward: no linear before it (and its weight may be gone)
  after_attention_ = false;  // (an attention op that threw must not reach the next forward)
  const int T = b.n_tokens, S = b.n_seqs;
  PERFX_CHECK(T > 0 && S > 0 && (int)b.token_ids.size() == T && (int)b.positions.size() == T &&
                  (int)b.slots.size() == T && (int)b.token_seq.size() == T &&
                  (int)b.block_tables.size() == S * b.max_blocks,
              "prepare_batch: inconsistent batch layout");
  check_fed_rows(b, fed_d_ ? fed_n_ : 0);
  const bool fed = b.fed();
  // Row t feeds token t for every token (a whole decode batch carried on): the ids are used
  // where the draw left them; any other mapping gathers them (launch_feed_ids).
  bool fed_identity = fed && fed_n_ == T;
  for (int t = 0; fed_identity && t < T; ++t) fed_identity = b.fed_rows[(size_t)t] == t;
  PERFX_CHECK(!fed || fed_identity || fed_n_ <= kFeedIdsMaxRows,
              "prepare_batch: a fed step from a sample of " + std::to_string(fed_n_) +
                  " rows (at most " + std::to_string(kFeedIdsMaxRows) + ")");
  for (int t = 0; t < T; ++t) {
    PERFX_CHECK((fed && b.fed_rows[(size_t)t] >= 0) ||
                    (b.token_ids[t] >= 0 && (vocab_ == 0 || b.token_ids[t] < vocab_)),
                "token id " + std::to_string(b.token_ids[t]) + " is outside the vocabulary of " +
                    std::to_string(vocab_));
    PERFX_CHECK(b.positions[t] >= 0, "prepare_batch: negative position");
  }
  // Per-sequence rows and key counts; tokens of a sequence must be contiguous and consecutive.
  q_start_.assign((size_t)S + 1, 0);
  kv_len_.assign((size_t)S, 0);
  int max_q = 0, max_kv = 0;
  {
    int t = 0;
    for (int s = 0; s < S; ++s) {
      q_start_[(size_t)s] = t;
      while (t < T && b.token_seq[t] == s) {
        PERFX_CHECK(t == q_start_[(size_t)s] || b.positions[t] == b.positions[t - 1] + 1,
                    "prepare_batch: the tokens of a sequence must have consecutive positions");
        ++t;
      }
      const int q = t - q_start_[(size_t)s];
      if (q > 0) kv_len_[(size_t)s] = b.positions[t - 1] + 1;
      max_q = std::max(max_q, q);
      max_kv = std::max(max_kv, kv_len_[(size_t)s]);
    }
    q_start_[(size_t)S] = t;
    PERFX_CHECK(
        t == T,
        "prepare_batch: the tokens of each sequence must be contiguous and in sequence order");
  }
  decode_only_ = max_q == 1 && T == S;
  bool eligible = graphs_enabled_ && decode_only_ && (int)b.logit_rows.size() == T;
  for (int i = 0; eligible && i < T; ++i) eligible = b.logit_rows[(size_t)i] == i;
  width_ = eligible ? next_pow2(std::max(b.max_blocks, 1)) : std::max(b.max_blocks, 1);
  // Staging: ids, positions, slots, token_seq [T], logit rows [L]; q_start [S + 1]; kv_len [S];
  // tables [S, width]; fed rows [T] when gathered.
  const size_t L = b.logit_rows.size();
  const size_t n_gather = fed && !fed_identity ? (size_t)T : 0;
  const size_t n_int = (size_t)T * 4 + L + (size_t)S * 2 + 1 + (size_t)S * width_ + n_gather;
  ensure_staging(n_int);
  if (eligible || fed) ensure_step_ids(T);
  const int p = par_;
  cuda_ok(cudaEventSynchronize(staged_[p]), "staging");  // its previous upload has read it
  int32_t* h = static_cast<int32_t*>(pinned_[p]);
  size_t at = 0;
  auto put = [&](const int32_t* src, size_t n) {
    const size_t off = at;
    if (n) std::memcpy(h + at, src, n * 4);
    at += n;
    return off;
  };
  const size_t o_ids = put(b.token_ids.data(), (size_t)T),
               o_pos = put(b.positions.data(), (size_t)T), o_slots = put(b.slots.data(), (size_t)T),
               o_seq = put(b.token_seq.data(), (size_t)T), o_rows = put(b.logit_rows.data(), L),
               o_qs = put(q_start_.data(), (size_t)S + 1), o_kv = put(kv_len_.data(), (size_t)S);
  const size_t o_bt = at;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < width_; ++j)
      h[at++] = j < b.max_blocks ? b.block_tables[(size_t)s * b.max_blocks + j] : -1;
  const size_t o_fed = put(b.fed_rows.data(), n_gather);
  int32_t* d = static_cast<int32_t*>(batch_dev_[p].get());
  cudaStream_t up = stream_;
  if (aside_) {
    // The upload on its own stream, after the step that last read this buffer (two steps
    // back); the stream waits for it (below), which, queued while the previous step runs, is
    // done by the time that step ends.
    up = up_stream_;
    cuda_ok(cudaStreamWaitEvent(up, used_[p], 0), "cudaStreamWaitEvent");
  } else if ((skip_ & kSkipUpload) && eligible && n_gather == 0 &&
             graphs_.contains(GraphKey{T, width_, gen_->value.load(), fed, p})) {
    // PERFX_CUDA_SKIP=upload (timing only): a replayed step's upload on a second stream that
    // the graph does not wait for (not where the feed gather, before the graph, reads it).
    if (!side_stream_)
      cuda_ok(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    up = side_stream_;
  }
  cuda_ok(cudaMemcpyAsync(d, h, at * 4, cudaMemcpyHostToDevice, up), "upload batch");
  cuda_ok(cudaEventRecord(staged_[p], up), "cudaEventRecord");
  if (aside_) {
    cuda_ok(cudaStreamWaitEvent(stream_, staged_[p], 0), "cudaStreamWaitEvent");
    // This step's argmax writes ids_[p ^ 1]: the host's copy of what the step before last
    // wrote there must have read it.
    cuda_ok(cudaStreamWaitEvent(stream_, ids_copied_[p ^ 1], 0), "cudaStreamWaitEvent");
  }
  // A fed step reads its ids from ids_[p], where an argmax inside the last graph wrote them;
  // a draw made elsewhere (a sampling slot) is copied there first, device to device; a subset
  // of the draw's rows, or host ids among them, is gathered there (after the host's copy of
  // the last argmax's ids has read them).
  int32_t* step_ids = static_cast<int32_t*>(ids_[p].get());
  ids_out_ = static_cast<int32_t*>(ids_[aside_ ? p ^ 1 : p].get());
  if (aside_ && fed && (!fed_identity || fed_d_ != step_ids))
    cuda_ok(cudaStreamWaitEvent(stream_, ids_copied_[p], 0), "cudaStreamWaitEvent");
  if (fed_identity && fed_d_ != step_ids)
    cuda_ok(cudaMemcpyAsync(step_ids, fed_d_, (size_t)T * 4, cudaMemcpyDeviceToDevice, stream_),
            "feed sampled ids");
  if (fed && !fed_identity) {
    launch_feed_ids(d + o_ids, d + o_fed, fed_d_, fed_n_, step_ids, T, stream_);
    launched("feed sampled ids");
  }
  ids_d_ = fed ? step_ids : d + o_ids;
  pos_d_ = d + o_pos;
  slots_d_ = d + o_slots;
  seq_d_ = d + o_seq;
  rows_d_ = d + o_rows;
  q_start_d_ = d + o_qs;
  kv_len_d_ = d + o_kv;
  tables_d_ = d + o_bt;
  n_tokens_ = T;
  n_seqs_ = S;
  max_q_ = max_q;
  max_kv_ = max_kv;
  graph_step_ = eligible;
  if (eligible) begin_graph_step(T, fed);
}

size_t CudaBackend::prof_next(std::string name) {
  if (prof_used_ == prof_.size()) {
    if (prof_.size() >= 8192) prof_flush();
    if (prof_used_ == prof_.size()) {
      ProfRecord r;
      (void)cudaEventCreate(&r.start);
      (void)cudaEventCreate(&r.stop);
      prof_.push_back(r);
    }
  }
  ProfRecord& r = prof_[prof_used_];
  r.name = std::move(name);
  (void)cudaEventRecord(r.start, stream_);
  return prof_used_++;
}

void CudaBackend::prof_flush() {
  (void)cudaStreamSynchronize(stream_);
  for (size_t i = 0; i < prof_used_; ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, prof_[i].start, prof_[i].stop) == cudaSuccess) {
      auto& a = prof_sum_[prof_[i].name];
      a.first += 1;
      a.second += ms;
    }
  }
  prof_used_ = 0;
}

std::string CudaBackend::linear_name(const Weight& w, int64_t M) {
  const auto& c = cw(w);
  const char* k = c.kind == CudaWeight::Kind::W4   ? "w4"
                  : c.kind == CudaWeight::Kind::W8 ? "w8"
                                                   : "dense";
  const int64_t mb = M <= 1 ? 1 : M <= 8 ? 8 : M <= 64 ? 64 : M <= 256 ? 256 : 4096;
  return "linear " + std::string(k) + " [" + std::to_string(w.out) + " x " + std::to_string(w.in) +
         "] M<=" + std::to_string(mb);
}

void CudaBackend::print_profile() {
  prof_flush();
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> v(prof_sum_.begin(),
                                                                    prof_sum_.end());
  std::sort(v.begin(), v.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  double total = 0;
  for (const auto& e : v) total += e.second.second;
  std::fprintf(stderr, "perfx cuda profile (GPU time per op, events around each op, no graphs):\n");
  std::fprintf(stderr, "  %-52s %9s %11s %9s %6s\n", "op", "calls", "total ms", "avg us", "share");
  for (const auto& [name, a] : v)
    std::fprintf(stderr, "  %-52s %9lld %11.3f %9.2f %5.1f%%\n", name.c_str(), (long long)a.first,
                 a.second, 1000.0 * a.second / (double)a.first,
                 100.0 * a.second / std::max(total, 1e-9));
  for (auto& r : prof_) {
    (void)cudaEventDestroy(r.start);
    (void)cudaEventDestroy(r.stop);
  }
  prof_.clear();
}

void CudaBackend::begin_graph_step(int n_tokens, bool fed) {
  const GraphKey key{n_tokens, width_, gen_->value.load(), fed, par_};
  if (const GraphExec* g = graphs_.find(key)) {
    state_ = State::Replaying;
    replay_ = g->exec;
    replay_argmax_ = g->argmax;
    return;
  }
  capture_argmax_ = false;
  cuda_ok(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  state_ = State::Capturing;
  capture_key_ = key;
}

void CudaBackend::finish_forward() {
  if (state_ == State::Eager) return;
  if (state_ == State::Replaying) {
    state_ = State::Eager;
    cuda_ok(cudaGraphLaunch(replay_, stream_), "cudaGraphLaunch");
    return;
  }
  state_ = State::Eager;
  cudaGraph_t g = nullptr;
  cuda_ok(cudaStreamEndCapture(stream_, &g),
          "CUDA graph capture of a decode step (PERFX_CUDA_GRAPHS=0 runs without graphs)");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  (void)cudaGraphDestroy(g);
  cuda_ok(e, "cudaGraphInstantiate");
  // Graphs made over an older scratch generation can never replay again; a full cache gives
  // up its least recently replayed graph.
  graphs_.erase_if([&](const GraphKey& k) { return k.gen != capture_key_.gen; }, destroy_exec);
  if (auto old = graphs_.insert(capture_key_, GraphExec{exec, capture_argmax_})) destroy_exec(*old);
  ++graphs_captured_;
  cuda_ok(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
}

void CudaBackend::abandon_capture() noexcept {
  if (state_ != State::Capturing) return;
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(stream_, &g);  // an invalidated capture returns no graph
  if (g) (void)cudaGraphDestroy(g);
  state_ = State::Eager;
}

void CudaBackend::launched(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    abandon_capture();  // leave capture mode before reporting
    cuda_ok(e, op);
  }
}

void CudaBackend::ensure_staging(size_t n) {
  if (n <= staging_cap_) return;
  const size_t cap = std::max<size_t>({n, staging_cap_ * 2, 65536});
  cuda_ok(sync_streams(), "staging");
  // Every new buffer first: a failed allocation leaves the old ones (and the graphs that point
  // into them) as they were.
  struct Pinned {
    void* p = nullptr;
    ~Pinned() {
      if (p) (void)cudaFreeHost(p);
    }
  } host[2];
  DevMem dev[2];
  for (int p = 0; p < n_bufs(); ++p) {
    const cudaError_t e = cudaHostAlloc(&host[p].p, cap * 4, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error("cannot allocate " + mib(cap * 4) +
                  " of pinned host memory for the batch layout: " + cudaGetErrorString(e));
    }
    dev[p].alloc(cap * 4, "the batch layout");
  }
  gen_->value++;  // the graphs point into the buffers about to go
  for (int p = 0; p < n_bufs(); ++p) {
    std::swap(pinned_[p], host[p].p);  // the old one is freed with `host`
    batch_dev_[p] = std::move(dev[p]);
  }
  staging_cap_ = cap;
}

void CudaBackend::ensure_step_ids(int n) {
  if ((size_t)n <= step_ids_cap_) return;
  const size_t cap = std::max<size_t>({(size_t)n, step_ids_cap_ * 2, 65536});
  cuda_ok(sync_streams(), "step ids");
  gen_->value++;  // before any old buffer goes: graphs captured over them never replay
  for (int i = 0; i < n_bufs(); ++i) {
    // A draw kept in the old buffer moves with it: a fed step with more tokens than its draw
    // had rows (new sequences joining) grows it. The new buffer exists before the old one goes.
    DevMem fresh(cap * 4, "the step's token ids");
    if (fed_d_ && fed_d_ == ids_[i].get()) {
      cuda_ok(cudaMemcpyAsync(fresh.get(), fed_d_, (size_t)fed_n_ * 4, cudaMemcpyDeviceToDevice,
                              stream_),
              "step ids");
      cuda_ok(cudaStreamSynchronize(stream_), "step ids");
      fed_d_ = static_cast<const int32_t*>(fresh.get());
    }
    ids_[i] = std::move(fresh);
  }
  step_rows_.alloc(cap * 4, "the step's rows");
  std::vector<int32_t> iota(cap);
  for (size_t i = 0; i < cap; ++i) iota[i] = (int32_t)i;
  cuda_ok(cudaMemcpy(step_rows_.get(), iota.data(), cap * 4, cudaMemcpyHostToDevice), "step rows");
  step_ids_cap_ = cap;
}

Workspace CudaBackend::workspace(size_t need) {
  if (need > linear_ws_.size()) {
    // The new buffer first (a failure leaves the old one, and the graphs over it, as they were);
    // a capture keeps the old one alive for the nodes it has already recorded.
    DevMem grown(std::max(need, linear_ws_.size() * 2), "the linear-layer workspace");
    if (state_ == State::Capturing)
      retired_.push_back(std::move(linear_ws_));
    else
      cuda_ok(cudaStreamSynchronize(stream_), "workspace");
    linear_ws_ = std::move(grown);
    // The graph being captured uses the new buffer: it stays valid for this bump, but not for
    // another one made during the same capture (e.g. an L2 successor learned anew).
    const uint64_t before = gen_->value++;
    if (capture_key_.gen == before) capture_key_.gen = before + 1;
  }
  return Workspace{linear_ws_.get(), linear_ws_.size()};
}

}  // namespace perfx::cuda::backend_impl

namespace perfx::cuda {

std::unique_ptr<Backend> create_cuda_backend(int index) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    (void)cudaGetLastError();
    throw Error(
        "no CUDA GPU found (device 'cuda:" + std::to_string(index) + "'): " +
        (e == cudaSuccess ? std::string("the driver reports none") : cudaGetErrorString(e)));
  }
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice ||
      e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string("CUDA is not usable on this machine (device 'cuda:") +
                std::to_string(index) + "'): " + cudaGetErrorName(e) + " (" +
                cudaGetErrorString(e) + "); is the NVIDIA driver installed?");
  }
  check(index >= 0 && index < n,
        "device 'cuda:" + std::to_string(index) + "' is out of range: this machine has " +
            std::to_string(n) + " CUDA GPU" + (n == 1 ? "" : "s") + " (cuda:0" +
            (n > 1 ? "..cuda:" + std::to_string(n - 1) : std::string()) + ")");
  return std::make_unique<backend_impl::CudaBackend>(index);
}

}  // namespace perfx::cuda
