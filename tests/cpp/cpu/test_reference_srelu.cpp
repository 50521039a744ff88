// Squared-ReLU references (docs/ops.md §4, §6) and gemm_amax against double-precision loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/expected.hpp"
#include "common/naive.hpp"
#include "common/offsets.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"
#include "reference/reference.hpp"

namespace moegemm::testing {
namespace {

using naive::BMode;

const std::vector<int64_t> kSizes{33, 0, 60, 1, 0};
constexpr int64_t kE = 5, kM = 110, kN = 40, kK = 56;

TEST(SreluReference, GroupedForward) {
  for (BMode mode : {BMode::dense_nk, BMode::dense_kn, BMode::ptrs_nk}) {
    HostTensor a = random_tensor(DType::bf16, {kM, kK}, 71);
    naive::Weights b(mode, DType::bf16, kE, kN, kK, 72, 2.0 / std::sqrt(double(kK)));
    HostTensor offsets = offsets_from_sizes(kSizes);
    HostTensor alpha = random_tensor(DType::f32, {kE}, 73, 0.5, 1.5);
    HostTensor prob = random_tensor(DType::f32, {kM}, 74, 0.0, 1.0);
    HostTensor bias = random_tensor(DType::f32, {kE, kN}, 75, -0.3, 0.3);
    HostTensor d(DType::bf16, {kM, kN}), c(DType::bf16, {kM, kN});
    poison(d);
    poison(c);
    GroupedGemmSreluArgs args;
    args.a = a.view();
    args.b = b.ew;
    args.offsets = offsets.view();
    args.alpha = alpha.view();
    args.prob = prob.view();
    args.bias = bias.view();
    args.d = d.view();
    args.c = c.view();
    reference::run(args);
    const naive::Rows rs = naive::rows(offsets, kM);
    Expected want_d({kM, kN}), want_c({kM, kN});
    for (int64_t g = 0; g < kE; ++g)
      for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r)
        for (int64_t n = 0; n < kN; ++n) {
          const double pre = alpha(g) * naive::dot(a, r, b, g, n) + bias(g, n);
          want_c.close({r, n}, pre);
          want_d.close({r, n}, prob(r) * naive::relu(pre) * naive::relu(pre));
        }
    EXPECT_TRUE(matches(d, want_d)) << "mode " << int(mode);
    EXPECT_TRUE(matches(c, want_c)) << "mode " << int(mode);
  }
}

TEST(SreluReference, GroupedBackward) {
  for (bool zero_tail : {false, true}) {
    const int64_t M = kM + 9;  // a tail past the last offset
    HostTensor dy = random_tensor(DType::bf16, {M, kK}, 81);
    naive::Weights b(BMode::ptrs_kn, DType::bf16, kE, kN, kK, 82, 2.0 / std::sqrt(double(kK)));
    HostTensor c = random_tensor(DType::bf16, {M, kN}, 83, -2.0, 2.0);
    HostTensor offsets = offsets_from_sizes(kSizes);
    HostTensor alpha = random_tensor(DType::f32, {kE}, 84, 0.5, 1.5);
    HostTensor prob = random_tensor(DType::f32, {M}, 85, 0.0, 1.0);
    HostTensor dc(DType::bf16, {M, kN}), dprob(DType::f32, {M}), dbias(DType::bf16, {kE, kN}),
        amax(DType::f32, {1});
    for (HostTensor* t : {&dc, &dprob, &dbias, &amax}) poison(*t);
    GroupedGemmDsreluArgs args;
    args.a = dy.view();
    args.b = b.ew;
    args.c = c.view();
    args.offsets = offsets.view();
    args.alpha = alpha.view();
    args.prob = prob.view();
    args.dc = dc.view();
    args.dprob = dprob.view();
    args.dbias = dbias.view();
    args.amax = amax.view();
    args.zero_tail = zero_tail;
    reference::run(args);

    const naive::Rows rs = naive::rows(offsets, M);
    Expected want_dc({M, kN}), want_dprob({M}), want_dbias({kE, kN}), want_amax({1});
    std::vector<double> sums(kE * kN, 0.0);
    double m = 0;
    for (int64_t g = 0; g < kE; ++g)
      for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r) {
        double dp = 0;
        for (int64_t n = 0; n < kN; ++n) {
          const double dh = alpha(g) * naive::dot(dy, r, b, g, n), s = naive::relu(c(r, n));
          const double v = 2 * s * dh * prob(r);
          want_dc.close({r, n}, v);
          sums[g * kN + n] += v;
          m = std::max(m, std::fabs(v));
          dp += s * s * dh;
        }
        want_dprob.close({r}, dp);
      }
    for (int64_t g = 0; g < kE; ++g)
      for (int64_t n = 0; n < kN; ++n)
        if (rs.end[g] == rs.begin[g]) want_dbias.exact({g, n}, 0.0);
        else want_dbias.close({g, n}, sums[g * kN + n]);
    want_amax.close({0}, m);
    for (int64_t r = rs.end_all; r < M && zero_tail; ++r) {
      want_dprob.exact({r}, 0.0);
      for (int64_t n = 0; n < kN; ++n) want_dc.exact({r, n}, 0.0);
    }
    const Tolerance f32_reduction{1e-3, 1e-3, 1e-4};
    EXPECT_TRUE(matches(dc, want_dc));
    EXPECT_TRUE(matches(dprob, want_dprob, f32_reduction));
    EXPECT_TRUE(matches(dbias, want_dbias));
    EXPECT_TRUE(matches(amax, want_amax, f32_reduction));
  }
}

