// grouped_gemm_dglu reference (docs/ops.md §3) against double-precision loops: dC in C's layout, dprob,
// dbias (exact zeros for empty experts), amax, alpha applied once, beta on C, zero_tail.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "common/expected.hpp"
#include "common/naive.hpp"
#include "common/offsets.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"
#include "reference/reference.hpp"

namespace moegemm::testing {
namespace {

using naive::BMode;

class DgluReference : public ::testing::TestWithParam<std::tuple<Activation, GluLayout, BMode>> {};

TEST_P(DgluReference, MatchesLoopFormula) {
  const auto [act, layout, mode] = GetParam();
  const std::vector<int64_t> sizes{0, 45, 0, 70, 1};  // empty first and middle experts
  const int64_t E = 5, M = 140, I = 64, N2 = 2 * I, K = 48;
  HostTensor dy = random_tensor(DType::bf16, {M, K}, 51);
  naive::Weights b(mode, DType::bf16, E, I, K, 52, 2.0 / std::sqrt(double(K)));
  HostTensor c = random_tensor(DType::bf16, {M, N2}, 53, -9.0, 9.0);  // beyond the clamp limit
  HostTensor offsets = offsets_from_sizes(sizes);
  HostTensor alpha = random_tensor(DType::f32, {E}, 54, 0.5, 1.5);
  HostTensor beta = random_tensor(DType::f32, {E}, 55, 0.5, 1.5);
  HostTensor prob = random_tensor(DType::f32, {M}, 56, 0.0, 1.0);
  HostTensor dc(DType::bf16, {M, N2}), dprob(DType::f32, {M}), dbias(DType::f32, {E, N2}),
      amax(DType::f32, {2});
  for (HostTensor* t : {&dc, &dprob, &dbias, &amax}) poison(*t);

  GroupedGemmDgluArgs args;
  args.a = dy.view();
  args.b = b.ew;
  args.c = c.view();
  args.offsets = offsets.view();
  args.alpha = alpha.view();
  args.beta = beta.view();
  args.prob = prob.view();
  args.glu.activation = act;
  args.glu.layout = layout;
  args.dc = dc.view();
  args.dprob = dprob.view();
  args.dbias = dbias.view();
  args.amax = amax.view();
  args.zero_tail = true;
  reference::run(args);

  const naive::Rows rs = naive::rows(offsets, M);
  Expected want_dc({M, N2}), want_dprob({M}), want_dbias({E, N2}), want_amax({2});
  std::vector<double> bias_sum(E * N2, 0.0);
  double amax_gate = 0, amax_up = 0;
  for (int64_t g = 0; g < E; ++g)
    for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r) {
      double dp = 0;
      for (int64_t j = 0; j < I; ++j) {
        int64_t gc, uc;
        naive::glu_pair(layout, I, j, gc, uc);
        const double dh = alpha(g) * naive::dot(dy, r, b, g, j);  // alpha once, not alpha^2
        const double gate = beta(g) * c(r, gc), up = beta(g) * c(r, uc);
        double dg, du;
        naive::glu_grad(args.glu, gate, up, dg, du);
        const double d_gate = dh * prob(r) * dg, d_up = dh * prob(r) * du;
        want_dc.close({r, gc}, d_gate);
        want_dc.close({r, uc}, d_up);
        bias_sum[g * N2 + gc] += d_gate;
        bias_sum[g * N2 + uc] += d_up;
        amax_gate = std::max(amax_gate, std::fabs(d_gate));
        amax_up = std::max(amax_up, std::fabs(d_up));
        dp += naive::glu(args.glu, gate, up) * dh;
      }
      want_dprob.close({r}, dp);
    }
  for (int64_t r = rs.end_all; r < M; ++r) {
    want_dprob.exact({r}, 0.0);
    for (int64_t n = 0; n < N2; ++n) want_dc.exact({r, n}, 0.0);
  }
  for (int64_t g = 0; g < E; ++g)
    for (int64_t n = 0; n < N2; ++n) {
      if (rs.end[g] == rs.begin[g]) want_dbias.exact({g, n}, 0.0);
      else want_dbias.close({g, n}, bias_sum[g * N2 + n]);
    }
  want_amax.close({0}, amax_gate);
  want_amax.close({1}, amax_up);
  // dprob, dbias and amax are f32 outputs of f32 math: compare with bf16-level tolerances because the
  // inputs to the activation (dH) are f32 sums whose rounding is amplified by the activation slope.
  const Tolerance f32_reduction{1e-3, 1e-3, 1e-4};
  EXPECT_TRUE(matches(dc, want_dc));
  EXPECT_TRUE(matches(dprob, want_dprob, f32_reduction));
  EXPECT_TRUE(matches(dbias, want_dbias, f32_reduction));
  EXPECT_TRUE(matches(amax, want_amax, f32_reduction));
}

INSTANTIATE_TEST_SUITE_P(
    All, DgluReference,
    ::testing::Combine(::testing::Values(Activation::swiglu, Activation::geglu, Activation::swiglu_clamped),
                       ::testing::Values(GluLayout::halves, GluLayout::interleaved32,
                                         GluLayout::interleaved32_up_first),
                       ::testing::Values(BMode::dense_kn, BMode::ptrs_nk)));

// swiglu_clamped's masks hold for any dH: where a clamp cuts the gradient off, dC is 0 also for an infinite
// or NaN dH (torch's clamp backward; a product with the zero derivative would be NaN), and non-finite where
// the gradient passes. B is the identity, so dH = dY: row 0 is +inf, row 1 NaN.
TEST(DgluReference, ClampedMasksANonFiniteDh) {
  const int64_t M = 2, I = 8;
  const std::vector<double> gates{9, -9, 2, 7, NAN, 1, 8, 0.5}, ups{1, 9, -9, 7, 2, NAN, -7, 3};
  HostTensor offsets = offsets_from_sizes({M});
  HostTensor eye = naive::identity_experts(DType::f32, 1, I), dy(DType::f32, {M, I}), c(DType::f32, {M, 2 * I});
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < I; ++j) {
      dy.set({r, j}, r == 0 ? INFINITY : NAN);
      c.set({r, j}, gates[j]);
      c.set({r, I + j}, ups[j]);
    }
  HostTensor dc(DType::f32, {M, 2 * I}), dbias(DType::f32, {1, 2 * I}), amax(DType::f32, {2});
  GroupedGemmDgluArgs bw;
  bw.a = dy.view();
  bw.b.dense = eye.view();
  bw.c = c.view();
  bw.offsets = offsets.view();
  bw.glu = GluParams{Activation::swiglu_clamped, GluLayout::halves};
  bw.dc = dc.view();
  bw.dbias = dbias.view();
  bw.amax = amax.view();
  reference::run(bw);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t j = 0; j < I; ++j) {
      const bool gate_cut = !(gates[j] <= 7), up_cut = !(ups[j] >= -7 && ups[j] <= 7);
      if (gate_cut) EXPECT_EQ(dc(r, j), 0.0) << "row " << r << " gate " << j;
      else EXPECT_FALSE(std::isfinite(dc(r, j))) << "row " << r << " gate " << j;
      if (up_cut) EXPECT_EQ(dc(r, I + j), 0.0) << "row " << r << " up " << j;
      else EXPECT_FALSE(std::isfinite(dc(r, I + j))) << "row " << r << " up " << j;
      // Column sums: 0 + 0 where both rows are cut, NaN (row 1) where the gradient passes.
      EXPECT_EQ(std::isnan(dbias(0, j)), !gate_cut) << "dbias gate " << j;
      EXPECT_EQ(std::isnan(dbias(0, I + j)), !up_cut) << "dbias up " << j;
    }
  }
  EXPECT_TRUE(std::isnan(amax(0)) && std::isnan(amax(1)));
}

