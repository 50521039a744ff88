// contract::check: one test per operand rule of docs/ops.md §0, each asserting the error code and that the
// message names the op, the operand, what was expected and what was given. Checks never dereference device
// pointers, so device operands here are views with made-up addresses.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/expect_error.hpp"
#include "contract/checks.hpp"
#include "contract/checks_pointers.hpp"
#include "contract/overlap.hpp"
#include "moegemm/moegemm.hpp"

namespace moegemm {
namespace {

using testing::expect_error;

/// 256-byte aligned host buffers (zero-filled; the checks read only the pointer tables).
class Arena {
 public:
  ~Arena() {
    for (void* p : blocks_) std::free(p);
  }
  void* take(std::size_t bytes) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    std::memset(p, 0, (bytes + 255) / 256 * 256 + 256);
    blocks_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> blocks_;
};

/// Builds operands on one device: real host memory, or made-up 256-byte aligned device addresses.
struct Maker {
  explicit Maker(Device d) : device(d) {}
  Device device;
  Arena arena;
  uintptr_t next_fake = 0x7f0000000000;

  void* memory(std::size_t bytes) {
    if (device == Device::host) return arena.take(bytes);
    void* p = reinterpret_cast<void*>(next_fake);
    next_fake += (bytes + 255) / 256 * 256 + 256;
    return p;
  }
  TensorView t(DType dtype, std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return TensorView::contiguous(memory(static_cast<std::size_t>(n) * dtype_size(dtype)), dtype, shape, device);
  }
};

constexpr int64_t kM = 96, kK = 64, kN = 128, kE = 8;

/// A valid grouped_gemm call on `m.device` with every optional operand.
GroupedGemmArgs grouped_gemm_args(Maker& m) {
  GroupedGemmArgs x;
  x.a = m.t(DType::bf16, {kM, kK});
  x.b.dense = m.t(DType::bf16, {kE, kN, kK});
  x.offsets = m.t(DType::i32, {kE});
  x.alpha = m.t(DType::f32, {kE});
  x.prob = m.t(DType::f32, {kM});
  x.bias = m.t(DType::f32, {kE, kN});
  x.d = m.t(DType::bf16, {kM, kN});
  x.c = m.t(DType::bf16, {kM, kN});
  return x;
}

GroupedGemmGluArgs glu_args(Maker& m, int64_t I = kN / 2) {
  GroupedGemmGluArgs x;
  x.a = m.t(DType::bf16, {kM, kK});
  x.b.dense = m.t(DType::bf16, {kE, 2 * I, kK});
  x.offsets = m.t(DType::i32, {kE});
  x.d = m.t(DType::bf16, {kM, I});
  x.c = m.t(DType::bf16, {kM, 2 * I});
  return x;
}

GroupedGemmDgluArgs dglu_args(Maker& m, int64_t I = kN / 2) {
  GroupedGemmDgluArgs x;
  x.a = m.t(DType::bf16, {kM, kK});
  x.b.dense = m.t(DType::bf16, {kE, I, kK});
  x.c = m.t(DType::bf16, {kM, 2 * I});
  x.offsets = m.t(DType::i32, {kE});
  x.alpha = m.t(DType::f32, {kE});
  x.beta = m.t(DType::f32, {kE});
  x.prob = m.t(DType::f32, {kM});
  x.dc = m.t(DType::bf16, {kM, 2 * I});
  x.dprob = m.t(DType::f32, {kM});
  x.dbias = m.t(DType::f32, {kE, 2 * I});
  x.amax = m.t(DType::f32, {2});
  return x;
}

GroupedGemmDsreluArgs dsrelu_args(Maker& m) {
  GroupedGemmDsreluArgs x;
  x.a = m.t(DType::bf16, {kM, kK});
  x.b.dense = m.t(DType::bf16, {kE, kN, kK});
  x.c = m.t(DType::bf16, {kM, kN});
  x.offsets = m.t(DType::i32, {kE});
  x.dc = m.t(DType::bf16, {kM, kN});
  x.dprob = m.t(DType::f32, {kM});
  x.dbias = m.t(DType::bf16, {kE, kN});
  x.amax = m.t(DType::f32, {1});
  return x;
}

GroupedGemmWgradArgs wgrad_args(Maker& m, int64_t H = 48, int64_t N = 80) {
  GroupedGemmWgradArgs x;
  x.x = m.t(DType::bf16, {kM, H});
  x.dy = m.t(DType::bf16, {kM, N});
  x.offsets = m.t(DType::i32, {kE});
  x.w = m.t(DType::f32, {kE, H, N});
  return x;
}

// ---- every op accepts a valid call, on both backends -------------------------------------------------

TEST(Contract, ValidCallsReturnTheirBackend) {
  for (Device dev : {Device::host, Device::cuda}) {
    Maker m{dev};
    EXPECT_EQ(contract::check(grouped_gemm_args(m)), dev);
    EXPECT_EQ(contract::check(glu_args(m)), dev);
    EXPECT_EQ(contract::check(dglu_args(m)), dev);
    EXPECT_EQ(contract::check(dsrelu_args(m)), dev);
    EXPECT_EQ(contract::check(wgrad_args(m)), dev);
    GroupedGemmSreluArgs s;
    const DType in = dev == Device::host ? DType::f16 : DType::bf16;  // f16 inputs run on the host only
    s.a = m.t(in, {kM, kK});
    s.b.dense = m.t(in, {kE, kK, kN});
    s.b.layout = BLayout::kn;
    s.offsets = m.t(DType::i32, {kE});
    s.d = m.t(DType::f32, {kM, kN});
    EXPECT_EQ(contract::check(s), dev);
    GemmSwigluArgs sw;
    sw.a = m.t(DType::bf16, {kM, kK});
    sw.b = m.t(DType::bf16, {kN, kK});
    sw.ab12 = m.t(DType::f32, {kM, kN});
    sw.c = m.t(DType::bf16, {kM, kN / 2});
    EXPECT_EQ(contract::check(sw), dev);
    GemmAmaxArgs am;
    am.a = m.t(DType::bf16, {kM, kK});
    am.b = m.t(DType::bf16, {kK, kN});
    am.b_layout = BLayout::kn;
    am.c = m.t(DType::bf16, {kM, kN});
    am.amax = m.t(DType::f32, {1});
    EXPECT_EQ(contract::check(am), dev);
    GemmSreluArgs gs;
    gs.a = m.t(DType::bf16, {kM, kK});
    gs.b = m.t(DType::bf16, {kN, kK});
    gs.prob = m.t(DType::f32, {kM});
    gs.d = m.t(DType::bf16, {kM, kN});
    EXPECT_EQ(contract::check(gs), dev);
    GemmDsreluArgs gd;
    gd.a = m.t(DType::bf16, {kM, kK});
    gd.b = m.t(DType::bf16, {kN, kK});
    gd.c = m.t(DType::bf16, {kM, kN});
    gd.dc = m.t(DType::bf16, {kM, kN});
    gd.dprob = m.t(DType::f32, {kM});
    EXPECT_EQ(contract::check(gd), dev);
  }
}

TEST(Contract, MessageFormatIsOpOperandExpectedGot) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.dense = m.t(DType::bf16, {kE, kN, 32});
  try {
    contract::check(x);
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "grouped_gemm: b: expected shape (E=8, N, K=64) with E from offsets, K from a, got (8, 128, 32)");
  }
}

// A hand-built view of rank > 4 or < 0 is rejected before its shape is read (it holds 4 extents), and a negative
// extent is named as such.
TEST(Contract, RanksOutsideOneToFourAndNegativeExtentsAreNamed) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a.rank = 7;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected a tensor of rank 1 to 4", "got rank 7"});
  auto y = grouped_gemm_args(m);
  y.a.shape[0] = -16;
  expect_error([&] { contract::check(y); }, ErrorCode::invalid_argument, {"grouped_gemm: a:", "(a negative extent)"});
  // A negative rank is refused by name, a required operand's and an optional one's: it passed for an absent
  // operand, so that a given prob was dropped and a given c never written.
  for (int rank : {-1, std::numeric_limits<int>::min()}) {
    auto z = grouped_gemm_args(m);
    z.a.rank = rank;
    expect_error([&] { contract::check(z); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected a tensor of rank 1 to 4", "got rank " + std::to_string(rank)});
  }
  auto w = grouped_gemm_args(m);
  w.prob = m.t(DType::f32, {kM});
  w.prob.rank = -1;
  expect_error([&] { contract::check(w); }, ErrorCode::invalid_argument,
               {"grouped_gemm: prob: expected a tensor of rank 1 to 4", "got rank -1"});
}

// The factories store at most four extents and strides: a longer list neither writes past the view's arrays
// (it overwrote the strides and the device before) nor loses its rank, which every op then rejects.
TEST(Contract, FactoriesKeepLongShapesInBoundsAndRejectable) {
  void* const p = reinterpret_cast<void*>(0x7f0000000000);
  // One stride per dim, no more and no fewer (a short list used to keep row-major strides for the rest).
  for (auto strides : {std::initializer_list<int64_t>{kK, 1, 7, 7, 7, 7}, std::initializer_list<int64_t>{kK}})
    expect_error([&] { (void)TensorView::strided(p, DType::bf16, {kM, kK}, strides, Device::cuda); },
                 ErrorCode::invalid_argument,
                 {"TensorView::strided: strides: expected one per dim (2), got " + std::to_string(strides.size())});
  const TensorView v = TensorView::strided(p, DType::bf16, {1, 2, 2, 2, 8}, {64, 32, 16, 8, 1}, Device::cuda);
  EXPECT_EQ(v.rank, 5);
  EXPECT_EQ(v.strides[3], 8);  // the first four strides stored, the fifth not written past the array
  EXPECT_EQ(v.device, Device::cuda);
  // Products past int64 saturate (they overflowed, undefined in this inline code): every op refuses the view.
  const int64_t big = int64_t(1) << 40, most = std::numeric_limits<int64_t>::max();
  const TensorView huge = TensorView::contiguous(p, DType::bf16, {big, big, big, 2}, Device::cuda);
  EXPECT_EQ(huge.strides[0], most);
  EXPECT_EQ(huge.strides[1], 2 * big);
  EXPECT_EQ(huge.numel(), most);
  EXPECT_TRUE(huge.is_contiguous());
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a = TensorView::contiguous(x.a.data, DType::bf16, {1, 2, 2, 2, 8}, Device::cuda);
  EXPECT_EQ(x.a.rank, 5);
  EXPECT_EQ(x.a.strides[0], 8);  // the first four extents' row-major strides, untouched by the fifth
  EXPECT_EQ(x.a.device, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected a tensor of rank 1 to 4", "got rank 5"});
  // The view's own helpers read the extents it stores, not past them.
  EXPECT_EQ(x.a.stored_rank(), 4);
  EXPECT_EQ(x.a.numel(), 8);
  EXPECT_TRUE(x.a.is_contiguous());
  EXPECT_FALSE(x.a.is_column_major());
}

// ---- dtypes --------------------------------------------------------------------------------------------

TEST(Contract, InputsMustBeBf16OnDevice) {
  // The sm_90a kernels take bf16 inputs: f16, f32 and f64 are refused by the contract, so the workspace query
  // (pointer rules ignored) refuses them too, before any launch.
  for (DType t : {DType::f16, DType::f32, DType::f64}) {
    for (auto pointers : {contract::Pointers::check, contract::Pointers::ignore}) {
      Maker m{Device::cuda};
      auto x = grouped_gemm_args(m);
      x.a.dtype = t;
      x.b.dense.dtype = t;
      expect_error([&] { contract::check(x, pointers); }, ErrorCode::unsupported,
                   {"grouped_gemm: a: expected bf16 on the cuda backend", "only when every tensor is on the host",
                    std::string("got ") + dtype_name(t)});
      auto w = wgrad_args(m);
      w.x.dtype = t;
      w.dy.dtype = t;
      expect_error([&] { contract::check(w, pointers); }, ErrorCode::unsupported,
                   {"grouped_gemm_wgrad: x: expected bf16 on the cuda backend", std::string("got ") + dtype_name(t)});
    }
  }
}

TEST(Contract, F32AndF64InputsAcceptedOnHost) {
  for (DType t : {DType::f32, DType::f64}) {
    Maker m{Device::host};
    auto x = grouped_gemm_args(m);
    x.a = m.t(t, {kM, kK});
    x.b.dense = m.t(t, {kE, kN, kK});
    x.d = m.t(t, {kM, kN});
    EXPECT_EQ(contract::check(x), Device::host) << dtype_name(t);
  }
}

TEST(Contract, EightBitInputsAreUnsupported) {
  for (DType t : {DType::e4m3, DType::e5m2}) {
    Maker m{Device::cuda};
    auto x = grouped_gemm_args(m);
    x.a.dtype = t;
    expect_error([&] { contract::check(x); }, ErrorCode::unsupported,
                 {"grouped_gemm: a:", "8-bit inputs are not supported yet", std::string("got ") + dtype_name(t)});
  }
}

TEST(Contract, Fp4InputsAreUnsupported) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a.dtype = DType::e2m1;
  expect_error([&] { contract::check(x); }, ErrorCode::unsupported,
               {"grouped_gemm: a:", "FP4 has no tensor-core path on sm_90", "got e2m1"});
}

TEST(Contract, IntegerInputsAreInvalid) {
  Maker m{Device::host};
  auto x = grouped_gemm_args(m);
  x.a.dtype = DType::i32;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected dtype bf16, f16, f32 or f64", "got i32"});
}

TEST(Contract, WeightsMustMatchTheDtypeOfA) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.dense.dtype = DType::f16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected dtype bf16 (the dtype of a)", "got f16"});
}

