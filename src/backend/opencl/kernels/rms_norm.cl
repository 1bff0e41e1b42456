// RMSNorm (HF LlamaRMSNorm, fp32): out = x / sqrt(mean(x^2) + eps) * w, one work-group per row.
// add_rms_norm first adds x into the residual (rounded to the activation dtype, as stored).
// Work-group: WG work-items (a power of two), global [WG, rows].

__kernel void rms_norm(__global const ACT_T* x, int x_off, int x_ld, __global const float* w,
                       float eps, int n, __global ACT_T* out, int out_off, int out_ld,
                       __local float* scratch) {
  const int r = get_group_id(1), lid = get_local_id(0), wg = get_local_size(0);
  __global const ACT_T* xr = x + x_off + (long)r * x_ld;
  __global ACT_T* o = out + out_off + (long)r * out_ld;
  float ss = 0.0f;
  for (int i = lid; i < n; i += wg) {
    const float v = LD_ACT(xr, i);
    ss += v * v;
  }
  ss = work_group_sum(ss, scratch, lid, wg);
  const float inv = 1.0f / sqrt(ss / (float)n + eps);
  for (int i = lid; i < n; i += wg) ST_ACT(o, i, w[i] * (LD_ACT(xr, i) * inv));
}

__kernel void add_rms_norm(__global ACT_T* res, int res_off, int res_ld, __global const ACT_T* x,
                           int x_off, int x_ld, __global const float* w, float eps, int n,
                           __global ACT_T* out, int out_off, int out_ld, __local float* scratch) {
  const int r = get_group_id(1), lid = get_local_id(0), wg = get_local_size(0);
  __global ACT_T* rr = res + res_off + (long)r * res_ld;
  __global const ACT_T* xr = x + x_off + (long)r * x_ld;
  __global ACT_T* o = out + out_off + (long)r * out_ld;
  float ss = 0.0f;
  for (int i = lid; i < n; i += wg) {
    ST_ACT(rr, i, LD_ACT(rr, i) + LD_ACT(xr, i));
    const float v = LD_ACT(rr, i);  // the stored (rounded) sum
    ss += v * v;
  }
  ss = work_group_sum(ss, scratch, lid, wg);
  const float inv = 1.0f / sqrt(ss / (float)n + eps);
  for (int i = lid; i < n; i += wg) ST_ACT(o, i, w[i] * (LD_ACT(rr, i) * inv));
}
