// grouped_gemm_glu (docs/ops.md §2) and gemm_swiglu (§6) references against double-precision loops:
// every activation x every column layout, with alpha/prob/bias, C, and the poisoned tail.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "common/clamp_edge.hpp"
#include "common/expected.hpp"
#include "common/naive.hpp"
#include "common/offsets.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"
#include "reference/glu.hpp"
#include "reference/reference.hpp"

namespace moegemm::testing {
namespace {

using naive::BMode;

std::string layout_name(GluLayout l) {
  switch (l) {
    case GluLayout::halves: return "halves";
    case GluLayout::interleaved32: return "interleaved32";
    default: return "interleaved32_up_first";
  }
}
std::string activation_name(Activation a) {
  switch (a) {
    case Activation::swiglu: return "swiglu";
    case Activation::geglu: return "geglu";
    default: return "swiglu_clamped";
  }
}

class GluReference : public ::testing::TestWithParam<std::tuple<Activation, GluLayout, BMode>> {};

TEST_P(GluReference, MatchesLoopFormula) {
  const auto [act, layout, mode] = GetParam();
  const std::vector<int64_t> sizes{45, 0, 70, 1, 64};
  const int64_t E = 5, M = 200, I = 64, N = 2 * I, K = 48;
  // Large pre-activations (|G| up to ~12) so that swiglu_clamped's clamps are active on many elements.
  HostTensor a = random_tensor(DType::bf16, {M, K}, 21);
  naive::Weights b(mode, DType::bf16, E, N, K, 22, 6.0 / std::sqrt(double(K)));
  HostTensor offsets = offsets_from_sizes(sizes);
  HostTensor alpha = random_tensor(DType::f32, {E}, 23, 0.5, 1.5);
  HostTensor prob = random_tensor(DType::f32, {M}, 24, 0.0, 1.0);
  HostTensor bias = random_tensor(DType::bf16, {E, N}, 25, -1.0, 1.0);
  HostTensor d(DType::bf16, {M, I}), c(DType::f32, {M, N});
  poison(d);
  poison(c);

  GroupedGemmGluArgs args;
  args.a = a.view();
  args.b = b.ew;
  args.offsets = offsets.view();
  args.alpha = alpha.view();
  args.prob = prob.view();
  args.bias = bias.view();
  args.glu.activation = act;
  args.glu.layout = layout;
  if (act == Activation::swiglu_clamped) {
    args.glu.limit = 5.0f;  // non-default knobs reach the formula
    args.glu.act_alpha = 1.5f;
    args.glu.linear_offset = 0.5f;
  }
  args.d = d.view();
  args.c = c.view();
  reference::run(args);

  const naive::Rows rs = naive::rows(offsets, M);
  Expected want_d({M, I}), want_c({M, N});
  int64_t clamped = 0;
  for (int64_t g = 0; g < E; ++g)
    for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r) {
      std::vector<double> pre(N);
      for (int64_t n = 0; n < N; ++n) {
        pre[n] = alpha(g) * naive::dot(a, r, b, g, n) + bias(g, n);
        want_c.close({r, n}, pre[n]);
      }
      for (int64_t j = 0; j < I; ++j) {
        int64_t gc, uc;
        naive::glu_pair(layout, I, j, gc, uc);
        want_d.close({r, j}, prob(r) * naive::glu(args.glu, pre[gc], pre[uc]));
        clamped += pre[gc] > args.glu.limit || std::fabs(pre[uc]) > args.glu.limit;
      }
    }
  if (act == Activation::swiglu_clamped) EXPECT_GT(clamped, 50) << "the data must exercise the clamps";
  EXPECT_TRUE(matches(d, want_d));
  EXPECT_TRUE(matches(c, want_c));
}

INSTANTIATE_TEST_SUITE_P(
    All, GluReference,
    ::testing::Combine(::testing::Values(Activation::swiglu, Activation::geglu, Activation::swiglu_clamped),
                       ::testing::Values(GluLayout::halves, GluLayout::interleaved32,
                                         GluLayout::interleaved32_up_first),
                       ::testing::Values(BMode::dense_nk, BMode::ptrs_kn)),
    [](const auto& info) {
      return activation_name(std::get<0>(info.param)) + "_" + layout_name(std::get<1>(info.param)) + "_" +
             (std::get<2>(info.param) == BMode::dense_nk ? "dense_nk" : "ptrs_kn");
    });

TEST(GluReference, ZeroTailAndDefaults) {
  // No alpha/prob/bias, no C, f16 output, a tail of unaddressed rows zeroed on request.
  const std::vector<int64_t> sizes{30, 0, 33};
  const int64_t E = 3, M = 90, I = 32, N = 64, K = 24;
  HostTensor a = random_tensor(DType::f16, {M, K}, 31);
  naive::Weights b(BMode::dense_kn, DType::f16, E, N, K, 32, 2.0 / std::sqrt(double(K)));
  HostTensor offsets = offsets_from_sizes(sizes);
  for (bool zero_tail : {false, true}) {
    HostTensor d(DType::f16, {M, I});
    poison(d);
    GroupedGemmGluArgs args;
    args.a = a.view();
    args.b = b.ew;
    args.offsets = offsets.view();
    args.d = d.view();
    args.zero_tail = zero_tail;
    reference::run(args);
    Expected want({M, I});
    for (int64_t g = 0; g < E; ++g)
      for (int64_t r = (g ? offsets(g - 1) : 0); r < offsets(g); ++r)
        for (int64_t j = 0; j < I; ++j)
          want.close({r, j}, naive::silu(naive::dot(a, r, b, g, j)) * naive::dot(a, r, b, g, I + j));
    for (int64_t r = 63; r < M && zero_tail; ++r)
      for (int64_t j = 0; j < I; ++j) want.exact({r, j}, 0.0);
    EXPECT_TRUE(matches(d, want)) << "zero_tail=" << zero_tail;
  }
}

TEST(GluReference, InterleavedNeedsWholeBlockPairs) {
  // 2I = 96 cannot be split into 32-column gate/up pairs: an error, never a read past column 95.
  HostTensor a = random_tensor(DType::bf16, {4, 8}, 35), offsets = offsets_from_sizes({4});
  naive::Weights b(BMode::dense_nk, DType::bf16, 1, 96, 8, 36, 0.5);
  HostTensor d(DType::bf16, {4, 48});
  GroupedGemmGluArgs args;
  args.a = a.view();
  args.b = b.ew;
  args.offsets = offsets.view();
  args.glu.layout = GluLayout::interleaved32;
  args.d = d.view();
  EXPECT_THROW(reference::run(args), Error);
  args.glu.layout = GluLayout::halves;
  EXPECT_NO_THROW(reference::run(args));
}

// swiglu_clamped's 16-bit C keeps each clamp's decision: where rounding to nearest would carry G across
// +-limit, C holds the 16-bit value next to it on G's side (docs/ops.md §2). Limits: 7 (a bf16 and f16
// value), one just above 7 and one past the bf16 midpoint 7.015625 (the other direction of crossing).
TEST(GluReference, ClampedSavedPreactivationKeepsEachClampDecision) {
  const std::vector<int64_t> sizes{70, 0, 90};
  const int64_t E = 3, M = 180, N = 128, K = 16;
  for (GluLayout layout : {GluLayout::halves, GluLayout::interleaved32}) {
    for (DType c_dtype : {DType::bf16, DType::f16}) {
      for (float limit : {7.0f, 7.000732421875f, 7.02f}) {
        SCOPED_TRACE(std::to_string(static_cast<int>(layout)) + " " + dtype_name(c_dtype) + " limit " +
                     std::to_string(limit));
        HostTensor a(DType::bf16, {M, K}), w(DType::bf16, {E, N, K}), bias(DType::f32, {E, N});
        clamp_edge::fill(a, w, bias, layout, 40 + static_cast<uint64_t>(layout));
        HostTensor offsets = offsets_from_sizes(sizes), d(DType::bf16, {M, N / 2}), c(c_dtype, {M, N});
        poison(c);
        GroupedGemmGluArgs args;
        args.a = a.view();
        args.b.dense = w.view();
        args.bias = bias.view();
        args.offsets = offsets.view();
        args.glu.activation = Activation::swiglu_clamped;
        args.glu.layout = layout;
        args.glu.limit = limit;
        args.d = d.view();
        args.c = c.view();
        reference::run(args);
        int64_t crossings = 0;
        clamp_edge::expect_sides_kept(c, a, w, bias, offsets, layout, limit, &crossings);
        EXPECT_GT(crossings, 0) << "no element of this problem would cross a bound by rounding";
      }
    }
  }
}

// Where the 16-bit type has no finite value on G's side of the bound, C keeps G's plain rounding (the
// kernels' clamp_crossing interval is empty there too), never a value further from G. An unclamped G whose
// rounding is inf (a bound past the type's range) moves to the largest finite value, which keeps its side.
TEST(GluReference, SavedClampSideNeedsAFiniteNeighbour) {
  using reference::saved_on_clamp_side;
  // f16's largest finite value is 65504; 65510 rounds to it. Above the bound 65504 there is only inf.
  EXPECT_EQ(saved_on_clamp_side(65510.f, 65504.f, true, DType::f16), 65510.f);
  // A bound past f16's range: 66000 (unclamped) rounds to inf, past the bound; it moves back to 65504.
  EXPECT_EQ(saved_on_clamp_side(66000.f, 1e5f, true, DType::f16), 65504.f);
  EXPECT_EQ(saved_on_clamp_side(-66000.f, -1e5f, false, DType::f16), -65504.f);
  // Clamped and rounding to inf: already on its side.
  EXPECT_EQ(saved_on_clamp_side(2e5f, 1e5f, true, DType::f16), 2e5f);
  // bf16: the largest finite value is 0x7f7f (about 3.3895e38); 3.4e38 rounds to inf.
  EXPECT_EQ(saved_on_clamp_side(3.4e38f, 3.401e38f, true, DType::bf16), 0x1.fep127f);
  // Within range the value moves one f16 step across: 7.001 rounds to 7 (the bound), kept above it.
  EXPECT_EQ(saved_on_clamp_side(7.001f, 7.f, true, DType::f16), 7.00390625f);
  EXPECT_EQ(saved_on_clamp_side(-7.001f, -7.f, false, DType::f16), -7.00390625f);
  // Nothing to move where the rounding keeps the side, or for NaN.
  EXPECT_EQ(saved_on_clamp_side(6.999f, 7.f, true, DType::bf16), 6.999f);
  EXPECT_TRUE(std::isnan(saved_on_clamp_side(NAN, 7.f, true, DType::bf16)));
}

// A very negative finite gate: swiglu_clamped's h is (u' + 1) * g' * sigmoid(1.702 g') = -0, as torch computes
// it (g' * sigmoid first), not (u' + 1) * g' = -inf times sigmoid = 0, a NaN; so are dprob's terms (§3).
// d_gate is (u' + 1) * 0 too, also where 1.702 g' overflows (below about -2e38).
TEST(GluReference, ClampedHugeNegativeGateGivesZeroNotNan) {
  GluParams p;
  p.activation = Activation::swiglu_clamped;
  for (float gate : {-5e37f, -3e38f, -std::numeric_limits<float>::max()}) {
    for (float up : {7.f, 1.f, -7.f}) {
      SCOPED_TRACE("gate " + std::to_string(gate) + " up " + std::to_string(up));
      const auto v = reference::glu_eval<float, true>(p, gate, up);
      EXPECT_EQ(v.h, 0.f);
      EXPECT_EQ(v.d_gate, 0.f);
      EXPECT_EQ(v.d_up, 0.f);
    }
  }
  const auto v = reference::glu_eval<double, false>(p, -1e300, 7.0);
  EXPECT_EQ(v.h, 0.0);
}

class GemmSwigluReference : public ::testing::TestWithParam<std::tuple<GluLayout, BLayout, DType>> {};

TEST_P(GemmSwigluReference, MatchesLoopFormula) {
  const auto [layout, b_layout, ab12_dtype] = GetParam();
  const int64_t M = 77, N = 128, I = 64, K = 40;
  HostTensor a = random_tensor(DType::bf16, {M, K}, 41);
  HostTensor b = random_tensor(DType::bf16, b_layout == BLayout::nk ? std::vector<int64_t>{N, K}
                                                                    : std::vector<int64_t>{K, N},
                               42, -0.5, 0.5);
  HostTensor ab12(ab12_dtype, {M, N}), c(DType::bf16, {M, I});
  poison(ab12);
  poison(c);
  GemmSwigluArgs args;
  args.a = a.view();
  args.b = b.view();
  args.b_layout = b_layout;
  args.alpha = 0.75f;
  args.layout = layout;
  args.ab12 = ab12.view();
  args.c = c.view();
  reference::run(args);

  Expected want_ab({M, N}), want_c({M, I});
  for (int64_t r = 0; r < M; ++r) {
    std::vector<double> pre(N);
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a(r, k) * (b_layout == BLayout::nk ? b(n, k) : b(k, n));
      pre[n] = 0.75 * s;
      want_ab.close({r, n}, pre[n]);
    }
    for (int64_t j = 0; j < I; ++j) {
      int64_t gc, uc;
      naive::glu_pair(layout, I, j, gc, uc);
      want_c.close({r, j}, pre[uc] * naive::silu(pre[gc]));
    }
  }
  EXPECT_TRUE(matches(ab12, want_ab));
  EXPECT_TRUE(matches(c, want_c));
}