// A NaN pre-activation stays NaN through relu, as in torch.relu and jax.nn.relu: an upstream overflow must
// not reach the outputs as a plausible 0. Row 3's pre-activation is NaN (through a NaN in A, or in the saved C).
TEST(SreluReference, NanPreactivationPropagates) {
  const std::vector<int64_t> sizes{8};
  const int64_t M = 8, N = 16, K = 16;
  HostTensor a = random_tensor(DType::bf16, {M, K}, 95);
  a.set({3, 5}, std::nan(""));
  naive::Weights b(BMode::dense_nk, DType::bf16, 1, N, K, 96, 0.25);
  HostTensor offsets = offsets_from_sizes(sizes);
  HostTensor d(DType::bf16, {M, N}), c(DType::bf16, {M, N});
  GroupedGemmSreluArgs fwd;
  fwd.a = a.view();
  fwd.b = b.ew;
  fwd.offsets = offsets.view();
  fwd.d = d.view();
  fwd.c = c.view();
  reference::run(fwd);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_TRUE(std::isnan(d(3, n))) << "d column " << n;
    EXPECT_FALSE(std::isnan(d(2, n))) << "d column " << n;
  }

  HostTensor dy = random_tensor(DType::bf16, {M, K}, 97);
  HostTensor saved = random_tensor(DType::bf16, {M, N}, 98, -2.0, 2.0);
  saved.set({3, 7}, std::nan(""));
  HostTensor dc(DType::bf16, {M, N}), dprob(DType::f32, {M});
  GroupedGemmDsreluArgs bwd;
  bwd.a = dy.view();
  bwd.b = b.ew;
  bwd.c = saved.view();
  bwd.offsets = offsets.view();
  bwd.dc = dc.view();
  bwd.dprob = dprob.view();
  reference::run(bwd);
  EXPECT_TRUE(std::isnan(dc(3, 7)));
  EXPECT_FALSE(std::isnan(dc(3, 6)));
  EXPECT_TRUE(std::isnan(dprob(3)));
  EXPECT_FALSE(std::isnan(dprob(2)));
}

