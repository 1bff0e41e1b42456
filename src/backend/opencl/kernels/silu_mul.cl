// SwiGLU: out[t, i] = silu(gu[t, i]) * gu[t, I + i], silu(g) = g / (1 + e^-g). Global [I, T].

__kernel void silu_mul(__global const ACT_T* gu, int gu_off, int gu_ld, int I,
                       __global ACT_T* out, int out_off, int out_ld) {
  const int i = get_global_id(0), t = get_global_id(1);
  if (i >= I) return;
  __global const ACT_T* row = gu + gu_off + (long)t * gu_ld;
  const float g = LD_ACT(row, i), u = LD_ACT(row, I + i);
  ST_ACT(out + out_off + (long)t * out_ld, i, g / (1.0f + exp(-g)) * u);
}
