// grouped_gemm_wgrad reference (docs/ops.md §5) against double-precision loops: dense and pointer
// outputs, transpose, accumulate, f32 and bf16 outputs, exact zeros for empty experts.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "common/expected.hpp"
#include "common/float_codec.hpp"
#include "common/naive.hpp"
#include "common/offsets.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"
#include "reference/reference.hpp"

namespace moegemm::testing {
namespace {

class WgradReference : public ::testing::TestWithParam<std::tuple<bool, bool, bool, DType>> {};

TEST_P(WgradReference, MatchesLoopFormula) {
  const auto [pointers, transpose, accumulate, out] = GetParam();
  const std::vector<int64_t> sizes{0, 37, 0, 130, 1, 0};
  const int64_t E = 6, M = 180, H = 40, N = 24;  // rows 168.. are a tail that wgrad must ignore
  HostTensor x = random_tensor(DType::bf16, {M, H}, 111);
  HostTensor dy = random_tensor(DType::bf16, {M, N}, 112);
  HostTensor offsets = offsets_from_sizes(sizes);
  const std::vector<int64_t> wshape = transpose ? std::vector<int64_t>{N, H} : std::vector<int64_t>{H, N};

  // Outputs: dense (E, ., .) with padded rows, or one buffer per expert followed by a poisoned guard row
  // (a write past an expert's matrix lands there). With accumulate they start from random values (kept by
  // empty experts); otherwise they are poisoned.
  HostTensor dense(out, {E, wshape[0], wshape[1]}, pointers ? 0 : 4);
  std::vector<HostTensor> per_expert;
  std::vector<const void*> addrs;
  for (int64_t g = 0; g < E; ++g) {
    per_expert.emplace_back(out, std::vector<int64_t>{wshape[0] + 1, wshape[1]});
    addrs.push_back(per_expert.back().data());
  }
  HostTensor table = pointer_table(addrs);
  auto w_at = [&](int64_t g, int64_t i, int64_t j) { return pointers ? per_expert[g](i, j) : dense(g, i, j); };
  std::vector<double> before(E * H * N, 0.0);
  if (accumulate) {
    fill_uniform(dense, 113);
    for (int64_t g = 0; g < E; ++g) {
      fill_uniform(per_expert[g], 114 + g);
      for (int64_t j = 0; j < wshape[1]; ++j)
        per_expert[g].set_bits_at(per_expert[g].offset({wshape[0], j}), poison_bits(out));
    }
    for (int64_t g = 0; g < E; ++g)
      for (int64_t i = 0; i < wshape[0]; ++i)
        for (int64_t j = 0; j < wshape[1]; ++j) before[(g * wshape[0] + i) * wshape[1] + j] = w_at(g, i, j);
  } else {
    poison(dense);
    for (auto& t : per_expert) poison(t);
  }

  GroupedGemmWgradArgs args;
  args.x = x.view();
  args.dy = dy.view();
  args.offsets = offsets.view();
  if (pointers) {
    args.w_ptrs = table.view();
    args.w_dtype = out;
  } else {
    args.w = dense.view();
  }
  args.transpose_output = transpose;
  args.accumulate = accumulate;
  reference::run(args);

  const naive::Rows rs = naive::rows(offsets, M);
  // Per expert, with the guard row after the matrix (untouched: the poison).
  std::vector<Expected> want(E, Expected({wshape[0] + 1, wshape[1]}));
  for (int64_t g = 0; g < E; ++g)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r) s += x(r, h) * dy(r, n);
        const int64_t i = transpose ? n : h, j = transpose ? h : n;
        const bool empty = rs.end[g] == rs.begin[g];
        const double old = before[(g * wshape[0] + i) * wshape[1] + j];
        if (empty) want[g].exact({i, j}, accumulate ? old : 0.0);
        else want[g].close({i, j}, s + old);
      }
  if (pointers) {
    for (int64_t g = 0; g < E; ++g) EXPECT_TRUE(matches(per_expert[g], want[g])) << "expert " << g;
  } else {
    // Compare expert slices of the dense output through per-expert copies of its values.
    Expected all({E, wshape[0], wshape[1]});
    const int64_t matrix = wshape[0] * wshape[1];  // want[g]'s elements before its guard row
    for (int64_t g = 0; g < E; ++g)
      for (int64_t lin = 0; lin < matrix; ++lin) all.set(g * matrix + lin, want[g].kind(lin), want[g].value(lin));
    if (accumulate) {
      // The padding held no poison (only view elements were filled): compare the view through a copy.
      HostTensor copy(out, {E, wshape[0], wshape[1]});
      for (int64_t lin = 0; lin < copy.numel(); ++lin) copy.set_bits_at(lin, dense.bits_at(dense.offset_of_linear(lin)));
      EXPECT_TRUE(matches(copy, all));
    } else {
      EXPECT_TRUE(matches(dense, all));
    }
  }
}

