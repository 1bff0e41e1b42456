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