// Autodiff consistency: with beta = 1, dC and dprob of the dglu op are the derivatives of the forward
// grouped_gemm_glu output (a sum of D weighted by the incoming gradient) in f64, by finite differences.
TEST(DgluReference, IsTheDerivativeOfTheForward) {
  const int64_t E = 2, M = 6, I = 32, N2 = 64, Kf = 8;
  const std::vector<int64_t> sizes{2, 4};
  HostTensor offsets = offsets_from_sizes(sizes);
  HostTensor x = random_tensor(DType::f64, {M, Kf}, 61);
  naive::Weights wf(BMode::dense_nk, DType::f64, E, N2, Kf, 62, 3.0);
  HostTensor prob = random_tensor(DType::f64, {M}, 63, 0.2, 1.0);
  HostTensor dy = random_tensor(DType::f64, {M, I}, 64);  // incoming gradient of D; dglu's A = dy, B = I
  HostTensor eye = naive::identity_experts(DType::f64, E, I);

  for (Activation act : {Activation::swiglu, Activation::geglu, Activation::swiglu_clamped}) {
    GluParams glu{act, GluLayout::interleaved32};
    glu.limit = 2.0f;
    auto forward = [&](HostTensor& c, HostTensor& d, const HostTensor& p) {
      GroupedGemmGluArgs f;
      f.a = x.view();
      f.b = wf.ew;
      f.offsets = offsets.view();
      f.prob = p.view();
      f.glu = glu;
      f.d = d.view();
      f.c = c.view();
      reference::run(f);
    };
    HostTensor c(DType::f64, {M, N2}), d(DType::f64, {M, I});
    forward(c, d, prob);

    HostTensor dc(DType::f64, {M, N2}), dprob(DType::f64, {M});
    GroupedGemmDgluArgs bw;
    bw.a = dy.view();
    bw.b.dense = eye.view();
    bw.c = c.view();
    bw.offsets = offsets.view();
    bw.prob = prob.view();
    bw.glu = glu;
    bw.dc = dc.view();
    bw.dprob = dprob.view();
    reference::run(bw);

    // L(C, prob) = sum dy * prob * act(C): its derivatives by central differences of the double formula.
    auto loss = [&](int64_t r, const std::vector<double>& row, double p) {
      double s = 0;
      for (int64_t j = 0; j < I; ++j) {
        int64_t gc, uc;
        naive::glu_pair(glu.layout, I, j, gc, uc);
        s += dy(r, j) * p * naive::glu(glu, row[gc], row[uc]);
      }
      return s;
    };
    for (int64_t r = 0; r < M; ++r) {
      std::vector<double> row(N2);
      for (int64_t n = 0; n < N2; ++n) row[n] = c(r, n);
      const double h = 1e-6;
      for (int64_t n = 0; n < N2; ++n) {
        if (std::fabs(std::fabs(row[n]) - glu.limit) < 1e-3) continue;  // kink of the clamp
        auto up = row, dn = row;
        up[n] += h;
        dn[n] -= h;
        EXPECT_NEAR(dc(r, n), (loss(r, up, prob(r)) - loss(r, dn, prob(r))) / (2 * h), 1e-6)
            << "row " << r << " col " << n;
      }
      EXPECT_NEAR(dprob(r), (loss(r, row, prob(r) + h) - loss(r, row, prob(r) - h)) / (2 * h), 1e-6);
    }
  }
}

}  // namespace
}  // namespace moegemm::testing