// Every expert's target is read from w_ptrs before any is written, as the kernels' map prologue reads the
// table: a table inside an expert's output (not checked, docs/ops.md rule 9) does not send later experts
// through an entry that an earlier expert's zeros overwrote.
TEST(WgradReference, PointerTableIsReadBeforeAnyWrite) {
  const int64_t M = 16, H = 8, N = 8;
  HostTensor x = random_tensor(DType::bf16, {M, H}, 121);
  HostTensor dy = random_tensor(DType::bf16, {M, N}, 122);
  HostTensor offsets = offsets_from_sizes({0, M});  // expert 0 has no rows: its output is zeroed first
  HostTensor w0(DType::f32, {H, N}), w1(DType::f32, {H, N});
  poison(w1);
  auto* table = static_cast<int64_t*>(w0.data());  // the table in expert 0's own output
  table[0] = reinterpret_cast<int64_t>(w0.data());
  table[1] = reinterpret_cast<int64_t>(w1.data());
  GroupedGemmWgradArgs args;
  args.x = x.view();
  args.dy = dy.view();
  args.offsets = offsets.view();
  args.w_ptrs = TensorView::contiguous(table, DType::i64, {2});
  reference::run(args);
  Expected want({H, N});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t r = 0; r < M; ++r) s += x(r, h) * dy(r, n);
      want.close({h, n}, s);
    }
  EXPECT_TRUE(matches(w1, want));
  Expected zeros({H, N});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t n = 0; n < N; ++n) zeros.exact({h, n}, 0.0);
  EXPECT_TRUE(matches(w0, zeros));
}

// accumulate rounds once (docs/ops.md §0: the result, computed in the accumulation type, is rounded once to the
// output's type): the stored W plus the f32 product, then one rounding to W's 16-bit dtype. Values +-k/128
// (k in [64, 256)) and at most 8 rows per expert keep every product and sum exact in f32, so the expected
// value is the double sum rounded once by the tests' own codec. Rounding the product to W's dtype before the
// addition gives another value in many elements (counted, so that the data is known to tell them apart).
TEST(WgradReference, AccumulateRoundsTheSumOnce) {
  const std::vector<int64_t> sizes{5, 0, 8, 3};
  const int64_t E = 4, M = 16, H = 16, N = 24;
  std::mt19937_64 rng(131);
  std::uniform_int_distribution<int> step(64, 255), sign(0, 1);
  auto fill = [&](HostTensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i)
      t.set_at(t.offset_of_linear(i), (sign(rng) ? -1.0 : 1.0) * step(rng) / 128.0);
  };
  HostTensor x(DType::bf16, {M, H}), dy(DType::bf16, {M, N});
  fill(x);
  fill(dy);
  HostTensor offsets = offsets_from_sizes(sizes);
  const naive::Rows rs = naive::rows(offsets, M);
  for (DType out : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(out));
    auto rounded = [&](double v) {
      return out == DType::bf16 ? decode_bf16(encode_bf16(v)) : decode_f16(encode_f16(v));
    };
    HostTensor w(out, {E, H, N});
    fill(w);
    std::vector<double> before(static_cast<size_t>(E * H * N));
    for (int64_t i = 0; i < E * H * N; ++i) before[i] = w.get_at(w.offset_of_linear(i));
    GroupedGemmWgradArgs args;
    args.x = x.view();
    args.dy = dy.view();
    args.offsets = offsets.view();
    args.w = w.view();
    args.accumulate = true;
    reference::run(args);
    int64_t telling = 0;
    for (int64_t g = 0; g < E; ++g)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r) s += x(r, h) * dy(r, n);
          const double old = before[(g * H + h) * N + n], once = rounded(old + s);
          telling += once != rounded(old + rounded(s));
          ASSERT_EQ(w(g, h, n), once) << "expert " << g << " h " << h << " n " << n << ": " << old << " + " << s;
        }
    EXPECT_GT(telling, 0) << "no element tells one rounding from two";
  }
}

INSTANTIATE_TEST_SUITE_P(All, WgradReference,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "ptrs" : "dense") +
                                  (std::get<1>(info.param) ? "_transposed" : "") +
                                  (std::get<2>(info.param) ? "_accumulate" : "") +
                                  (std::get<3>(info.param) == DType::f32 ? "_f32" : "_bf16");
                         });

}  // namespace
}  // namespace moegemm::testing