INSTANTIATE_TEST_SUITE_P(All, GemmSwigluReference,
                         ::testing::Combine(::testing::Values(GluLayout::interleaved32_up_first,
                                                              GluLayout::interleaved32, GluLayout::halves),
                                            ::testing::Values(BLayout::nk, BLayout::kn),
                                            ::testing::Values(DType::f32, DType::bf16)));

TEST(GemmSwigluReference, DefaultLayoutIsUpFirst) {
  // Output column 0 pairs up = pre-activation column 0 and gate = column 32 (cuDNN dense convention).
  const int64_t M = 1, N = 64, K = 64;
  HostTensor a(DType::bf16, {M, K}), b(DType::bf16, {N, K}), ab12(DType::f32, {M, N}), c(DType::f32, {M, 32});
  for (int64_t k = 0; k < K; ++k) a.set({0, k}, k == 0 ? 1.0 : 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) b.set({n, k}, k == 0 ? (n < 32 ? 2.0 : -1.0) : 0.0);
  GemmSwigluArgs args;
  args.a = a.view();
  args.b = b.view();
  args.ab12 = ab12.view();
  args.c = c.view();
  reference::run(args);
  EXPECT_NEAR(c(0, 0), 2.0 * naive::silu(-1.0), 1e-6);  // up = 2, gate = -1
}

}  // namespace
}  // namespace moegemm::testing
