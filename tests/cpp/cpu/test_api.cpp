// The public entry points: validate_offsets, workspace queries, checks before allocation, backend dispatch
// and the guarantee that a rejected call writes nothing.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/expect_error.hpp"
#include "moegemm/moegemm.hpp"

namespace moegemm {
namespace {

using testing::expect_error;

TensorView offsets_view(std::vector<int32_t>& ends) {
  return TensorView::contiguous(ends.data(), DType::i32, {static_cast<int64_t>(ends.size())});
}

// A quiet NaN with a payload no arithmetic produces: an element still holding it was never written.
constexpr uint32_t kPoisonBits = 0x7fc0dead;

std::vector<float> poisoned(std::size_t n) {
  std::vector<float> v(n);
  for (float& x : v) std::memcpy(&x, &kPoisonBits, sizeof x);
  return v;
}

bool is_poison(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == kPoisonBits;
}

// ---- validate_offsets ------------------------------------------------------------------------------------

TEST(ValidateOffsets, AcceptsEmptyExpertsAndAShortLastEnd) {
  std::vector<int32_t> ends{0, 5, 5, 17, 17, 90};
  EXPECT_NO_THROW(validate_offsets(offsets_view(ends), 96));
  std::vector<int32_t> all_empty{0, 0, 0};
  EXPECT_NO_THROW(validate_offsets(offsets_view(all_empty), 0));
  std::vector<int32_t> full{96};
  EXPECT_NO_THROW(validate_offsets(offsets_view(full), 96));
}

TEST(ValidateOffsets, ReportsDecreasingEnd) {
  std::vector<int32_t> ends{4, 9, 9, 5, 20};
  expect_error([&] { validate_offsets(offsets_view(ends), 96); }, ErrorCode::invalid_argument,
               {"validate_offsets: offsets: expected non-decreasing expert end rows in [0, M=96]",
                "got offsets[3] = 5 < offsets[2] = 9"});
}

TEST(ValidateOffsets, ReportsAnEndOneBelowTheOneBeforeIt) {
  std::vector<int32_t> ends{4, 9, 8, 20};  // the smallest decrease: expert 2 would silently get no rows
  expect_error([&] { validate_offsets(offsets_view(ends), 96); }, ErrorCode::invalid_argument,
               {"validate_offsets: offsets:", ">= the one before it", "got offsets[2] = 8 < offsets[1] = 9"});
}

TEST(ValidateOffsets, ReportsNegativeEnd) {
  std::vector<int32_t> ends{-1, 4};
  expect_error([&] { validate_offsets(offsets_view(ends), 96); }, ErrorCode::invalid_argument,
               {"validate_offsets: offsets:", ">= 0", "got offsets[0] = -1"});
}

TEST(ValidateOffsets, ReportsEndPastM) {
  std::vector<int32_t> ends{10, 20, 97};
  expect_error([&] { validate_offsets(offsets_view(ends), 96); }, ErrorCode::invalid_argument,
               {"validate_offsets: offsets:", "<= M", "got offsets[2] = 97"});
}

TEST(ValidateOffsets, TheWeightGradientNamesItsRowsT) {
  // grouped_gemm_wgrad's offsets split the T rows of x and dy; validate = true says so, and writes nothing.
  const int64_t T = 24, H = 8, N = 8;
  std::vector<uint16_t> x(T * H, 0x3f00), dy(T * N, 0x3e80);  // bf16 0.5 and 0.25
  std::vector<float> w = poisoned(2 * H * N);
  std::vector<int32_t> ends{10, 25};
  GroupedGemmWgradArgs args;
  args.x = TensorView::contiguous(x.data(), DType::bf16, {T, H});
  args.dy = TensorView::contiguous(dy.data(), DType::bf16, {T, N});
  args.offsets = offsets_view(ends);
  args.w = TensorView::contiguous(w.data(), DType::f32, {2, H, N});
  args.validate = true;
  expect_error([&] { grouped_gemm_wgrad(args, nullptr, 0, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: offsets: expected non-decreasing expert end rows in [0, M=24]", "each <= M",
                "got offsets[1] = 25"});
  for (float v : w) EXPECT_TRUE(is_poison(v));
}

TEST(ValidateOffsets, ReportsTheFirstBadIndex) {
  std::vector<int32_t> ends{10, 200, 5, -3};  // 1 is past M, 2 decreases, 3 is negative
  expect_error([&] { validate_offsets(offsets_view(ends), 96); }, ErrorCode::invalid_argument,
               {"got offsets[1] = 200"});
}

TEST(ValidateOffsets, ChecksTheOffsetsOperandItself) {
  std::vector<int64_t> wide{1, 2};
  auto t = TensorView::contiguous(wide.data(), DType::i64, {2});
  expect_error([&] { validate_offsets(t, 96); }, ErrorCode::invalid_argument,
               {"validate_offsets: offsets: expected dtype i32", "got i64"});
  std::vector<int32_t> none;
  expect_error([&] { validate_offsets(offsets_view(none), 96); }, ErrorCode::invalid_argument,
               {"validate_offsets: offsets: expected 1 <= E <= 1024 experts", "got E=0"});
}

TEST(ValidateOffsets, RefusesADeviceValueOutsideTheEnum) {
  // Read as host memory it would be dereferenced; the ops refuse the same view by name.
  std::vector<int32_t> ends{1, 2};
  TensorView t = offsets_view(ends);
  t.device = static_cast<Device>(9);
  expect_error([&] { validate_offsets(t, 96); }, ErrorCode::invalid_argument,
               {"validate_offsets: offsets: expected a host or cuda tensor", "got device value 9"});
}

// ---- host dispatch -----------------------------------------------------------------------------------------

/// A small f32 grouped_gemm on the host with alpha, bias and prob, 3 experts (the middle one empty) and a
/// 3-row tail; integer-valued data keeps the naive sum below exact.
struct HostGroupedGemm {
  static constexpr int64_t M = 20, K = 8, N = 8, E = 3;
  std::vector<float> a, b, alpha, prob, bias, d;
  std::vector<int32_t> ends{5, 5, 17};
  GroupedGemmArgs args;

  HostGroupedGemm() {
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int> small(-4, 4);
    auto fill = [&](std::vector<float>& v, std::size_t n) {
      v.resize(n);
      for (float& x : v) x = static_cast<float>(small(rng));
    };
    fill(a, M * K);
    fill(b, E * N * K);
    fill(bias, E * N);
    alpha = {0.5f, 2.0f, -1.0f};
    prob.resize(M);
    for (int64_t r = 0; r < M; ++r) prob[r] = 0.25f * static_cast<float>(1 + r % 4);
    d = poisoned(M * N);
    args.a = TensorView::contiguous(a.data(), DType::f32, {M, K});
    args.b.dense = TensorView::contiguous(b.data(), DType::f32, {E, N, K});
    args.offsets = offsets_view(ends);
    args.alpha = TensorView::contiguous(alpha.data(), DType::f32, {E});
    args.prob = TensorView::contiguous(prob.data(), DType::f32, {M});
    args.bias = TensorView::contiguous(bias.data(), DType::f32, {E, N});
    args.d = TensorView::contiguous(d.data(), DType::f32, {M, N});
  }

  /// docs/ops.md §1: D = prob[r] * (alpha[g] * A[r,:] @ B_g^T + bias[g,:]).
  double expected(int64_t r, int64_t n) const {
    int64_t g = 0;
    while (r >= ends[g]) ++g;
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += double(a[r * K + k]) * b[(g * N + n) * K + k];
    return prob[r] * (alpha[g] * acc + bias[g * N + n]);
  }
};

TEST(Dispatch, HostTensorsRunTheReference) {
  HostGroupedGemm p;
  EXPECT_EQ(grouped_gemm_workspace_bytes(p.args), 0u);
  grouped_gemm(p.args, nullptr, 0, nullptr);
  bool any_nonzero = false;
  for (int64_t r = 0; r < p.M; ++r) {
    for (int64_t n = 0; n < p.N; ++n) {
      const float got = p.d[r * p.N + n];
      if (r < p.ends.back()) {
        EXPECT_NEAR(got, p.expected(r, n), 1e-4) << "row " << r << " col " << n;
        any_nonzero |= got != 0.0f;
      } else {
        EXPECT_TRUE(is_poison(got)) << "tail row " << r << " col " << n << " was written: " << got;
      }
    }
  }
  EXPECT_TRUE(any_nonzero);
}

TEST(Dispatch, ValidateRejectsBadOffsetsBeforeWriting) {
  HostGroupedGemm p;
  p.ends = {5, 3, 17};
  p.args.validate = true;
  expect_error([&] { grouped_gemm(p.args, nullptr, 0, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets:", "got offsets[1] = 3 < offsets[0] = 5"});
  for (float x : p.d) ASSERT_TRUE(is_poison(x));
}

TEST(Dispatch, ContractErrorsComeBeforeAnyWrite) {
  HostGroupedGemm p;
  p.args.prob = TensorView::contiguous(p.prob.data(), DType::f32, {p.M - 1});
  expect_error([&] { grouped_gemm(p.args, nullptr, 0, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: prob: expected shape (M=20,)", "got (19,)"});
  for (float x : p.d) ASSERT_TRUE(is_poison(x));
}

// accumulate with w_in in another buffer: the op copies w_in into w first, so w ends as w_in + X^T dY (the formula
// of docs/ops.md §5 in doubles: integer data keeps every sum exact in f32), experts without rows get w_in's
// values, every element of w is written over its poison, and w_in is left as it was.
TEST(Dispatch, WgradAddsIntoAWInFromAnotherBuffer) {
  constexpr int64_t M = 12, H = 8, N = 4, E = 3;
  std::vector<int32_t> ends{4, 4, 10};  // expert 1 empty, rows 10.. a tail
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> small(-4, 4);
  auto fill = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(small(rng));
    return v;
  };
  std::vector<float> x = fill(M * H), dy = fill(M * N), w_in = fill(E * H * N), w = poisoned(E * H * N);
  const std::vector<float> kept = w_in;
  GroupedGemmWgradArgs args;
  args.x = TensorView::contiguous(x.data(), DType::f32, {M, H});
  args.dy = TensorView::contiguous(dy.data(), DType::f32, {M, N});
  args.offsets = offsets_view(ends);
  args.w = TensorView::contiguous(w.data(), DType::f32, {E, H, N});
  args.w_in = TensorView::contiguous(w_in.data(), DType::f32, {E, H, N});
  args.accumulate = true;
  grouped_gemm_wgrad(args, nullptr, 0, nullptr);
  EXPECT_EQ(w_in, kept);
  int64_t moved = 0;
  for (int64_t g = 0, begin = 0; g < E; begin = ends[g++]) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t n = 0; n < N; ++n) {
        double sum = w_in[(g * H + h) * N + n];
        for (int64_t r = begin; r < ends[g]; ++r) sum += double(x[r * H + h]) * dy[r * N + n];
        const float got = w[(g * H + h) * N + n];
        ASSERT_EQ(got, sum) << "expert " << g << " h " << h << " n " << n;
        moved += got != w_in[(g * H + h) * N + n];
      }
    }
  }
  EXPECT_GT(moved, 0) << "no product changed w: the test cannot tell a copy from the op";
}

// ---- checks before the outputs exist (X_check) --------------------------------------------------------------

// A binding checks the call before it allocates: an output with null data is one still to come, checked for
// shape and dtype; the op itself refuses the same null pointer.
TEST(CheckBeforeAllocation, PlannedOutputsSkipOnlyTheirPointerRules) {
  HostGroupedGemm p;
  p.args.d.data = nullptr;
  EXPECT_EQ(grouped_gemm_check(p.args, nullptr), grouped_gemm_workspace_bytes(p.args));
  expect_error([&] { grouped_gemm(p.args, nullptr, 0, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected a non-null data pointer", "got nullptr"});
  p.args.d = TensorView::contiguous(nullptr, DType::f32, {p.M, p.N + 4});
  expect_error([&] { grouped_gemm_check(p.args, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected shape (M=20, N=8)", "got (20, 12)"});
}

TEST(CheckBeforeAllocation, OperandsGivenGetThePointerRules) {
  HostGroupedGemm p;
  p.args.d.data = nullptr;
  std::vector<float> shifted(p.a.size() + 4);
  float* a = shifted.data();
  while (reinterpret_cast<uintptr_t>(a) % 16 != 4) ++a;  // 4 bytes past a 16-byte boundary
  p.args.a.data = a;
  expect_error([&] { grouped_gemm_check(p.args, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected a 16-byte aligned base address (16-byte alignment rule)", "got 0x",
                "; pass a copy of the operand, which starts aligned"});
  // An output given is checked for aliasing as in the call.
  HostGroupedGemm q;
  q.args.d = TensorView::contiguous(q.a.data(), DType::f32, {q.M, q.N});
  expect_error([&] { grouped_gemm_check(q.args, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected memory that no other operand of the call uses", "memory overlapping a"});
}

// Only an output still to come may lack data: an input, or w that accumulate reads, is refused as by the op.
TEST(CheckBeforeAllocation, InputsWithoutDataAreRefused) {
  HostGroupedGemm p;
  p.args.d.data = nullptr;
  p.args.a.data = nullptr;
  expect_error([&] { grouped_gemm_check(p.args, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected a non-null data pointer", "got nullptr"});
  HostGroupedGemm q;
  q.args.d.data = nullptr;
  q.args.offsets.data = nullptr;
  expect_error([&] { grouped_gemm_check(q.args, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets: expected a non-null data pointer", "got nullptr"});

  const int64_t T = 8, H = 8, N = 8;
  std::vector<float> x(T * H, 0.5f), dy(T * N, 0.25f);
  std::vector<int32_t> ends{3, 8};
  GroupedGemmWgradArgs w;
  w.x = TensorView::contiguous(x.data(), DType::f32, {T, H});
  w.dy = TensorView::contiguous(dy.data(), DType::f32, {T, N});
  w.offsets = offsets_view(ends);
  w.w = TensorView::contiguous(nullptr, DType::f32, {2, H, N});
  EXPECT_EQ(grouped_gemm_wgrad_check(w, nullptr), 0u);  // w to be allocated
  w.accumulate = true;                                   // w to be read: it must exist
  expect_error([&] { grouped_gemm_wgrad_check(w, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w: expected a non-null data pointer", "got nullptr"});
}

TEST(CheckBeforeAllocation, ValidateReadsTheOffsets) {
  HostGroupedGemm p;
  p.args.d.data = nullptr;
  p.ends = {5, 3, 17};
  EXPECT_EQ(grouped_gemm_check(p.args, nullptr), 0u);  // validate off: the values are not read
  p.args.validate = true;
  expect_error([&] { grouped_gemm_check(p.args, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets:", "got offsets[1] = 3 < offsets[0] = 5"});
}

/// Every grouped op that takes `validate`, on the host with f32 operands (M = 20 rows, K = N = I = 8,
/// E = 3): the call with the offsets given, and its check before allocation (every output still to come).
struct GroupedValidateCall {
  static constexpr int64_t M = 20, K = 8, N = 8, E = 3;
  std::string op;
  std::vector<float> a, b, c, alpha, beta, prob, bias;
  std::vector<float> out1, out2, out3, out4;  // the outputs, poisoned (accumulate: w's values, as read)
  std::vector<int32_t> ends;
  std::function<void(bool validate, bool planned)> run;  ///< planned: X_check with null output data

  GroupedValidateCall(std::string name, std::vector<int32_t> offsets) : op(std::move(name)), ends(std::move(offsets)) {
    std::mt19937 rng(77);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto random = [&](std::size_t n) {
      std::vector<float> v(n);
      for (float& x : v) x = uniform(rng);
      return v;
    };
    const bool glu = op == "grouped_gemm_glu", dglu = op == "grouped_gemm_dglu";
    const bool wgrad = op.rfind("grouped_gemm_wgrad", 0) == 0, accumulate = op == "grouped_gemm_wgrad.accumulate";
    const int64_t gemm_n = glu ? 2 * N : N;  // the GEMM's columns: 2I for the GLU
    const int64_t c_cols = dglu ? 2 * N : N;   // the saved pre-activation's: 2I for the dGLU
    a = random(M * K);
    b = random(E * gemm_n * K);
    c = random(M * c_cols);
    alpha = random(E);
    beta = random(E);
    prob = random(M);
    bias = random(E * gemm_n);
    const auto view = [](std::vector<float>& v, std::initializer_list<int64_t> shape, bool planned = false) {
      return TensorView::contiguous(planned ? nullptr : v.data(), DType::f32, shape);
    };
    const auto weights = [this, view](int64_t n) {
      ExpertWeights w;
      w.dense = view(b, {E, n, K});
      return w;
    };
    if (wgrad) {
      out1 = accumulate ? random(E * K * N) : poisoned(E * K * N);
      run = [this, view, accumulate](bool validate, bool planned) {
        GroupedGemmWgradArgs x;
        x.x = view(a, {M, K});
        x.dy = view(c, {M, N});
        x.offsets = offsets_view(ends);
        x.w = view(out1, {E, K, N}, planned && !accumulate);  // accumulate reads w: it is always given
        x.accumulate = accumulate;
        x.validate = validate;
        if (planned) grouped_gemm_wgrad_check(x, nullptr);
        else grouped_gemm_wgrad(x, nullptr, 0, nullptr);
      };
    } else if (dglu || op == "grouped_gemm_dsrelu") {
      out1 = poisoned(M * c_cols);
      out2 = poisoned(M);
      out3 = poisoned(E * c_cols);
      out4 = poisoned(dglu ? 2 : 1);
      run = [this, view, weights, dglu, c_cols](bool validate, bool planned) {
        auto fill = [&](auto& x) {
          x.a = view(a, {M, K});
          x.b = weights(N);
          x.c = view(c, {M, c_cols});
          x.offsets = offsets_view(ends);
          x.alpha = view(alpha, {E});
          x.prob = view(prob, {M});
          x.dc = view(out1, {M, c_cols}, planned);
          x.dprob = view(out2, {M}, planned);
          x.dbias = view(out3, {E, c_cols}, planned);
          x.amax = view(out4, {dglu ? 2 : 1}, planned);
          x.validate = validate;
        };
        if (dglu) {
          GroupedGemmDgluArgs x;
          fill(x);
          x.beta = view(beta, {E});
          if (planned) grouped_gemm_dglu_check(x, nullptr);
          else grouped_gemm_dglu(x, nullptr, 0, nullptr);
        } else {
          GroupedGemmDsreluArgs x;
          fill(x);
          if (planned) grouped_gemm_dsrelu_check(x, nullptr);
          else grouped_gemm_dsrelu(x, nullptr, 0, nullptr);
        }
      };
    } else {
      out1 = poisoned(M * (glu ? N : gemm_n));
      out2 = poisoned(M * gemm_n);
      run = [this, view, weights, glu, gemm_n](bool validate, bool planned) {
        auto fill = [&](auto& x) {
          x.a = view(a, {M, K});
          x.b = weights(gemm_n);
          x.offsets = offsets_view(ends);
          x.alpha = view(alpha, {E});
          x.prob = view(prob, {M});
          x.bias = view(bias, {E, gemm_n});
          x.d = view(out1, {M, glu ? N : gemm_n}, planned);
          x.c = view(out2, {M, gemm_n}, planned);
          x.validate = validate;
        };
        if (glu) {
          GroupedGemmGluArgs x;
          fill(x);
          if (planned) grouped_gemm_glu_check(x, nullptr);
          else grouped_gemm_glu(x, nullptr, 0, nullptr);
        } else if (op == "grouped_gemm_srelu") {
          GroupedGemmSreluArgs x;
          fill(x);
          if (planned) grouped_gemm_srelu_check(x, nullptr);
          else grouped_gemm_srelu(x, nullptr, 0, nullptr);
        } else {
          GroupedGemmArgs x;
          fill(x);
          if (planned) grouped_gemm_check(x, nullptr);
          else grouped_gemm(x, nullptr, 0, nullptr);
        }
      };
    }
  }

  /// Every output holds the bytes it held before the call.
  bool outputs_unchanged(const std::vector<std::vector<float>>& before) const {
    const std::vector<float>* now[] = {&out1, &out2, &out3, &out4};
    for (std::size_t i = 0; i < before.size(); ++i)
      if (!before[i].empty() && std::memcmp(before[i].data(), now[i]->data(), before[i].size() * sizeof(float)) != 0)
        return false;
    return true;
  }
};

// validate = true reports bad offsets (negative, decreasing, past M) of every grouped op, forward and backward,
// naming the op and the first bad index, before anything is written; so does the op's check before allocation.
// The same offsets without validate are clamped (docs/ops.md §0.1), and the call goes through.
TEST(Dispatch, ValidateRejectsBadOffsetsOfEveryGroupedOp) {
  const std::pair<std::vector<int32_t>, std::string> bad[] = {
      {{5, 3, 17}, "got offsets[1] = 3 < offsets[0] = 5"},
      {{-1, 5, 17}, "got offsets[0] = -1"},
      {{5, 9, 21}, "got offsets[2] = 21"},
  };
  for (const char* op : {"grouped_gemm", "grouped_gemm_glu", "grouped_gemm_dglu", "grouped_gemm_srelu",
                         "grouped_gemm_dsrelu", "grouped_gemm_wgrad", "grouped_gemm_wgrad.accumulate"}) {
    const std::string name = std::string(op).substr(0, std::string(op).find('.'));
    for (const auto& [ends, got] : bad) {
      SCOPED_TRACE(std::string(op) + ", " + got);
      GroupedValidateCall call(op, ends);
      const std::vector<std::vector<float>> before = {call.out1, call.out2, call.out3, call.out4};
      for (bool planned : {false, true}) {
        expect_error([&] { call.run(true, planned); }, ErrorCode::invalid_argument,
                     {name + ": offsets: expected non-decreasing expert end rows in [0, M=20]", got});
      }
      EXPECT_TRUE(call.outputs_unchanged(before)) << "a rejected call wrote an output";
      EXPECT_NO_THROW(call.run(false, true));
      EXPECT_NO_THROW(call.run(false, false));
      EXPECT_FALSE(call.outputs_unchanged(before)) << "the call without validate wrote nothing";
    }
    GroupedValidateCall good(op, {5, 5, 17});
    EXPECT_NO_THROW(good.run(true, true)) << op;
    EXPECT_NO_THROW(good.run(true, false)) << op;
  }
}

// A device call where the current device cannot run the sm_90a kernels (no GPU, or not compute capability
// 9.0) names the op and what it needs, as `unsupported`, before the offsets check reads the device.
TEST(Api, DeviceCallWithoutAnSm90GpuNamesTheOp) {
  if (device_kernels_available()) GTEST_SKIP() << "this machine has an sm_90 GPU: the GPU suites run the call";
  std::vector<uint16_t> a(32 * 64), b(2 * 32 * 64), d(32 * 32);
  std::vector<int32_t> ends = {16, 32};
  GroupedGemmArgs x;
  x.a = TensorView::contiguous(a.data(), DType::bf16, {32, 64}, Device::cuda);
  x.b.dense = TensorView::contiguous(b.data(), DType::bf16, {2, 32, 64}, Device::cuda);
  x.offsets = TensorView::contiguous(ends.data(), DType::i32, {2}, Device::cuda);
  x.d = TensorView::contiguous(d.data(), DType::bf16, {32, 32}, Device::cuda);
  x.validate = true;
  const std::vector<uint16_t> before = d;
  expect_error([&] { grouped_gemm(x, nullptr, 0, nullptr); }, ErrorCode::unsupported,
               {"grouped_gemm: device: expected a GPU of compute capability 9.0 for cuda tensors", "got "});
  EXPECT_EQ(d, before);
  x.d.data = nullptr;  // the check a binding makes before allocating d says the same
  expect_error([&] { grouped_gemm_check(x, nullptr); }, ErrorCode::unsupported,
               {"grouped_gemm: device: expected a GPU of compute capability 9.0 for cuda tensors", "got "});
  // With no driver at all the runtime says "insufficient driver": the message says what that can mean.
  int device = 0;
  if (cudaGetDevice(&device) == cudaErrorInsufficientDriver)
    expect_error([&] { grouped_gemm_check(x, nullptr); }, ErrorCode::unsupported,
                 {"no NVIDIA driver is loaded, or it is older than the CUDA runtime"});
  cudaGetLastError();
}

// A Device value from outside the enum is named with its operand, not taken for cuda.
TEST(Api, DeviceValueOutsideTheEnumIsNamed) {
  std::vector<uint16_t> a(32 * 64), b(2 * 32 * 64), d(32 * 32);
  std::vector<int32_t> ends = {16, 32};
  GroupedGemmArgs x;
  x.a = TensorView::contiguous(a.data(), DType::bf16, {32, 64});
  x.b.dense = TensorView::contiguous(b.data(), DType::bf16, {2, 32, 64});
  x.offsets = offsets_view(ends);
  x.d = TensorView::contiguous(d.data(), DType::bf16, {32, 32});
  x.d.device = static_cast<Device>(7);
  expect_error([&] { grouped_gemm(x, nullptr, 0, nullptr); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected a host or cuda tensor", "got device value 7"});
}

// ---- workspace queries -------------------------------------------------------------------------------------

/// A device grouped_gemm as a binding describes it at trace time: shapes and dtypes, no buffers yet.
GroupedGemmArgs traced_device_call() {
  GroupedGemmArgs x;
  x.a = TensorView::contiguous(nullptr, DType::bf16, {4096, 2048}, Device::cuda);
  x.b.dense = TensorView::contiguous(nullptr, DType::bf16, {8, 1024, 2048}, Device::cuda);
  x.offsets = TensorView::contiguous(nullptr, DType::i32, {8}, Device::cuda);
  x.d = TensorView::contiguous(nullptr, DType::bf16, {4096, 1024}, Device::cuda);
  return x;
}

TEST(Workspace, QueryNeedsNoBuffers) {
  const GroupedGemmArgs x = traced_device_call();
  const std::size_t bytes = grouped_gemm_workspace_bytes(x);
  GroupedGemmArgs moved = x;  // other addresses, same shapes: same size
  moved.a.data = reinterpret_cast<void*>(0x7f0000001000);
  EXPECT_EQ(grouped_gemm_workspace_bytes(moved), bytes);
}

// The size of pointer-mode weights' maps depends on E, not on where the pointer table is: a trace-time query
// with no table yet gets what the call will ask for.
TEST(Workspace, PointerModeSizeDoesNotDependOnTheTableAddress) {
  GroupedGemmArgs x = traced_device_call();
  x.b.dense = TensorView{};
  x.b.n = 1024;
  x.b.ptrs = TensorView::contiguous(nullptr, DType::i64, {8}, Device::cuda);
  const std::size_t traced = grouped_gemm_workspace_bytes(x);
  x.b.ptrs.data = reinterpret_cast<void*>(0x7f0040000000);
  EXPECT_EQ(grouped_gemm_workspace_bytes(x), traced);
  EXPECT_GT(traced, 0u);  // one tensor map per expert
}

// gemm_swiglu, gemm_amax and gemm_srelu run without a workspace, so they ask for none, even where the grouped
// ops would take the dynamic tile order's counter (M = 256 rows, 65536 columns: 256 tiles of 128 x 256).
TEST(Workspace, DenseOpsWithoutPartialsAskForNone) {
  const auto dev = [](DType t, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(nullptr, t, shape, Device::cuda);
  };
  GemmSreluArgs s;
  s.a = dev(DType::bf16, {256, 64});
  s.b = dev(DType::bf16, {65536, 64});
  s.d = dev(DType::bf16, {256, 65536});
  EXPECT_EQ(gemm_srelu_workspace_bytes(s), 0u);
  GemmAmaxArgs am;
  am.a = s.a;
  am.b = s.b;
  am.c = s.d;
  am.amax = dev(DType::f32, {1});
  EXPECT_EQ(gemm_amax_workspace_bytes(am), 0u);
  GemmSwigluArgs sw;
  sw.a = s.a;
  sw.b = s.b;
  sw.ab12 = s.d;
  sw.c = dev(DType::bf16, {256, 32768});
  EXPECT_EQ(gemm_swiglu_workspace_bytes(sw), 0u);
}

TEST(Workspace, QueryStillChecksShapes) {
  GroupedGemmArgs x = traced_device_call();
  x.d = TensorView::contiguous(nullptr, DType::bf16, {4096, 1000}, Device::cuda);
  expect_error([&] { grouped_gemm_workspace_bytes(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected shape (M=4096, N=1024)", "got (4096, 1000)"});
}

// ---- dtype names -------------------------------------------------------------------------------------------

TEST(DTypeName, NamesEveryElementType) {
  const std::pair<DType, const char*> names[] = {
      {DType::bf16, "bf16"}, {DType::f16, "f16"},   {DType::f32, "f32"},   {DType::f64, "f64"},
      {DType::i32, "i32"},   {DType::i64, "i64"},   {DType::u8, "u8"},     {DType::e4m3, "e4m3"},
      {DType::e5m2, "e5m2"}, {DType::e2m1, "e2m1"}};
  for (const auto& [t, name] : names) EXPECT_STREQ(dtype_name(t), name);
  EXPECT_EQ(std::size(kAllDTypes), std::size(names));
}

std::string long_name(DType t) { return std::string("long_") + dtype_name(t); }

TEST(DTypeName, RespellsWholeWordsOnly) {
  // Each name as a word of its own is replaced; inside a longer word, after a dot, or as a prefix it is not.
  EXPECT_EQ(respell_dtypes("x: expected dtype bf16 (the dtype of a), got f32", long_name),
            "x: expected dtype long_bf16 (the dtype of a), got long_f32");
  EXPECT_EQ(respell_dtypes("offsets: expected i32, got i64; I * sizeof(f16) for e4m3/e5m2/e2m1 or u8, f64",
                           long_name),
            "offsets: expected long_i32, got long_i64; I * sizeof(long_f16) for long_e4m3/long_e5m2/long_e2m1 or "
            "long_u8, long_f64");
  EXPECT_EQ(respell_dtypes("bias_f32 f32x bf16_t torch.f32 sm_90a bf1 f32", long_name),
            "bias_f32 f32x bf16_t torch.f32 sm_90a bf1 long_f32");
  EXPECT_EQ(respell_dtypes("", long_name), "");
}

}  // namespace
}  // namespace moegemm
