// A plain copy (float4 per work-item) of n float4s at element offset off: the device's copy
// bandwidth, measured beside the GEMV.

__kernel void copy_f4(__global const float4* src, __global float4* dst, int n, long off) {
  const int i = get_global_id(0);
  if (i < n) dst[off + i] = src[off + i];
}
