// Decode GEMV: y[r] = x · W[r, :] (+ bias[r]) for one token, W a weight slab (weights.cl).
//
// Work-group (LANES, ROWS); each work-item computes RPT rows, so a work-group covers ROWS · RPT
// rows. The columns of a row are split over the LANES work-items in chunks of 32 (a 2-D split over
// rows and K): lane l sums chunks l, l + LANES, ... in that order, so neighbouring lanes read
// neighbouring 16-byte words of a row. The loop takes U chunks per lane at a time; for int4 it
// issues all U · RPT weight loads (one uint4 per row and chunk) before the arithmetic that needs
// them, so each work-item keeps that many loads in flight (int8: two char16, dense: 8-wide vectors,
// loaded where they are used).
// A work-item loads its chunk of the activation vector once (through an image1d_buffer_t with
// USE_IMAGE — the texture path — else from the buffer) and reuses it for its RPT rows. Quantized
// formats read each chunk's (scale, offset) from global memory (cached), or from local memory
// staged first (LOCAL_SCALES), and factor the chunk's sum: Σ (q·s + m)·x = s·Σ q·x + m·Σ x
// (Σ x shared by the RPT rows).
//
// int4 nibbles become floats without a shift-and-convert chain: rotating the word puts nibble n at
// bits 19..22, and OR-ing the bits of 1.0f makes the float 1 + q/16 exactly (two integer
// instructions: a funnel shift and a three-input logic op; IEEE 754 binary32 with exponent field 127
// and mantissa field m is 1 + m / 2^23). Then Σ q·x = 16 · (Σ (1 + q/16)·x − Σ x).
//
// A row's result depends only on LANES (which lane sums which chunks, in order, and the order of
// the sum over lanes), never on ROWS, RPT or U: tuning those per device changes the speed, not a
// single bit. Global [LANES, ceil(rows / (ROWS · RPT)) · ROWS].
//
// -DACT_Q8 (int4 formats only; PERFX_OPENCL_ACT_Q8=1): the activations are int8 per chunk of 32
// (act_q8_chunk.cl) and each chunk's Σ q·x is an exact integer dot product (4 weights per dp4a),
// about a fifth of the float path's instructions per weight; results then differ from the fp32
// path by the activations' rounding (as the CPU backend's int8-activation kernels do). Its
// weight loads are software-pipelined: the first step's go out before anything else, and each
// step issues the next step's before its own arithmetic. With -DACT_LOCAL (the host's choice
// where 40 bytes per 32 columns fit in local memory, unless tuning preferred the separate
// kernel or PERFX_OPENCL_ACT_LOCAL=0) each work-group quantizes x into local memory itself
// while the first loads are in flight: no separate quantization kernel (a fixed
// ~6 µs each on NVIDIA's OpenCL), and no dependent cache round trip per step for a chunk's
// activations. Without it, act_q8.cl quantizes x first into xq / xs, read from global memory.
//
// Measurement switch (tools/device/opencl_nvidia.sh): -DGEMV_PROBE keeps the int4 loads and drops
// the arithmetic (the results are then meaningless; other formats do nothing), to separate memory
// time from compute time (with ACT_LOCAL the work-group still quantizes x).
#include "weights.cl"

#ifndef GEMV_U
#define GEMV_U 2
#endif

