// Weight formats shared by gemv.cl and gemm.cl (included into both by the host, after common.cl).
// A weight slab is one buffer `w` holding rows [row0, row0 + rows) of a matrix [out, in]:
//   WF_F32 / WF_F16 / WF_BF16: [rows, in] at byte q_off.
//   WF_Q4:  packed int4 words [rows, in / 8] at q_off (nibble i of word c is column 8c + i), fp16
//           scales [rows, in / GS] at s_off, uint8 zeros [rows, in / GS] at z_off:
//           W = (q − z) · s, evaluated as fma(q, s, −z·s), which is exact in fp32.
//   WF_Q4M: as WF_Q4 with fp16 mins instead of zeros: W = q · s + m (GGUF Q4_1).
//   WF_Q8:  int8 [rows, in] at q_off, fp16 scales [rows, in / 32] at s_off: W = q · s (GGUF Q8_0).
// The quantized formats need in % 32 == 0 and GS % 32 == 0: a chunk of 32 columns has one scale.
#define WF_F32 1
#define WF_F16 2
#define WF_BF16 3
#define WF_Q4 4
#define WF_Q4M 5
#define WF_Q8 6

#if WF == WF_Q4 || WF == WF_Q4M
#define WF_QUANT 1
#define CHUNK_GROUP(c) ((c) / (GS / 32))
#elif WF == WF_Q8
#define WF_QUANT 1
#define GS 32
#define CHUNK_GROUP(c) (c)
#else
#define WF_QUANT 0
#endif

// 4-bit values (0..15) to fp32 without an int-to-float conversion, which runs at a fraction of the
// FMA rate on many GPUs: 2^23 + q has q in its low mantissa bits, so (q | bits of 2^23) − 2^23 = q
// exactly, in two full-rate instructions.
inline float4 nibbles_f4(uint4 q) { return as_float4(q | 0x4B000000u) - 8388608.0f; }
inline float8 nibbles_f8(uint8 q) { return as_float8(q | 0x4B000000u) - 8388608.0f; }

#if WF_QUANT
// The (scale, offset) of group g of row r: W = q · scale + offset.
inline float2 group_scale(__global const uchar* w, long s_off, long z_off, int in, int r, int g) {
  const int G = in / GS;
  const float s = vload_half((long)r * G + g, (__global const half*)(w + s_off));
#if WF == WF_Q4
  const float z = (float)(w + z_off)[(long)r * G + g];
  return (float2)(s, -z * s);
#elif WF == WF_Q4M
  return (float2)(s, vload_half((long)r * G + g, (__global const half*)(w + z_off)));
#else
  return (float2)(s, 0.0f);
#endif
}
#endif

// Eight weights of row r at columns k0 .. k0 + 7 (k0 a multiple of 8), dequantized exactly.
// Dense formats: columns at or past `in` read as 0.
inline float8 load_w8(__global const uchar* w, long q_off, long s_off, long z_off, int in, int r,
                      int k0) {
#if WF == WF_Q4 || WF == WF_Q4M
  const uint q = ((__global const uint*)(w + q_off))[(long)r * (in / 8) + k0 / 8];
  const float2 sm = group_scale(w, s_off, z_off, in, r, k0 / GS);
  const float8 qf = nibbles_f8(((uint8)(q) >> (uint8)(0, 4, 8, 12, 16, 20, 24, 28)) & 15u);
  return fma(qf, (float8)(sm.x), (float8)(sm.y));
#elif WF == WF_Q8
  const float8 qf = convert_float8(vload8(0, (__global const char*)(w + q_off) + (long)r * in + k0));
  return qf * group_scale(w, s_off, z_off, in, r, k0 / 32).x;
#else
  const long base = (long)r * in + k0;
  if (k0 + 8 <= in) {
#if WF == WF_F32
    return vload8(0, (__global const float*)(w + q_off) + base);
#elif WF == WF_F16
    return vload_half8(0, (__global const half*)(w + q_off) + base);
#else
    const uint8 b = convert_uint8(vload8(0, (__global const ushort*)(w + q_off) + base));
    return as_float8(b << 16);
#endif
  }
  float v[8];
  for (int i = 0; i < 8; ++i) {
    const int k = k0 + i;
#if WF == WF_F32
    v[i] = k < in ? ((__global const float*)(w + q_off))[base + i] : 0.0f;
#elif WF == WF_F16
    v[i] = k < in ? vload_half(base + i, (__global const half*)(w + q_off)) : 0.0f;
#else
    v[i] = k < in ? bf16_to_f32(((__global const ushort*)(w + q_off))[base + i]) : 0.0f;
#endif
  }
  return (float8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
#endif
}
