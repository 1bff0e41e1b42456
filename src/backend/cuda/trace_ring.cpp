// TraceRing: allocation, binding and the CSV dump of the kernel trace (trace.cuh).
#include "backend/cuda/trace_ring.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/trace.cuh"
#include "perfx/status.h"

namespace perfx::cuda {

namespace {
void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(std::string("PERFX_CUDA_TRACE: ") + what + ": " + cudaGetErrorString(e));
}
}  // namespace

bool TraceRing::built() {
  return kTraceBuilt;
}

TraceRing::TraceRing(unsigned cap) {
  const char* p = std::getenv("PERFX_CUDA_TRACE");
  if (p == nullptr || *p == '\0') return;
  if (!kTraceBuilt)
    throw Error(
        "PERFX_CUDA_TRACE is set, but this build records no trace: configure with "
        "-DPERFX_CUDA_TRACE=ON");
  if (cap == 0) throw Error("PERFX_CUDA_TRACE: a ring of 0 records");
  path_ = p;
  cap_ = cap;
  const size_t bytes = sizeof(TraceBuf) + (size_t)(cap - 1) * sizeof(TraceRec);
  ok(cudaMalloc(&buf_, bytes), "cudaMalloc");
  try {
    ok(cudaMemset(buf_, 0, bytes), "cudaMemset");
    ok(cudaMemcpy(static_cast<char*>(buf_) + offsetof(TraceBuf, cap), &cap_, sizeof cap_,
                  cudaMemcpyHostToDevice),
       "cudaMemcpy");
    // PERFX_CUDA_TRACE_PROBE=N (0..1000; 0: none): which probe point stamps t_prewait / t_mark
    // (trace.cuh; an N that no kernel has records nothing different from 0)
    if (const uint32_t probe = (uint32_t)env_int("PERFX_CUDA_TRACE_PROBE", 0, 1000, 0)) {
      ok(cudaMemcpy(static_cast<char*>(buf_) + offsetof(TraceBuf, probe), &probe, sizeof probe,
                    cudaMemcpyHostToDevice),
         "cudaMemcpy");
    }
    ok(trace_bind_all(static_cast<TraceBuf*>(buf_)), "binding the ring");
  } catch (...) {
    (void)trace_bind_all(nullptr);
    (void)cudaFree(buf_);
    buf_ = nullptr;
    throw;
  }
}

TraceRing::~TraceRing() {
  if (buf_ == nullptr) return;
  try {
    write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perfx: %s\n", e.what());
  }
  (void)trace_bind_all(nullptr);
  (void)cudaFree(buf_);
}

void TraceRing::write() const {
  if (buf_ == nullptr) return;
  unsigned long long n = 0;
  ok(cudaMemcpy(&n, buf_, sizeof n, cudaMemcpyDeviceToHost), "reading the record count");
  const unsigned long long kept = n < cap_ ? n : cap_;
  std::vector<TraceRec> rec((size_t)kept);
  if (kept > 0)
    ok(cudaMemcpy(rec.data(), static_cast<char*>(buf_) + offsetof(TraceBuf, rec),
                  kept * sizeof(TraceRec), cudaMemcpyDeviceToHost),
       "reading the records");
  FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) throw Error("PERFX_CUDA_TRACE: cannot write " + path_);
  std::fprintf(f, "kind,tag,cta,smid,t_start,t_prewait,t_wait,t_end,t_mark\n");
  for (unsigned long long k = n - kept; k < n; ++k) {
    const TraceRec& r = rec[(size_t)(k % cap_)];
    std::fprintf(f, "%s,%llx,%u,%u,%llu,%llu,%llu,%llu,%llu\n", trace_kind_name(r.kind),
                 (unsigned long long)r.tag, r.cta, r.smid, (unsigned long long)r.t_start,
                 (unsigned long long)r.t_prewait, (unsigned long long)r.t_wait,
                 (unsigned long long)r.t_end, (unsigned long long)r.t_mark);
  }
  const bool failed = std::ferror(f) != 0;
  if (std::fclose(f) != 0 || failed) throw Error("PERFX_CUDA_TRACE: writing " + path_ + " failed");
  std::fprintf(stderr, "perfx: PERFX_CUDA_TRACE: %llu of %llu records written to %s\n", kept, n,
               path_.c_str());
}

}  // namespace perfx::cuda
