// Sampling with a temperature on the GPU: the reference sampler's (src/backend/cpu/sampling.cpp)
// no-truncation path and its top-k (<= 1024) path with top-p / min-p, one row per block, so only
// the picked ids leave the device.
#include <cfloat>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/logit_check.cuh"
#include "backend/cuda/pdl.cuh"

namespace perfx::cuda {
namespace {

constexpr int kSampleThreads = 1024;

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// One block per draw. Thread t owns ids [t·C, t·C + C) (C = ceil(vocab / 1024)); the chunks' sums
// of exp((l − max) / T) in double are scanned in id order, and the thread whose chunk holds
// u · total walks it: the first id where the running sum exceeds u · total wins (the CPU walks
// every id in order with the same test). out = −1 where a logit is NaN or +inf (logit_check.cuh).
__global__ void __launch_bounds__(kSampleThreads)
    sample_softmax_kernel(const float* logits, int64_t ld, const SampleDraw* __restrict__ draws,
                          int vocab, int32_t* __restrict__ out) {
  PERFX_TRACE(kTrSample, logits);
  pdl_enter();
  using Reduce = cub::BlockReduce<float, kSampleThreads>;
  using Scan = cub::BlockScan<double, kSampleThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ float s_max;
  __shared__ int s_pick;
  __shared__ double s_before[kSampleThreads + 1];
  // nc-ok: draws: uploaded before the launch
  const SampleDraw d = draws[blockIdx.x];
  const float* l = logits + (int64_t)d.row * ld;
  float m = -FLT_MAX;
  bool broken = false;
  for (int j = threadIdx.x; j < vocab; j += kSampleThreads) {
    m = fmaxf(m, l[j]);
    broken |= broken_logit(l[j]);
  }
  if (__syncthreads_or(broken)) {  // the host reports the row
    if (threadIdx.x == 0) out[blockIdx.x] = -1;
    return;
  }
  m = Reduce(tmp.reduce).Reduce(m, MaxOp());
  if (threadIdx.x == 0) {
    s_max = m;
    s_pick = vocab - 1;  // the CPU's answer when rounding leaves u · total past the last id
  }
  __syncthreads();
  const float mx = s_max;
  const double T = (double)d.temperature;
  const int C = (vocab + kSampleThreads - 1) / kSampleThreads;
  const int j0 = min(vocab, (int)threadIdx.x * C), j1 = min(vocab, j0 + C);
  double s = 0;
  for (int j = j0; j < j1; ++j) s += exp((double)(l[j] - mx) / T);
  double before = 0, total = 0;
  Scan(tmp.scan).ExclusiveSum(s, before, total);
  s_before[threadIdx.x] = before;
  if (threadIdx.x == 0) s_before[kSampleThreads] = total;
  __syncthreads();
  // Thread t owns [before_t, before_t+1): the ranges tile [0, total) whatever the rounding.
  const double r = d.u * total;
  if (j0 < j1 && before <= r && r < s_before[threadIdx.x + 1]) {
    double acc = before;
    int last = -1;  // the chunk's last id with weight: where rounding leaves the walk short of r
    for (int j = j0; j < j1; ++j) {
      const double e = exp((double)(l[j] - mx) / T);
      acc += e;
      if (e > 0) last = j;
      if (acc > r) {
        last = j;
        break;
      }
    }
    if (last >= 0) atomicMin(&s_pick, last);
  }
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = s_pick;
}

// A float's bits as an unsigned key with the same order (larger float, larger key; −0 and +0 the
// same key, as they compare equal on the host).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f + 0.0f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// expf as the host computes it (glibc's is correctly rounded or nearly; CUDA's expf may be 2 ulp
// off): exp in double, rounded once to float.
__device__ __forceinline__ float host_expf(float x) {
  return (float)exp((double)x);
}

// (key, id) pairs sorted by key descending, then id ascending (the reference sampler's order).
__device__ __forceinline__ bool goes_first(uint32_t ka, int ia, uint32_t kb, int ib) {
  return ka > kb || (ka == kb && ia < ib);
}

// Bitonic sort of kSampleThreads (key, id) pairs in shared memory into goes_first order; every
// thread of the block calls it.
__device__ void bitonic_sort(uint32_t* key, int* id) {
  const int i = threadIdx.x;
  for (int size = 2; size <= kSampleThreads; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      const int j = i ^ stride;
      if (j > i) {
        const bool up = (i & size) == 0;
        const bool swap = up ? goes_first(key[j], id[j], key[i], id[i])
                             : goes_first(key[i], id[i], key[j], id[j]);
        if (swap) {
          const uint32_t tk = key[i];
          key[i] = key[j];
          key[j] = tk;
          const int ti = id[i];
          id[i] = id[j];
          id[j] = ti;
        }
      }
    }
  __syncthreads();
}

// One block per draw: the reference sampler's truncated path for top_k <= kSampleThreads, or
// (top_k off: `full`) for top-p / min-p over the whole vocabulary when their cut falls within the
// kSampleThreads most likely ids.
// 1. The k-th candidate's key by a most-significant-digit-first radix select (4 passes of 8 bits);
// 2. the candidates (keys above it, then the lowest ids among those equal to it) sorted by
//    (logit descending, id ascending); 3. thread 0 repeats the reference's arithmetic on them in
//    order: softmax at T in float with a double sum (over the whole vocabulary when `full`),
//    top-p prefix, min-p, the draw. out = −1 (the host samples that row) when more than
//    kSampleThreads logits equal the k-th one, or a `full` row's cut lies past the candidates,
//    or a logit is NaN or +inf (logit_check.cuh).
__global__ void __launch_bounds__(kSampleThreads)
    sample_top_k_kernel(const float* logits, int64_t ld, const SampleDrawTopK* __restrict__ draws,
                        int vocab, int32_t* __restrict__ out) {
  PERFX_TRACE(kTrSample, logits);
  pdl_enter();
  using ScanI = cub::BlockScan<int, kSampleThreads>;
  __shared__ typename ScanI::TempStorage scan_tmp;
  __shared__ uint32_t ckey[kSampleThreads];
  __shared__ int cid[kSampleThreads];
  __shared__ float prob[kSampleThreads];
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_left, n_gt;
  __shared__ double s_sum_all;
  // nc-ok: draws: uploaded before the launch
  const SampleDrawTopK d = draws[blockIdx.x];
  const float* l = logits + (int64_t)d.row * ld;
  const bool full = d.top_k <= 0;  // top-p / min-p over the whole vocabulary
  const int k = min(min(vocab, kSampleThreads), full ? kSampleThreads : d.top_k);
  const int t = threadIdx.x;
  if (t == 0) {
    s_prefix = 0;
    s_left = k;
    n_gt = 0;
  }
  // 1. radix select of the k-th largest key
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = t; b < 256; b += kSampleThreads) hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix;
    bool broken = false;
    for (int j = t; j < vocab; j += kSampleThreads) {
      const uint32_t key = order_key(l[j]);
      if (shift == 24 || (key >> (shift + 8)) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1);
      broken |= shift == 24 && broken_logit(l[j]);
    }
    if (__syncthreads_or(broken)) {  // the host reports the row
      if (t == 0) out[blockIdx.x] = -1;
      return;
    }
    if (t == 0) {
      int left = s_left, b = 255;
      for (; b > 0 && hist[b] < left; --b) left -= hist[b];
      s_left = left;  // how many of bin b's keys are still to take
      s_prefix = (prefix << 8) | (uint32_t)b;
    }
    __syncthreads();
  }
  const uint32_t kth = s_prefix;
  const int take_eq = s_left;  // keys equal to kth among the k (>= 1)
  // 2. candidates: the keys above kth (fewer than k) anywhere, then the first take_eq ids equal to
  // it in id order (contiguous id chunks per thread, ranked by a scan), placed after them
  ckey[t] = 0;
  cid[t] = 0x7fffffff;
  __syncthreads();
  const int C = (vocab + kSampleThreads - 1) / kSampleThreads;
  const int j0 = min(vocab, t * C), j1 = min(vocab, j0 + C);
  int n_eq = 0;
  for (int j = j0; j < j1; ++j) {
    const uint32_t key = order_key(l[j]);
    if (key > kth) {
      const int at = atomicAdd(&n_gt, 1);
      ckey[at] = key;
      cid[at] = j;
    }
    n_eq += key == kth;
  }
  int rank = 0;
  ScanI(scan_tmp).ExclusiveSum(n_eq, rank);
  __syncthreads();  // n_gt complete
  const int gt = n_gt;
  for (int j = j0; j < j1 && rank < take_eq; ++j)
    if (order_key(l[j]) == kth) {
      ckey[gt + rank] = kth;
      cid[gt + rank] = j;
      ++rank;
    }
  bitonic_sort(ckey, cid);
  // 3. the reference's arithmetic, in order (src/backend/cpu/sampling.cpp steps 4-7)
  const float mx = l[cid[0]];
  if (full) {  // the softmax's sum runs over every id (in another order than the host's)
    double part = 0;
    for (int j = t; j < vocab; j += kSampleThreads) part += host_expf((l[j] - mx) / d.temperature);
    using ReduceD = cub::BlockReduce<double, kSampleThreads>;
    __shared__ typename ReduceD::TempStorage red;
    part = ReduceD(red).Sum(part);
    if (t == 0) s_sum_all = part;
  }
  if (t != 0) return;
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    prob[i] = host_expf((l[cid[i]] - mx) / d.temperature);
    sum += prob[i];
  }
  if (full) sum = s_sum_all;
  for (int i = 0; i < k; ++i) prob[i] = (float)(prob[i] / sum);
  int keep = k;
  bool cut = !full || k == vocab;  // a `full` row needs its cut inside the candidates
  if (d.top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < k; ++i) {
      cum += prob[i];
      if (cum >= d.top_p) {
        keep = i + 1;
        cut = true;
        break;
      }
    }
  }
  if (d.min_p > 0.0f) {
    const float thr = d.min_p * prob[0];
    int kk = 1;
    while (kk < keep && prob[kk] >= thr) ++kk;
    if (kk < k) cut = true;
    keep = kk;
  }
  if (!cut) {
    out[blockIdx.x] = -1;
    return;
  }
  double total = 0;
  for (int i = 0; i < keep; ++i) total += prob[i];
  double r = d.u * total;
  int pick = cid[keep - 1];
  for (int i = 0; i < keep; ++i) {
    r -= prob[i];
    if (r < 0) {
      pick = cid[i];
      break;
    }
  }
  out[blockIdx.x] = pick;
}

}  // namespace

void launch_sample_top_k(const float* logits, int64_t ld, const SampleDrawTopK* draws, int n,
                         int vocab, int32_t* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(sample_top_k_kernel, dim3(n), dim3(kSampleThreads), 0, stream, logits, ld, draws,
             vocab, out);
}

void launch_sample_softmax(const float* logits, int64_t ld, const SampleDraw* draws, int n,
                           int vocab, int32_t* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(sample_softmax_kernel, dim3(n), dim3(kSampleThreads), 0, stream, logits, ld, draws,
             vocab, out);
}

PERFX_TRACE_BINDER(trace_bind_sample)

}  // namespace perfx::cuda
