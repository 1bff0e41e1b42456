// Prepended to every kernel file. OpenCL C 1.2.
//
// Activations are stored as fp32, or as fp16 when the program is built with -DACT_F16. fp16 values
// are read and written with vload_half / vstore_half_rte (core OpenCL, no cl_khr_fp16 needed);
// arithmetic is fp32 everywhere. Logits and norm weights are fp32.
//
// Tensors are passed as (buffer, element offset, row stride in elements).
#ifdef ACT_F16
#define ACT_T half
#define ACT_BITS ushort  // for copies without a conversion
#define LD_ACT(p, i) vload_half((i), (p))
#define ST_ACT(p, i, v) vstore_half_rte((v), (i), (p))
#define LD_ACT4(p, i) vload_half4(0, (p) + (i))
#define LD_ACT8(p, i) vload_half8(0, (p) + (i))
#else
#define ACT_T float
#define ACT_BITS uint
#define LD_ACT(p, i) ((p)[(i)])
#define ST_ACT(p, i, v) ((p)[(i)] = (v))
#define LD_ACT4(p, i) vload4(0, (p) + (i))
#define LD_ACT8(p, i) vload8(0, (p) + (i))
#endif

// bfloat16 bits -> fp32 (exact).
inline float bf16_to_f32(ushort b) { return as_float((uint)b << 16); }

// Writes v to element i of an activation tensor, or of an fp32 one when y_f32 != 0 (logits).
inline void store_out(__global void* y, long i, float v, int y_f32) {
  if (y_f32)
    ((__global float*)y)[i] = v;
  else
    ST_ACT((__global ACT_T*)y, i, v);
}

#ifdef USE_SUBGROUPS
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#endif

// Sum of v over the n work-items of a 1-D work-group (n a power of two <= 1024). `scratch` holds n
// floats; every work-item gets the sum. Contains barriers: call from uniform control flow.
// With USE_SUBGROUPS (the device has cl_khr_subgroups): one reduction per sub-group, then the
// sub-groups' sums in order; else a tree in local memory.
inline float work_group_sum(float v, __local float* scratch, int lid, int n) {
#ifdef USE_SUBGROUPS
  const float s = sub_group_reduce_add(v);
  if (get_sub_group_local_id() == 0) scratch[get_sub_group_id()] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  float r = 0.0f;
  for (uint i = 0; i < get_num_sub_groups(); ++i) r += scratch[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#else
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n >> 1; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#endif
}

#ifdef PERFX_TEST_BUILD_ERROR
// Set through PERFX_OPENCL_BUILD_OPTIONS=-DPERFX_TEST_BUILD_ERROR by the error-path tests.
this is not OpenCL C;
#endif
