// Int8 activations for the int4 decode GEMV (gemv.cl with -DACT_Q8): one work-item per chunk of
// 32 columns of x quantizes them as the CPU backend does (backend/cpu/qlinear.h): d = max|x| / 127,
// q = round-half-even(x · (127 / max|x|)) clamped to ±127 (all zeros: d = 0, q = 0), and keeps
// the exact fp32 Σ x of the chunk. Output per chunk c: xq[8c .. 8c+7] = for each word j of the
// weight's packed nibbles (columns 8j .. 8j+7 of the chunk) two words of four int8, the even
// columns (8j, 8j+2, 8j+4, 8j+6) then the odd ones, the order in which `w & 0x0F0F0F0F` and
// `(w >> 4) & 0x0F0F0F0F` hold the weight's nibbles; xs[c] = (d, Σ x).
#ifdef PERFX_TEST_BUILD_ERROR_ACT_Q8
// Set through PERFX_OPENCL_BUILD_OPTIONS by the test of the default's fallback (a driver that
// cannot build the int8 kernels keeps the activations' own path).
this is not OpenCL C;
#endif

__kernel void quantize_act_q8(__global const ACT_T* x, int x_off, int in, __global uint* xq,
                              __global float2* xs) {
  const int c = get_global_id(0);
  if (c >= in / 32) return;
  float v[32];
  float amax = 0.0f, sum = 0.0f;
  for (int k = 0; k < 32; ++k) {
    v[k] = LD_ACT(x, x_off + 32 * c + k);
    amax = fmax(amax, fabs(v[k]));
    sum += v[k];
  }
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 4; ++j) {
    uint lo = 0, hi = 0;
    for (int b = 0; b < 4; ++b) {
      const int qe = (int)clamp(rint(v[8 * j + 2 * b] * id), -127.0f, 127.0f);
      const int qo = (int)clamp(rint(v[8 * j + 2 * b + 1] * id), -127.0f, 127.0f);
      lo |= ((uint)qe & 0xFFu) << (8 * b);
      hi |= ((uint)qo & 0xFFu) << (8 * b);
    }
    xq[8 * c + 2 * j] = lo;
    xq[8 * c + 2 * j + 1] = hi;
  }
  xs[c] = (float2)(amax / 127.0f, sum);
}
