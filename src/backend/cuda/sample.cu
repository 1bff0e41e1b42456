// Sampling with a temperature on the GPU: the reference sampler's no-truncation path
// (src/backend/cpu/sampling.cpp) for one row per block, so only the picked ids leave the device.
#include <cfloat>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
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
// every id in order with the same test).
__global__ void __launch_bounds__(kSampleThreads)
    sample_softmax_kernel(const float* __restrict__ logits, int64_t ld,
                          const SampleDraw* __restrict__ draws, int vocab,
                          int32_t* __restrict__ out) {
  pdl_enter();
  using Reduce = cub::BlockReduce<float, kSampleThreads>;
  using Scan = cub::BlockScan<double, kSampleThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ float s_max;
  __shared__ int s_pick;
  const SampleDraw d = draws[blockIdx.x];
  const float* l = logits + (int64_t)d.row * ld;
  float m = -FLT_MAX;
  for (int j = threadIdx.x; j < vocab; j += kSampleThreads) m = fmaxf(m, l[j]);
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
  const double r = d.u * total;
  if (j0 < j1 && before <= r && r < before + s) {
    double acc = before;
    for (int j = j0; j < j1; ++j) {
      acc += exp((double)(l[j] - mx) / T);
      if (acc > r) {
        atomicMin(&s_pick, j);
        break;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = s_pick;
}

}  // namespace

void launch_sample_softmax(const float* logits, int64_t ld, const SampleDraw* draws, int n,
                           int vocab, int32_t* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(sample_softmax_kernel, dim3(n), dim3(kSampleThreads), 0, stream, logits, ld, draws,
             vocab, out);
}

}  // namespace perfx::cuda
