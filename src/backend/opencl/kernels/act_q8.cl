// Int8 activations for the int4 decode GEMV (gemv.cl with -DACT_Q8 and without -DACT_LOCAL: where
// x does not fit in local memory, tuning chose this kernel, or PERFX_OPENCL_ACT_LOCAL=0): one
// work-item per chunk of 32 columns of x (act_q8_chunk.cl's rule and layout). Output per chunk c:
// xq[8c .. 8c+7] (the chunk's int8, packed), xs[c] = (d, Σ x).
#ifdef PERFX_TEST_BUILD_ERROR_ACT_Q8
// Set through PERFX_OPENCL_BUILD_OPTIONS by the test of the default's fallback (a driver that
// cannot build the int8 kernels keeps the activations' own path).
this is not OpenCL C;
#endif
#include "act_q8_chunk.cl"

__kernel void quantize_act_q8(__global const ACT_T* x, int x_off, int in, __global uint* xq,
                              __global float2* xs) {
  const int c = get_global_id(0);
  if (c >= in / 32) return;
  uint q[8];
  xs[c] = act_q8_chunk(x, x_off + 32 * c, q);
  for (int j = 0; j < 8; ++j) xq[8 * c + j] = q[j];
}