TEST(Contract, OutputDtypes) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.d.dtype = DType::i32;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected dtype bf16, f16 or f32", "got i32"});
  x = grouped_gemm_args(m);
  x.c.dtype = DType::f64;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: c: expected dtype", "f64 only on the host backend", "got f64"});
  Maker h{Device::host};
  auto y = grouped_gemm_args(h);
  y.d = h.t(DType::f64, {kM, kN});
  EXPECT_EQ(contract::check(y), Device::host);
}

TEST(Contract, OffsetsMustBeInt32Vector) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.offsets.dtype = DType::i64;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets: expected dtype i32", "got i64"});
  x = grouped_gemm_args(m);
  x.offsets = m.t(DType::i32, {kE, 1});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets: expected shape (E,)", "got (8, 1)"});
  x = grouped_gemm_args(m);
  x.offsets = TensorView{};
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets: expected shape (E,)", "got none"});
}

TEST(Contract, ExpertCountBetweenOneAndMax) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.offsets = m.t(DType::i32, {0});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets: expected 1 <= E <= 1024 experts", "got E=0"});
  GroupedGemmArgs big;
  big.a = m.t(DType::bf16, {kM, kK});
  big.b.dense = m.t(DType::bf16, {kMaxExperts + 1, 16, kK});
  big.offsets = m.t(DType::i32, {kMaxExperts + 1});
  big.d = m.t(DType::bf16, {kM, 16});
  expect_error([&] { contract::check(big); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets: expected 1 <= E <= 1024", "got E=1025"});
  big.b.dense = m.t(DType::bf16, {kMaxExperts, 16, kK});
  big.offsets = m.t(DType::i32, {kMaxExperts});
  EXPECT_EQ(contract::check(big), Device::cuda);
}

TEST(Contract, AlphaAndBetaArePerExpertF32) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.alpha = m.t(DType::f32, {kE + 1});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: alpha: expected shape (E=8,) with E from offsets", "got (9,)"});
  x = grouped_gemm_args(m);
  x.alpha.dtype = DType::bf16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: alpha: expected dtype f32", "got bf16"});
  auto d = dglu_args(m);
  d.beta = m.t(DType::f64, {kE});
  expect_error([&] { contract::check(d); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: beta: expected dtype f32", "got f64"});
}

TEST(Contract, ProbIsPerRowF32) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.prob = m.t(DType::f32, {kM + 1});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: prob: expected shape (M=96,) with M from a", "got (97,)"});
  x = grouped_gemm_args(m);
  x.prob.dtype = DType::bf16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: prob: expected dtype f32", "got bf16"});
}

TEST(Contract, BiasIsPerExpertRow) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.bias = m.t(DType::f32, {kE, kN + 8});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: bias: expected shape (E=8, N=128)", "got (8, 136)"});
  x = grouped_gemm_args(m);
  x.bias.dtype = DType::f16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: bias: expected dtype bf16 or f32", "got f16"});
  x = grouped_gemm_args(m);
  x.bias.dtype = DType::f64;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm: bias:", "got f64"});
  Maker h{Device::host};
  auto y = grouped_gemm_args(h);
  y.bias = h.t(DType::f64, {kE, kN});
  EXPECT_EQ(contract::check(y), Device::host);
}

TEST(Contract, BackwardSideOutputs) {
  Maker m{Device::cuda};
  auto x = dglu_args(m);
  x.dprob.dtype = DType::bf16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: dprob: expected dtype f32", "got bf16"});
  x = dglu_args(m);
  x.dbias.dtype = DType::f16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: dbias: expected dtype f32 or bf16", "got f16"});
  x = dglu_args(m);
  x.dbias = m.t(DType::f32, {kE, kN / 2});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: dbias: expected shape (E=8, 2I=128)", "got (8, 64)"});
  x = dglu_args(m);
  x.amax = m.t(DType::f32, {1});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: amax: expected shape (2,)", "got (1,)"});
  auto s = dsrelu_args(m);
  s.amax = m.t(DType::f32, {2});
  expect_error([&] { contract::check(s); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dsrelu: amax: expected shape (1,)", "got (2,)"});
  s = dsrelu_args(m);
  s.amax.dtype = DType::bf16;
  expect_error([&] { contract::check(s); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dsrelu: amax: expected dtype f32", "got bf16"});
}

// ---- shapes ----------------------------------------------------------------------------------------------

TEST(Contract, OutputShapesFollowAAndB) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.d = m.t(DType::bf16, {kM, kN + 8});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected shape (M=96, N=128) with M from a, N from b", "got (96, 136)"});
  x = grouped_gemm_args(m);
  x.c = m.t(DType::bf16, {kM - 1, kN});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: c: expected shape (M=96, N=128)", "got (95, 128)"});
  x = grouped_gemm_args(m);
  x.d = TensorView{};
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected shape (M=96, N=128)", "got none"});
}

TEST(Contract, WeightsShapeFollowsLayout) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.layout = BLayout::kn;  // (E, N, K) storage declared as (E, K, N): K=128 != a's 64
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected shape (E=8, K=64, N) with E from offsets, K from a", "got (8, 128, 64)"});
  x = grouped_gemm_args(m);
  x.b.dense = m.t(DType::bf16, {kE - 1, kN, kK});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected shape (E=8, N, K=64)", "got (7, 128, 64)"});
}

TEST(Contract, RowsMayBeZeroButNotColumns) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a = m.t(DType::bf16, {0, kK});
  x.prob = m.t(DType::f32, {0});
  x.d = m.t(DType::bf16, {0, kN});
  x.c = m.t(DType::bf16, {0, kN});
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.a.data = nullptr;  // an empty tensor needs no memory
  EXPECT_EQ(contract::check(x), Device::cuda);

  x = grouped_gemm_args(m);
  x.a = m.t(DType::bf16, {kM, 0});
  x.b.dense = m.t(DType::bf16, {kE, kN, 0});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm: a: expected K > 0", "got K=0"});
  x = grouped_gemm_args(m);
  x.b.dense = m.t(DType::bf16, {kE, 0, kK});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm: b: expected N > 0", "got N=0"});
}

TEST(Contract, GluNeedsN2IAndItsLayoutRules) {
  Maker m{Device::cuda};
  // interleaved32 pairs 32-column blocks: N = 2I must be a multiple of 64.
  auto x = glu_args(m, 48);
  x.glu.layout = GluLayout::interleaved32;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: b: expected 2I = N a multiple of 64 for glu layout interleaved32",
                "(alternating 32-column gate and up blocks)", "got N=96"});
  x.glu.layout = GluLayout::interleaved32_up_first;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"interleaved32_up_first (alternating 32-column up and gate blocks)", "got N=96"});
  x = glu_args(m, 64);
  x.glu.layout = GluLayout::interleaved32;
  EXPECT_EQ(contract::check(x), Device::cuda);
  // halves: the up half starts at column I, 16-byte aligned in 16-bit outputs: I % 8 == 0.
  x = glu_args(m, 12);
  // The error names b, the operand whose N sets I, and the tensor whose dtype asks for the alignment.
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: b: expected I = N/2 with I * sizeof(bf16) a multiple of 16 bytes",
                "in d of dtype bf16", "I % 8 == 0 for bf16", "got N=24 (I=12)"});
  x.d = m.t(DType::f32, {kM, 12});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: b: expected I = N/2 with I * sizeof(bf16)", "in c of dtype bf16", "got N=24 (I=12)"});
  x.c = m.t(DType::f32, {kM, 24});
  EXPECT_EQ(contract::check(x), Device::cuda);  // f32 outputs need only I % 4
  // dGLU: b's N is I itself. f32 operands on the host pass b's own rule at I = 4; the bf16 c does not.
  Maker host{Device::host};
  auto dg = dglu_args(host, 4);
  dg.a = host.t(DType::f32, {kM, kK});
  dg.b.dense = host.t(DType::f32, {kE, 4, kK});
  dg.dc = host.t(DType::f32, {kM, 8});
  expect_error([&] { contract::check(dg); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: b: expected I = N with I * sizeof(bf16)", "in c of dtype bf16", "got N=4 (I=4)"});
  dg.c = host.t(DType::f32, {kM, 8});
  EXPECT_EQ(contract::check(dg), Device::host);
  // Interleaved dGLU: b's N is I, c's 2I = 2N columns pair 32-column blocks; both are named.
  dg = dglu_args(m, 16);
  dg.glu.layout = GluLayout::interleaved32;
  expect_error([&] { contract::check(dg); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: b: expected 2I = 2N, c's columns, a multiple of 64 for glu layout interleaved32",
                "got N=16 (2I=32)"});
  // d has I columns, c has 2I.
  x = glu_args(m);
  x.d = m.t(DType::bf16, {kM, kN});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: d: expected shape (M=96, I=64)", "got (96, 128)"});
}

TEST(Contract, ClampedSwigluNeedsPositiveLimit) {
  Maker m{Device::cuda};
  auto x = glu_args(m);
  x.glu.activation = Activation::swiglu_clamped;
  x.glu.limit = 0.0f;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: limit: expected a positive clamp limit", "got 0"});
  // The limit is printed as given, in the shortest form that reads back, with no locale involved.
  for (const auto& [limit, text] : {std::pair{-2.5f, "got -2.5"}, std::pair{-1e-30f, "got -1e-30"},
                                    std::pair{std::numeric_limits<float>::quiet_NaN(), "got nan"},
                                    std::pair{-std::numeric_limits<float>::infinity(), "got -inf"}}) {
    x.glu.limit = limit;
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {std::string(text)});
  }
  x.glu.limit = 1e-30f;
  EXPECT_EQ(contract::check(x), Device::cuda);
}

