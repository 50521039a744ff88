// grouped_gemm reference (docs/ops.md §1) against the double-precision loop formula, with poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "common/expected.hpp"
#include "common/float_codec.hpp"
#include "common/naive.hpp"
#include "common/offsets.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"
#include "reference/reference.hpp"

namespace moegemm::testing {
namespace {

using naive::BMode;

struct GemmCase {
  std::string name;
  BMode mode = BMode::dense_nk;
  DType in = DType::bf16, out = DType::bf16;
  std::vector<int64_t> sizes{37, 0, 64, 1, 90};
  int64_t M = 200, N = 48, K = 40;
  bool alpha = true, prob = true, bias = true, generate_c = true, zero_tail = false;
  DType bias_dtype = DType::f32;
  int64_t row_pad = 0;  // padding after every row of A, D, C and B
};

void run_case(const GemmCase& tc) {
  const int64_t E = static_cast<int64_t>(tc.sizes.size()), M = tc.M, N = tc.N, K = tc.K;
  HostTensor a = random_tensor(tc.in, {M, K}, 11, -1, 1, tc.row_pad);
  naive::Weights b(tc.mode, tc.in, E, N, K, 12, 2.0 / std::sqrt(double(K)), tc.row_pad);
  HostTensor offsets = offsets_from_sizes(tc.sizes);
  HostTensor alpha = random_tensor(DType::f32, {E}, 13, 0.5, 1.5);
  HostTensor prob = random_tensor(DType::f32, {M}, 14, 0.0, 1.0);
  HostTensor bias = random_tensor(tc.bias_dtype, {E, N}, 15, -0.5, 0.5);
  HostTensor d(tc.out, {M, N}, tc.row_pad), c(tc.out, {M, N}, tc.row_pad);
  poison(d);
  poison(c);

  GroupedGemmArgs args;
  args.a = a.view();
  args.b = b.ew;
  args.offsets = offsets.view();
  if (tc.alpha) args.alpha = alpha.view();
  if (tc.prob) args.prob = prob.view();
  if (tc.bias) args.bias = bias.view();
  args.d = d.view();
  if (tc.generate_c) args.c = c.view();
  args.zero_tail = tc.zero_tail;
  reference::run(args);

  const naive::Rows rs = naive::rows(offsets, M);
  Expected want_d({M, N}), want_c({M, N});
  for (int64_t g = 0; g < E; ++g)
    for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double pre = (tc.alpha ? alpha(g) : 1.0) * naive::dot(a, r, b, g, n);
        if (tc.bias) pre += bias(g, n);
        want_c.close({r, n}, pre);
        want_d.close({r, n}, (tc.prob ? prob(r) : 1.0) * pre);
      }
  if (tc.zero_tail)
    for (int64_t r = rs.end_all; r < M; ++r)
      for (int64_t n = 0; n < N; ++n) {
        want_d.exact({r, n}, 0.0);
        want_c.exact({r, n}, 0.0);
      }
  EXPECT_TRUE(matches(d, want_d)) << "D, case " << tc.name;
  if (tc.generate_c) EXPECT_TRUE(matches(c, want_c)) << "C, case " << tc.name;
  else for (int64_t i = 0; i < c.storage_elems(); ++i) ASSERT_TRUE(is_poison(c, i)) << "C written without generate_c";
}

class GroupedGemmReference : public ::testing::TestWithParam<GemmCase> {};
TEST_P(GroupedGemmReference, MatchesLoopFormula) { run_case(GetParam()); }

std::vector<GemmCase> cases() {
  std::vector<GemmCase> v;
  auto add = [&](std::string name, auto edit) {
    GemmCase c;
    c.name = std::move(name);
    edit(c);
    v.push_back(c);
  };
  add("dense_nk", [](GemmCase&) {});
  add("dense_kn", [](GemmCase& c) { c.mode = BMode::dense_kn; });
  add("ptrs_nk", [](GemmCase& c) { c.mode = BMode::ptrs_nk; });
  add("ptrs_kn", [](GemmCase& c) { c.mode = BMode::ptrs_kn; });
  add("plain", [](GemmCase& c) { c.alpha = c.prob = c.bias = c.generate_c = false; });
  add("alpha_only", [](GemmCase& c) { c.prob = c.bias = false; });
  add("prob_only", [](GemmCase& c) { c.alpha = c.bias = false; });
  add("bias_bf16", [](GemmCase& c) { c.bias_dtype = DType::bf16; c.alpha = c.prob = false; });
  add("f16_in_out", [](GemmCase& c) { c.in = c.out = DType::f16; c.bias_dtype = DType::f16; });
  add("f32_out", [](GemmCase& c) { c.out = DType::f32; });
  add("f64_gradcheck_path", [](GemmCase& c) { c.in = c.out = DType::f64; c.bias_dtype = DType::f64; });
  add("f32_inputs", [](GemmCase& c) { c.in = DType::f32; c.out = DType::f32; });
  add("tail_untouched", [](GemmCase& c) { c.M = 250; });
  add("tail_zeroed", [](GemmCase& c) { c.M = 250; c.zero_tail = true; });
  add("strided_rows", [](GemmCase& c) { c.row_pad = 8; c.M = 230; c.mode = BMode::dense_kn; });
  add("zero_tail_no_tail", [](GemmCase& c) { c.zero_tail = true; });
  add("e1024_tiny_experts", [](GemmCase& c) {
    c.sizes.assign(1024, 0);
    for (int g = 0; g < 1024; ++g) c.sizes[g] = g % 3 == 0 ? 0 : (g % 3 == 1 ? 1 : 2);
    c.M = 1023 + 5;  // 1023 addressed rows (341 * 1 + 341 * 2) and a 5-row tail
    c.K = 16;
    c.N = 24;
  });
  add("odd_sizes_large_k", [](GemmCase& c) { c.sizes = {3, 129, 0, 70, 5}; c.M = 260; c.K = 264; c.N = 136; });
  return v;
}

// f64 inputs (the gradient-check path) with 16-bit D and C: every element is rounded once, from the double
// (docs/ops.md §0), as Numeric.DoublesRoundOnceTo16BitTypes checks for the element-wise store; here through the
// row stores of an op. G[r, n] = b[n, 0] + s_r 2^-30 b[n, 1] lies 2^-30 (relative) from a 16-bit tie b[n, 0]
// (an odd multiple of the type's half unit), on the side of the random sign s_r: rounded once it goes that
// way; through f32 first (whose half unit is 2^-24) it lands on the tie and goes to even, half of the time the
// other way.
TEST(GroupedGemmReference, F64ResultsRoundOnceTo16BitOutputs) {
  const std::vector<int64_t> sizes{7, 0, 9};
  const int64_t E = 3, M = 16, N = 32, K = 8;
  std::mt19937_64 rng(301);
  std::uniform_int_distribution<int> odd(0, 63), sign(0, 1), octave(-3, 3);
  std::uniform_real_distribution<double> unit(0.5, 1.0);
  HostTensor a(DType::f64, {M, K}), b(DType::f64, {E, N, K}), offsets = offsets_from_sizes(sizes);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t k = 0; k < K; ++k)
      a.set({r, k}, k == 0 ? 1.0 : k == 1 ? (sign(rng) ? -1.0 : 1.0) * std::ldexp(1.0, -30) : 0.0);
  for (DType out : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(out));
    const int half_unit = out == DType::bf16 ? 8 : 11;  // 2^-8 (bf16) or 2^-11 (f16) relative: a tie in [1, 2)
    auto rounded = [&](double v) {
      return out == DType::bf16 ? decode_bf16(encode_bf16(v)) : decode_f16(encode_f16(v));
    };
    for (int64_t g = 0; g < E; ++g)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const double tie = std::ldexp(1.0 + (2 * odd(rng) + 1) * std::ldexp(1.0, -half_unit), octave(rng));
          b.set({g, n, k}, k == 0 ? (sign(rng) ? -tie : tie) : k == 1 ? tie * unit(rng) : unit(rng));
        }
    HostTensor d(out, {M, N}), c(out, {M, N});
    poison(d);
    poison(c);
    GroupedGemmArgs args;
    args.a = a.view();
    args.b.dense = b.view();
    args.offsets = offsets.view();
    args.d = d.view();
    args.c = c.view();
    reference::run(args);
    const naive::Rows rs = naive::rows(offsets, M);
    int64_t telling = 0;
    for (int64_t g = 0; g < E; ++g)
      for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r)
        for (int64_t n = 0; n < N; ++n) {
          double v = 0;
          for (int64_t k = 0; k < K; ++k) v += a(r, k) * b(g, n, k);
          telling += rounded(v) != rounded(static_cast<float>(v));
          ASSERT_EQ(d(r, n), rounded(v)) << "d row " << r << " col " << n << std::hexfloat << " G " << v;
          ASSERT_EQ(c(r, n), rounded(v)) << "c row " << r << " col " << n << std::hexfloat << " G " << v;
        }
    EXPECT_GT(telling, 0) << "no element tells one rounding from two";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GroupedGemmReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moegemm::testing
