// One chunk of 32 activations to int8, the CPU backend's rule (backend/cpu/qlinear.h):
// d = max|x| / 127, q = round-half-even(x · (127 / max|x|)) clamped to ±127 (all zeros: d = 0,
// q = 0), and the chunk's exact fp32 Σ x. Included by act_q8.cl (the separate quantization) and
// gemv.cl (the int8 GEMV that quantizes into local memory itself), so both give the same bits.
//
// q[0..7]: for each word j of the weight's packed nibbles (columns 8j .. 8j+7 of the chunk) two
// words of four int8, the even columns (8j, 8j+2, 8j+4, 8j+6) then the odd ones, the order in
// which `w & 0x0F0F0F0F` and `(w >> 4) & 0x0F0F0F0F` hold the weight's nibbles. Returns (d, Σ x).
inline float2 act_q8_chunk(__global const ACT_T* x, int base, uint* q) {
  float v[32];
  float amax = 0.0f, sum = 0.0f;
  for (int k = 0; k < 32; ++k) {
    v[k] = LD_ACT(x, base + k);
    amax = fmax(amax, fabs(v[k]));
    sum += v[k];
  }
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 4; ++j) {
    uint lo = 0, hi = 0;
    for (int b = 0; b < 4; ++b) {
      const int qe = (int)clamp(rint(v[8 * j + 2 * b] * id), -127.0f, 127.0f);
      const int qo = (int)clamp(rint(v[8 * j + 2 * b + 1] * id), -127.0f, 127.0f);
      lo |= ((uint)qe & 0xFFu) << (8 * b);
      hi |= ((uint)qo & 0xFFu) << (8 * b);
    }
    q[2 * j] = lo;
    q[2 * j + 1] = hi;
  }
  return (float2)(amax / 127.0f, sum);
}