// dC = 2 relu(C) dH prob is 0 where C <= 0 for any dH, as autodiff of relu(C)^2 gives in torch and JAX
// (not the NaN of 0 * inf), and non-finite where C > 0 or C is NaN. dprob's terms stay products: NaN.
// B is the identity, so dH = dY: row 0 is +inf, row 1 NaN.
TEST(SreluReference, NonFiniteDhGivesZeroWhereCIsNotPositive) {
  const int64_t M = 2, N = 8;
  const std::vector<double> saved_row{-1, 0, -0.0, 2, NAN, 0.5, -3, 1e-30};
  HostTensor offsets = offsets_from_sizes({M});
  HostTensor eye = naive::identity_experts(DType::f32, 1, N), dy(DType::f32, {M, N}), saved(DType::f32, {M, N});
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      dy.set({r, n}, r == 0 ? INFINITY : NAN);
      saved.set({r, n}, saved_row[n]);
    }
  HostTensor dc(DType::f32, {M, N}), dprob(DType::f32, {M}), amax(DType::f32, {1});
  GroupedGemmDsreluArgs bwd;
  bwd.a = dy.view();
  bwd.b.dense = eye.view();
  bwd.c = saved.view();
  bwd.offsets = offsets.view();
  bwd.dc = dc.view();
  bwd.dprob = dprob.view();
  bwd.amax = amax.view();
  reference::run(bwd);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      if (saved_row[n] <= 0) EXPECT_EQ(dc(r, n), 0.0) << "row " << r << " col " << n;
      else EXPECT_FALSE(std::isfinite(dc(r, n))) << "row " << r << " col " << n;
    }
    EXPECT_TRUE(std::isnan(dprob(r))) << "row " << r;
  }
  EXPECT_TRUE(std::isnan(amax(0)));
}

TEST(SreluReference, DenseForwardAndBackward) {
  const int64_t M = 70, N = 24, K = 32;
  for (BLayout layout : {BLayout::nk, BLayout::kn}) {
    HostTensor a = random_tensor(DType::f16, {M, K}, 91);
    HostTensor b = random_tensor(DType::f16, layout == BLayout::nk ? std::vector<int64_t>{N, K}
                                                                   : std::vector<int64_t>{K, N},
                                 92, -0.4, 0.4);
    auto bt = [&](int64_t n, int64_t k) { return layout == BLayout::nk ? b(n, k) : b(k, n); };
    HostTensor prob = random_tensor(DType::f32, {M}, 93, 0.0, 1.0);
    HostTensor saved = random_tensor(DType::f16, {M, N}, 94, -1.0, 1.0);
    HostTensor bias = random_tensor(DType::f32, {N}, 95, -1.0, 1.0);
    HostTensor d(DType::f16, {M, N}), c(DType::f32, {M, N}), dc(DType::f16, {M, N}), dprob(DType::f32, {M});
    HostTensor dbias(DType::f32, {N}), amax(DType::f32, {1});
    for (HostTensor* t : {&d, &c, &dc, &dprob, &dbias, &amax}) poison(*t);

    GemmSreluArgs fw;
    fw.a = a.view();
    fw.b = b.view();
    fw.b_layout = layout;
    fw.alpha = 1.25f;
    fw.prob = prob.view();
    fw.bias = bias.view();
    fw.d = d.view();
    fw.c = c.view();
    reference::run(fw);
    GemmDsreluArgs bw;
    bw.a = a.view();
    bw.b = b.view();
    bw.b_layout = layout;
    bw.alpha = 1.25f;
    bw.c = saved.view();
    bw.prob = prob.view();
    bw.dc = dc.view();
    bw.dprob = dprob.view();
    bw.dbias = dbias.view();
    bw.amax = amax.view();
    reference::run(bw);

    Expected want_d({M, N}), want_c({M, N}), want_dc({M, N}), want_dprob({M}), want_dbias({N}), want_amax({1});
    std::vector<double> col_sums(static_cast<std::size_t>(N), 0.0);
    double max_abs = 0;
    for (int64_t r = 0; r < M; ++r) {
      double dp = 0;
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a(r, k) * bt(n, k);
        // The forward adds the bias; the backward's GEMM gives dH = alpha dY B^T, with no bias.
        const double pre = 1.25 * s + bias(n), dh = 1.25 * s, sr = naive::relu(saved(r, n));
        want_c.close({r, n}, pre);
        want_d.close({r, n}, prob(r) * naive::relu(pre) * naive::relu(pre));
        const double g = 2 * sr * dh * prob(r);
        want_dc.close({r, n}, g);
        col_sums[static_cast<std::size_t>(n)] += g;
        max_abs = std::max(max_abs, std::abs(g));
        dp += sr * sr * dh;
      }
      want_dprob.close({r}, dp);
    }
    for (int64_t n = 0; n < N; ++n) want_dbias.close({n}, col_sums[static_cast<std::size_t>(n)]);
    want_amax.close({0}, max_abs);
    EXPECT_TRUE(matches(d, want_d));
    EXPECT_TRUE(matches(c, want_c));
    EXPECT_TRUE(matches(dc, want_dc));
    EXPECT_TRUE(matches(dprob, want_dprob, Tolerance{1e-3, 1e-3, 1e-4}));
    EXPECT_TRUE(matches(dbias, want_dbias, Tolerance{1e-3, 1e-3, 1e-4}));
    EXPECT_TRUE(matches(amax, want_amax));
  }
}