TEST(Contract, ClampedSwigluNeedsFiniteAlphaAndOffset) {
  Maker m{Device::cuda};
  auto x = glu_args(m);
  x.glu.activation = Activation::swiglu_clamped;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  x.glu.act_alpha = nan;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: act_alpha: expected a finite act_alpha for swiglu_clamped", "got nan"});
  x.glu.act_alpha = -inf;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"act_alpha", "got -inf"});
  x.glu.act_alpha = -3.5f;  // any finite value is a valid slope
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.glu.linear_offset = inf;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: linear_offset: expected a finite linear_offset for swiglu_clamped", "got inf"});
  // The dGLU takes the same parameters through the same check.
  auto dg = dglu_args(m);
  dg.glu.activation = Activation::swiglu_clamped;
  dg.glu.linear_offset = nan;
  expect_error([&] { contract::check(dg); }, ErrorCode::invalid_argument, {"grouped_gemm_dglu: linear_offset"});
  // The other activations ignore them.
  x.glu.activation = Activation::swiglu;
  EXPECT_EQ(contract::check(x), Device::cuda);
}

TEST(Contract, DgluShapesFollowI) {
  Maker m{Device::cuda};
  auto x = dglu_args(m);
  x.c = m.t(DType::bf16, {kM, kN / 2});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: c: expected shape (M=96, 2I=128)", "got (96, 64)"});
  x = dglu_args(m);
  x.c = TensorView{};
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: c: expected a tensor of shape (M, 2I)", "got none"});
  x = dglu_args(m);
  x.dc = m.t(DType::bf16, {kM + 1, kN});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: dc: expected shape (M=96, 2I=128)", "got (97, 128)"});
}

// ---- weights storage -------------------------------------------------------------------------------------

TEST(Contract, ExactlyOneWeightStorage) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.ptrs = m.t(DType::i64, {kE});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected exactly one of b.dense or b.ptrs", "got both"});
  x.b.dense = TensorView{};
  x.b.ptrs = TensorView{};
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected exactly one of b.dense or b.ptrs", "got neither"});
}

TEST(Contract, PointerModeOperands) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.dense = TensorView{};
  x.b.ptrs = m.t(DType::i64, {kE});
  x.b.n = kN;
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.b.n = 0;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm: b.n: expected N > 0", "got N=0"});
  x.b.n = kN;
  x.b.dtype = DType::f16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b.dtype: expected dtype bf16 (the dtype of a)", "got f16"});
  x.b.dtype = DType::bf16;
  x.b.ptrs = m.t(DType::i32, {kE});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b.ptrs: expected dtype i64", "got i32"});
  x.b.ptrs = m.t(DType::i64, {kE + 1});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b.ptrs: expected shape (E=8,) with E from offsets", "got (9,)"});
  x.b.ptrs = m.t(DType::i64, {kE});
  x.b.n = 33;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected N * sizeof(bf16) a multiple of 16 bytes", "got N=33"});
}

// The matrices behind a pointer table obey the 2^62-byte rule of every operand (rule 4), also where no other
// operand bounds them (no rows): b.n past it used to overflow the dGLU's 2I and the GLU's I * sizeof(d).
TEST(Contract, PointerTableMatricesSpanAtMost2To62Bytes) {
  const auto none = [](DType t, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(nullptr, t, shape, Device::host);
  };
  const int64_t huge = std::numeric_limits<int64_t>::max() - 7;
  GroupedGemmDgluArgs dglu;
  dglu.a = none(DType::bf16, {0, 8});
  dglu.offsets = none(DType::i32, {1});
  dglu.b.ptrs = none(DType::i64, {1});
  dglu.b.n = huge;
  dglu.c = none(DType::bf16, {0, 16});
  dglu.dc = none(DType::bf16, {0, 16});
  expect_error([&] { contract::check(dglu, contract::Pointers::ignore); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: b.ptrs: expected each matrix it points to, (N, K) of bf16, at most 2^62 bytes "
                "(its sizes multiplied)", "got (N=9223372036854775800, K=8)"});
  GroupedGemmGluArgs glu;
  glu.a = none(DType::bf16, {0, 8});
  glu.offsets = none(DType::i32, {1});
  glu.b.ptrs = none(DType::i64, {1});
  glu.b.layout = BLayout::kn;
  glu.b.n = int64_t{1} << 62;
  glu.d = none(DType::f32, {0, int64_t{1} << 61});
  expect_error([&] { contract::check(glu, contract::Pointers::ignore); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: b.ptrs: expected each matrix it points to, (K, N) of bf16",
                "got (K=8, N=4611686018427387904)"});
  glu.b.n = int64_t{1} << 58;  // 2^58 x 8 x 2 bytes: at the limit, accepted (an I of 2^57 columns of f32 d)
  glu.d = none(DType::f32, {0, int64_t{1} << 57});
  EXPECT_EQ(contract::check(glu, contract::Pointers::ignore), Device::host);
  GroupedGemmWgradArgs wgrad;
  wgrad.x = none(DType::bf16, {0, int64_t{1} << 40});
  wgrad.dy = none(DType::bf16, {0, int64_t{1} << 40});
  wgrad.offsets = none(DType::i32, {1});
  wgrad.w_ptrs = none(DType::i64, {1});
  expect_error([&] { contract::check(wgrad, contract::Pointers::ignore); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_ptrs: expected each matrix it points to, (H, N) of f32",
                "got (H=1099511627776, N=1099511627776)"});
  wgrad.transpose_output = true;
  expect_error([&] { contract::check(wgrad, contract::Pointers::ignore); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_ptrs: expected each matrix it points to, (N, H) of f32"});
}

TEST(Contract, HostPointerTableEntriesAreCheckedOnHost) {
  Maker m{Device::host};
  auto x = grouped_gemm_args(m);
  x.b.dense = TensorView{};
  x.b.ptrs = m.t(DType::i64, {kE});
  x.b.n = kN;
  auto* table = x.b.ptrs.ptr<int64_t>();
  for (int64_t g = 0; g < kE; ++g) table[g] = reinterpret_cast<int64_t>(m.memory(kN * kK * 2));
  EXPECT_EQ(contract::check(x), Device::host);
  table[2] = 0;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b.ptrs: expected a non-null, 16-byte aligned address in every entry", "got b.ptrs[2]"});
  table[2] = reinterpret_cast<int64_t>(m.memory(kN * kK * 2)) + 8;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b.ptrs:", "16-byte alignment rule", "got b.ptrs[2]"});
}

// ---- layout (C13) ------------------------------------------------------------------------------------------

TEST(Contract, TransposedViewsAreRejected) {
  // Outputs, and A of every op but grouped_gemm (Contract.ColumnMajorA).
  Maker m{Device::cuda};
  auto glu = glu_args(m);
  glu.a = TensorView::strided(glu.a.data, DType::bf16, {kM, kK}, {1, kM}, Device::cuda);
  expect_error([&] { contract::check(glu); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: a: expected a row-major matrix with unit column stride", "got strides (1, 96)"});
  auto x = grouped_gemm_args(m);
  x.d = TensorView::strided(x.d.data, DType::bf16, {kM, kN}, {1, kM}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected a row-major matrix", "got strides (1, 96)"});
}

TEST(Contract, OneRowWithColumnsApartIsRejected) {
  // A single row takes any row stride, but its columns are read contiguously: a column stride of 2 is refused
  // (read as 1, the row's elements would be taken from the wrong places).
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    x.a = m.t(DType::bf16, {1, kK});
    x.prob = m.t(DType::f32, {1});
    x.c = m.t(DType::bf16, {1, kN});
    x.d = TensorView::strided(m.memory(2 * kN * 2), DType::bf16, {1, kN}, {2 * kN, 2}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: d: expected a row-major matrix with unit column stride", "got strides (256, 2)"});
    x.d = m.t(DType::bf16, {1, kN});
    x.c = TensorView::strided(m.memory(2 * kN * 2), DType::bf16, {1, kN}, {2 * kN, 2}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: c: expected a row-major matrix with unit column stride", "got strides (256, 2)"});
  }
}

TEST(Contract, OverlappingRowsAreRejected) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.d = TensorView::strided(x.d.data, DType::bf16, {kM, kN}, {kN - 8, 1}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected row stride stride(0) >= N=128", "got stride(0)=120"});
}

TEST(Contract, OneRowMatricesTakeAnyRowStride) {
  // A (1, cols) view's row stride addresses nothing (torch gives size-1 dims arbitrary strides, e.g. the
  // transpose of a (K, 1) column): neither overlapping rows nor the 16-byte rule apply to it.
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a = TensorView::strided(m.t(DType::bf16, {1, kK}).data, DType::bf16, {1, kK}, {1, 1}, Device::cuda);
  x.prob = m.t(DType::f32, {1});
  x.d = TensorView::strided(m.t(DType::bf16, {1, kN}).data, DType::bf16, {1, kN}, {kN + 3, 1}, Device::cuda);
  x.c = TensorView::strided(m.t(DType::bf16, {1, kN}).data, DType::bf16, {1, kN}, {7, 1}, Device::cuda);
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.a = TensorView::strided(x.a.data, DType::bf16, {2, kK}, {1, 1}, Device::cuda);  // two rows: rejected
  x.prob = m.t(DType::f32, {2});
  x.d = m.t(DType::bf16, {2, kN});
  x.c = m.t(DType::bf16, {2, kN});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected row stride stride(0) >= K=64", "got stride(0)=1"});
}

TEST(Contract, EmptyMatricesTakeAnyStrides) {
  // M = 0: a (0, cols) view reads nothing, whatever its strides (autograd hands out empty gradients with
  // all-zero strides); with rows, a column stride other than 1 is still a transposed view.
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a = TensorView::strided(x.a.data, DType::bf16, {0, kK}, {0, 0}, Device::cuda);
  x.prob = m.t(DType::f32, {0});
  x.d = TensorView::strided(x.d.data, DType::bf16, {0, kN}, {0, 0}, Device::cuda);
  x.c = TensorView::strided(x.c.data, DType::bf16, {0, kN}, {1, 0}, Device::cuda);
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.a = TensorView::strided(x.a.data, DType::bf16, {1, kK}, {kK, 0}, Device::cuda);
  x.prob = m.t(DType::f32, {1});
  x.d = m.t(DType::bf16, {1, kN});
  x.c = m.t(DType::bf16, {1, kN});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected a row-major matrix (stride(1) == 1) or, with more than one row, a "
                "column-major one",
                "got strides (64, 0)"});
}

TEST(Contract, PaddedRowsAreAccepted) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a = TensorView::strided(m.memory(kM * (kK + 64) * 2), DType::bf16, {kM, kK}, {kK + 64, 1}, Device::cuda);
  x.d = TensorView::strided(m.memory(kM * (kN + 8) * 2), DType::bf16, {kM, kN}, {kN + 8, 1}, Device::cuda);
  EXPECT_EQ(contract::check(x), Device::cuda);
}

TEST(Contract, ExpertsInnermostWeightsAreRejected) {  // C13
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.dense = TensorView::strided(x.b.dense.data, DType::bf16, {kE, kN, kK}, {1, kK * kE, kE}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected unit stride in its last dim (stride(2) == 1: rows of K contiguous "
                "elements; a view whose last dim is strided, such as experts innermost, is not read)",
                "got strides (1, 512, 8)"});
  auto w = wgrad_args(m);
  w.w = TensorView::strided(w.w.data, DType::f32, {kE, 48, 80}, {1, 80 * kE, kE}, Device::cuda);
  expect_error([&] { contract::check(w); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w: expected a contiguous row-major tensor", "got strides (1, 640, 8)"});
  // Padded rows or experts: row-major but not packed, named as such.
  for (auto strides : {std::initializer_list<int64_t>{48 * 96, 96, 1}, {2 * 48 * 80, 80, 1}}) {
    w.w = TensorView::strided(w.w.data, DType::f32, {kE, 48, 80}, strides, Device::cuda);
    expect_error([&] { contract::check(w); }, ErrorCode::invalid_argument,
                 {"grouped_gemm_wgrad: w: expected a contiguous row-major tensor (packed, experts outermost: no gap "
                  "between rows or experts, no transposed or permuted view)"});
  }
}

TEST(Contract, VectorsMustBeContiguous) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.prob = TensorView::strided(x.prob.data, DType::f32, {kM}, {2}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: prob: expected a contiguous vector (stride(0) == 1)", "got stride(0)=2"});
  x = grouped_gemm_args(m);
  x.offsets = TensorView::strided(x.offsets.data, DType::i32, {kE}, {2}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm: offsets: expected a contiguous vector"});
}

// ---- the 16-byte rule (C08) --------------------------------------------------------------------------------

TEST(Contract, C08_NotAMultipleOf8ColumnsIsAClearError) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.dense = m.t(DType::bf16, {kE, 33, kK});
  x.bias = TensorView{};
  x.d = m.t(DType::bf16, {kM, 33});
  x.c = TensorView{};
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected N * sizeof(bf16) a multiple of 16 bytes",
                "16-byte alignment rule: N % 8 == 0 for bf16", "got N=33 (66 bytes)"});
  x = grouped_gemm_args(m);
  x.a = m.t(DType::bf16, {kM, 33});
  x.b.dense = m.t(DType::bf16, {kE, kN, 33});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected K * sizeof(bf16) a multiple of 16 bytes",
                "16-byte alignment rule: K % 8 == 0 for bf16", "got K=33 (66 bytes)"});
}

TEST(Contract, SixteenByteRuleOfAnExtentPastInt64BytesNamesNoByteCount) {
  // K = 2^63 - 1 bf16 columns: not a multiple of 8, and its bytes do not fit in int64 (the count was once
  // printed as "-2 bytes", from a product that overflowed). An empty a, so that no storage is implied.
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  x.a = TensorView::strided(x.a.data, DType::bf16, {0, kHuge}, {kHuge, 1}, Device::cuda);
  try {
    contract::check(x);
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("grouped_gemm: a: expected K * sizeof(bf16) a multiple of 16 bytes"), std::string::npos)
        << what;
    EXPECT_NE(what.find("got K=9223372036854775807"), std::string::npos) << what;
    EXPECT_EQ(what.find("bytes)"), std::string::npos) << what;
  }
  // A row stride past int64 bytes: refused as reaching past 2^62 bytes, in elements (no byte count).
  x = grouped_gemm_args(m);
  x.a = TensorView::strided(x.a.data, DType::bf16, {kM, kK}, {kHuge, 1}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected strides that reach at most 2^62 bytes",
                "got strides (9223372036854775807, 1) with shape (96, 64) of bf16"});
}

