// Host side of the linear kernels' weights: packing canonical Int4Matrix / Int8Matrix parts into
// the device layouts of linear.cuh, reading them back (tests), and the upload / ownership.
#include <cstring>
#include <string>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "perfx/status.h"

namespace perfx::cuda {
namespace {

/// log2(gs / 32) when gs is a power of two >= 32, else -1.
int group_shift(int gs) {
  if (gs < 32 || (gs & (gs - 1)) != 0) return -1;
  int s = 0;
  while ((32 << s) != gs) ++s;
  return s;
}

std::string part_name(size_t i) {
  return "part " + std::to_string(i);
}

}  // namespace

// ===================================================================================== W4

W4Packed pack_w4(const std::vector<const Int4Matrix*>& parts, W4RowOrder order, bool allow_sym) {
  check(!parts.empty(), "pack_w4: no parts");
  const bool inter = order == W4RowOrder::kInterleave8;
  check(!inter || (parts.size() == 2 && parts[0]->out == parts[1]->out && parts[0]->out % 8 == 0),
        "pack_w4: the interleaved order needs two parts of equal out, a multiple of 8");
  const int64_t K = parts[0]->in;
  const int gs = parts[0]->group_size;
  int64_t N = 0;
  bool sym = allow_sym && gs == 32;  // and every zero 8 (checked below)
  for (size_t i = 0; i < parts.size(); ++i) {
    const Int4Matrix& m = *parts[i];
    check(!m.has_mins(),
          "pack_w4: " + part_name(i) +
              " has mins (GGUF Q4_1), which the CUDA int4 kernels do not support; load it dense");
    check(m.out > 0 && m.in > 0, "pack_w4: " + part_name(i) + " is empty");
    check(m.in == K, "pack_w4: " + part_name(i) + " has in = " + std::to_string(m.in) +
                         ", part 0 has " + std::to_string(K));
    check(m.group_size == gs, "pack_w4: " + part_name(i) + " has group size " +
                                  std::to_string(m.group_size) + ", part 0 has " +
                                  std::to_string(gs));
    check(group_shift(gs) >= 0,
          "pack_w4: group size " + std::to_string(gs) + " is not a power of two >= 32");
    check(K % gs == 0, "pack_w4: in = " + std::to_string(K) +
                           " is not a multiple of the group size " + std::to_string(gs));
    const size_t G = (size_t)(K / gs);
    check(m.q.size() == (size_t)(m.out * (K / 8)) && m.scales.size() == (size_t)m.out * G &&
              m.zeros.size() == (size_t)m.out * G,
          "pack_w4: " + part_name(i) + " has vectors of the wrong size for [" +
              std::to_string(m.out) + ", " + std::to_string(K) + "]");
    for (uint8_t z : m.zeros) {
      check(z <= 15, "pack_w4: " + part_name(i) + " has a zero > 15");
      sym = sym && z == 8;
    }
    N += m.out;
  }
  check(N <= (int64_t)16 * (1 << 26), "pack_w4: too many rows");

  W4Packed p;
  W4Dims& d = p.d;
  d.N = N;
  d.K = K;
  d.NB = (int)ceil_div<int64_t>(N, 16);
  d.KC = (int)ceil_div<int64_t>(K, 64);
  d.group_size = gs;
  d.gs_shift = group_shift(gs);
  d.sym = sym;
  d.G = sym ? d.KC : (int)ceil_div<int64_t>((int64_t)d.KC * 64, gs);
  p.q.assign(d.q_bytes() / 4, 0u);
  p.sz.assign(d.sz_bytes() / 4, 0u);

  const int64_t Gs = K / gs;  // real groups per row
  int64_t r0 = 0;
  for (size_t pi = 0; pi < parts.size(); ++pi) {
    const Int4Matrix& m = *parts[pi];
    for (int64_t lr = 0; lr < m.out; ++lr) {
      const int64_t r = inter ? w4_interleave_row((int)pi, lr) : r0 + lr;
      const int64_t nb = r / 16;
      const int rr = (int)(r % 16), gid = rr & 7, hi = rr >> 3;
      // Canonical word c holds channels 8c..8c+7 = (kc, h, tid) with jj = 0 (nibbles 0..3) and
      // jj = 1 (nibbles 4..7). Channel offsets koff 0..3 of a word half go to the elements
      // w4_elem(hi, koff) = 0, 1, 4, 5 (+2 for hi), i.e. nibbles 0, 4, 2, 6 (+1 for hi):
      // spread() places a 4-nibble value accordingly; w4_packed_value re-derives every element
      // from the frag:: helpers and the tests compare the two.
      auto spread = [](uint32_t v) {
        return (v & 0xFu) | ((v >> 4) & 0xFu) << 16 | ((v >> 8) & 0xFu) << 8 |
               ((v >> 12) & 0xFu) << 24;
      };
      const uint32_t* src = m.q.data() + lr * (K / 8);
      for (int64_t c = 0; c < K / 8; ++c) {
        const int64_t kc = c / 8;
        const int h = (int)((c % 8) / 4), tid = (int)(c % 4);
        const int64_t word = frag::w4_q_index(d.KC, nb, kc, 4 * gid + tid) * 4 + 2 * h;
        p.q[(size_t)word] |= spread(src[c] & 0xFFFFu) << (4 * hi);
        p.q[(size_t)word + 1] |= spread(src[c] >> 16) << (4 * hi);
      }
      for (int64_t g = 0; g < Gs; ++g) {
        const size_t src = (size_t)(lr * Gs + g);
        if (sym) {  // group g = half-chunk g: .x (g even) or .y of chunk g / 2's record
          const int64_t idx = frag::w4_rec_index(d.G, d.gs_shift, true, nb, g, gid);
          p.sz[(size_t)(2 * idx + (g & 1))] |= (uint32_t)m.scales[src] << (16 * hi);
          continue;
        }
        const int64_t idx = frag::w4_sz_index(d.G, nb, g, gid);
        p.sz[(size_t)(2 * idx)] |= (uint32_t)m.scales[src] << (16 * hi);
        p.sz[(size_t)(2 * idx + 1)] |= (uint32_t)m.zeros[src] << (8 * hi);
      }
    }
    r0 += m.out;
  }
  return p;
}

uint32_t w4_packed_value(const W4Packed& p, int64_t r, int64_t k) {
  const W4Dims& d = p.d;
  const int64_t nb = r / 16;
  const int rr = (int)(r % 16), gid = rr & 7, hi = rr >> 3;
  const int64_t kc = k / 64;
  const int kk = (int)(k % 64);
  const int h = kk / 32, tid = (kk % 32) / 8, jj = (kk % 8) / 4, koff = kk % 4;
  const int64_t word = frag::w4_q_index(d.KC, nb, kc, 4 * gid + tid) * 4 + 2 * h + jj;
  return (p.q[(size_t)word] >> (4 * frag::w4_nibble(frag::w4_elem(hi, koff)))) & 0xFu;
}

float w4_packed_dequant(const W4Packed& p, int64_t r, int64_t k) {
  const W4Dims& d = p.d;
  const int64_t nb = r / 16;
  const int rr = (int)(r % 16), gid = rr & 7, hi = rr >> 3;
  const int64_t hc = k / 32;
  const int64_t idx = frag::w4_rec_index(d.G, d.gs_shift, d.sym, nb, hc, gid);
  const uint2 rec = frag::w4_rec_of_half(
      make_uint2(p.sz[(size_t)(2 * idx)], p.sz[(size_t)(2 * idx + 1)]), d.sym, hc);
  const uint16_t s = (uint16_t)(rec.x >> (16 * hi));
  const uint32_t z = (rec.y >> (8 * hi)) & 0xFFu;
  return ((float)w4_packed_value(p, r, k) - (float)z) * fp16_to_fp32(s);
}

W4Weight::~W4Weight() {
  device_free(mem_);  // no throw from a destructor; errors surface elsewhere
}

W4Weight::W4Weight(W4Weight&& o) noexcept : v_(o.v_), mem_(o.mem_) {
  o.v_ = W4View{};
  o.mem_ = nullptr;
}

W4Weight& W4Weight::operator=(W4Weight&& o) noexcept {
  if (this != &o) {
    device_free(mem_);
    v_ = o.v_;
    mem_ = o.mem_;
    o.v_ = W4View{};
    o.mem_ = nullptr;
  }
  return *this;
}

W4Weight W4Weight::upload(const W4Packed& p, const std::string& what) {
  check(p.q.size() * 4 == p.d.q_bytes() && p.sz.size() * 4 == p.d.sz_bytes(),
        "W4Weight::upload: packed image sizes do not match its dims");
  const size_t q_bytes = p.d.q_bytes();
  const size_t sz_off = ceil_div<size_t>(q_bytes, 256) * 256;
  W4Weight w;
  w.mem_ = device_malloc(sz_off + p.d.sz_bytes(), what);
  CUDA_CHECK(cudaMemcpy(w.mem_, p.q.data(), q_bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(static_cast<char*>(w.mem_) + sz_off, p.sz.data(), p.d.sz_bytes(),
                        cudaMemcpyHostToDevice));
  w.v_.d = p.d;
  w.v_.q = static_cast<const uint4*>(w.mem_);
  w.v_.sz = reinterpret_cast<const uint2*>(static_cast<const char*>(w.mem_) + sz_off);
  return w;
}

W4Weight W4Weight::from_parts(const std::vector<const Int4Matrix*>& parts, W4RowOrder order) {
  return upload(pack_w4(parts, order));
}

// ===================================================================================== W8

W8Packed pack_w8(const std::vector<const Int8Matrix*>& parts) {
  check(!parts.empty(), "pack_w8: no parts");
  const int64_t K = parts[0]->in;
  const int gs = parts[0]->group_size;
  int64_t N = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Int8Matrix& m = *parts[i];
    check(m.out > 0 && m.in > 0, "pack_w8: " + part_name(i) + " is empty");
    check(m.in == K, "pack_w8: " + part_name(i) + " has in = " + std::to_string(m.in) +
                         ", part 0 has " + std::to_string(K));
    check(m.group_size == gs, "pack_w8: " + part_name(i) + " has group size " +
                                  std::to_string(m.group_size) + ", part 0 has " +
                                  std::to_string(gs));
    check(group_shift(gs) >= 0,
          "pack_w8: group size " + std::to_string(gs) + " is not a power of two >= 32");
    check(K % gs == 0, "pack_w8: in = " + std::to_string(K) +
                           " is not a multiple of the group size " + std::to_string(gs));
    check(m.q.size() == (size_t)(m.out * K) && m.scales.size() == (size_t)(m.out * (K / gs)),
          "pack_w8: " + part_name(i) + " has vectors of the wrong size for [" +
              std::to_string(m.out) + ", " + std::to_string(K) + "]");
    N += m.out;
  }
  check(N <= (int64_t)16 * (1 << 26), "pack_w8: too many rows");

  W8Packed p;
  W8Dims& d = p.d;
  d.N = N;
  d.K = K;
  d.NB = (int)ceil_div<int64_t>(N, 16);
  d.KC = (int)(K / 32);
  d.group_size = gs;
  d.gs_shift = group_shift(gs);
  d.G = (int)(K / gs);
  // Padding rows hold q = 0, stored as 0x80.
  p.q.assign(d.q_bytes() / 4, 0x80808080u);
  p.s.assign(d.s_bytes() / 4, 0u);

  int64_t r0 = 0;
  for (const Int8Matrix* part : parts) {
    const Int8Matrix& m = *part;
    for (int64_t lr = 0; lr < m.out; ++lr) {
      const int64_t r = r0 + lr;
      const int64_t nb = r / 16;
      const int rr = (int)(r % 16), gid = rr & 7, hi = rr >> 3;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t kc = k / 32;
        const int kk = (int)(k % 32);
        const int tid = kk / 8, jj = (kk % 8) / 4, koff = kk % 4;
        const int w = 2 * jj + (koff >> 1);
        const int byte = (hi << 1) | (koff & 1);
        const int64_t word = frag::w8_q_index(d.KC, nb, kc, 4 * gid + tid) * 4 + w;
        const uint32_t u = (uint32_t)(uint8_t)(m.q[(size_t)(lr * K + k)]) ^ 0x80u;
        uint32_t& dst = p.q[(size_t)word];
        dst = (dst & ~(0xFFu << (8 * byte))) | (u << (8 * byte));
      }
      for (int64_t g = 0; g < d.G; ++g) {
        const int64_t idx = frag::w8_s_index(d.G, nb, g, gid);
        p.s[(size_t)idx] |= (uint32_t)m.scales[(size_t)(lr * d.G + g)] << (16 * hi);
      }
    }
    r0 += m.out;
  }
  return p;
}