TEST(GemmAmaxReference, ValuesAndAmax) {
  // b and then -b: whichever sign the largest product has, one pass takes it from a negative value.
  for (double sign : {1.0, -1.0}) {
  const int64_t M = 90, N = 56, K = 72;
  HostTensor a = random_tensor(DType::bf16, {M, K}, 101);
  HostTensor b = random_tensor(DType::bf16, {N, K}, 102, -0.3, 0.3);
  for (int64_t i = 0; i < b.numel(); ++i) b.set_at(b.offset_of_linear(i), sign * b.get_at(b.offset_of_linear(i)));
  HostTensor c(DType::bf16, {M, N}, 8), amax(DType::f32, {1});
  poison(c);
  poison(amax);
  GemmAmaxArgs args;
  args.a = a.view();
  args.b = b.view();
  args.c = c.view();
  args.amax = amax.view();
  reference::run(args);
  Expected want({M, N}), want_amax({1});
  double m = 0;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a(r, k) * b(n, k);
      want.close({r, n}, s);
      m = std::max(m, std::fabs(s));
    }
  want_amax.close({0}, m);
  EXPECT_TRUE(matches(c, want)) << "sign " << sign;
  EXPECT_TRUE(matches(amax, want_amax, Tolerance{1e-5, 1e-5, 1e-5}));  // from f32 values, before rounding
  }
}

// amax keeps a NaN (docs/ops.md §7): one NaN in the saved pre-activation of an addressed row makes its dC
// NaN, and the amax of dC with it.
TEST(SreluReference, GroupedBackwardAmaxKeepsNaN) {
  HostTensor dy = random_tensor(DType::bf16, {kM, kK}, 91);
  naive::Weights b(BMode::dense_nk, DType::bf16, kE, kN, kK, 92, 2.0 / std::sqrt(double(kK)));
  HostTensor c = random_tensor(DType::bf16, {kM, kN}, 93, -2.0, 2.0);
  c.set({40, 7}, NAN);  // row 40: expert 2 (rows 33..92)
  HostTensor offsets = offsets_from_sizes(kSizes);
  HostTensor dc(DType::bf16, {kM, kN}), amax(DType::f32, {1});
  poison(dc);
  poison(amax);
  GroupedGemmDsreluArgs args;
  args.a = dy.view();
  args.b = b.ew;
  args.c = c.view();
  args.offsets = offsets.view();
  args.dc = dc.view();
  args.amax = amax.view();
  reference::run(args);
  // NaN, and written: not the poison's signalling NaN.
  EXPECT_TRUE(std::isnan(dc(40, 7)) && !is_poison(dc, dc.offset({40, 7})));
  EXPECT_TRUE(std::isnan(amax(0)) && !is_poison(amax, amax.offset({0})));
  EXPECT_FALSE(std::isnan(dc(40, 8)));
}