TEST(Contract, SixteenByteRuleHoldsOnTheHostToo) {
  Maker m{Device::host};
  auto x = grouped_gemm_args(m);
  x.a = m.t(DType::bf16, {kM, 36});
  x.b.dense = m.t(DType::bf16, {kE, kN, 36});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a:", "16-byte alignment rule", "got K=36 (72 bytes)"});
  // f32 inputs on the host: K % 4 suffices.
  x.a = m.t(DType::f32, {kM, 36});
  x.b.dense = m.t(DType::f32, {kE, kN, 36});
  EXPECT_EQ(contract::check(x), Device::host);
}

TEST(Contract, RowStrideMustBeAMultipleOf16Bytes) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a = TensorView::strided(x.a.data, DType::bf16, {kM, kK}, {kK + 4, 1}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected a row stride that is a multiple of 16 bytes (16-byte alignment rule)",
                "got stride(0)=68 elements (136 bytes)"});
}

// The 16-byte rule on the row stride holds from two rows on (a single row's stride addresses nothing): two tokens
// of a padded activation, a[:, :K] of a (2, K + 4) tensor, are refused as 96 are.
TEST(Contract, RowStrideRuleHoldsForTwoRows) {
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    x.prob = TensorView{};
    x.a = TensorView::strided(x.a.data, DType::bf16, {2, kK}, {kK + 4, 1}, dev);
    x.d = TensorView::contiguous(x.d.data, DType::bf16, {2, kN}, dev);
    x.c = TensorView::contiguous(x.c.data, DType::bf16, {2, kN}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected a row stride that is a multiple of 16 bytes (16-byte alignment rule)",
                  "got stride(0)=68 elements (136 bytes)"});
    x.a = TensorView::strided(x.a.data, DType::bf16, {2, kK}, {kK + 8, 1}, dev);  // padded by 16 bytes: taken
    EXPECT_EQ(contract::check(x), dev);
  }
}

TEST(Contract, BaseAddressesMustBe16ByteAligned) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.d.data = static_cast<char*>(x.d.data) + 8;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected a 16-byte aligned base address (16-byte alignment rule)", "got 0x"});
  x = grouped_gemm_args(m);
  x.b.dense.data = static_cast<char*>(x.b.dense.data) + 2;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b: expected a 16-byte aligned base address"});
  x = grouped_gemm_args(m);
  x.prob.data = static_cast<char*>(x.prob.data) + 2;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: prob: expected a base address aligned to 4 bytes"});
  x = grouped_gemm_args(m);
  x.a.data = nullptr;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: a: expected a non-null data pointer", "got nullptr"});
}

// ---- no aliasing (rule 9) ------------------------------------------------------------------------------------

/// A view at a made-up address (views_overlap reads no memory).
TensorView at(uintptr_t address, DType dtype, std::initializer_list<int64_t> shape,
              std::initializer_list<int64_t> strides) {
  return TensorView::strided(reinterpret_cast<void*>(address), dtype, shape, strides, Device::cuda);
}

TEST(Contract, PaddedMatricesOverlapExactlyWhateverTheirPitches) {
  // Random pairs of row-major views (contiguous, padded, one row) at random byte offsets and pitches, equal
  // or not, against the bytes they cover.
  std::mt19937 rng(7);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int overlaps = 0, disjoint = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    int64_t rows[2], cols[2], pitch[2], offset[2];
    std::set<int64_t> bytes[2];
    for (int v = 0; v < 2; ++v) {
      rows[v] = pick(1, 9);
      cols[v] = pick(1, 8);
      pitch[v] = cols[v] + (pick(0, 3) == 0 ? 0 : pick(1, 12));  // elements of 2 bytes
      offset[v] = pick(0, 240);
      for (int64_t r = 0; r < rows[v]; ++r) {
        for (int64_t b = 0; b < 2 * cols[v]; ++b) bytes[v].insert(offset[v] + 2 * pitch[v] * r + b);
      }
    }
    bool expected = false;
    for (int64_t b : bytes[0]) expected = expected || bytes[1].count(b) > 0;
    const TensorView x = at(0x10000 + offset[0], DType::bf16, {rows[0], cols[0]}, {pitch[0], 1});
    const TensorView y = at(0x10000 + offset[1], DType::bf16, {rows[1], cols[1]}, {pitch[1], 1});
    ASSERT_EQ(contract::views_overlap(x, y), expected)
        << "x: " << rows[0] << " x " << cols[0] << " at +" << offset[0] << ", pitch " << pitch[0] << "; y: " << rows[1]
        << " x " << cols[1] << " at +" << offset[1] << ", pitch " << pitch[1];
    ASSERT_EQ(contract::views_overlap(y, x), expected);
    (expected ? overlaps : disjoint) += 1;
  }
  EXPECT_GT(overlaps, 2000);  // both outcomes are well represented
  EXPECT_GT(disjoint, 2000);
  // Long matrices: rows of 16 bytes at pitches of 4096 and 4104 bytes. y's row s starts 16 + 8 s bytes past a
  // row of x (modulo 4096), so its rows 0-508 lie in x's padding and row 509 (at 4088) reaches x's next row.
  const uintptr_t base = 0x100000;
  const TensorView long_x = at(base, DType::bf16, {1 << 22, 8}, {2048, 1});
  EXPECT_FALSE(contract::views_overlap(long_x, at(base + 4096 * 3 + 16, DType::bf16, {509, 8}, {2052, 1})));
  EXPECT_TRUE(contract::views_overlap(long_x, at(base + 4096 * 3 + 16, DType::bf16, {510, 8}, {2052, 1})));
  EXPECT_TRUE(contract::views_overlap(at(base + 4096 * 3 + 16, DType::bf16, {1 << 20, 8}, {2052, 1}), long_x));
  // A row stride of 2^62 bytes, the most the rules admit, is still compared row by row: y lies between x's rows.
  constexpr int64_t k2To61 = int64_t{1} << 61;
  const TensorView between = at(base + 16, DType::bf16, {2, 8}, {16, 1});
  EXPECT_FALSE(contract::views_overlap(at(base, DType::bf16, {2, 1}, {k2To61, 1}), between));
  EXPECT_TRUE(contract::views_overlap(at(base, DType::bf16, {2, 9}, {k2To61, 1}), between));
  // Past what the rules admit, extents whose bytes pass 2^127 reach past every byte (no overflow): a
  // column-major (2^62, 2^62) f64 view, an f64 vector of INT64_MAX elements at that stride.
  constexpr int64_t k2To62 = int64_t{1} << 62, kMax = std::numeric_limits<int64_t>::max();
  const TensorView later = at(0x5000, DType::bf16, {4}, {1});
  EXPECT_TRUE(contract::views_overlap(at(0x1000, DType::f64, {k2To62, k2To62}, {1, k2To62}), later));
  EXPECT_TRUE(contract::views_overlap(at(0x1000, DType::f64, {kMax}, {kMax}), later));
}

