// Numerics and offsets of the CPU reference: 16-bit conversions (round to nearest even), offset
// clamping of garbage values, and determinism of repeated runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/expected.hpp"
#include "common/float_codec.hpp"
#include "common/naive.hpp"
#include "common/offsets.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"
#include "reference/element.hpp"
#include "reference/expert_rows.hpp"
#include "reference/numeric.hpp"
#include "reference/reference.hpp"

namespace moegemm::testing {
namespace {

float random_float(std::mt19937& rng) {
  // Random bit patterns cover every exponent, subnormals and ties; skip NaN (payloads differ by design).
  for (;;) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) return f;
  }
}

TEST(Numeric, Bf16RoundsToNearestEven) {
  std::mt19937 rng(1);
  for (int i = 0; i < 1000000; ++i) {
    const float f = random_float(rng);
    ASSERT_EQ(reference::float_to_bf16(f), encode_bf16(f)) << f;
    ASSERT_EQ(reference::bf16_to_float(encode_bf16(f)), decode_bf16(encode_bf16(f)));
  }
  EXPECT_EQ(reference::float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie to even (down)
  EXPECT_EQ(reference::float_to_bf16(1.0f + 3.0f / 256), 0x3f82);  // tie to even (up)
  EXPECT_EQ(reference::float_to_bf16(3.4e38f), 0x7f80);              // rounds to inf
  EXPECT_TRUE(std::isnan(reference::bf16_to_float(reference::float_to_bf16(NAN))));
}

TEST(Numeric, F16RoundsToNearestEven) {
  std::mt19937 rng(2);
  for (int i = 0; i < 1000000; ++i) {
    // Half the samples in f16's range, where rounding is interesting.
    float f = random_float(rng);
    if (i % 2) f = std::ldexp(std::fmod(f, 2.0f), static_cast<int>(rng() % 44) - 28);
    ASSERT_EQ(reference::float_to_f16(f), encode_f16(f)) << f;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = decode_f16(static_cast<uint16_t>(h));
    const float got = reference::f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got));
    else ASSERT_EQ(got, want) << h;
  }
  EXPECT_EQ(reference::float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(reference::float_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(reference::float_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(reference::float_to_f16(std::ldexp(1.0f, -25)), 0x0000);          // tie to even (zero)
  EXPECT_EQ(reference::float_to_f16(std::ldexp(3.0f, -25)), 0x0002);          // tie to even (up)
}

// f64 results (the gradient-check path) stored to a 16-bit output are rounded once, from the double: a
// double just past a 16-bit tie used to round to nearest f32 first, onto the tie, and then to even.
TEST(Numeric, DoublesRoundOnceTo16BitTypes) {
  std::mt19937_64 rng(3);
  std::vector<double> values;
  for (int i = 0; i < 400000; ++i) {
    uint64_t u = rng();
    double v;
    std::memcpy(&v, &u, 8);
    if (std::isnan(v)) continue;
    if (i % 2) v = std::ldexp(std::fmod(v, 2.0), static_cast<int>(rng() % 300) - 150);  // 16-bit ranges
    values.push_back(v);
  }
  // Near the ties of both types: k/2^9 and k/2^12 (halfway for bf16 and f16 at [1, 2)), nudged by 2^-40,
  // at several exponents down to the subnormals.
  for (int k = 1; k < 512; k += 2)
    for (int e : {0, -20, -130, -133, 100})
      for (double nudge : {-1.0, 0.0, 1.0}) {
        values.push_back(std::ldexp(1.0 + k / 512.0 + nudge * std::ldexp(1.0, -40), e));
        values.push_back(-std::ldexp(1.0 + k / 4096.0 + nudge * std::ldexp(1.0, -40), e / 8));
      }
  values.push_back(std::ldexp(1.0, 200));  // past f32's range: inf in both
  values.push_back(-std::ldexp(1.0, -1000));  // below both: -0
  for (double v : values) {
    uint16_t bf = 0, h = 0;
    reference::store<double>(&bf, DType::bf16, 0, v);
    reference::store<double>(&h, DType::f16, 0, v);
    ASSERT_EQ(bf, encode_bf16(v)) << std::hexfloat << v;
    ASSERT_EQ(h, encode_f16(v)) << std::hexfloat << v;
    ASSERT_EQ(reference::rounded_to<double>(DType::bf16, v), decode_bf16(encode_bf16(v))) << std::hexfloat << v;
  }
  uint16_t bf = 0;
  reference::store<double>(&bf, DType::bf16, 0, 1.00390625 + std::ldexp(1.0, -40));  // just past the tie
  EXPECT_EQ(bf, 0x3f81);
}

TEST(Offsets, GarbageIsClampedIntoRange) {
  // Decreasing, negative and > M ends: each end is clamped into [previous end, M].
  const int64_t M = 50;
  HostTensor o = offsets_raw({10, 5, -3, 30, 80, 20, 60});
  const reference::ExpertRows r = reference::expert_rows(o.view(), M);
  const std::vector<int64_t> want_end{10, 10, 10, 30, 50, 50, 50};
  EXPECT_EQ(r.end, want_end);
  EXPECT_EQ(r.begin, (std::vector<int64_t>{0, 10, 10, 10, 30, 50, 50}));
  EXPECT_EQ(r.end_all, 50);
  HostTensor neg = offsets_raw({-5, -1});
  EXPECT_EQ(reference::expert_rows(neg.view(), M).end_all, 0);
}

// Garbage offsets through every row-indexed op: no crash, no write outside [0, M), the clamped ranges
// computed and nothing else (tail rows keep the poison).
TEST(Offsets, GarbageNeverEscapesTheOutput) {
  const int64_t M = 64, N = 16, K = 16, E = 5;
  HostTensor a = random_tensor(DType::bf16, {M, K}, 121);
  naive::Weights b(naive::BMode::dense_nk, DType::bf16, E, N, K, 122, 0.5);
  for (const std::vector<int32_t>& raw : {std::vector<int32_t>{20, 10, -7, 40, 2000000000},
                                          std::vector<int32_t>{-1, -2, -3, -4, -5},
                                          std::vector<int32_t>{30, 30, 12, 50, 48}}) {
    HostTensor offsets = offsets_raw(raw);
    HostTensor d(DType::bf16, {M, N}, 4);
    poison(d);
    GroupedGemmArgs args;
    args.a = a.view();
    args.b = b.ew;
    args.offsets = offsets.view();
    args.d = d.view();
    reference::run(args);
    const naive::Rows rs = naive::rows(offsets, M);
    Expected want({M, N});
    for (int64_t g = 0; g < E; ++g)
      for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r)
        for (int64_t n = 0; n < N; ++n) want.close({r, n}, naive::dot(a, r, b, g, n));
    EXPECT_TRUE(matches(d, want)) << "offsets " << raw[0] << "," << raw[1] << ",...";

    HostTensor x = random_tensor(DType::bf16, {M, K}, 123), w(DType::f32, {E, K, K});
    poison(w);
    GroupedGemmWgradArgs wa;
    wa.x = x.view();
    wa.dy = a.view();
    wa.offsets = offsets.view();
    wa.w = w.view();
    reference::run(wa);
    for (int64_t g = 0; g < E; ++g)
      for (int64_t h = 0; h < K; ++h)
        for (int64_t n = 0; n < K; ++n) {
          double s = 0;
          for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r) s += x(r, h) * a(r, n);
          ASSERT_NEAR(w(g, h, n), s, 1e-4 + 1e-5 * std::fabs(s)) << "wgrad expert " << g;
        }
  }
}

