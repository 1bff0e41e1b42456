// Greedy sampling on the device: argmax of each listed logits row (lowest id on ties); only the
// ids travel back. One work-group of WG work-items per row. Global [WG, n_rows]. A row holding a
// NaN or +inf (the model's output is broken; -inf is a masked token) gets -1: the host reports it
// (cpu::sample_logits's check).

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void argmax_rows(
    __global const float* logits, int off, int ld, int vocab, __global int* rows_ids, int n) {
  __local float bv[WG];
  __local int bi[WG];
  __local int bad[WG];
  const int lid = get_local_id(0), r = get_group_id(1);
  __global const float* row = logits + off + (long)rows_ids[r] * ld;
  // Like the reference: the first index of the largest value (a later value wins only when
  // strictly greater), so ties go to the lowest id.
  float best = -INFINITY;
  int at = -1, broken = 0;
  for (int i = lid; i < vocab; i += WG) {
    const float v = row[i];
    if (at < 0 || v > best) {
      best = v;
      at = i;
    }
    broken |= !(v < INFINITY);
  }
  bv[lid] = best;
  bi[lid] = at;
  bad[lid] = broken;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = WG >> 1; s > 0; s >>= 1) {
    if (lid < s) {
      const float ov = bv[lid + s];
      const int oi = bi[lid + s];
      if (oi >= 0 && (bi[lid] < 0 || ov > bv[lid] || (ov == bv[lid] && oi < bi[lid]))) {
        bv[lid] = ov;
        bi[lid] = oi;
      }
      bad[lid] |= bad[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) rows_ids[n + r] = bad[0] ? -1 : bi[0] < 0 ? 0 : bi[0];  // ids follow the n rows
}