#ifdef ACT_Q8
// Int8 activations (act_q8_chunk.cl): x itself with ACT_LOCAL, else act_q8.cl's xq / xs; dot
// products of 4 unsigned weight bytes with 4 signed activation bytes, accumulated in int32
// (exact): cl_khr_integer_dot_product, NVIDIA's dp4a instruction (inline PTX), or four
// multiply-adds.
#ifdef ACT_LOCAL  // the work-group quantizes x into local memory itself
#define X_ARG __global const ACT_T* x
#else  // quantized by act_q8.cl
#define X_ARG __global const uint* xq, __global const float2* xs
#endif
#include "act_q8_chunk.cl"
#if defined(DP4A_KHR)
#pragma OPENCL EXTENSION cl_khr_integer_dot_product : enable
#define DP4A(a, b, acc) ((acc) + dot_4x8packed_us_int((a), (b)))
#elif defined(DP4A_PTX)
inline int dp4a_ptx(uint a, uint b, int acc) {
  int r;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
  return r;
}
#define DP4A(a, b, acc) dp4a_ptx((a), (b), (acc))
#else
inline int dp4a_generic(uint a, uint b, int acc) {
  const uchar4 u = as_uchar4(a);
  const char4 s = as_char4(b);
  return acc + (int)u.x * s.x + (int)u.y * s.y + (int)u.z * s.z + (int)u.w * s.w;
}
#define DP4A(a, b, acc) dp4a_generic((a), (b), (acc))
#endif
// Σ_j q_j · x_j over one chunk (exact int32): word j's even nibbles against xa/xb's even-column
// bytes, its odd nibbles against the odd ones.
inline int q4_chunk_dot_i8(uint4 q, uint4 xa, uint4 xb) {
  const uint m = 0x0F0F0F0Fu;
  int d = 0;
  d = DP4A(q.s0 & m, xa.s0, d);
  d = DP4A((q.s0 >> 4) & m, xa.s1, d);
  d = DP4A(q.s1 & m, xa.s2, d);
  d = DP4A((q.s1 >> 4) & m, xa.s3, d);
  d = DP4A(q.s2 & m, xb.s0, d);
  d = DP4A((q.s2 >> 4) & m, xb.s1, d);
  d = DP4A(q.s3 & m, xb.s2, d);
  d = DP4A((q.s3 >> 4) & m, xb.s3, d);
  return d;
}
#elif defined(USE_IMAGE)
#define X_ARG __read_only image1d_buffer_t ximg, __global const ACT_T* x
#define X4(k) read_imagef(ximg, (x_off + (k)) >> 2)
#else
#define X_ARG __global const ACT_T* x
#define X4(k) LD_ACT4(x, x_off + (k))
#endif

#if WF == WF_Q4 || WF == WF_Q4M
// Σ_j q_j · x_j over one chunk of 32 columns (one uint4 of packed nibbles), given Σ_j x_j = sx.
inline float q4_chunk_dot(uint4 q, const float4* xv, float sx) {
  float d = 0.0f;
  for (int j = 0; j < 4; ++j) {
    const uint wd = j == 0 ? q.s0 : j == 1 ? q.s1 : j == 2 ? q.s2 : q.s3;
    // nibble n rotated left by 19 − 4n (mod 32) lands at bits 19..22
    const float4 fa =
        as_float4((rotate((uint4)(wd), (uint4)(19, 15, 11, 7)) & 0x00780000u) | 0x3F800000u);
    const float4 fb =
        as_float4((rotate((uint4)(wd), (uint4)(3, 31, 27, 23)) & 0x00780000u) | 0x3F800000u);
    d += dot(fa, xv[2 * j]) + dot(fb, xv[2 * j + 1]);
  }
  return 16.0f * (d - sx);
}
#endif

#if WF_QUANT
// The (scale, offset) pairs of the work-group's ROWS · RPT rows (from row wg_r0), every group, into
// `lss` [ROWS · RPT · G · 2] (the caller's barrier follows).
inline void stage_scales(__global const uchar* w, long s_off, long z_off, int in, int rows,
                         int wg_r0, __local float* lss) {
  const int G = in / GS;
  for (int i = get_local_id(1) * LANES + get_local_id(0); i < ROWS * RPT * G; i += LANES * ROWS) {
    const float2 sm = group_scale(w, s_off, z_off, in, min(wg_r0 + i / G, rows - 1), i % G);
    lss[2 * i] = sm.x;
    lss[2 * i + 1] = sm.y;
  }
}
#endif