// The dense ops read B through its strides: rows padded past K (nk) or N (kn), as a slice b[:, :K] of a wider
// tensor gives them (docs/ops.md rule 5 takes any row stride >= the columns, a multiple of 16 bytes), for each of
// gemm_amax, gemm_srelu, gemm_dsrelu and gemm_swiglu, against the loop formula.
TEST(GemmAmaxReference, DenseOpsReadPaddedWeightRows) {
  const int64_t M = 40, N = 64, K = 48, I = N / 2;
  for (BLayout layout : {BLayout::nk, BLayout::kn}) {
    SCOPED_TRACE(layout == BLayout::nk ? "nk" : "kn");
    const bool nk = layout == BLayout::nk;
    HostTensor a = random_tensor(DType::bf16, {M, K}, 131);
    HostTensor b = random_tensor(DType::bf16, nk ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, 132,
                                 -0.4, 0.4, /*row_pad=*/8);
    auto g = [&](int64_t r, int64_t n) {  // A @ B^T in double
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a(r, k) * (nk ? b(n, k) : b(k, n));
      return s;
    };
    HostTensor saved = random_tensor(DType::f32, {M, N}, 133);
    HostTensor c(DType::f32, {M, N}), amax(DType::f32, {1}), d(DType::f32, {M, N}), dc(DType::f32, {M, N}),
        ab12(DType::f32, {M, N}), h(DType::f32, {M, I});
    for (HostTensor* t : {&c, &amax, &d, &dc, &ab12, &h}) poison(*t);
    GemmAmaxArgs am;
    am.a = a.view();
    am.b = b.view();
    am.b_layout = layout;
    am.c = c.view();
    am.amax = amax.view();
    reference::run(am);
    GemmSreluArgs sr;
    sr.a = a.view();
    sr.b = b.view();
    sr.b_layout = layout;
    sr.d = d.view();
    reference::run(sr);
    GemmDsreluArgs ds;
    ds.a = a.view();
    ds.b = b.view();
    ds.b_layout = layout;
    ds.c = saved.view();
    ds.dc = dc.view();
    reference::run(ds);
    GemmSwigluArgs sw;
    sw.a = a.view();
    sw.b = b.view();
    sw.b_layout = layout;
    sw.layout = GluLayout::halves;
    sw.ab12 = ab12.view();
    sw.c = h.view();
    reference::run(sw);
    Expected want_c({M, N}), want_d({M, N}), want_dc({M, N}), want_h({M, I}), want_amax({1});
    double m = 0;
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t n = 0; n < N; ++n) {
        const double v = g(r, n);
        want_c.close({r, n}, v);
        want_d.close({r, n}, naive::relu(v) * naive::relu(v));
        want_dc.close({r, n}, 2 * naive::relu(saved(r, n)) * v);
        m = std::max(m, std::fabs(v));
      }
      for (int64_t j = 0; j < I; ++j) want_h.close({r, j}, naive::silu(g(r, j)) * g(r, I + j));
    }
    want_amax.close({0}, m);
    EXPECT_TRUE(matches(c, want_c)) << "gemm_amax c";
    EXPECT_TRUE(matches(amax, want_amax)) << "gemm_amax amax";
    EXPECT_TRUE(matches(d, want_d)) << "gemm_srelu d";
    EXPECT_TRUE(matches(dc, want_dc)) << "gemm_dsrelu dc";
    EXPECT_TRUE(matches(ab12, want_c)) << "gemm_swiglu ab12";
    EXPECT_TRUE(matches(h, want_h)) << "gemm_swiglu c";
  }
}

TEST(GemmAmaxReference, EmptyMWritesZero) {
  HostTensor a(DType::bf16, {0, 16}), b = random_tensor(DType::bf16, {8, 16}, 103), c(DType::bf16, {0, 8}),
      amax(DType::f32, {1});
  poison(amax);
  GemmAmaxArgs args;
  args.a = a.view();
  args.b = b.view();
  args.c = c.view();
  args.amax = amax.view();
  reference::run(args);
  EXPECT_EQ(amax(0), 0.0);
}

}  // namespace
}  // namespace moegemm::testing
