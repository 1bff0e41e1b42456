// attention_group (AVX2) against attention_group_ref and against a double-precision softmax
// attention computed directly from the keys' logical order, on a paged layout with a shuffled block
// table, for GQA groups of 1-4 query heads and key counts around the 8-key and 64-key blocks.
#include "backend/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"

using namespace perfx::cpu;

TEST(Attention, PagedRowMatchesReferenceAndDirectFormula) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n_kv_heads = 3, block_size = 4, n_blocks = 40;
  for (int hd : {8, 12, 24, 64, 72, 128}) {  // 12: not a multiple of 8 (reference path)
    const int64_t slot_stride = (int64_t)n_kv_heads * hd;
    std::vector<float> kpool((size_t)(n_blocks * block_size * slot_stride)), vpool(kpool.size());
    for (auto& x : kpool) x = nd(rng);
    for (auto& x : vpool) x = nd(rng);
    std::vector<int32_t> table(n_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    for (int n_keys : {1, 7, 8, 9, 17, 64, 65, 150}) {
      for (int group : {1, 2, 3, 4}) {
        const int kvh = n_keys % n_kv_heads;
        PagedKv kv;
        kv.k_base = kpool.data() + kvh * hd;
        kv.v_base = vpool.data() + kvh * hd;
        kv.slot_stride = slot_stride;
        kv.table = table.data();
        kv.block_size = block_size;
        std::vector<float> qs((size_t)(group * hd));
        for (auto& x : qs) x = nd(rng);
        const float scale = 1.0f / std::sqrt((float)hd);
        std::vector<float> s1((size_t)(group * n_keys)), s2(s1.size()), o1(qs.size()),
            o2(qs.size());
        attention_group_ref(qs.data(), group, hd, scale, n_keys, kv, s1.data(), o1.data());
        attention_group(qs.data(), group, hd, scale, n_keys, kv, s2.data(), o2.data());
        for (int g = 0; g < group; ++g) {
          const float* q = qs.data() + g * hd;
          // Direct formula in double from the logical key order.
          std::vector<double> p(n_keys);
          double mx = -1e300, sum = 0;
          for (int j = 0; j < n_keys; ++j) {
            const int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
            double d = 0;
            for (int c = 0; c < hd; ++c)
              d += (double)q[c] * kpool[slot * slot_stride + kvh * hd + c];
            p[j] = d * scale;
            mx = std::max(mx, p[j]);
          }
          for (auto& x : p) sum += (x = std::exp(x - mx));
          for (int c = 0; c < hd; ++c) {
            double ref = 0;
            for (int j = 0; j < n_keys; ++j) {
              const int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
              ref += p[j] / sum * vpool[slot * slot_stride + kvh * hd + c];
            }
            ASSERT_NEAR(o1[g * hd + c], ref, 1e-4)
                << "reference, hd=" << hd << " n_keys=" << n_keys << " g=" << g;
            ASSERT_NEAR(o2[g * hd + c], ref, 1e-4)
                << "fast, hd=" << hd << " n_keys=" << n_keys << " g=" << g;
          }
          for (int j = 0; j < n_keys; ++j) ASSERT_NEAR(s2[g * n_keys + j], p[j] / sum, 1e-5);
        }
      }
    }
  }
}

// attention_tile (online softmax over 64-key blocks, several tokens of one sequence at once)
// against attention_group_ref row by row, on fp32 and fp16 K/V (the reference reads the fp16
// values converted exactly), for tiles of 1-19 tokens whose causal limits cut blocks anywhere.
TEST(Attention, OnlineSoftmaxTileMatchesReferenceRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int n_kv_heads = 2, block_size = 16, n_blocks = 24;
  for (int hd : {8, 12, 64, 128}) {
    const int64_t slot_stride = (int64_t)n_kv_heads * hd;
    const size_t n = (size_t)(n_blocks * block_size * slot_stride);
    std::vector<float> kpool(n), vpool(n);
    for (auto& x : kpool) x = 2.0f * nd(rng);
    for (auto& x : vpool) x = nd(rng);
    std::vector<uint16_t> k16(n), v16(n);
    std::vector<float> kr(n), vr(n);  // the fp16 values as fp32
    for (size_t i = 0; i < n; ++i) {
      k16[i] = perfx::fp32_to_fp16(kpool[i]);
      v16[i] = perfx::fp32_to_fp16(vpool[i]);
      kr[i] = perfx::fp16_to_fp32(k16[i]);
      vr[i] = perfx::fp16_to_fp32(v16[i]);
    }
    std::vector<int32_t> table(n_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    for (bool f16 : {false, true}) {
      for (auto [p0, nt] : {std::pair{0, 1}, {0, 19}, {5, 1}, {63, 2}, {100, 9}, {200, 16}}) {
        for (int group : {1, 3}) {
          const int kvh = 1;
          PagedKv kv;
          kv.k_base = (f16 ? kr.data() : kpool.data()) + kvh * hd;
          kv.v_base = (f16 ? vr.data() : vpool.data()) + kvh * hd;
          kv.slot_stride = slot_stride;
          kv.table = table.data();
          kv.block_size = block_size;
          PagedKv kvt = kv;
          if (f16) {
            kvt.k_raw = reinterpret_cast<const uint8_t*>(k16.data() + kvh * hd);
            kvt.v_raw = reinterpret_cast<const uint8_t*>(v16.data() + kvh * hd);
            kvt.k_dtype = kvt.v_dtype = perfx::DType::F16;
            kvt.k_slot_bytes = kvt.v_slot_bytes = slot_stride * 2;
            kvt.k_base = kvt.v_base = nullptr;
          }
          const int64_t ldq = (int64_t)group * hd + 5;
          std::vector<float> qs((size_t)(nt * ldq)), out((size_t)(nt * ldq), NAN);
          for (auto& x : qs) x = nd(rng);
          std::vector<int32_t> pos(nt);
          for (int i = 0; i < nt; ++i) pos[i] = p0 + i;
          const float scale = 1.0f / std::sqrt((float)hd);
          attention_tile(qs.data(), ldq, nt, pos.data(), group, hd, scale, kvt, out.data(), ldq);
          for (int i = 0; i < nt; ++i) {
            std::vector<float> sc((size_t)(group * (pos[i] + 1))), ref((size_t)(group * hd));
            attention_group_ref(qs.data() + i * ldq, group, hd, scale, pos[i] + 1, kv, sc.data(),
                                ref.data());
            for (int c = 0; c < group * hd; ++c)
              ASSERT_NEAR(out[(size_t)(i * ldq + c)], ref[(size_t)c], 2e-5)
                  << "hd=" << hd << " f16=" << f16 << " p0=" << p0 << " nt=" << nt
                  << " group=" << group << " token " << i << " elem " << c;
            for (int c = group * hd; c < ldq; ++c)
              ASSERT_TRUE(std::isnan(out[(size_t)(i * ldq + c)])) << "wrote past the row";
          }
        }
      }
    }
  }
}