__kernel __attribute__((reqd_work_group_size(LANES, ROWS, 1))) void gemv(
    __global const uchar* w, long q_off, long s_off, long z_off, int in, int rows, X_ARG,
    int x_off, __global const float* bias, int bias_off, int has_bias, __global void* y,
    long y_off, int y_f32, __local float4* lsc4) {
  // the local arguments' alignment follows their type on some drivers (NVIDIA's: a float* one may
  // start 4 bytes off a 16-byte line, and the int8 path reads it as uint4)
  __local float* lsc = (__local float*)lsc4;
  const int lane = get_local_id(0), lr = get_local_id(1);
  const int wg_r0 = get_group_id(1) * ROWS * RPT;  // first row of the work-group
  const int my_r0 = wg_r0 + lr * RPT;              // first row of this work-item
  int rr[RPT];  // its rows, clamped: rows past the end compute a copy and store nothing
  for (int i = 0; i < RPT; ++i) rr[i] = min(my_r0 + i, rows - 1);
  const int nc = in / 32;
  float acc[RPT];
  for (int i = 0; i < RPT; ++i) acc[i] = 0.0f;

#if WF_QUANT
  const int G = in / GS;
#ifdef LOCAL_SCALES
#ifdef ACT_Q8
#ifdef ACT_LOCAL
  __local float* lss = lsc + 10 * nc;  // after the activations (below), staged with them
#else
  __local float* lss = lsc;  // staged after the first weight loads (below)
#endif
#else
  __local float* lss = lsc;
  stage_scales(w, s_off, z_off, in, rows, wg_r0, lss);
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
#define SCALE(i, g) \
  ((float2)(lss[2 * ((lr * RPT + (i)) * G + (g))], lss[2 * ((lr * RPT + (i)) * G + (g)) + 1]))
#else
#define SCALE(i, g) group_scale(w, s_off, z_off, in, rr[i], (g))
#endif
#endif

#if WF == WF_Q4 || WF == WF_Q4M
  __global const uint4* qrow[RPT];
  for (int i = 0; i < RPT; ++i)
    qrow[i] = (__global const uint4*)(w + q_off) + (long)rr[i] * (in / 32);
#endif

#ifdef ACT_Q8
  // The first step's weight loads go out first; with ACT_LOCAL the work-group then quantizes x
  // (shared by all its rows) into local memory while they are in flight. Each step issues the
  // next step's loads before its own arithmetic, so their latency overlaps that arithmetic.
  uint4 qv[GEMV_U][RPT];
  for (int u = 0; u < GEMV_U; ++u)
    for (int i = 0; i < RPT; ++i) qv[u][i] = qrow[i][min(lane + u * LANES, nc - 1)];
#ifdef ACT_LOCAL
  __local uint4* lxq = (__local uint4*)lsc;              // [2 · nc]: the int8 x as uint4
  __local float2* lxs = (__local float2*)(lsc + 8 * nc);  // [nc]: (d, Σ x)
  for (int c = lr * LANES + lane; c < nc; c += LANES * ROWS) {
    uint q[8];
    lxs[c] = act_q8_chunk(x, x_off + 32 * c, q);
    lxq[2 * c] = (uint4)(q[0], q[1], q[2], q[3]);
    lxq[2 * c + 1] = (uint4)(q[4], q[5], q[6], q[7]);
  }
#define XQ4(i) lxq[i]
#define XS(c) lxs[c]
#else
#define XQ4(i) vload4((i), xq)
#define XS(c) xs[c]
#endif
#ifdef LOCAL_SCALES
  stage_scales(w, s_off, z_off, in, rows, wg_r0, lss);
#endif
#if defined(ACT_LOCAL) || defined(LOCAL_SCALES)
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
#endif
  for (int c0 = lane; c0 < nc; c0 += LANES * GEMV_U) {
#ifdef ACT_Q8
    uint4 qn[GEMV_U][RPT];  // the next step's weights (past the end: the last chunk, cached)
    for (int u = 0; u < GEMV_U; ++u)
      for (int i = 0; i < RPT; ++i)
        qn[u][i] = qrow[i][min(c0 + (GEMV_U + u) * LANES, nc - 1)];
#elif WF == WF_Q4 || WF == WF_Q4M
    uint4 qv[GEMV_U][RPT];  // every load of the step first; chunks past the end re-read the last
    for (int u = 0; u < GEMV_U; ++u)
      for (int i = 0; i < RPT; ++i) qv[u][i] = qrow[i][min(c0 + u * LANES, nc - 1)];
#endif
    for (int u = 0; u < GEMV_U; ++u) {
      const int c = c0 + u * LANES;
      if (c >= nc) break;
      const int k = c * 32;
#ifdef GEMV_PROBE
#if WF == WF_Q4 || WF == WF_Q4M
      for (int i = 0; i < RPT; ++i)
        acc[i] += (float)((qv[u][i].s0 ^ qv[u][i].s1 ^ qv[u][i].s2 ^ qv[u][i].s3) & 1u);
#endif
#elif defined(ACT_Q8)
      // chunk c's quantized activations, shared by the RPT rows: y += s·d·Σ q·q_x + m·Σ x
      const uint4 xa = XQ4(2 * c), xb = XQ4(2 * c + 1);
      const float2 ds = XS(c);
      for (int i = 0; i < RPT; ++i) {
        const float2 sm = SCALE(i, CHUNK_GROUP(c));
        acc[i] += sm.x * (ds.x * (float)q4_chunk_dot_i8(qv[u][i], xa, xb)) + sm.y * ds.y;
      }
      (void)k;
#else
      float4 xv[8];
      for (int j = 0; j < 8; ++j) xv[j] = X4(k + 4 * j);
#if WF == WF_Q4 || WF == WF_Q4M
      float sx = 0.0f;
      for (int j = 0; j < 8; ++j) sx += dot(xv[j], (float4)(1.0f));
      for (int i = 0; i < RPT; ++i) {
        const float2 sm = SCALE(i, CHUNK_GROUP(c));
        acc[i] += sm.x * q4_chunk_dot(qv[u][i], xv, sx) + sm.y * sx;
      }
#elif WF == WF_Q8
      for (int i = 0; i < RPT; ++i) {
        __global const char* qp = (__global const char*)(w + q_off) + (long)rr[i] * in + k;
        const float16 qa = convert_float16(vload16(0, qp)), qb = convert_float16(vload16(1, qp));
        const float dq = dot(qa.s0123, xv[0]) + dot(qa.s4567, xv[1]) + dot(qa.s89ab, xv[2]) +
                         dot(qa.scdef, xv[3]) + dot(qb.s0123, xv[4]) + dot(qb.s4567, xv[5]) +
                         dot(qb.s89ab, xv[6]) + dot(qb.scdef, xv[7]);
        acc[i] += SCALE(i, c).x * dq;
      }
#else
      for (int i = 0; i < RPT; ++i) {
        float s = 0.0f;
        for (int j = 0; j < 4; ++j) {
          const float8 wv = load_w8(w, q_off, s_off, z_off, in, rr[i], k + 8 * j);
          s += dot(wv.lo, xv[2 * j]) + dot(wv.hi, xv[2 * j + 1]);
        }
        acc[i] += s;
      }
#endif
#endif  // GEMV_PROBE
    }
#ifdef ACT_Q8
    for (int u = 0; u < GEMV_U; ++u)
      for (int i = 0; i < RPT; ++i) qv[u][i] = qn[u][i];
#endif
  }
#if !WF_QUANT
  // columns past the last full chunk (dense weights only)
  for (int k = nc * 32 + lane; k < in; k += LANES) {
    const float xk = LD_ACT(x, x_off + k);
    for (int i = 0; i < RPT; ++i) {
      const float8 wv = load_w8(w, q_off, s_off, z_off, in, rr[i], k & ~7);
      const int e = k & 7;
      const float wk = e == 0 ? wv.s0 : e == 1 ? wv.s1 : e == 2 ? wv.s2 : e == 3 ? wv.s3
                     : e == 4 ? wv.s4 : e == 5 ? wv.s5 : e == 6 ? wv.s6 : wv.s7;
      acc[i] += wk * xk;
    }
  }
#endif

  // Sum over the lanes: each work-item's RPT partial sums go to local memory, and after one
  // barrier work-item `lane` (< RPT) adds row `lane`'s LANES sums, four running sums over the
  // lanes mod 4, then those four.
  __local float red[ROWS * RPT * LANES];
  __local float* mine = red + lr * RPT * LANES;
  for (int i = 0; i < RPT; ++i) mine[i * LANES + lane] = acc[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane < RPT && my_r0 + lane < rows) {
    const int r = my_r0 + lane;
    float4 s4 = vload4(0, mine + lane * LANES);
    for (int l = 4; l < LANES; l += 4) s4 += vload4(0, mine + lane * LANES + l);
    float v = (s4.x + s4.y) + (s4.z + s4.w);
    if (has_bias) v += bias[bias_off + r];
    store_out(y, y_off + r, v, y_f32);
  }
}
