// swiglu_clamped problems whose pre-activations G are exact in f32 and crowd around +-limit, to check that a
// 16-bit C keeps each clamp's decision (docs/ops.md §2). A holds -1, 0 or 1, B multiples of 2^-10 no larger
// than 2^-7, and the f32 bias is +-7 plus multiples of 2^-10 (gate columns +7, up columns either sign), so
// with K <= 64 every partial sum of G is a multiple of 2^-10 below 8 in magnitude: exact in f32, whatever
// the order of summation. About 5% of the bf16 gate values sit where rounding to nearest would cross 7.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/float_codec.hpp"
#include "common/host_tensor.hpp"
#include "moegemm/ops.hpp"

namespace moegemm::testing::clamp_edge {

inline bool is_gate_column(GluLayout layout, int64_t col, int64_t I) {
  switch (layout) {
    case GluLayout::halves: return col < I;
    case GluLayout::interleaved32: return (col / 32) % 2 == 0;
    default: return (col / 32) % 2 == 1;
  }
}

/// Fills a (M, K) bf16, b (E, N, K) bf16 and bias (E, N) f32 as described above.
inline void fill(HostTensor& a, HostTensor& b, HostTensor& bias, GluLayout layout, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> unit(-1, 1), step(-8, 8), shift(-40, 40), sign(0, 1);
  const int64_t m = a.shape()[0], k = a.shape()[1], e = b.shape()[0], n = b.shape()[1];
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) a.set({r, c}, unit(rng));
  for (int64_t g = 0; g < e; ++g)
    for (int64_t c = 0; c < n; ++c) {
      for (int64_t j = 0; j < k; ++j) b.set({g, c, j}, std::ldexp(step(rng), -10));
      const double base = is_gate_column(layout, c, n / 2) || sign(rng) ? 7.0 : -7.0;
      bias.set({g, c}, base + std::ldexp(shift(rng), -10));
    }
}

/// G[r, c] of row r in expert g, exactly (every term and partial sum is exact).
inline double preactivation(const HostTensor& a, const HostTensor& b, const HostTensor& bias, int64_t g,
                            int64_t r, int64_t c) {
  double s = bias(g, c);
  for (int64_t j = 0; j < a.shape()[1]; ++j) s += a(r, j) * b(g, c, j);
  return s;
}

/// x rounded to nearest even in C's 16-bit dtype (the tests' own codec).
inline double rounded(DType t, double x) {
  return t == DType::bf16 ? decode_bf16(encode_bf16(x)) : decode_f16(encode_f16(x));
}

/// Checks the 16-bit C of rows [0, end) (expert g owning rows [offsets[g-1], offsets[g])) against the exact
/// G: every element on the same side of each clamp bound as G (gate: limit; up: +-limit), and no further
/// from G than the 16-bit values around it. Counts the elements that rounding to nearest would have carried
/// across a bound (the test is only meaningful where there are some).
inline void expect_sides_kept(const HostTensor& c, const HostTensor& a, const HostTensor& b,
                              const HostTensor& bias, const HostTensor& offsets, GluLayout layout, double limit,
                              int64_t* crossings) {
  const int64_t n = c.shape()[1];
  int64_t bad = 0, row0 = 0;
  *crossings = 0;
  for (int64_t g = 0; g < offsets.shape()[0]; ++g) {
    const auto row1 = static_cast<int64_t>(offsets(g));
    for (int64_t r = row0; r < row1; ++r)
      for (int64_t col = 0; col < n; ++col) {
        const double x = preactivation(a, b, bias, g, r, col), got = c(r, col), rn = rounded(c.dtype(), x);
        const bool gate = is_gate_column(layout, col, n / 2);
        const bool crosses = ((x > limit) != (rn > limit)) || (!gate && ((x < -limit) != (rn < -limit)));
        const bool kept = ((x > limit) == (got > limit)) && (gate || ((x < -limit) == (got < -limit)));
        // Within one 16-bit spacing of G (both 16-bit values around G are; |G| is far from any power of 2).
        int e;
        std::frexp(std::fabs(x), &e);
        const bool near = std::fabs(got - x) <= std::ldexp(1.0, e - 1 - (c.dtype() == DType::bf16 ? 7 : 10));
        *crossings += crosses;
        if ((!kept || !near) && bad++ < 5) {
          ADD_FAILURE() << "C[" << r << ", " << col << "] = " << got << " for G = " << x << " (limit " << limit
                        << ", " << (gate ? "gate" : "up") << "): " << (kept ? "too far from G" : "clamp side lost");
        }
      }
    row0 = row1;
  }
  EXPECT_EQ(bad, 0) << "elements of C whose clamp side or value is wrong";
}

}  // namespace moegemm::testing::clamp_edge
