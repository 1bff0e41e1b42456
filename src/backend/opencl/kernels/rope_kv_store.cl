// Per token t and head h (q heads, then kv heads): optional RMSNorm of the head over head_dim
// (Qwen3 q_norm / k_norm, fp32), RoPE at positions[t] with the host-built table (cos, sin)
// [positions, rot/2], then q heads are written back in place and k heads go to the KV cache slot
// slots[t] (v heads are copied there unchanged). `inter`: rotate pairs (2i, 2i+1), else (i, i +
// rot/2). One work-item per (head, token): a head is a few hundred values. Global [nq + nkv, T].

__kernel void rope_kv_store(__global ACT_T* q, int q_off, int q_ld, __global const ACT_T* k,
                            int k_off, int k_ld, __global const ACT_T* v, int v_off, int v_ld,
                            int nq, int nkv, int hd, int rot, int inter,
                            __global const float* q_norm, __global const float* k_norm,
                            int has_norm, float eps, __global const float* cs,
                            __global const float* sn, __global const int* batch, int pos_off,
                            int slots_off, __global ACT_T* kc, __global ACT_T* vc,
                            int T) {
  const int h = get_global_id(0), t = get_global_id(1);
  if (h >= nq + nkv || t >= T) return;
  const bool is_q = h < nq;
  __global const ACT_T* src = is_q ? q + q_off + (long)t * q_ld + (long)h * hd
                                   : k + k_off + (long)t * k_ld + (long)(h - nq) * hd;
  const long slot_at = (long)batch[slots_off + t] * nkv * hd + (long)(h - nq) * hd;
  __global ACT_T* dst = is_q ? q + q_off + (long)t * q_ld + (long)h * hd : kc + slot_at;
  __global const float* nw = is_q ? q_norm : k_norm;
  float inv = 1.0f;
  if (has_norm) {
    float ss = 0.0f;
    for (int i = 0; i < hd; ++i) {
      const float x = LD_ACT(src, i);
      ss += x * x;
    }
    inv = 1.0f / sqrt(ss / (float)hd + eps);
  }
  const int half_rot = rot / 2, pos = batch[pos_off + t];
  for (int i = 0; i < half_rot; ++i) {
    const int a = inter ? 2 * i : i, b = inter ? 2 * i + 1 : i + half_rot;
    float x0 = LD_ACT(src, a), x1 = LD_ACT(src, b);
    if (has_norm) {
      x0 = nw[a] * (x0 * inv);
      x1 = nw[b] * (x1 * inv);
    }
    const float c = cs[(long)pos * half_rot + i], s = sn[(long)pos * half_rot + i];
    ST_ACT(dst, a, x0 * c - x1 * s);
    ST_ACT(dst, b, x1 * c + x0 * s);
  }
  for (int i = rot; i < hd; ++i) {
    const float x = LD_ACT(src, i);
    ST_ACT(dst, i, has_norm ? nw[i] * (x * inv) : x);
  }
  if (!is_q) {
    __global const ACT_T* vs = v + v_off + (long)t * v_ld + (long)(h - nq) * hd;
    for (int i = 0; i < hd; ++i)
      ((__global ACT_BITS*)vc)[slot_at + i] = ((__global const ACT_BITS*)vs)[i];
  }
}