TEST(Contract, ViewsOverlapOnlyWhereTheyShareAByte) {
  using contract::views_overlap;
  constexpr uintptr_t base = 0x10000;
  // Contiguous ranges: adjacent ones are disjoint, one shared byte is an overlap.
  const TensorView v = at(base, DType::f32, {16}, {1});  // [base, base + 64)
  EXPECT_FALSE(views_overlap(v, at(base + 64, DType::f32, {4}, {1})));
  EXPECT_FALSE(views_overlap(v, at(base - 16, DType::f32, {4}, {1})));  // ends where v starts
  EXPECT_TRUE(views_overlap(v, at(base + 60, DType::bf16, {8}, {1})));
  EXPECT_TRUE(views_overlap(at(base + 16, DType::f32, {2}, {1}), v));  // inside
  // Two (4, 8) bf16 halves of one (4, 16) buffer (pitch 32 bytes): disjoint; one element into the other: not.
  const TensorView left = at(base, DType::bf16, {4, 8}, {16, 1});
  EXPECT_FALSE(views_overlap(left, at(base + 16, DType::bf16, {4, 8}, {16, 1})));
  EXPECT_TRUE(views_overlap(left, at(base + 14, DType::bf16, {4, 8}, {16, 1})));
  // The right half of the rows below: row r of one meets row r + 1 of the other only with a shift.
  EXPECT_FALSE(views_overlap(left, at(base + 32 * 4, DType::bf16, {4, 8}, {16, 1})));  // starts past its rows
  EXPECT_TRUE(views_overlap(left, at(base + 32 * 3, DType::bf16, {4, 8}, {16, 1})));   // shares row 3
  EXPECT_FALSE(views_overlap(left, at(base + 32 * 3 + 16, DType::bf16, {4, 8}, {16, 1})));
  EXPECT_TRUE(views_overlap(at(base + 32 * 3 + 16, DType::bf16, {4, 8}, {16, 1}),
                            at(base + 32 * 4 + 8, DType::bf16, {2, 8}, {16, 1})));  // shifted by 8 bytes
  // A contiguous range in the padding between a padded matrix's rows, or reaching into its next row.
  EXPECT_FALSE(views_overlap(left, at(base + 32 + 16, DType::bf16, {8}, {1})));
  EXPECT_TRUE(views_overlap(left, at(base + 32 + 16, DType::bf16, {9}, {1})));
  EXPECT_FALSE(views_overlap(at(base + 16 - 64, DType::bf16, {8}, {1}), left));  // before it
  EXPECT_FALSE(views_overlap(at(base + 32 * 3 + 16, DType::f32, {100}, {1}), left));  // after its last row
  // Different row pitches: one start in common is an overlap; otherwise a row of one meeting a row of the
  // other. `left`'s rows cover bytes [0, 16), [32, 48), [64, 80) and [96, 112).
  EXPECT_TRUE(views_overlap(left, at(base, DType::bf16, {4, 8}, {32, 1})));
  EXPECT_FALSE(views_overlap(left, at(base + 16, DType::bf16, {2, 8}, {32, 1})));  // [16, 32), [80, 96)
  EXPECT_TRUE(views_overlap(left, at(base + 16, DType::bf16, {2, 8}, {20, 1})));   // [16, 32), [56, 72)
  EXPECT_TRUE(views_overlap(at(base + 16, DType::bf16, {4, 8}, {24, 1}), left));   // [16, 32), [64, 80), ...
  // A column-major view of one contiguous block (a (K, M) tensor transposed: column stride M) is that block,
  // whatever the other view's pitch: a padded matrix starting inside it overlaps it, one starting past it not.
  const TensorView columns = at(base, DType::bf16, {16, 16}, {1, 16});  // [base, base + 512)
  EXPECT_TRUE(views_overlap(columns, at(base + 32, DType::f32, {16, 8}, {16, 1})));
  EXPECT_TRUE(views_overlap(at(base + 480, DType::f32, {16, 8}, {16, 1}), columns));
  EXPECT_FALSE(views_overlap(columns, at(base + 512, DType::f32, {16, 8}, {16, 1})));
  // Padded columns (stride 24 for 16 rows) keep their gaps: a range inside one is disjoint.
  const TensorView padded_columns = at(base, DType::bf16, {16, 4}, {1, 24});
  EXPECT_FALSE(views_overlap(padded_columns, at(base + 32, DType::bf16, {8}, {1})));
  EXPECT_TRUE(views_overlap(padded_columns, at(base + 32, DType::bf16, {9}, {1})));
  // A strided stack (every other (2, 8) bf16 matrix of a buffer) counts as its whole span, gaps included.
  const TensorView stack = at(base, DType::bf16, {3, 2, 8}, {32, 8, 1});  // [base, base + 160)
  EXPECT_TRUE(views_overlap(stack, at(base + 32, DType::bf16, {8}, {1})));  // in the gap after matrix 0
  EXPECT_TRUE(views_overlap(at(base + 158, DType::bf16, {4}, {1}), stack));
  EXPECT_FALSE(views_overlap(stack, at(base + 160, DType::bf16, {4, 8}, {16, 1})));
  EXPECT_FALSE(views_overlap(at(base - 64, DType::bf16, {2, 8}, {16, 1}), stack));
  // A dim of one element steps no stride, whatever its value: a one-expert stack with a negative expert
  // stride still spans its rows.
  const TensorView one_expert = at(base, DType::bf16, {1, 8, 8}, {-1, 16, 1});  // [base, base + 240)
  EXPECT_TRUE(views_overlap(one_expert, at(base + 32, DType::bf16, {2, 8}, {8, 1})));
  EXPECT_FALSE(views_overlap(one_expert, at(base + 240, DType::bf16, {2, 8}, {8, 1})));
  // Addresses anywhere below 2^64: the byte arithmetic does not overflow.
  constexpr uintptr_t high = 0x7ffffffffffffff0u, top = 0xffffffffffffffe0u;
  EXPECT_TRUE(views_overlap(at(high, DType::bf16, {2, 8}, {8, 1}), at(high + 16, DType::bf16, {4}, {1})));
  EXPECT_FALSE(views_overlap(at(high - 32, DType::bf16, {2, 8}, {8, 1}), at(high, DType::bf16, {8}, {1})));
  EXPECT_TRUE(views_overlap(at(top, DType::f32, {2, 4}, {4, 1}), at(top + 16, DType::bf16, {4, 2}, {4, 1})));
  EXPECT_FALSE(views_overlap(at(top, DType::bf16, {16}, {1}), at(0x10, DType::bf16, {16}, {1})));
  // Views without elements or without data share nothing.
  EXPECT_FALSE(views_overlap(v, at(base, DType::f32, {0}, {1})));
  EXPECT_FALSE(views_overlap(v, TensorView{}));
  EXPECT_FALSE(views_overlap(TensorView::contiguous(nullptr, DType::f32, {4}), TensorView::contiguous(nullptr, DType::f32, {4})));
}

TEST(Contract, OutputsSharingMemoryWithAnyOperandAreRejected) {
  for (Device dev : {Device::host, Device::cuda}) {
    Maker m{dev};
    const auto aliased = [](const std::function<void()>& call, const std::string& op, const std::string& out,
                            const std::string& other) {
      expect_error(call, ErrorCode::invalid_argument,
                   {op + ": " + out + ": expected memory that no other operand of the call uses",
                    "got memory overlapping " + other + " (at 0x"});
    };
    // Each aliased pair is carved from one fresh block, so that it meets no other operand.
    auto g = grouped_gemm_args(m);
    g.d.data = m.memory(kM * kN * 2);
    g.a.data = g.d.data;
    aliased([&] { contract::check(g); }, "grouped_gemm", "d", "a");
    // A column-major a over one contiguous block (a (K, M) tensor transposed) and a padded d starting inside it:
    // their pitches differ, yet a is one range.
    g = grouped_gemm_args(m);
    auto* block = static_cast<char*>(m.memory(kM * kK * 2 + kM * (kN + 8) * 2));
    g.a = TensorView::strided(block, DType::bf16, {kM, kK}, {1, kM}, dev);
    g.d = TensorView::strided(block + 64, DType::bf16, {kM, kN}, {kN + 8, 1}, dev);
    aliased([&] { contract::check(g); }, "grouped_gemm", "d", "a");
    g = grouped_gemm_args(m);
    g.c.data = g.d.data;
    aliased([&] { contract::check(g); }, "grouped_gemm", "d", "c");
    // Padded d and c at different row strides in one buffer: c starting in d's first row gap covers d's
    // second row; c after d's last row shares nothing.
    g = grouped_gemm_args(m);
    auto* rows = static_cast<char*>(m.memory(kM * (kN + 8) * 2 + kM * (kN + 16) * 2));
    g.d = TensorView::strided(rows, DType::bf16, {kM, kN}, {kN + 8, 1}, dev);
    g.c = TensorView::strided(rows + kN * 2, DType::bf16, {kM, kN}, {kN + 16, 1}, dev);
    aliased([&] { contract::check(g); }, "grouped_gemm", "d", "c");
    g.c.data = rows + kM * (kN + 8) * 2;
    EXPECT_EQ(contract::check(g), dev);
    g = grouped_gemm_args(m);
    g.prob.data = static_cast<char*>(g.c.data) + 64;  // an input inside an output
    aliased([&] { contract::check(g); }, "grouped_gemm", "c", "prob");
    // Aliasing is a pointer rule: the workspace query takes the shapes alone.
    EXPECT_EQ(contract::check(g, contract::Pointers::ignore), dev);

    // GLU: d and c as column blocks of one (M, 3I) buffer share no byte; c one block to the left does.
    constexpr int64_t I = kN / 2;
    auto glu = glu_args(m);
    auto* buffer = static_cast<char*>(m.memory(kM * 3 * I * 2));
    glu.d = TensorView::strided(buffer, DType::bf16, {kM, I}, {3 * I, 1}, dev);
    glu.c = TensorView::strided(buffer + I * 2, DType::bf16, {kM, 2 * I}, {3 * I, 1}, dev);
    EXPECT_EQ(contract::check(glu), dev);
    glu.c.data = buffer + 8 * 2;
    aliased([&] { contract::check(glu); }, "grouped_gemm_glu", "d", "c");

    auto dglu = dglu_args(m);
    dglu.dc.data = dglu.c.data;  // dC in place of the saved pre-activation
    aliased([&] { contract::check(dglu); }, "grouped_gemm_dglu", "dc", "c");
    dglu = dglu_args(m);
    dglu.dprob.data = dglu.dbias.data;
    aliased([&] { contract::check(dglu); }, "grouped_gemm_dglu", "dprob", "dbias");
    auto dsrelu = dsrelu_args(m);
    dsrelu.amax.data = dsrelu.a.data;
    aliased([&] { contract::check(dsrelu); }, "grouped_gemm_dsrelu", "amax", "a");

    auto w = wgrad_args(m);
    w.w.data = m.memory(kE * 48 * 80 * 4);
    w.dy.data = static_cast<char*>(w.w.data) + 1024;
    aliased([&] { contract::check(w); }, "grouped_gemm_wgrad", "w", "dy");
    w = wgrad_args(m);
    w.accumulate = true;  // read and written as one operand: not aliasing
    EXPECT_EQ(contract::check(w), dev);

    GemmSwigluArgs sw;
    sw.a = m.t(DType::bf16, {kM, kK});
    sw.b = m.t(DType::bf16, {kN, kK});
    sw.ab12 = m.t(DType::f32, {kM, kN});
    sw.c = TensorView::strided(static_cast<char*>(sw.ab12.data) + kN * 4 * (kM - 1), DType::bf16, {kM, kN / 2},
                               {kN / 2, 1}, dev);  // starts in ab12's last row
    aliased([&] { contract::check(sw); }, "gemm_swiglu", "ab12", "c");
    GemmAmaxArgs am;
    am.a = m.t(DType::bf16, {kM, kK});
    am.b = m.t(DType::bf16, {kN, kK});
    am.c = m.t(DType::bf16, {kM, kN});
    am.amax = TensorView::contiguous(static_cast<char*>(am.b.data) + 32, DType::f32, {1}, dev);
    aliased([&] { contract::check(am); }, "gemm_amax", "amax", "b");
    GemmSreluArgs gs;
    gs.a = m.t(DType::bf16, {kM, kK});
    gs.b = m.t(DType::bf16, {kN, kK});
    gs.d = m.t(DType::bf16, {kM, kN});
    gs.prob = TensorView::contiguous(gs.d.data, DType::f32, {kM}, dev);
    aliased([&] { contract::check(gs); }, "gemm_srelu", "d", "prob");
    GemmDsreluArgs gd;
    gd.a = m.t(DType::bf16, {kM, kK});
    gd.b = m.t(DType::bf16, {kN, kK});
    gd.c = m.t(DType::bf16, {kM, kN});
    gd.dc = m.t(DType::bf16, {kM, kN});
    gd.dprob = TensorView::contiguous(gd.c.data, DType::f32, {kM}, dev);
    aliased([&] { contract::check(gd); }, "gemm_dsrelu", "dprob", "c");
  }
}

TEST(Contract, AliasingRuleCoversEveryOperandOfTheDglu) {
  // Every operand the check places takes part in the aliasing rule with its role: each one in turn moved
  // onto dc's first byte is refused, naming dc (the first output placed) and that operand.
  using X = GroupedGemmDgluArgs;
  const std::pair<const char*, TensorView X::*> operands[] = {
      {"a", &X::a},       {"c", &X::c},         {"offsets", &X::offsets}, {"alpha", &X::alpha}, {"beta", &X::beta},
      {"prob", &X::prob}, {"dprob", &X::dprob}, {"dbias", &X::dbias},     {"amax", &X::amax}};
  for (Device dev : {Device::host, Device::cuda}) {
    Maker m{dev};
    const auto refused = [](const X& x, const std::string& other) {
      expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                   {"grouped_gemm_dglu: dc: expected memory that no other operand of the call uses",
                    "got memory overlapping " + other + " (at 0x"});
    };
    for (const auto& [name, member] : operands) {
      SCOPED_TRACE(name);
      auto x = dglu_args(m);
      (x.*member).data = x.dc.data;
      refused(x, name);
    }
    auto x = dglu_args(m);
    x.b.dense.data = x.dc.data;
    refused(x, "b");
    EXPECT_EQ(contract::check(dglu_args(m)), dev);
  }
}

