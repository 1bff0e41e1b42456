// Activations quantized to int8 for the W4A8 decode GEMV (w4_gemv3's A8 variant,
// docs/cuda_linear_notes.md §13): one thread per 4 channels, a group's G / 4 threads adjacent
// lanes of one warp, max |x| and the sum of the quantized values reduced by xor-shuffles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "backend/cuda/pdl.cuh"

namespace perfx::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, int LPG>  // LPG: lanes per group = group / 4
__global__ void quantize_act_q8_kernel(const T* x, int64_t ldx, int M, int64_t K,
                                       int8_t* __restrict__ xq, int2* __restrict__ meta) {
  pdl_enter();
  const int64_t per_row = K / 4, total = (int64_t)M * per_row;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  // Past the end a whole group of lanes is idle (total is a multiple of LPG); they still join
  // their own segment's shuffles, on the last element.
  const bool live = idx < total;
  const int64_t i = live ? idx : total - 1;
  const int64_t m = i / per_row, c4 = i % per_row;
  const uint2 raw = *reinterpret_cast<const uint2*>(x + m * ldx + 4 * c4);
  const T* h = reinterpret_cast<const T*>(&raw);
  float v[4], amax = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[k] = static_cast<float>(h[k]);
    amax = fmaxf(amax, fabsf(v[k]));
  }
#pragma unroll
  for (int o = LPG / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
  int q[4], s = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    q[k] = __float2int_rn(v[k] * id);
    s += q[k];
  }
#pragma unroll
  for (int o = LPG / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (!live) return;
  // stored order 0, 2, 1, 3: the byte order of the int4 layout's A fragments (linear_frag.cuh)
  reinterpret_cast<uint32_t*>(xq + m * K)[c4] = frag::a8_store4(q[0], q[1], q[2], q[3]);
  if (c4 % LPG == 0) meta[m * (K / (4 * LPG)) + c4 / LPG] = make_int2(__float_as_int(d), s);
}

template <typename T, int LPG>
void launch(const void* x, int64_t ldx, int M, int64_t K, int8_t* xq, int2* meta,
            cudaStream_t stream) {
  const int64_t total = (int64_t)M * (K / 4);
  const unsigned blocks = (unsigned)((total + kThreads - 1) / kThreads);
  launch_pdl(quantize_act_q8_kernel<T, LPG>, dim3(blocks), dim3(kThreads), 0, stream,
             static_cast<const T*>(x), ldx, M, K, xq, meta);
}

template <typename T>
void launch_group(int group, const void* x, int64_t ldx, int M, int64_t K, int8_t* xq, int2* meta,
                  cudaStream_t stream) {
  switch (group) {
    case 32:
      return launch<T, 8>(x, ldx, M, K, xq, meta, stream);
    case 64:
      return launch<T, 16>(x, ldx, M, K, xq, meta, stream);
    default:
      return launch<T, 32>(x, ldx, M, K, xq, meta, stream);
  }
}

}  // namespace

size_t act_q8_bytes(int M, int64_t K, int group) {
  return ((size_t)M * (size_t)K + 255) / 256 * 256 + (size_t)M * (size_t)(K / group) * 8;
}

W4A8Act quantize_act_q8(const void* x, DType xt, int M, int64_t ldx, int64_t K, int group,
                        Workspace ws, cudaStream_t stream, bool launch_kernel) {
  PERFX_CHECK(group == 32 || group == 64 || group == 128,
              "quantize_act_q8: group " + std::to_string(group) + " is not 32, 64 or 128");
  PERFX_CHECK(K % 128 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0,
              "quantize_act_q8: K = " + std::to_string(K) +
                  " must be a multiple of 128 and x 8-byte aligned with ldx a multiple of 4");
  PERFX_CHECK(ws.ptr != nullptr && ws.bytes >= act_q8_bytes(M, K, group),
              "quantize_act_q8: workspace of " + std::to_string(ws.bytes) + " bytes, needs " +
                  std::to_string(act_q8_bytes(M, K, group)));
  W4A8Act a;
  a.q = static_cast<int8_t*>(ws.ptr);
  a.meta = reinterpret_cast<int2*>(static_cast<char*>(ws.ptr) +
                                   ((size_t)M * (size_t)K + 255) / 256 * 256);
  if (M == 0 || !launch_kernel) return a;
  if (xt == DType::F16)
    launch_group<__half>(group, x, ldx, M, K, const_cast<int8_t*>(a.q), const_cast<int2*>(a.meta),
                         stream);
  else
    launch_group<__nv_bfloat16>(group, x, ldx, M, K, const_cast<int8_t*>(a.q),
                                const_cast<int2*>(a.meta), stream);
  return a;
}

}  // namespace perfx::cuda
