// Whole-matrix dequantization of W4 / W8 weights to fp16 / bf16 [N, K] (the large-M path:
// dequantize once, then the caller's dense GEMM, as vLLM's AWQ does for >= 256 tokens), and the
// bias add that path needs after a GEMM without a bias epilogue.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cvt.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"

namespace perfx::cuda {
namespace {

/// One thread per (row block nb, chunk kc, lane): the lane's 32 weights are rows gid, gid + 8 ×
/// channels 64kc + 32h + 8tid + 0..7 (h = 0, 1): four 16-byte stores.
template <typename T>
__global__ void w4_dequant_kernel(W4View w, T* __restrict__ dst, int64_t ldd) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t total = (int64_t)w.d.NB * w.d.KC * 32;
  if (i >= total) return;
  const int lane = (int)(i & 31), gid = lane >> 2, tid = lane & 3;
  const int64_t kc = (i >> 5) % w.d.KC, nb = (i >> 5) / w.d.KC;
  const uint4 q = w.q[i];  // == w4_q_index(KC, nb, kc, lane)
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t k0 = 64 * kc + 32 * h + 8 * tid;
    if (64 * kc + 32 * h >= w.d.K) continue;  // K is a multiple of 32: the whole half is padding
    const int64_t hc = 2 * kc + h;
    const uint2 rec = frag::w4_rec_of_half(
        w.sz[frag::w4_rec_index(w.d.G, w.d.gs_shift, w.d.sym, nb, hc, gid)], w.d.sym, hc);
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int64_t row = nb * 16 + gid + 8 * hi;
      if (row >= w.d.N) continue;
      const float s = hi ? frag::f16_hi(rec.x) : frag::f16_lo(rec.x);
      const float z = (float)((rec.y >> (8 * hi)) & 0xFFu);
      float v[8];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj)
#pragma unroll
        for (int koff = 0; koff < 4; ++koff) {
          const int e = frag::w4_elem(hi, koff);
          const uint32_t nib = (words[2 * h + jj] >> (4 * frag::w4_nibble(e))) & 0xFu;
          v[4 * jj + koff] = ((float)nib - z) * s;  // as Int4Matrix::dequant
        }
      *reinterpret_cast<uint4*>(dst + row * ldd + k0) = pack8<T>(v);
    }
  }
}

/// One thread per (row block nb, chunk kc of 32, lane): rows gid, gid + 8 × channels
/// 32kc + 8tid + 0..7: two 16-byte stores.
template <typename T>
__global__ void w8_dequant_kernel(W8View w, T* __restrict__ dst, int64_t ldd) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t total = (int64_t)w.d.NB * w.d.KC * 32;
  if (i >= total) return;
  const int lane = (int)(i & 31), gid = lane >> 2, tid = lane & 3;
  const int64_t kc = (i >> 5) % w.d.KC, nb = (i >> 5) / w.d.KC;
  const uint4 q = w.q[i];
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
  const uint32_t rec = w.s[frag::w8_s_index(w.d.G, nb, kc >> w.d.gs_shift, gid)];
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int64_t row = nb * 16 + gid + 8 * hi;
    if (row >= w.d.N) continue;
    const float s = hi ? frag::f16_hi(rec) : frag::f16_lo(rec);
    float v[8];
#pragma unroll
    for (int o = 0; o < 8; ++o) {
      const int jj = o >> 2, koff = o & 3;
      const uint32_t word = words[2 * jj + (koff >> 1)];
      const int byte = (hi << 1) | (koff & 1);
      v[o] = (float)((int)((word >> (8 * byte)) & 0xFFu) - 128) * s;  // as Int8Matrix::dequant
    }
    *reinterpret_cast<uint4*>(dst + row * ldd + 32 * kc + 8 * tid) = pack8<T>(v);
  }
}