// ---- one device per call -----------------------------------------------------------------------------------

TEST(Contract, MixedDevicesNameTheOddOperand) {
  Maker dev{Device::cuda};
  auto x = grouped_gemm_args(dev);
  x.d.device = Device::host;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected a cuda tensor like the other operands", "got a host tensor"});
  Maker host{Device::host};
  auto y = grouped_gemm_args(host);
  y.offsets.device = Device::cuda;
  expect_error([&] { contract::check(y); }, ErrorCode::invalid_argument,
               {"grouped_gemm: offsets: expected a host tensor", "got a cuda tensor"});
  auto w = wgrad_args(dev);
  w.x.device = Device::host;
  expect_error([&] { contract::check(w); }, ErrorCode::invalid_argument, {"grouped_gemm_wgrad: x: expected a cuda tensor"});
}

// As many operands on each device: the backend is the first operand's (rules.hpp), and the first operand on the
// other device is named, whichever device the first operand is on.
TEST(Contract, MixedDevicesInATieFollowTheFirstOperand) {
  for (Device first : {Device::cuda, Device::host}) {
    const Device other = first == Device::cuda ? Device::host : Device::cuda;
    Maker m{Device::cuda};
    GroupedGemmArgs x;  // a, offsets on `first`; b, d on the other device
    x.a = m.t(DType::bf16, {kM, kK});
    x.b.dense = m.t(DType::bf16, {kE, kN, kK});
    x.offsets = m.t(DType::i32, {kE});
    x.d = m.t(DType::bf16, {kM, kN});
    x.a.device = x.offsets.device = first;
    x.b.dense.device = x.d.device = other;
    const std::string want_first = first == Device::cuda ? "cuda" : "host";
    const std::string want_other = other == Device::cuda ? "cuda" : "host";
    expect_error([&] { contract::check(x, contract::Pointers::ignore); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: d: expected a " + want_first + " tensor like the other operands",
                  "got a " + want_other + " tensor"});
  }
}

// ---- wgrad -------------------------------------------------------------------------------------------------

TEST(Contract, WgradOperands) {
  Maker m{Device::cuda};
  auto x = wgrad_args(m);
  x.dy = m.t(DType::bf16, {kM - 1, 80});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: dy: expected shape (M=96, N) with M from x", "got (95, 80)"});
  x = wgrad_args(m);
  x.dy.dtype = DType::f16;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: dy: expected dtype bf16 (the dtype of x)", "got f16"});
  x = wgrad_args(m);
  x.w = m.t(DType::f32, {kE, 80, 48});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w: expected shape (E=8, H=48, N=80)", "got (8, 80, 48)"});
  x.transpose_output = true;
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.w = m.t(DType::f32, {kE, 48, 80});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w: expected shape (E=8, N=80, H=48)", "got (8, 48, 80)"});
  x = wgrad_args(m);
  x.w.dtype = DType::i32;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm_wgrad: w: expected dtype", "got i32"});
}

TEST(Contract, WgradExactlyOneOutputStorage) {
  Maker m{Device::cuda};
  auto x = wgrad_args(m);
  x.w_ptrs = m.t(DType::i64, {kE});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w: expected exactly one of w or w_ptrs", "got both"});
  x.w = TensorView{};
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.w_ptrs = TensorView{};
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"got neither"});
  x.w_ptrs = m.t(DType::i64, {kE});
  x.w_dtype = DType::e4m3;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_dtype: expected dtype bf16, f16 or f32", "got e4m3"});
}

// w_in, the gradient accumulate adds into when it comes in another buffer than w: w itself, or a packed tensor
// of w's shape and dtype under w's rules (non-null, 16-byte aligned) that w does not overlap; only with
// accumulate and a dense w.
TEST(Contract, WgradWIn) {
  Maker m{Device::cuda};
  auto x = wgrad_args(m);
  x.accumulate = true;
  x.w_in = m.t(DType::f32, {kE, 48, 80});
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.w_in = x.w;
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.w_in.strides = {48 * 80, 1, 48};  // w's address read in another order
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected w itself (packed, as w) or another buffer",
                "got w's address with strides (3840, 1, 48)"});
  x.w_in = x.w;
  x.w_in.data = static_cast<char*>(x.w.data) + 256;  // shifted by 64 elements: overlaps w
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w: expected memory that no other operand of the call uses",
                "got memory overlapping w_in"});
  x.w_in = m.t(DType::f32, {kE, 80, 48});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected shape (E=8, H=48, N=80) with E from offsets, H from x, N from dy",
                "got (8, 80, 48)"});
  x.transpose_output = true;
  x.w = m.t(DType::f32, {kE, 80, 48});
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.transpose_output = false;
  x.w = m.t(DType::f32, {kE, 48, 80});
  x.w_in = m.t(DType::bf16, {kE, 48, 80});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected dtype f32 (the dtype of w)", "got bf16"});
  x.w_in = m.t(DType::f32, {kE, 48, 96});
  x.w_in.shape[2] = 80;  // rows padded to 96
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected a contiguous row-major tensor", "got strides (4608, 96, 1)"});
  x.w_in = m.t(DType::f32, {kE, 48, 80});
  x.w_in.data = nullptr;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected a non-null data pointer", "got nullptr"});
  x.w_in = m.t(DType::f32, {kE, 48, 80});
  x.w_in.data = static_cast<char*>(x.w_in.data) + 4;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected a 16-byte aligned base address"});
  x.w_in = m.t(DType::f32, {kE, 48, 80});
  x.accumulate = false;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected no w_in without accumulate", "got w_in"});
  x.accumulate = true;
  x.w = TensorView{};
  x.w_ptrs = m.t(DType::i64, {kE});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_in: expected no w_in with w_ptrs (a dense w only)", "got w_in"});
}

TEST(Contract, WgradHostPointerTable) {
  Maker m{Device::host};
  auto x = wgrad_args(m);
  x.w = TensorView{};
  x.w_ptrs = m.t(DType::i64, {kE});
  auto* table = x.w_ptrs.ptr<int64_t>();
  for (int64_t g = 0; g < kE; ++g) table[g] = reinterpret_cast<int64_t>(m.memory(48 * 80 * 4));
  EXPECT_EQ(contract::check(x), Device::host);
  table[kE - 1] += 4;
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_wgrad: w_ptrs: expected a non-null, 16-byte aligned address", "got w_ptrs[7]"});
}

// ---- dense ops ---------------------------------------------------------------------------------------------

