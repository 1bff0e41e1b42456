// Decode GEMV: y[r] = x · W[r, :] (+ bias[r]) for one token, W a weight slab (weights.cl).
//
// Work-group (LANES, ROWS): ROWS rows at once, each row's columns split over LANES work-items in
// chunks of 32 (a 2-D split over rows and K). A lane reads a chunk of int4 weights as one uint4
// (16 bytes), int8 as two char16, dense as 8-wide vectors; the activation vector comes through an
// image1d_buffer_t (texture path) when built with USE_IMAGE, else from the buffer. Quantized
// formats stage their ROWS × groups (scale, offset) pairs in local memory first (LOCAL_SCALES).
// Per chunk the quantized sum is factored: Σ (q·s + m)·x = s·Σ q·x + m·Σ x.
//
// The result of a row depends only on LANES (which lane sums which chunks, and the tree reduction
// over lanes), never on ROWS: tuning ROWS per device changes the speed, not a single bit.
// Global [LANES, ceil(rows / ROWS) · ROWS].
#include "weights.cl"

#ifdef USE_IMAGE
#define X_ARG __read_only image1d_buffer_t ximg, __global const ACT_T* x
#define X4(k) read_imagef(ximg, (x_off + (k)) >> 2)
#else
#define X_ARG __global const ACT_T* x
#define X4(k) LD_ACT4(x, x_off + (k))
#endif

__kernel __attribute__((reqd_work_group_size(LANES, ROWS, 1))) void gemv(
    __global const uchar* w, long q_off, long s_off, long z_off, int in, int rows, X_ARG,
    int x_off, __global const float* bias, int bias_off, int has_bias, __global void* y,
    long y_off, int y_f32, __local float* lsc) {
  const int lane = get_local_id(0), lr = get_local_id(1);
  const int r0 = get_group_id(1) * ROWS;
  const int r_real = r0 + lr;
  const int r = min(r_real, rows - 1);  // rows past the end compute a copy and store nothing
  const int nc = in / 32;
  float acc = 0.0f;

#if WF_QUANT
  const int G = in / GS;
#ifdef LOCAL_SCALES
  for (int i = lr * LANES + lane; i < ROWS * G; i += LANES * ROWS) {
    const int rr = min(r0 + i / G, rows - 1);
    const float2 sm = group_scale(w, s_off, z_off, in, rr, i % G);
    lsc[2 * i] = sm.x;
    lsc[2 * i + 1] = sm.y;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#define SCALE(g) ((float2)(lsc[2 * (lr * G + (g))], lsc[2 * (lr * G + (g)) + 1]))
#else
#define SCALE(g) group_scale(w, s_off, z_off, in, r, (g))
#endif
#endif

  for (int c = lane; c < nc; c += LANES) {
    const int k = c * 32;
#if WF == WF_Q4 || WF == WF_Q4M
    const uint4 q = vload4(c, (__global const uint*)(w + q_off) + (long)r * (in / 8));
    float dq = 0.0f, sx = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint wd = j == 0 ? q.s0 : j == 1 ? q.s1 : j == 2 ? q.s2 : q.s3;
      const float4 xa = X4(k + 8 * j), xb = X4(k + 8 * j + 4);
      const float4 qa = convert_float4(((uint4)(wd) >> (uint4)(0, 4, 8, 12)) & 15u);
      const float4 qb = convert_float4(((uint4)(wd) >> (uint4)(16, 20, 24, 28)) & 15u);
      dq += dot(qa, xa) + dot(qb, xb);
      sx += dot(xa, (float4)(1.0f)) + dot(xb, (float4)(1.0f));
    }
    const float2 sm = SCALE(CHUNK_GROUP(c));
    acc += sm.x * dq + sm.y * sx;
#elif WF == WF_Q8
    __global const char* qp = (__global const char*)(w + q_off) + (long)r * in + k;
    const float16 qa = convert_float16(vload16(0, qp)), qb = convert_float16(vload16(1, qp));
    const float dq = dot(qa.s0123, X4(k)) + dot(qa.s4567, X4(k + 4)) + dot(qa.s89ab, X4(k + 8)) +
                     dot(qa.scdef, X4(k + 12)) + dot(qb.s0123, X4(k + 16)) +
                     dot(qb.s4567, X4(k + 20)) + dot(qb.s89ab, X4(k + 24)) +
                     dot(qb.scdef, X4(k + 28));
    acc += SCALE(c).x * dq;
#else
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float8 wv = load_w8(w, q_off, s_off, z_off, in, r, k + 8 * j);
      s += dot(wv.lo, X4(k + 8 * j)) + dot(wv.hi, X4(k + 8 * j + 4));
    }
    acc += s;
#endif
  }
#if !WF_QUANT
  // columns past the last full chunk (dense weights only)
  for (int k = nc * 32 + lane; k < in; k += LANES) {
    const float8 wv = load_w8(w, q_off, s_off, z_off, in, r, k & ~7);
    const float wk = (k & 7) == 0 ? wv.s0 : (k & 7) == 1 ? wv.s1 : (k & 7) == 2 ? wv.s2
                   : (k & 7) == 3 ? wv.s3 : (k & 7) == 4 ? wv.s4 : (k & 7) == 5 ? wv.s5
                   : (k & 7) == 6 ? wv.s6 : wv.s7;
    acc += wk * LD_ACT(x, x_off + k);
  }
#endif

  __local float red[ROWS * LANES];
  red[lr * LANES + lane] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = LANES >> 1; s > 0; s >>= 1) {
    if (lane < s) red[lr * LANES + lane] += red[lr * LANES + lane + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lane == 0 && r_real < rows) {
    float v = red[lr * LANES];
    if (has_bias) v += bias[bias_off + r_real];
    store_out(y, y_off + r_real, v, y_f32);
  }
}
