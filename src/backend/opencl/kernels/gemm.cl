// Prefill GEMM: y[t, n] = Σ_k x[t, k] · W[n, k] (+ bias[n]) for T tokens, W a weight slab
// (weights.cl). A work-group computes a BM (tokens) × BN (rows) tile; per step of 32 columns it
// dequantizes the W tile [BN, 32] and loads the x tile [BM, 32] into local memory (transposed,
// k-major, padded against bank conflicts), then each work-item accumulates TM × TN outputs.
// Work-item (tx, ty) owns rows tx + j·(BN/TN) and tokens ty + i·(BM/TM), so neighbouring
// work-items touch neighbouring addresses. The host picks the tiling by T (two are built: a small
// one for a few tokens, where reading W dominates, and a large one for prefill).
// Global [ceil(rows / BN) · BN/TN, ceil(T / BM) · BM/TM], local [BN/TN, BM/TM].
#include "weights.cl"

#define NTX (BN / TN)
#define NTY (BM / TM)

__kernel __attribute__((reqd_work_group_size(NTX, NTY, 1))) void gemm(
    __global const uchar* w, long q_off, long s_off, long z_off, int in, int rows,
    __global const ACT_T* x, int x_off, int x_ld, int T, __global const float* bias, int bias_off,
    int has_bias, __global void* y, long y_off, int y_ld, int y_f32) {
  __local float ws[32][BN + 1];
  __local float xs[32][BM + 1];
  const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * NTX + tx;
  const int n0 = get_group_id(0) * BN, m0 = get_group_id(1) * BM;
  float acc[TM][TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < in; k0 += 32) {
    for (int it = tid; it < BN * 4; it += NTX * NTY) {
      const int n = it >> 2, part = it & 3, row = n0 + n;
      const float8 v = row < rows ? load_w8(w, q_off, s_off, z_off, in, row, k0 + 8 * part)
                                  : (float8)(0.0f);
      ws[8 * part + 0][n] = v.s0;
      ws[8 * part + 1][n] = v.s1;
      ws[8 * part + 2][n] = v.s2;
      ws[8 * part + 3][n] = v.s3;
      ws[8 * part + 4][n] = v.s4;
      ws[8 * part + 5][n] = v.s5;
      ws[8 * part + 6][n] = v.s6;
      ws[8 * part + 7][n] = v.s7;
    }
    for (int it = tid; it < BM * 32; it += NTX * NTY) {
      const int m = it >> 5, kk = it & 31, t = m0 + m, k = k0 + kk;
      xs[kk][m] = (t < T && k < in) ? LD_ACT(x, x_off + (long)t * x_ld + k) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll 4
    for (int kk = 0; kk < 32; ++kk) {
      float a[TM], b[TN];
      for (int i = 0; i < TM; ++i) a[i] = xs[kk][ty + i * NTY];
      for (int j = 0; j < TN; ++j) b[j] = ws[kk][tx + j * NTX];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < TM; ++i) {
    const int t = m0 + ty + i * NTY;
    if (t >= T) continue;
    for (int j = 0; j < TN; ++j) {
      const int n = n0 + tx + j * NTX;
      if (n >= rows) continue;
      float v = acc[i][j];
      if (has_bias) v += bias[bias_off + n];
      store_out(y, y_off + (long)t * y_ld + n, v, y_f32);
    }
  }
}