// C++ callers can cast any integer to an option enum: values outside it are errors naming the option.
TEST(Contract, EnumOptionsOutOfRangeAreNamed) {
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.b.layout = static_cast<BLayout>(5);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: b.layout: expected nk or kn, got value 5"});
  auto g = glu_args(m);
  g.glu.activation = static_cast<Activation>(7);
  expect_error([&] { contract::check(g); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: glu.activation: expected swiglu, geglu or swiglu_clamped, got value 7"});
  auto d = dglu_args(m);
  d.glu.layout = static_cast<GluLayout>(9);
  expect_error([&] { contract::check(d); }, ErrorCode::invalid_argument,
               {"grouped_gemm_dglu: glu.layout: expected halves, interleaved32 or interleaved32_up_first, got value 9"});
  GemmSwigluArgs sw;
  sw.a = m.t(DType::bf16, {kM, kK});
  sw.b = m.t(DType::bf16, {kN, kK});
  sw.ab12 = m.t(DType::bf16, {kM, kN});
  sw.c = m.t(DType::bf16, {kM, kN / 2});
  sw.layout = static_cast<GluLayout>(3);
  expect_error([&] { contract::check(sw); }, ErrorCode::invalid_argument, {"gemm_swiglu: layout: expected halves"});
  sw.layout = GluLayout::halves;
  sw.b_layout = static_cast<BLayout>(2);
  expect_error([&] { contract::check(sw); }, ErrorCode::invalid_argument,
               {"gemm_swiglu: b_layout: expected nk or kn, got value 2"});
}

// The sm_90a kernels hold M, N, K and H in 32-bit integers; the host backend takes any extent.
TEST(Contract, DeviceExtentsFitThirtyTwoBits) {
  constexpr int64_t kHuge = (int64_t{1} << 31) + 128;
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    x.a = TensorView::contiguous(reinterpret_cast<void*>(0x7f0000000000), DType::bf16, {kHuge, kK}, dev);
    x.d = TensorView::contiguous(reinterpret_cast<void*>(0x7f0000000000), DType::bf16, {kHuge, kN}, dev);
    x.prob = x.alpha = x.bias = x.c = TensorView{};
    if (dev == Device::cuda) {
      expect_error([&] { contract::check(x, contract::Pointers::ignore); }, ErrorCode::unsupported,
                   {"grouped_gemm: a: expected M <= 2147483647 on the cuda backend", "got M=2147483776"});
    } else {
      EXPECT_EQ(contract::check(x, contract::Pointers::ignore), Device::host);
    }
  }
  Maker m{Device::cuda};
  auto w = wgrad_args(m);
  w.dy = TensorView::contiguous(w.dy.data, DType::bf16, {kM, kHuge - 128 + 8}, Device::cuda);
  w.w = TensorView::contiguous(w.w.data, DType::f32, {kE, 48, kHuge - 128 + 8}, Device::cuda);
  expect_error([&] { contract::check(w, contract::Pointers::ignore); }, ErrorCode::unsupported,
               {"grouped_gemm_wgrad: dy: expected N <= 2147483647 on the cuda backend", "got N=2147483656"});
  // The dGLU's c, dc and dbias have 2I columns, which the kernels hold in 32 bits too: I = 2^30 + 8 fits,
  // 2I does not (its last up columns wrapped to negative ones).
  for (Device dev : {Device::cuda, Device::host}) {
    Maker md{dev};
    const int64_t i = (int64_t{1} << 30) + 8;
    auto d = dglu_args(md, 8);
    d.a = TensorView::contiguous(d.a.data, DType::bf16, {1, kK}, dev);
    d.b.dense = TensorView::contiguous(d.b.dense.data, DType::bf16, {kE, i, kK}, dev);
    d.c = TensorView::contiguous(d.c.data, DType::bf16, {1, 2 * i}, dev);
    d.dc = TensorView::contiguous(d.dc.data, DType::bf16, {1, 2 * i}, dev);
    d.prob = TensorView::contiguous(d.prob.data, DType::f32, {1}, dev);
    d.dprob = d.dbias = TensorView{};
    if (dev == Device::cuda) {
      expect_error([&] { contract::check(d, contract::Pointers::ignore); }, ErrorCode::unsupported,
                   {"grouped_gemm_dglu: c: expected 2I <= 2147483647 on the cuda backend", "got 2I=2147483664"});
    } else {
      EXPECT_EQ(contract::check(d, contract::Pointers::ignore), Device::host);
    }
  }
}

// Sizes whose byte span passes 2^62 (no memory holds them) are refused by name on either backend, before any
// byte count computed from them could wrap: a weight tensor of 2^67 elements, a weight gradient of 2^72.
TEST(Contract, OperandsSpanAtMostTwoToTheSixtyTwoBytes) {
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    x.b.dense = TensorView::contiguous(x.b.dense.data, DType::bf16, {kE, int64_t{1} << 62, kK}, dev);
    expect_error([&] { contract::check(x, contract::Pointers::ignore); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: b: expected at most 2^62 bytes (its sizes multiplied), got shape (", " of bf16"});
    auto w = wgrad_args(m);
    constexpr int64_t kWide = int64_t{1} << 31;
    w.x = TensorView::contiguous(w.x.data, DType::bf16, {kM, kWide}, dev);
    w.dy = TensorView::contiguous(w.dy.data, DType::bf16, {kM, kWide}, dev);
    w.w = TensorView::contiguous(w.w.data, DType::f32, {kE, kWide, kWide}, dev);
    expect_error([&] { contract::check(w, contract::Pointers::ignore); }, ErrorCode::invalid_argument,
                 {"grouped_gemm_wgrad: w: expected at most 2^62 bytes", "of f32"});
    // Just under the bound passes this rule (the host backend takes such extents; the device ones stop at the
    // 32-bit rule instead).
    x = grouped_gemm_args(m);
    x.a = TensorView::contiguous(x.a.data, DType::bf16, {int64_t{1} << 40, kK}, dev);
    x.d = TensorView::contiguous(x.d.data, DType::bf16, {int64_t{1} << 40, kN}, dev);
    x.prob = x.alpha = x.bias = x.c = TensorView{};
    if (dev == Device::host) EXPECT_EQ(contract::check(x, contract::Pointers::ignore), Device::host);
  }
}

// Strides whose reach passes 2^62 bytes are refused by name the same way, before the overlap check divides by
// a row pitch that would wrap: 2^62 elements between two rows of d (a byte pitch of 2^64 wrapped to 0 and the
// check divided by it), 2^61 of f32 (a pitch that wrapped negative named an overlap that is not there), and
// 2^62 + 4 (wrapped to 16 bytes, accepted). A column-major a's column stride, likewise.
TEST(Contract, StridesReachAtMostTwoToTheSixtyTwoBytes) {
  for (Device dev : {Device::cuda, Device::host}) {
    for (int64_t stride : {int64_t{1} << 62, int64_t{1} << 61, (int64_t{1} << 62) + 4}) {
      Maker m{dev};
      auto x = grouped_gemm_args(m);
      x.d = TensorView::strided(x.d.data, DType::f32, {kM, kN}, {stride, 1}, dev);
      expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                   {"grouped_gemm: d: expected strides that reach at most 2^62 bytes past its first element",
                    "got strides (" + std::to_string(stride) + ", 1) with shape (96, 128) of f32"});
    }
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    x.a = TensorView::strided(x.a.data, DType::bf16, {kM, kK}, {1, int64_t{1} << 62}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected strides that reach at most 2^62 bytes", "got strides (1, "});
    // A stride the view never steps (one row) reaches nothing.
    x = grouped_gemm_args(m);
    x.a = TensorView::strided(x.a.data, DType::bf16, {1, kK}, {int64_t{1} << 62, 1}, dev);
    x.d = TensorView::strided(x.d.data, DType::bf16, {1, kN}, {int64_t{1} << 62, 1}, dev);
    x.prob = m.t(DType::f32, {1});
    x.c = m.t(DType::bf16, {1, kN});
    EXPECT_EQ(contract::check(x), dev);
    // Whatever its value: INT64_MIN too, whose magnitude no int64_t holds.
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
    x.a = TensorView::strided(x.a.data, DType::bf16, {1, kK}, {kMin, 1}, dev);
    x.d = TensorView::strided(x.d.data, DType::bf16, {1, kN}, {kMin, 1}, dev);
    EXPECT_EQ(contract::check(x), dev);
    // Stepped, it is refused (not negated into an overflow).
    x = grouped_gemm_args(m);
    x.d = TensorView::strided(x.d.data, DType::f32, {kM, kN}, {kMin, 1}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: d: expected", "got strides (-9223372036854775808, 1) with shape (96, 128) of f32"});
  }
}

// The grouped ops' bias is read without a row stride by the sm_90a kernels: padded rows are refused on the
// cuda backend (they would be read as contiguous), and computed on the host. The dense ops' b is read through
// a tensor map at its row stride, padded or not, on both.
TEST(Contract, DeviceRowsReadWithoutAStrideMustBeContiguous) {
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    GemmSreluArgs s;
    s.a = m.t(DType::bf16, {kM, kK});
    s.b = TensorView::strided(m.memory(kN * (kK + 8) * 2), DType::bf16, {kN, kK}, {kK + 8, 1}, dev);
    s.d = m.t(DType::bf16, {kM, kN});
    EXPECT_EQ(contract::check(s), dev);
    auto x = grouped_gemm_args(m);
    x.bias = TensorView::strided(m.memory(kE * (kN + 8) * 4), DType::f32, {kE, kN}, {kN + 8, 1}, dev);
    if (dev == Device::cuda) {
      expect_error([&] { contract::check(x); }, ErrorCode::unsupported,
                   {"grouped_gemm: bias: expected contiguous rows on the cuda backend (stride(0) == N=128",
                    "got stride(0)=136"});
    } else {
      EXPECT_EQ(contract::check(x), Device::host);
    }
  }
}

// Dense B is read through one 3-D tensor map at its own strides: padded rows and any positive expert stride
// that keeps the 16-byte rule, on both backends; a broadcast (expert stride 0), overlapping rows and strides
// off the rule are refused; strides past the tensor map's 2^40 bytes are unsupported on the cuda backend.
TEST(Contract, StridedWeightStacks) {
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    auto with_b = [&](std::initializer_list<int64_t> strides, int64_t elems) {
      x.b.dense = TensorView::strided(m.memory(elems * 2), DType::bf16, {kE, kN, kK}, strides, dev);
      return x;
    };
    const int64_t matrix = kN * kK;
    EXPECT_EQ(contract::check(with_b({2 * matrix, kK, 1}, 2 * kE * matrix)), dev);  // every other expert
    EXPECT_EQ(contract::check(with_b({kN * (kK + 8), kK + 8, 1}, kE * kN * (kK + 8))), dev);  // padded rows
    EXPECT_EQ(contract::check(with_b({8, kK, 1}, kE * 8 + matrix)), dev);  // experts sharing memory (an input)
    EXPECT_EQ(contract::check(with_b({kK, kE * kK, 1}, kE * matrix)), dev);  // experts inside each row
    expect_error([&] { contract::check(with_b({0, kK, 1}, matrix)); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: b: expected a positive expert stride that is a multiple of 16 bytes",
                  "got stride(0)=0 elements (0 bytes)"});
    expect_error([&] { contract::check(with_b({matrix + 4, kK, 1}, kE * (matrix + 4))); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: b: expected a positive expert stride that is a multiple of 16 bytes",
                  "got stride(0)=8196 elements (16392 bytes)"});
    expect_error([&] { contract::check(with_b({kN * (kK + 4), kK + 4, 1}, kE * kN * (kK + 4))); },
                 ErrorCode::invalid_argument,
                 {"grouped_gemm: b: expected a positive row stride that is a multiple of 16 bytes",
                  "got stride(1)=68 elements (136 bytes)"});
    expect_error([&] { contract::check(with_b({matrix, kK - 8, 1}, kE * matrix)); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: b: expected row stride stride(1) >= K=64 (rows must not overlap)",
                  "got strides (8192, 56, 1)"});
    // One expert: its stride is never stepped, any value.
    auto one = grouped_gemm_args(m);
    one.offsets = m.t(DType::i32, {1});
    one.alpha = one.bias = TensorView{};
    one.b.dense = TensorView::strided(m.memory(matrix * 2), DType::bf16, {1, kN, kK}, {3, kK, 1}, dev);
    EXPECT_EQ(contract::check(one), dev);
    // A stride the tensor map cannot hold: a view of memory no device has (no pointer is read here).
    const int64_t huge = int64_t{1} << 39;  // elements: 2^40 bytes
    x.b.dense = TensorView::strided(m.memory(64), DType::bf16, {kE, kN, kK}, {huge, kK, 1}, dev);
    if (dev == Device::cuda) {
      expect_error([&] { contract::check(x, contract::Pointers::ignore); }, ErrorCode::unsupported,
                   {"grouped_gemm: b: expected expert stride below 2^40 bytes on the cuda backend",
                    "got stride(0)=549755813888 elements (1099511627776 bytes)"});
    }
  }
}

TEST(Contract, ColumnMajorA) {
  // grouped_gemm reads a column-major A (the transposed view of a row-major (K, M) tensor, padded or not); the
  // other ops read A row-major only. An output inside A's padding is not aliasing.
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    auto column_major = [&](int64_t ld) {
      return TensorView::strided(m.memory(static_cast<std::size_t>(kK * ld * 2)), DType::bf16, {kM, kK}, {1, ld}, dev);
    };
    x.a = column_major(kM);
    EXPECT_EQ(contract::check(x), dev);
    x.a = column_major(kM + 8);
    EXPECT_EQ(contract::check(x), dev);
    x.a = column_major(kM + 4);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected a column stride that is a multiple of 16 bytes for a column-major matrix",
                  "got stride(1)=100 elements (200 bytes)"});
    x.a = TensorView::strided(m.memory(static_cast<std::size_t>(kK * kM * 2)), DType::bf16, {kM, kK}, {1, kM - 8}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected column stride stride(1) >= M=96 for a column-major matrix",
                  "got stride(1)=88"});
    x.a = TensorView::strided(m.memory(static_cast<std::size_t>(kM * kK * 4)), DType::bf16, {kM, kK}, {2 * kK, 2}, dev);
    // Neither order, and a single row at a column stride (read row-major): named as grouped_gemm reads A.
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected a row-major matrix (stride(1) == 1) or, with more than one row, a "
                  "column-major one (stride(0) == 1)",
                  "got strides (128, 2)"});
    x.a = TensorView::strided(m.memory(static_cast<std::size_t>(kK * 8 * 2)), DType::bf16, {1, kK}, {1, 8}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected a row-major matrix (stride(1) == 1) or, with more than one row",
                  "got strides (1, 8)"});
    // K off the 16-byte rule is named against A in either order (not against B, checked after it).
    x.a = TensorView::strided(m.memory(static_cast<std::size_t>((kK - 4) * kM * 2)), DType::bf16, {kM, kK - 4},
                              {1, kM}, dev);
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: a: expected K * sizeof(bf16) a multiple of 16 bytes", "got K=60 (120 bytes)"});
    auto glu = glu_args(m);
    glu.a = column_major(kM);
    expect_error([&] { contract::check(glu); }, ErrorCode::invalid_argument,
                 {"grouped_gemm_glu: a: expected a row-major matrix with unit column stride", "got strides (1, 96)"});
  }
  // The gaps between a column-major A's columns may hold an output (the aliasing rule is exact for this
  // layout): A's columns of 96 elements at a pitch of 224, d's rows of 128 elements in between.
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  constexpr int64_t ld = kM + kN;
  char* base = static_cast<char*>(m.memory(static_cast<std::size_t>((kM + 1) * ld * 2)));
  x.a = TensorView::strided(base, DType::bf16, {kM, kK}, {1, ld}, Device::cuda);
  x.c = TensorView{};
  x.d = TensorView::strided(base + kM * 2, DType::bf16, {kM, kN}, {ld, 1}, Device::cuda);
  EXPECT_EQ(contract::check(x), Device::cuda);
  x.d = TensorView::strided(base + kM * 2 + 16, DType::bf16, {kM, kN}, {ld, 1}, Device::cuda);
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm: d: expected memory that no other operand of the call uses", "memory overlapping a"});
}

