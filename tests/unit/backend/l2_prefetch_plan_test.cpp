// The CUDA backend's L2 prefetch plan (src/backend/cuda/l2_prefetch_plan.h): which bytes a decode
// GEMV hands to L2 for the next linear. Host code only, so it runs in every build.
#include "backend/cuda/l2_prefetch_plan.h"

#include <gtest/gtest.h>

namespace perfx::cuda {
namespace {

alignas(16) char A[64], B[64], C[64], R[64];

L2Prefetch one(const void* p, uint32_t n) {
  L2Prefetch r;
  r.p[0] = p;
  r.n[0] = n;
  return r;
}

TEST(L2PrefetchPlan, PrefixTakesTheCapAndTheSameShareOfTheRecords) {
  // 4096 of 100000 bytes, and 4.096 % of the 10000 record bytes (409.6) rounded down to 16
  L2Prefetch r = l2_prefix(A, 100000, R, 10000, 4096);
  EXPECT_EQ(r.p[0], A);
  EXPECT_EQ(r.n[0], 4096u);
  EXPECT_EQ(r.p[1], R);
  EXPECT_EQ(r.n[1], 400u);
  // a weight smaller than the cap: all of it, rounded down to 16 bytes; all its records
  r = l2_prefix(A, 1000, R, 64, 1 << 20);
  EXPECT_EQ(r.n[0], 992u);
  EXPECT_EQ(r.n[1], 48u);  // 64 · 992 / 1000 = 63.5 -> 48
  // no records, no cap, nothing to read: empty
  EXPECT_EQ(l2_prefix(A, 1000, nullptr, 0, 4096).n[1], 0u);
  EXPECT_TRUE(l2_prefix(A, 1000, R, 64, 0).empty());
  EXPECT_TRUE(l2_prefix(A, 0, R, 64, 4096).empty());
  // never past 4 GiB - 16 per range (the kernel's 32-bit sizes)
  EXPECT_EQ(l2_prefix(A, size_t(8) << 30, nullptr, 0, size_t(8) << 30).n[0], 0xFFFFFFF0u);
}

TEST(L2PrefetchPlan, ReturnsWhatFollowedLastTime) {
  L2PrefetchPlan plan;
  const L2Prefetch ra = one(A, 16), rb = one(B, 32), rc = one(C, 48);
  // first step: nothing known yet
  EXPECT_TRUE(plan.next_after(A, ra).empty());
  EXPECT_TRUE(plan.next_after(B, rb).empty());
  EXPECT_TRUE(plan.next_after(C, rc).empty());
  // second step: each linear gets its successor's ranges, the last one the first one's
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(plan.next_after(A, ra).p[0], B);
    EXPECT_EQ(plan.next_after(B, rb).n[0], 48u);
    EXPECT_EQ(plan.next_after(C, rc).p[0], A);
  }
  // the same weight twice in a row is not its own successor
  plan.next_after(A, ra);
  EXPECT_EQ(plan.next_after(A, ra).p[0], B);
  plan.clear();
  EXPECT_TRUE(plan.next_after(A, ra).empty());
  EXPECT_TRUE(plan.next_after(B, rb).empty());
}

// A successor learned anew (or a different one) is reported, so the backend can drop graphs
// captured with the old one; a repeated step reports nothing.
TEST(L2PrefetchPlan, ReportsASuccessorLearnedAnew) {
  L2PrefetchPlan plan;
  const L2Prefetch ra = one(A, 16), rb = one(B, 32), rc = one(C, 48);
  bool changed = true;
  plan.next_after(A, ra, &changed);
  EXPECT_FALSE(changed);  // nothing before A
  plan.next_after(B, rb, &changed);
  EXPECT_TRUE(changed);  // A -> B learned
  plan.next_after(C, rc, &changed);
  EXPECT_TRUE(changed);  // B -> C learned
  plan.next_after(A, ra, &changed);
  EXPECT_TRUE(changed);  // C -> A learned
  plan.next_after(B, rb, &changed);
  EXPECT_FALSE(changed);  // A -> B again
  plan.next_after(C, rc, &changed);
  EXPECT_FALSE(changed);
  plan.next_after(B, rb, &changed);  // C -> B: another successor for C
  EXPECT_TRUE(changed);
  EXPECT_EQ(plan.next_after(C, rc, &changed).p[0], B);
  EXPECT_FALSE(changed);             // B -> C as before
  plan.next_after(C, rc, &changed);  // the same key twice in a row: no successor of itself
  EXPECT_FALSE(changed);
  // a successor that offers nothing (the size rule) is a change too, and so is its return
  plan.next_after(A, L2Prefetch{}, &changed);  // C -> A, A now offering nothing
  EXPECT_TRUE(changed);
  EXPECT_TRUE(plan.next_after(C, rc, &changed).empty());  // A -> C learned; C's successor: A, empty
  EXPECT_TRUE(changed);
  plan.next_after(A, ra, &changed);  // C -> A offering ra again
  EXPECT_TRUE(changed);
  // after clear() (a weight freed) everything is learned anew, and reported
  plan.clear();
  plan.next_after(A, ra, &changed);
  EXPECT_FALSE(changed);
  plan.next_after(B, rb, &changed);
  EXPECT_TRUE(changed);
}

TEST(L2PrefetchPlan, WarmingRule) {
  constexpr size_t MiB = size_t(1) << 20;
  // the default: a weight of at most twice the cap is offered, a larger one is not
  EXPECT_TRUE(l2_warm_offers(size_t(11.7 * MiB), 8 * MiB, true));  // TinyLlama's gate|up (11.7 MiB)
  EXPECT_TRUE(l2_warm_offers(16 * MiB, 8 * MiB, true));
  EXPECT_FALSE(l2_warm_offers(16 * MiB + 1, 8 * MiB, true));
  EXPECT_FALSE(l2_warm_offers(size_t(45.7 * MiB), 8 * MiB, true));  // 7B's gate|up (45.7 MiB)
  // a forced cap offers any size; cap 0 nothing
  EXPECT_TRUE(l2_warm_offers(46 * MiB, 8 * MiB, false));
  EXPECT_FALSE(l2_warm_offers(MiB, 0, false));
  EXPECT_FALSE(l2_warm_offers(MiB, 0, true));
  // only the linear right after attention, only for one token
  EXPECT_TRUE(l2_warm_applies(true, 1));
  EXPECT_FALSE(l2_warm_applies(true, 2));
  EXPECT_FALSE(l2_warm_applies(true, 8));
  EXPECT_FALSE(l2_warm_applies(false, 1));
}

}  // namespace
}  // namespace perfx::cuda
