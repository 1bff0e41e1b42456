// out[i, :] = x[rows[i], :] (the rows whose logits are wanted). Global [cols, n].

__kernel void gather_rows(__global const ACT_T* x, int x_off, int x_ld,
                          __global const int* batch, int rows_off, int cols, __global ACT_T* out, int out_off,
                          int out_ld) {
  const int c = get_global_id(0), i = get_global_id(1);
  if (c >= cols) return;
  __global const ACT_T* src = x + x_off + (long)batch[rows_off + i] * x_ld;
  __global ACT_T* dst = out + out_off + (long)i * out_ld;
  ((__global ACT_BITS*)dst)[c] = ((__global const ACT_BITS*)src)[c];  // a bit copy
}
