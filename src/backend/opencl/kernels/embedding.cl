// out[t, :] = table[ids[t], :] for the tokens whose id falls in this slab's rows [row0, row0 +
// rows). The table is dense (fmt 1 = fp32, 2 = fp16, 3 = bf16; [rows, cols]). Global [cols, T].

__kernel void embedding(__global const uchar* table, int fmt, int row0, int rows, int cols,
                        __global const int* batch, int ids_off, __global ACT_T* out, int out_off, int out_ld) {
  const int c = get_global_id(0), t = get_global_id(1);
  if (c >= cols) return;
  const int r = batch[ids_off + t] - row0;
  if (r < 0 || r >= rows) return;
  const long i = (long)r * cols + c;
  float v;
  if (fmt == 1)
    v = ((__global const float*)table)[i];
  else if (fmt == 2)
    v = vload_half(i, (__global const half*)table);
  else
    v = bf16_to_f32(((__global const ushort*)table)[i]);
  ST_ACT(out + out_off + (long)t * out_ld, c, v);
}