TEST(Determinism, RepeatedRunsAreBitIdentical) {
  // Large enough to run on several threads; dglu exercises dprob, dbias and amax reductions.
  const int64_t M = 1500, I = 128, K = 256, E = 3;
  HostTensor dy = random_tensor(DType::bf16, {M, K}, 131);
  naive::Weights b(naive::BMode::dense_nk, DType::bf16, E, I, K, 132, 0.1);
  HostTensor c = random_tensor(DType::bf16, {M, 2 * I}, 133, -3, 3);
  HostTensor offsets = offsets_from_sizes({700, 0, 800});
  std::vector<std::vector<uint8_t>> runs;
  for (int i = 0; i < 2; ++i) {
    HostTensor dc(DType::bf16, {M, 2 * I}), dprob(DType::f32, {M}), dbias(DType::f32, {E, 2 * I}),
        amax(DType::f32, {2});
    GroupedGemmDgluArgs args;
    args.a = dy.view();
    args.b = b.ew;
    args.c = c.view();
    args.offsets = offsets.view();
    args.dc = dc.view();
    args.dprob = dprob.view();
    args.dbias = dbias.view();
    args.amax = amax.view();
    reference::run(args);
    std::vector<uint8_t> bytes;
    for (const HostTensor* t : {&dc, &dprob, &dbias, &amax}) {
      const auto* p = static_cast<const uint8_t*>(t->data());
      bytes.insert(bytes.end(), p, p + t->storage_bytes());
    }
    runs.push_back(std::move(bytes));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace
}  // namespace moegemm::testing