TEST(Contract, DenseOps) {
  Maker m{Device::cuda};
  GemmSwigluArgs sw;
  sw.a = m.t(DType::bf16, {kM, kK});
  sw.b = m.t(DType::bf16, {kN, kK});
  sw.ab12 = m.t(DType::bf16, {kM, kN});
  sw.c = m.t(DType::bf16, {kM, kN});
  expect_error([&] { contract::check(sw); }, ErrorCode::invalid_argument,
               {"gemm_swiglu: c: expected shape (M=96, N/2=64)", "got (96, 128)"});
  sw.c = m.t(DType::bf16, {kM, kN / 2});
  sw.b = m.t(DType::bf16, {kN, 32});
  expect_error([&] { contract::check(sw); }, ErrorCode::invalid_argument,
               {"gemm_swiglu: b: expected shape (N, K=64) with K from a", "got (128, 32)"});

  GemmAmaxArgs am;
  am.a = m.t(DType::bf16, {kM, kK});
  am.b = m.t(DType::bf16, {kN, kK});
  am.c = m.t(DType::bf16, {kM, kN});
  expect_error([&] { contract::check(am); }, ErrorCode::invalid_argument,
               {"gemm_amax: amax: expected a tensor of shape (1,)", "got none"});

  GemmDsreluArgs gd;
  gd.a = m.t(DType::bf16, {kM, kK});
  gd.b = m.t(DType::bf16, {kN, kK});
  gd.dc = m.t(DType::bf16, {kM, kN});
  expect_error([&] { contract::check(gd); }, ErrorCode::invalid_argument,
               {"gemm_dsrelu: c: expected shape (M=96, N=128)", "got none"});
}

// Rule 6 on the dense ops' B: N * sizeof(b) a multiple of 16 bytes, also where B is (N, K) (nk, its rows are K
// long) and the outputs are f32, whose own rows would take N % 4 == 0. N = 12 bf16 columns are 24 bytes.
TEST(Contract, DenseWeightsNeedNInWhole16Bytes) {
  const int64_t n = 12;
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    GemmAmaxArgs am;
    am.a = m.t(DType::bf16, {kM, kK});
    am.b = m.t(DType::bf16, {n, kK});
    am.c = m.t(DType::f32, {kM, n});
    am.amax = m.t(DType::f32, {1});
    expect_error([&] { contract::check(am); }, ErrorCode::invalid_argument,
                 {"gemm_amax: b: expected N * sizeof(bf16) a multiple of 16 bytes", "got N=12 (24 bytes)"});
    GemmSreluArgs sr;
    sr.a = m.t(DType::bf16, {kM, kK});
    sr.b = m.t(DType::bf16, {n, kK});
    sr.d = m.t(DType::f32, {kM, n});
    expect_error([&] { contract::check(sr); }, ErrorCode::invalid_argument,
                 {"gemm_srelu: b: expected N * sizeof(bf16) a multiple of 16 bytes", "got N=12 (24 bytes)"});
    GemmDsreluArgs ds;
    ds.a = m.t(DType::bf16, {kM, kK});
    ds.b = m.t(DType::bf16, {n, kK});
    ds.c = m.t(DType::f32, {kM, n});
    ds.dc = m.t(DType::f32, {kM, n});
    expect_error([&] { contract::check(ds); }, ErrorCode::invalid_argument,
                 {"gemm_dsrelu: b: expected N * sizeof(bf16) a multiple of 16 bytes", "got N=12 (24 bytes)"});
    am.b = m.t(DType::bf16, {16, kK});  // N = 16: 32 bytes, taken
    am.c = m.t(DType::f32, {kM, 16});
    EXPECT_EQ(contract::check(am), dev);
  }
}

// ---- operands that each had no test of their own (found by mutating the checks) ---------------------------

TEST(Contract, GluSavedPreactivationIsChecked) {
  Maker m{Device::cuda};
  auto x = glu_args(m);
  x.c = m.t(DType::bf16, {kM, kN / 2});  // I columns where the op writes 2I
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
               {"grouped_gemm_glu: c: expected shape (M=96, 2I=128)", "got (96, 64)"});
  x = glu_args(m);
  x.c = m.t(DType::i32, {kM, kN});
  expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm_glu: c: expected dtype", "got i32"});
}

// With f32 inputs on the host, x's and dy's rows keep the 16-byte rule while a 16-bit weight gradient's rows
// may not: the rule is checked on the output's own last dim (H transposed, N otherwise).
TEST(Contract, WgradPointerTableRowsFollowTheOutputsLastDim) {
  for (bool transposed : {true, false}) {
    Maker m{Device::host};
    const int64_t H = transposed ? 12 : 16, N = transposed ? 16 : 12;
    auto x = wgrad_args(m, H, N);
    x.x = m.t(DType::f32, {kM, H});
    x.dy = m.t(DType::f32, {kM, N});
    x.w = TensorView{};
    x.w_ptrs = m.t(DType::i64, {kE});
    x.w_dtype = DType::bf16;
    x.transpose_output = transposed;
    auto* table = x.w_ptrs.ptr<int64_t>();
    for (int64_t g = 0; g < kE; ++g) table[g] = reinterpret_cast<int64_t>(m.memory(H * N * 2));
    const std::string last = transposed ? "H" : "N";
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm_wgrad: w_ptrs: expected " + last + " * sizeof(bf16) a multiple of 16 bytes",
                  "got " + last + "=12 (24 bytes)"});
    x.w_dtype = DType::f32;  // 48-byte rows
    EXPECT_EQ(contract::check(x), Device::host);
  }
}

TEST(Contract, DenseRowVectorsAreChecked) {
  Maker m{Device::cuda};
  GemmDsreluArgs gd;
  gd.a = m.t(DType::bf16, {kM, kK});
  gd.b = m.t(DType::bf16, {kN, kK});
  gd.c = m.t(DType::bf16, {kM, kN});
  gd.dc = m.t(DType::bf16, {kM, kN});
  gd.dprob = m.t(DType::f32, {kM - 1});
  expect_error([&] { contract::check(gd); }, ErrorCode::invalid_argument, {"gemm_dsrelu: dprob: expected", "(95"});
  gd.dprob = m.t(DType::bf16, {kM});
  expect_error([&] { contract::check(gd); }, ErrorCode::invalid_argument, {"gemm_dsrelu: dprob: expected dtype f32", "got bf16"});
  GemmSreluArgs gs;
  gs.a = m.t(DType::bf16, {kM, kK});
  gs.b = m.t(DType::bf16, {kN, kK});
  gs.d = m.t(DType::bf16, {kM, kN});
  gs.prob = m.t(DType::f32, {kM + 1});
  expect_error([&] { contract::check(gs); }, ErrorCode::invalid_argument, {"gemm_srelu: prob: expected", "(97"});
  gs.prob = TensorView{};
  // The dense ops' bias and dbias are one expert's row, (N,); amax is (1,).
  gs.bias = m.t(DType::f32, {1, kN});
  expect_error([&] { contract::check(gs); }, ErrorCode::invalid_argument,
               {"gemm_srelu: bias: expected shape (N=128", "got (1, 128)"});
  gs.bias = m.t(DType::f32, {kN - 8});
  expect_error([&] { contract::check(gs); }, ErrorCode::invalid_argument,
               {"gemm_srelu: bias: expected shape (N=128", "got (120"});
  gs.bias = m.t(DType::f16, {kN});
  expect_error([&] { contract::check(gs); }, ErrorCode::invalid_argument, {"gemm_srelu: bias: expected dtype", "got f16"});
  gs.bias = TensorView::strided(m.memory(2 * kN * 4), DType::f32, {kN}, {2}, Device::cuda);
  expect_error([&] { contract::check(gs); }, ErrorCode::invalid_argument,
               {"gemm_srelu: bias: expected a contiguous vector", "got stride(0)=2"});
  gs.bias = m.t(DType::bf16, {kN});
  EXPECT_EQ(contract::check(gs), Device::cuda);
  gd.dprob = TensorView{};
  gd.dbias = m.t(DType::f32, {1, kN});
  expect_error([&] { contract::check(gd); }, ErrorCode::invalid_argument,
               {"gemm_dsrelu: dbias: expected shape (N=128", "got (1, 128)"});
  gd.dbias = m.t(DType::f16, {kN});
  expect_error([&] { contract::check(gd); }, ErrorCode::invalid_argument, {"gemm_dsrelu: dbias: expected dtype", "got f16"});
  gd.dbias = m.t(DType::bf16, {kN});
  gd.amax = m.t(DType::f32, {2});
  expect_error([&] { contract::check(gd); }, ErrorCode::invalid_argument, {"gemm_dsrelu: amax: expected shape (1,)", "got (2,)"});
  gd.amax = m.t(DType::f32, {1});
  EXPECT_EQ(contract::check(gd), Device::cuda);
  gd.amax = gd.dbias;  // an output inside another
  gd.amax.dtype = DType::f32;
  gd.amax.shape[0] = 1;
  expect_error([&] { contract::check(gd); }, ErrorCode::invalid_argument, {"gemm_dsrelu: dbias: expected memory that no other operand of the call uses", "overlapping amax"});
}

// Two experts: vectors and rows of two elements are held to the same rules as longer ones.
TEST(Contract, TwoExpertOperandsKeepTheRules) {
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    x.b.dense = m.t(DType::bf16, {2, kN, kK});
    x.alpha = TensorView{};
    x.offsets = TensorView::strided(m.memory(4 * sizeof(int32_t)), DType::i32, {2}, {2}, dev);
    x.bias = m.t(DType::f32, {2, kN});
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument,
                 {"grouped_gemm: offsets: expected a contiguous vector", "got stride(0)=2"});
    x.offsets = m.t(DType::i32, {2});
    x.bias = TensorView::strided(m.memory(2 * (kN + 8) * 4), DType::f32, {2, kN}, {kN + 8, 1}, dev);
    if (dev == Device::cuda) {
      expect_error([&] { contract::check(x); }, ErrorCode::unsupported,
                   {"grouped_gemm: bias: expected contiguous rows on the cuda backend", "got stride(0)=136"});
    } else {
      EXPECT_EQ(contract::check(x), Device::host);
    }
  }
}

// The largest M the cuda backend takes, 2^31 - 1, is accepted (only past it is unsupported).
TEST(Contract, DeviceExtentsUpToThirtyTwoBitsAreAccepted) {
  constexpr int64_t kLargest = 2147483647;
  Maker m{Device::cuda};
  auto x = grouped_gemm_args(m);
  x.a = TensorView::contiguous(reinterpret_cast<void*>(0x700000000000), DType::bf16, {kLargest, kK}, Device::cuda);
  x.d = TensorView::contiguous(reinterpret_cast<void*>(0x7a0000000000), DType::bf16, {kLargest, kN}, Device::cuda);
  x.prob = x.alpha = x.bias = x.c = TensorView{};
  EXPECT_EQ(contract::check(x, contract::Pointers::ignore), Device::cuda);
}

// Outputs back to back in one buffer (d's last byte just before c's first) are disjoint and accepted.
TEST(Contract, OutputsBackToBackAreDisjoint) {
  for (Device dev : {Device::cuda, Device::host}) {
    Maker m{dev};
    auto x = grouped_gemm_args(m);
    char* buffer = static_cast<char*>(m.memory(2 * kM * kN * 2));
    x.d = TensorView::contiguous(buffer, DType::bf16, {kM, kN}, dev);
    x.c = TensorView::contiguous(buffer + kM * kN * 2, DType::bf16, {kM, kN}, dev);
    EXPECT_EQ(contract::check(x), dev);
    std::swap(x.c.data, x.d.data);  // c first, then d
    EXPECT_EQ(contract::check(x), dev);
    std::swap(x.c.data, x.d.data);
    x.c = TensorView::contiguous(buffer + kM * kN * 2 - 16, DType::bf16, {kM, kN}, dev);  // 8 elements shared
    expect_error([&] { contract::check(x); }, ErrorCode::invalid_argument, {"grouped_gemm: d:", "overlapping c"});
  }
}

}  // namespace
}  // namespace moegemm
