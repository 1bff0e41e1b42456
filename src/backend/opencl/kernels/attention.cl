// Causal attention over the paged KV cache with GQA. A work-group handles one token, one KV head
// and up to GMAX of the query heads that share it (so each key and value is read once for them):
// the keys 0 .. positions[t] of the token's sequence are visited in tiles of WG, each work-item
// scoring one key against those heads; an online softmax (fp32) keeps a running max and sum per
// head; each work-item accumulates head_dim / WG output dimensions of every head.
// Cache layout per layer: [slot, nkv, hd] for K and V; slot = table[seq][j / bs] · bs + j % bs.
// Split-K (decode with few work-groups): with n_splits > 1, work-group split s visits keys
// [s · split_len, (s + 1) · split_len) only and writes its running max, sum and unnormalised
// output to `part` [T, nq, n_splits, 2 + hd]; attention_combine merges the splits.
// Global [WG, nkv · ceil(group / GMAX), T · n_splits], local [WG, 1, 1]. hd <= 4 · WG.

#define MAXD 4  // output dims per work-item

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attention(
    __global const ACT_T* q, int q_off, int q_ld, __global const ACT_T* kc,
    __global const ACT_T* vc, __global ACT_T* out, int out_off, int out_ld,
    __global const int* batch, int pos_off, int seq_off, int tab_off, int max_blocks, int bs,
    int nq, int nkv, int hd, float scale, int n_splits, int split_len, __global float* part) {
  __local float qs[GMAX * 4 * WG];  // scaled queries [GMAX][hd]
  __local float sc[GMAX][WG];       // scores, then probabilities, of the tile
  __local float corr[GMAX], lsum[GMAX], mx[GMAX];
  const int lid = get_local_id(0), t = get_group_id(2) / n_splits, sp = get_group_id(2) % n_splits;
  const int group = nq / nkv, chunks = (group + GMAX - 1) / GMAX;
  const int kvh = get_group_id(1) / chunks, h0 = kvh * group + (get_group_id(1) % chunks) * GMAX;
  const int ng = min(GMAX, kvh * group + group - h0);
  const int n_all = batch[pos_off + t] + 1;
  const int j_begin = n_splits > 1 ? sp * split_len : 0;
  const int n_keys = n_splits > 1 ? min(n_all, j_begin + split_len) : n_all;  // one past the end
  __global const int* table = batch + tab_off + (long)batch[seq_off + t] * max_blocks;
  const long slot_stride = (long)nkv * hd;

  for (int i = lid; i < ng * hd; i += WG)
    qs[i] = LD_ACT(q, q_off + (long)t * q_ld + (long)h0 * hd + i) * scale;
  if (lid < GMAX) {
    mx[lid] = -INFINITY;
    lsum[lid] = 0.0f;
  }
  float acc[GMAX][MAXD];
  for (int g = 0; g < GMAX; ++g)
    for (int d = 0; d < MAXD; ++d) acc[g][d] = 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);

  for (int j0 = j_begin; j0 < n_keys; j0 += WG) {
    // 1) scores of key j0 + lid against the ng heads
    const int j = j0 + lid;
    if (j < n_keys) {
      const long slot = (long)table[j / bs] * bs + j % bs;
      __global const ACT_T* kr = kc + slot * slot_stride + (long)kvh * hd;
      float s[GMAX];
      for (int g = 0; g < GMAX; ++g) s[g] = 0.0f;
      for (int d = 0; d < hd; d += 4) {
        const float4 kv = LD_ACT4(kr, d);
        for (int g = 0; g < ng; ++g)
          s[g] += dot(kv, (float4)(qs[g * hd + d], qs[g * hd + d + 1], qs[g * hd + d + 2],
                                   qs[g * hd + d + 3]));
      }
      for (int g = 0; g < ng; ++g) sc[g][lid] = s[g];
    } else {
      for (int g = 0; g < ng; ++g) sc[g][lid] = -INFINITY;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // 2) online softmax update, one work-item per head
    const int nt = min(WG, n_keys - j0);
    if (lid < ng) {
      float m = mx[lid];
      for (int i = 0; i < nt; ++i) m = fmax(m, sc[lid][i]);
      float sum = 0.0f;
      for (int i = 0; i < nt; ++i) {
        const float p = exp(sc[lid][i] - m);
        sc[lid][i] = p;
        sum += p;
      }
      const float cf = exp(mx[lid] - m);  // 0 on the first tile (mx = -inf)
      corr[lid] = cf;
      lsum[lid] = lsum[lid] * cf + sum;
      mx[lid] = m;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // 3) acc = acc · corr + Σ p · v over the tile
    for (int g = 0; g < ng; ++g)
      for (int d = 0; d < MAXD; ++d) acc[g][d] *= corr[g];
    for (int i = 0; i < nt; ++i) {
      const int jj = j0 + i;
      const long slot = (long)table[jj / bs] * bs + jj % bs;
      __global const ACT_T* vr = vc + slot * slot_stride + (long)kvh * hd;
      for (int d = 0; d < MAXD; ++d) {
        const int dd = lid + d * WG;
        if (dd < hd) {
          const float vv = LD_ACT(vr, dd);
          for (int g = 0; g < ng; ++g) acc[g][d] = fma(sc[g][i], vv, acc[g][d]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (n_splits > 1) {  // partial results; an empty split leaves max -inf and sum 0
    for (int g = 0; g < ng; ++g) {
      __global float* p = part + (((long)t * nq + h0 + g) * n_splits + sp) * (2 + hd);
      if (lid == 0) {
        p[0] = mx[g];
        p[1] = lsum[g];
      }
      for (int d = 0; d < MAXD; ++d) {
        const int dd = lid + d * WG;
        if (dd < hd) p[2 + dd] = acc[g][d];
      }
    }
    return;
  }
  for (int g = 0; g < ng; ++g) {
    const float inv = 1.0f / lsum[g];
    for (int d = 0; d < MAXD; ++d) {
      const int dd = lid + d * WG;
      if (dd < hd) ST_ACT(out + out_off + (long)t * out_ld + (long)(h0 + g) * hd, dd, acc[g][d] * inv);
    }
  }
}

// Merges the n_splits partial results of every (token, head): with M the largest running max,
// out = Σ_s acc_s · e^(m_s − M) / Σ_s l_s · e^(m_s − M). Global [hd, nq, T].
__kernel void attention_combine(__global const float* part, int n_splits, int nq, int hd,
                                __global ACT_T* out, int out_off, int out_ld) {
  const int d = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
  if (d >= hd) return;
  __global const float* p = part + ((long)t * nq + h) * n_splits * (2 + hd);
  float m = -INFINITY;
  for (int s = 0; s < n_splits; ++s) m = fmax(m, p[s * (2 + hd)]);
  float l = 0.0f, o = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    __global const float* q = p + s * (2 + hd);
    if (q[1] == 0.0f) continue;  // an empty split
    const float f = exp(q[0] - m);
    l += q[1] * f;
    o += q[2 + d] * f;
  }
  ST_ACT(out + out_off + (long)t * out_ld + (long)h * hd, d, o / l);
}