template <typename T>
__global__ void add_bias_kernel(T* __restrict__ y, int64_t ldy, int M, int64_t N,
                                const float* __restrict__ bias) {
  const int64_t total = (int64_t)M * N;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t m = i / N, n = i - m * N;
    T& v = y[m * ldy + n];
    if constexpr (std::is_same_v<T, float>)
      v += bias[n];
    else if constexpr (std::is_same_v<T, __half>)
      v = __float2half_rn(__half2float(v) + bias[n]);
    else
      v = __float2bfloat16_rn(__bfloat162float(v) + bias[n]);
  }
}

void check_dense_dst(const char* op, int64_t K, const void* dst, DType dt, int64_t ldd) {
  PERFX_CHECK(dt == DType::F16 || dt == DType::BF16,
              std::string(op) + ": destination must be F16 or BF16, got " + dtype_name(dt));
  PERFX_CHECK(dst != nullptr && reinterpret_cast<uintptr_t>(dst) % 16 == 0,
              std::string(op) + ": destination null or not 16-byte aligned");
  PERFX_CHECK(ldd >= K && ldd % 8 == 0, std::string(op) + ": ldd = " + std::to_string(ldd) +
                                            " must be >= K = " + std::to_string(K) +
                                            " and a multiple of 8");
}

}  // namespace

void w4_dequantize(const W4View& w, void* dst, DType dt, int64_t ldd, cudaStream_t stream) {
  check_dense_dst("w4_dequantize", w.d.K, dst, dt, ldd);
  const int64_t total = (int64_t)w.d.NB * w.d.KC * 32;
  const unsigned blocks = (unsigned)ceil_div<int64_t>(total, 256);
  if (dt == DType::F16)
    w4_dequant_kernel<__half><<<blocks, 256, 0, stream>>>(w, static_cast<__half*>(dst), ldd);
  else
    w4_dequant_kernel<__nv_bfloat16>
        <<<blocks, 256, 0, stream>>>(w, static_cast<__nv_bfloat16*>(dst), ldd);
  CUDA_CHECK_LAUNCH("w4_dequant_kernel");
}

void w8_dequantize(const W8View& w, void* dst, DType dt, int64_t ldd, cudaStream_t stream) {
  check_dense_dst("w8_dequantize", w.d.K, dst, dt, ldd);
  const int64_t total = (int64_t)w.d.NB * w.d.KC * 32;
  const unsigned blocks = (unsigned)ceil_div<int64_t>(total, 256);
  if (dt == DType::F16)
    w8_dequant_kernel<__half><<<blocks, 256, 0, stream>>>(w, static_cast<__half*>(dst), ldd);
  else
    w8_dequant_kernel<__nv_bfloat16>
        <<<blocks, 256, 0, stream>>>(w, static_cast<__nv_bfloat16*>(dst), ldd);
  CUDA_CHECK_LAUNCH("w8_dequant_kernel");
}

void add_bias(void* y, DType yt, int64_t ldy, int M, int64_t N, const float* bias,
              cudaStream_t stream) {
  if (M <= 0 || N <= 0 || bias == nullptr) return;
  PERFX_CHECK(y != nullptr && ldy >= N, std::string("add_bias: null y or ldy < N"));
  const int64_t total = (int64_t)M * N;
  const int blocks = (int)std::min<int64_t>(ceil_div<int64_t>(total, 256), 4096);
  switch (yt) {
    case DType::F32:
      add_bias_kernel<float><<<blocks, 256, 0, stream>>>(static_cast<float*>(y), ldy, M, N, bias);
      break;
    case DType::F16:
      add_bias_kernel<__half><<<blocks, 256, 0, stream>>>(static_cast<__half*>(y), ldy, M, N, bias);
      break;
    case DType::BF16:
      add_bias_kernel<__nv_bfloat16>
          <<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(y), ldy, M, N, bias);
      break;
    default:
      throw Error(std::string("add_bias: unsupported output dtype ") + dtype_name(yt));
  }
  CUDA_CHECK_LAUNCH("add_bias_kernel");
}

}  // namespace perfx::cuda