int w8_packed_value(const W8Packed& p, int64_t r, int64_t k) {
  const W8Dims& d = p.d;
  const int64_t nb = r / 16;
  const int rr = (int)(r % 16), gid = rr & 7, hi = rr >> 3;
  const int64_t kc = k / 32;
  const int kk = (int)(k % 32);
  const int tid = kk / 8, jj = (kk % 8) / 4, koff = kk % 4;
  const int64_t word = frag::w8_q_index(d.KC, nb, kc, 4 * gid + tid) * 4 + 2 * jj + (koff >> 1);
  const uint32_t u = (p.q[(size_t)word] >> (8 * ((hi << 1) | (koff & 1)))) & 0xFFu;
  return (int)u - 128;
}

W8Weight::~W8Weight() {
  device_free(mem_);
}

W8Weight::W8Weight(W8Weight&& o) noexcept : v_(o.v_), mem_(o.mem_) {
  o.v_ = W8View{};
  o.mem_ = nullptr;
}

W8Weight& W8Weight::operator=(W8Weight&& o) noexcept {
  if (this != &o) {
    device_free(mem_);
    v_ = o.v_;
    mem_ = o.mem_;
    o.v_ = W8View{};
    o.mem_ = nullptr;
  }
  return *this;
}

W8Weight W8Weight::upload(const W8Packed& p, const std::string& what) {
  check(p.q.size() * 4 == p.d.q_bytes() && p.s.size() * 4 == p.d.s_bytes(),
        "W8Weight::upload: packed image sizes do not match its dims");
  const size_t q_bytes = p.d.q_bytes();
  const size_t s_off = ceil_div<size_t>(q_bytes, 256) * 256;
  W8Weight w;
  w.mem_ = device_malloc(s_off + p.d.s_bytes(), what);
  CUDA_CHECK(cudaMemcpy(w.mem_, p.q.data(), q_bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(static_cast<char*>(w.mem_) + s_off, p.s.data(), p.d.s_bytes(),
                        cudaMemcpyHostToDevice));
  w.v_.d = p.d;
  w.v_.q = static_cast<const uint4*>(w.mem_);
  w.v_.s = reinterpret_cast<const uint32_t*>(static_cast<const char*>(w.mem_) + s_off);
  return w;
}

W8Weight W8Weight::from_parts(const std::vector<const Int8Matrix*>& parts) {
  return upload(pack_w8(parts));
}

}  // namespace perfx::cuda
