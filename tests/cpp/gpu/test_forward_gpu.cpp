// grouped_gemm, grouped_gemm_glu and gemm_swiglu on the sm_90a kernels, against the CPU reference run on
// the same bytes. Outputs are poisoned before each call: addressed elements must be written and close to
// the reference, rows past the last expert end must keep the poison (zeros with zero_tail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clamp_edge.hpp"
#include "common/offsets.hpp"
#include "gpu/harness.hpp"

namespace moegemm::testing {
namespace {

/// One forward problem: shapes, group sizes and options.
struct Forward {
  std::string name;
  int64_t m = 256, n = 256, k = 128;
  std::vector<int64_t> sizes{128, 128};
  std::vector<int32_t> raw_offsets;  // used instead of sizes when non-empty (garbage offsets)
  BLayout layout = BLayout::nk;
  bool alpha = false, prob = false, generate_c = false, zero_tail = false;
  int bias = 0;  // 0 none, 1 bf16, 2 f32
  DType out = DType::bf16;
  bool glu = false;
  GluParams glu_params;
  bool ptrs = false;  // weights as per-expert pointers (expert g reads slot (g * 5 + 3) % E of the stack)
  // Dense weights at other strides: rows padded by b_row_pad elements (poisoned), and with b_experts_apart
  // every other matrix of a stack twice as deep (the others hold random values).
  int64_t b_row_pad = 0;
  bool b_experts_apart = false;
  // A column-major: the transposed view of a (K, M + a_col_pad) row-major tensor (padding poisoned).
  bool a_column_major = false;
  int64_t a_col_pad = 0;
  uint64_t seed = 1;
};

/// Host inputs of a problem, and device mirrors.
struct Inputs {
  HostTensor a, a_t, b, offsets, alpha, prob, bias, host_ptrs, device_ptrs;
  DeviceTensor da, db, doffsets, dalpha, dprob, dbias, dptrs;

  explicit Inputs(const Forward& f) {
    const int64_t e = f.raw_offsets.empty() ? static_cast<int64_t>(f.sizes.size())
                                            : static_cast<int64_t>(f.raw_offsets.size());
    a = random_tensor(DType::bf16, {f.m, f.k}, f.seed);
    if (f.a_column_major) {  // the same values, stored column-major; `da` mirrors this storage
      a_t = HostTensor(DType::bf16, {f.k, f.m}, f.a_col_pad);
      poison(a_t);
      for (int64_t r = 0; r < f.m; ++r) {
        for (int64_t c = 0; c < f.k; ++c) a_t.set_at(a_t.offset({c, r}), a.get_at(a.offset({r, c})));
      }
    }
    const double bscale = 1.0 / std::sqrt(static_cast<double>(f.k));  // keeps outputs O(1)
    const int64_t stack = f.b_experts_apart ? 2 * e : e;
    b = f.layout == BLayout::nk ? HostTensor(DType::bf16, {stack, f.n, f.k}, f.b_row_pad)
                                : HostTensor(DType::bf16, {stack, f.k, f.n}, f.b_row_pad);
    poison(b);  // the row padding keeps it: a kernel that reads it gives NaN
    fill_uniform(b, f.seed + 1, -bscale, bscale);
    offsets = f.raw_offsets.empty() ? offsets_from_sizes(f.sizes) : offsets_raw(f.raw_offsets);
    da = DeviceTensor(f.a_column_major ? a_t : a);
    db = DeviceTensor(b);
    doffsets = DeviceTensor(offsets);
    if (f.alpha) {
      alpha = random_tensor(DType::f32, {e}, f.seed + 2, 0.5, 1.5);
      dalpha = DeviceTensor(alpha);
    }
    if (f.prob) {
      prob = random_tensor(DType::f32, {f.m}, f.seed + 3, 0.0, 1.0);
      dprob = DeviceTensor(prob);
    }
    if (f.bias) {
      bias = random_tensor(f.bias == 1 ? DType::bf16 : DType::f32, {e, f.n}, f.seed + 4, -0.5, 0.5);
      dbias = DeviceTensor(bias);
    }
    if (f.ptrs) {  // a permutation, so that a kernel reading the stack in expert order would fail
      host_ptrs = HostTensor(DType::i64, {e});
      device_ptrs = HostTensor(DType::i64, {e});
      const int64_t slot_bytes = f.n * f.k * 2;
      for (int64_t g = 0; g < e; ++g) {
        const int64_t slot = (g * 5 + 3) % e;
        reinterpret_cast<int64_t*>(host_ptrs.data())[g] =
            reinterpret_cast<int64_t>(static_cast<const char*>(b.data()) + slot * slot_bytes);
        reinterpret_cast<int64_t*>(device_ptrs.data())[g] =
            reinterpret_cast<int64_t>(static_cast<const char*>(db.data()) + slot * slot_bytes);
      }
      dptrs = DeviceTensor(device_ptrs);
    }
  }
};

template <class Args>
void fill_common(Args& args, const Forward& f, const Inputs& in, bool device) {
  args.a = device ? in.da.view() : in.a.view();
  if (f.a_column_major) {  // (M, K) over the (K, M + pad) storage, on both backends
    args.a = device ? in.da.view() : in.a_t.view();
    std::swap(args.a.shape[0], args.a.shape[1]);
    std::swap(args.a.strides[0], args.a.strides[1]);
  }
  args.b.layout = f.layout;
  if (f.ptrs) {
    args.b.ptrs = device ? in.dptrs.view() : in.host_ptrs.view();
    args.b.n = f.n;
    args.b.dtype = DType::bf16;
  } else {
    args.b.dense = device ? in.db.view() : in.b.view();
    if (f.b_experts_apart) {
      args.b.dense.shape[0] /= 2;
      args.b.dense.strides[0] *= 2;
    }
  }
  args.offsets = device ? in.doffsets.view() : in.offsets.view();
  if (f.alpha) args.alpha = device ? in.dalpha.view() : in.alpha.view();
  if (f.prob) args.prob = device ? in.dprob.view() : in.prob.view();
  if (f.bias) args.bias = device ? in.dbias.view() : in.bias.view();
  args.zero_tail = f.zero_tail;
}

/// Outputs of one run (host storage; device runs download into it).
struct Outputs {
  HostTensor d, c;
};

Outputs make_outputs(const Forward& f) {
  Outputs o;
  o.d = HostTensor(f.out, {f.m, f.glu ? f.n / 2 : f.n});
  poison(o.d);
  if (f.generate_c) {
    o.c = HostTensor(f.out, {f.m, f.n});
    poison(o.c);
  }
  return o;
}

/// Runs the problem on the host (reference) or on the device, returning the outputs.
Outputs run(const Forward& f, const Inputs& in, bool device, cudaStream_t stream = nullptr) {
  Outputs o = make_outputs(f);
  DeviceTensor dd(o.d), dc;
  if (f.generate_c) dc = DeviceTensor(o.c);
  auto out_view = [&](HostTensor& h, DeviceTensor& dt) { return device ? dt.view() : h.view(); };
  if (f.glu) {
    GroupedGemmGluArgs args;
    fill_common(args, f, in, device);
    args.glu = f.glu_params;
    args.d = out_view(o.d, dd);
    if (f.generate_c) args.c = out_view(o.c, dc);
    call_op(grouped_gemm_glu_workspace_bytes, grouped_gemm_glu, args, device, stream);
  } else {
    GroupedGemmArgs args;
    fill_common(args, f, in, device);
    args.d = out_view(o.d, dd);
    if (f.generate_c) args.c = out_view(o.c, dc);
    call_op(grouped_gemm_workspace_bytes, grouped_gemm, args, device, stream);
  }
  if (device) {
    dd.download(o.d);
    if (f.generate_c) dc.download(o.c);
  }
  return o;
}

void check_forward(const Forward& f) {
  SCOPED_TRACE(f.name);
  Inputs in(f);
  const Outputs ref = run(f, in, false);
  const Outputs got = run(f, in, true);
  const int64_t end = addressed_end(in.offsets, f.m);
  EXPECT_TRUE(matches(got.d, expect_rows(ref.d, end, f.zero_tail))) << "output d";
  if (f.generate_c) {
    EXPECT_TRUE(matches(got.c, expect_rows(ref.c, end, f.zero_tail))) << "output c";
  }
}

TEST(ForwardGpu, GroupSizeEdgeCases) {
  REQUIRE_GPU();
  const std::vector<std::pair<std::string, std::vector<int64_t>>> patterns = {
      {"random", {130, 7, 301, 64, 1, 250, 99, 148}},
      {"empty first", {0, 200, 300, 100, 0, 120, 80, 200}},
      {"empty middle", {200, 100, 0, 0, 300, 150, 50, 200}},
      {"empty last", {300, 200, 100, 150, 150, 50, 50, 0}},
      {"all empty", {0, 0, 0, 0, 0, 0, 0, 0}},
      {"one expert holds every row", {0, 0, 0, 1000, 0, 0, 0, 0}},
      {"1-row experts", {1, 1, 1, 1, 1, 1, 1, 993}},
      {"offsets[-1] < M", {100, 100, 100, 100, 100, 100, 100, 44}},
  };
  for (const auto& [name, sizes] : patterns) {
    for (BLayout layout : {BLayout::nk, BLayout::kn}) {
      Forward f;
      f.name = name + (layout == BLayout::nk ? " nk" : " kn");
      f.m = 1000;
      f.n = 384;
      f.k = 200;
      f.sizes = sizes;
      f.layout = layout;
      f.generate_c = true;
      check_forward(f);
    }
  }
}

TEST(ForwardGpu, ExpertCounts) {
  REQUIRE_GPU();
  for (bool glu : {false, true}) {
    for (int64_t e : {1, 7, 64, 256, 1024}) {
      Forward f;
      f.name = std::string(glu ? "glu" : "grouped_gemm") + " E=" + std::to_string(e);
      f.glu = glu;
      f.m = std::max<int64_t>(1500, 3 * e);
      f.n = 256;
      f.k = 136;
      f.sizes = random_group_sizes(e, f.m - 37, 11 + e, e == 1 ? 0.0 : 0.2);  // the one expert is never empty
      ASSERT_GT(std::accumulate(f.sizes.begin(), f.sizes.end(), int64_t{0}), 0) << f.name;
      if (glu) {  // every GLU option that reads per-expert data, and C
        f.glu_params.layout = e % 2 ? GluLayout::interleaved32 : GluLayout::halves;
        f.alpha = true;
        f.prob = true;
        f.bias = e % 2 ? 1 : 2;
        f.generate_c = true;
        f.seed = 40 + e;
      }
      check_forward(f);
    }
  }
}

TEST(ForwardGpu, ShapesNK) {
  REQUIRE_GPU();
  const std::vector<int64_t> dims = {8, 24, 136, 768, 1536, 2880, 4096};
  for (int64_t n : dims) {
    for (int64_t k : dims) {
      Forward f;
      f.name = "N=" + std::to_string(n) + " K=" + std::to_string(k);
      f.m = 264;
      f.n = n;
      f.k = k;
      f.sizes = {100, 0, 131, 20};
      f.layout = (n + k) % 16 == 0 ? BLayout::nk : BLayout::kn;
      check_forward(f);
    }
  }
}

TEST(ForwardGpu, Options) {
  REQUIRE_GPU();
  int variant = 0;
  for (BLayout layout : {BLayout::nk, BLayout::kn}) {
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      for (int opts = 0; opts < 4; ++opts) {
        Forward f;
        f.m = 777;
        f.n = 520;
        f.k = 328;
        f.sizes = {120, 0, 301, 77, 200};
        f.layout = layout;
        f.out = out;
        f.alpha = opts & 1;
        f.prob = opts & 2;
        f.bias = (variant % 3);
        f.generate_c = variant % 2 == 0;
        f.zero_tail = variant % 4 < 2;
        f.seed = 100 + variant;
        f.name = "options variant " + std::to_string(variant++);
        check_forward(f);
      }
    }
  }
}

TEST(ForwardGpu, Glu) {
  REQUIRE_GPU();
  int variant = 0;
  for (GluLayout pairing : {GluLayout::halves, GluLayout::interleaved32, GluLayout::interleaved32_up_first}) {
    for (Activation act : {Activation::swiglu, Activation::geglu, Activation::swiglu_clamped}) {
      for (BLayout layout : {BLayout::nk, BLayout::kn}) {
        for (int64_t n : {128, 1536, 2880 * 2}) {
          if (pairing != GluLayout::halves && n % 64) continue;
          Forward f;
          f.glu = true;
          f.glu_params.activation = act;
          f.glu_params.layout = pairing;
          f.m = 700;
          f.n = pairing == GluLayout::halves && n == 128 ? 272 : n;  // I = 136: not a tile multiple
          f.k = 264;
          f.sizes = {300, 0, 1, 250, 100};
          f.layout = layout;
          f.alpha = variant % 2;
          f.prob = variant % 3 != 0;
          f.bias = variant % 3;
          f.generate_c = variant % 2 == 0;
          f.zero_tail = variant % 4 == 1;
          f.out = variant % 5 == 4 ? DType::f32 : DType::bf16;
          f.seed = 300 + variant;
          f.name = "glu variant " + std::to_string(variant++) + " N=" + std::to_string(f.n);
          check_forward(f);
        }
      }
    }
  }
}

// swiglu_clamped's 16-bit C keeps each clamp's decision (docs/ops.md §2): on pre-activations that are exact
// in f32 and crowd around +-limit (common/clamp_edge.hpp), C is bitwise the reference's, on G's side of every
// bound, within one 16-bit spacing of G; D is close to the reference. Plain rounding fails this on every
// problem below (each has elements it would carry across a bound).
TEST(ForwardGpu, ClampedSavedPreactivationKeepsEachClampDecision) {
  REQUIRE_GPU();
  for (GluLayout pairing : {GluLayout::halves, GluLayout::interleaved32}) {
    for (DType out : {DType::bf16, DType::f16}) {
      for (float limit : {7.0f, 7.02f}) {
        Forward f;
        f.glu = true;
        f.glu_params.activation = Activation::swiglu_clamped;
        f.glu_params.layout = pairing;
        f.glu_params.limit = limit;
        f.m = 300;
        f.n = 512;
        f.k = 16;
        f.sizes = {70, 0, 150, 40};
        f.bias = 2;
        f.generate_c = true;
        f.out = out;
        f.name = "clamp sides " + std::to_string(static_cast<int>(pairing)) + " " + dtype_name(out) + " limit " +
                 std::to_string(limit);
        SCOPED_TRACE(f.name);
        Inputs in(f);
        clamp_edge::fill(in.a, in.b, in.bias, pairing, 70 + static_cast<uint64_t>(pairing));
        in.da = DeviceTensor(in.a);
        in.db = DeviceTensor(in.b);
        in.dbias = DeviceTensor(in.bias);
        const Outputs ref = run(f, in, false);
        const Outputs got = run(f, in, true);
        const int64_t end = addressed_end(in.offsets, f.m);
        EXPECT_TRUE(matches(got.d, expect_rows(ref.d, end, false))) << "output d";
        int64_t differ = 0;
        for (int64_t r = 0; r < end; ++r)
          for (int64_t col = 0; col < f.n; ++col)
            differ += got.c.bits_at(got.c.offset({r, col})) != ref.c.bits_at(ref.c.offset({r, col}));
        EXPECT_EQ(differ, 0) << "elements of C that differ from the reference's bits";
        int64_t crossings = 0;
        clamp_edge::expect_sides_kept(got.c, in.a, in.b, in.bias, in.offsets, pairing, limit, &crossings);
        EXPECT_GT(crossings, 0);
      }
    }
  }
}

// Past f16's range (limit 1e5, or 65530 between 65520 and the next power of two), an unclamped G whose f16
// rounding is inf holds 65504, f16's largest finite value, so that the dGLU of C lets its gradient through as
// the forward did (docs/ops.md §2); a clamped one keeps its rounding. G = bias + A B is exact in f32 (A in
// {-1, 0, 1}, B multiples of 2^-7 no larger than 2^-4, K = 16, |G| < 2^17), and the bias walks the gates
// and ups (negated) through 65000..70000, so every case occurs. C is bitwise the reference's.
TEST(ForwardGpu, ClampedSavedPreactivationPastTheF16Range) {
  REQUIRE_GPU();
  for (float limit : {1e5f, 65530.0f}) {
    Forward f;
    f.glu = true;
    f.glu_params.activation = Activation::swiglu_clamped;
    f.glu_params.layout = GluLayout::halves;
    f.glu_params.limit = limit;
    f.m = 300;
    f.n = 512;
    f.k = 16;
    f.sizes = {70, 0, 150, 40};
    f.bias = 2;
    f.prob = true;  // about 1e-6, so that D = prob (u' + 1) g' sigmoid(g') stays finite in f16
    f.generate_c = true;
    f.out = DType::f16;
    f.name = "f16 C, limit " + std::to_string(limit);
    SCOPED_TRACE(f.name);
    Inputs in(f);
    fill_uniform(in.prob, 92, 1e-6, 2e-6);
    in.dprob = DeviceTensor(in.prob);
    std::mt19937_64 rng(91);
    std::uniform_int_distribution<int> unit(-1, 1), step(-8, 8);
    for (int64_t r = 0; r < f.m; ++r)
      for (int64_t c = 0; c < f.k; ++c) in.a.set({r, c}, unit(rng));
    const int64_t inter = f.n / 2;
    for (int64_t g = 0; g < 4; ++g)
      for (int64_t c = 0; c < f.n; ++c) {
        for (int64_t j = 0; j < f.k; ++j) in.b.set({g, c, j}, std::ldexp(step(rng), -7));
        const double target = 65000.0 + 5000.0 * static_cast<double>(c % inter) / inter + 0.25 * g;
        const double walk = std::ldexp(std::round(std::ldexp(target, 7)), -7);  // a multiple of 2^-7
        in.bias.set({g, c}, c < inter ? walk : -walk);
      }
    in.da = DeviceTensor(in.a);
    in.db = DeviceTensor(in.b);
    in.dbias = DeviceTensor(in.bias);
    const Outputs ref = run(f, in, false);
    const Outputs got = run(f, in, true);
    const int64_t end = addressed_end(in.offsets, f.m);
    EXPECT_TRUE(matches(got.d, expect_rows(ref.d, end, false))) << "output d";
    int64_t differ = 0, moved = 0, kept_inf = 0;
    for (int64_t r = 0; r < end; ++r)
      for (int64_t col = 0; col < f.n; ++col) {
        differ += got.c.bits_at(got.c.offset({r, col})) != ref.c.bits_at(ref.c.offset({r, col}));
        const double c = got.c(r, col);
        moved += std::fabs(c) == 65504.0;
        kept_inf += std::isinf(c);
      }
    EXPECT_EQ(differ, 0) << "elements of C that differ from the reference's bits";
    EXPECT_GT(moved, 0);
    if (limit == 65530.0f) EXPECT_GT(kept_inf, 0);  // clamped past 65530: rounds to inf, kept
  }
}

// A NaN in a row of A reaches every output element of that row, through the clamps of swiglu_clamped too
// (the reference keeps NaN, as torch.clamp does); the other rows stay close to the reference.
TEST(ForwardGpu, NanInputsPropagateLikeTheReference) {
  REQUIRE_GPU();
  struct Variant {
    bool glu;
    GluLayout pairing;
    Activation act;
  };
  const Variant variants[] = {{true, GluLayout::halves, Activation::swiglu_clamped},
                              {true, GluLayout::interleaved32, Activation::swiglu_clamped},
                              {true, GluLayout::halves, Activation::swiglu},
                              {false, GluLayout::halves, Activation::swiglu}};
  int index = 0;
  for (const Variant& v : variants) {
    Forward f;
    f.glu = v.glu;
    f.glu_params.activation = v.act;
    f.glu_params.layout = v.pairing;
    f.m = 700;
    f.n = 1536;
    f.k = 264;
    f.sizes = {300, 0, 1, 250, 100};
    f.prob = true;
    f.generate_c = true;
    f.seed = 900 + index;
    f.name = "NaN rows, variant " + std::to_string(index++) + (v.glu ? " glu" : " linear");
    SCOPED_TRACE(f.name);
    Inputs in(f);
    const int64_t nan_rows[] = {5, 299, 300, 450};  // expert 0 (a row, its last row), expert 2's one row, expert 3
    for (int64_t r : nan_rows) in.a.set({r, (r * 7) % f.k}, NAN);
    in.da = DeviceTensor(in.a);
    const Outputs ref = run(f, in, false);
    const Outputs got = run(f, in, true);
    const int64_t end = addressed_end(in.offsets, f.m);
    int64_t d_nans = 0, c_nans = 0;
    EXPECT_TRUE(matches(got.d, nan_where_reference_is(expect_rows(ref.d, end, false), ref.d, &d_nans))) << "d";
    EXPECT_TRUE(matches(got.c, nan_where_reference_is(expect_rows(ref.c, end, false), ref.c, &c_nans))) << "c";
    EXPECT_EQ(d_nans, 4 * got.d.size(1));
    EXPECT_EQ(c_nans, 4 * f.n);
  }
}

TEST(ForwardGpu, PointerModeWeights) {
  REQUIRE_GPU();
  int variant = 0;
  for (bool glu : {false, true}) {
    for (BLayout layout : {BLayout::nk, BLayout::kn}) {
      Forward f;
      f.name = std::string("pointer weights ") + (glu ? "glu " : "") + (layout == BLayout::nk ? "nk" : "kn");
      f.ptrs = true;
      f.glu = glu;
      f.glu_params.layout = variant % 2 ? GluLayout::interleaved32 : GluLayout::halves;
      f.m = 900;
      f.n = 512;
      f.k = 200;
      f.sizes = {100, 0, 230, 1, 64, 300, 0, 150};
      f.layout = layout;
      f.generate_c = true;
      f.prob = true;
      f.seed = 500 + variant++;
      check_forward(f);
    }
  }
}

TEST(ForwardGpu, StridedWeightStacks) {
  // Dense weights read through the tensor map at their own strides: padded rows (poisoned padding), every
  // other expert of a deeper stack, both; both layouts, the linear and the GLU epilogue.
  REQUIRE_GPU();
  int variant = 0;
  for (bool glu : {false, true}) {
    for (BLayout layout : {BLayout::nk, BLayout::kn}) {
      for (int strides : {1, 2, 3}) {
        Forward f;
        f.name = std::string("strided weights ") + (glu ? "glu " : "") + (layout == BLayout::nk ? "nk" : "kn") +
                 (strides & 1 ? " padded rows" : "") + (strides & 2 ? " experts apart" : "");
        f.glu = glu;
        f.m = 700;
        f.n = 384;
        f.k = 320;
        f.sizes = {100, 0, 230, 1, 64, 200, 0, 105};
        f.layout = layout;
        f.b_row_pad = strides & 1 ? 24 : 0;
        f.b_experts_apart = strides & 2;
        f.generate_c = true;
        f.seed = 900 + variant++;
        check_forward(f);
      }
    }
  }
}

TEST(ForwardGpu, ColumnMajorA) {
  // grouped_gemm with A column-major (M-major A tiles): packed and with poisoned padding past M, both weight
  // layouts, both tile widths, half tiles, unaligned and empty experts, rows past the last offset (zero_tail
  // or untouched), bias, prob and alpha; against the CPU reference on the same column-major A.
  REQUIRE_GPU();
  int variant = 0;
  for (BLayout layout : {BLayout::nk, BLayout::kn}) {
    for (int64_t n : {128, 768}) {
      for (int64_t pad : {0, 40}) {
        Forward f;
        f.name = std::string("column-major a ") + (layout == BLayout::nk ? "nk" : "kn") + " N=" +
                 std::to_string(n) + " pad=" + std::to_string(pad);
        f.a_column_major = true;
        f.a_col_pad = pad;
        f.m = 1000;
        f.n = n;
        f.k = 200;
        f.sizes = {100, 0, 230, 1, 64, 300, 0, 150, 37};
        f.layout = layout;
        f.prob = variant % 2;
        f.alpha = variant % 3 == 0;
        f.bias = variant % 3;
        f.zero_tail = variant % 2 == 0;
        f.generate_c = variant % 4 == 1;
        f.out = variant % 4 == 3 ? DType::f32 : DType::bf16;
        f.seed = 1300 + variant++;
        check_forward(f);
      }
    }
  }
  // Experts that start at any row: an expert's first tile starts at its first row rounded down to a multiple
  // of 8 and must write none of the rows before it (they hold the expert before's results). One-row experts,
  // many experts, and M and the column stride not multiples of 64.
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> starts = {
      {1000, {1, 1, 1, 1, 1, 1, 1, 993}},
      {997, {3, 5, 7, 9, 11, 13, 900, 2}},
      {1500, random_group_sizes(64, 1450, 77, 0.2)},
  };
  for (const auto& [m, sizes] : starts) {
    Forward f;
    f.name = "column-major a, experts from any row, M=" + std::to_string(m) + " E=" + std::to_string(sizes.size());
    f.a_column_major = true;
    f.a_col_pad = 8 - m % 8 + 8;  // column stride a 16-byte multiple, with poisoned padding
    f.m = m;
    f.n = 192;
    f.k = 136;
    f.sizes = sizes;
    f.prob = true;
    f.generate_c = true;
    f.zero_tail = variant % 2 == 0;
    f.seed = 1300 + variant++;
    check_forward(f);
  }
  // Garbage offsets, clamped on the device: no A row outside [0, M) is read (compute-sanitizer runs this).
  for (const std::vector<int32_t>& raw : {std::vector<int32_t>{500, 200, 900, 100},
                                          std::vector<int32_t>{-2147483647 - 1, 0, 3, 1 << 30}}) {
    Forward f;
    f.name = "column-major a, garbage offsets " + std::to_string(variant);
    f.a_column_major = true;
    f.a_col_pad = 8;
    f.m = 800;
    f.n = 256;
    f.k = 64;
    f.raw_offsets = raw;
    f.zero_tail = variant++ % 2 == 0;
    check_forward(f);
  }
}

TEST(ForwardGpu, HalfTilesForShortExpertTails) {
  REQUIRE_GPU();
  // Experts whose last tile has 1..64 rows run as half tiles; 65..127 as full ones.
  int variant = 0;
  for (bool glu : {false, true}) {
    for (GluLayout pairing : {GluLayout::halves, GluLayout::interleaved32}) {
      for (int64_t n : {256, 2048}) {
        Forward f;
        f.glu = glu;
        f.glu_params.layout = pairing;
        f.m = 1400;
        f.n = n;
        f.k = 192;
        f.sizes = {129, 192, 64, 65, 255, 256, 1, 127, 300};
        f.layout = variant % 2 ? BLayout::kn : BLayout::nk;
        f.out = variant % 3 == 2 ? DType::f32 : DType::bf16;
        f.generate_c = true;
        f.prob = true;
        f.bias = 1 + variant % 2;
        f.seed = 700 + variant;
        f.name = "half tiles variant " + std::to_string(variant++);
        check_forward(f);
        if (!glu) break;
      }
    }
  }
}

TEST(ForwardGpu, CasesC03C04C07) {
  REQUIRE_GPU();
  {  // C03: 256 experts, 240 empty, the rest 1..40 rows; then all 256 empty with M = 128.
    std::vector<int64_t> sizes(256, 0);
    std::mt19937 rng(3);
    int64_t total = 0;
    for (int i = 0; i < 16; ++i) {
      const int64_t s = 1 + static_cast<int64_t>(rng() % 40);
      sizes[static_cast<size_t>(rng() % 256)] += s;
    }
    for (int64_t s : sizes) total += s;
    Forward f;
    f.name = "C03 sparse";
    f.m = total + 5;
    f.n = 128;
    f.k = 64;
    f.sizes = sizes;
    f.generate_c = true;
    check_forward(f);
    f.name = "C03 all empty";
    f.m = 128;
    f.sizes.assign(256, 0);
    check_forward(f);
  }
  for (bool zero_tail : {false, true}) {  // C04: M = 1000, offsets[-1] = 744
    Forward f;
    f.name = zero_tail ? "C04 zero_tail" : "C04";
    f.m = 1000;
    f.n = 256;
    f.k = 128;
    f.sizes = {93, 93, 93, 93, 93, 93, 93, 93};
    f.zero_tail = zero_tail;
    f.generate_c = true;
    check_forward(f);
  }
  for (int64_t n : {128, 160, 200, 768}) {  // C07: N tails
    Forward f;
    f.name = "C07 N=" + std::to_string(n);
    f.m = 512;
    f.n = n;
    f.k = 64;
    f.sizes = {256, 256};
    check_forward(f);
  }
}

TEST(ForwardGpu, GarbageOffsetsClampLikeTheReference) {
  REQUIRE_GPU();
  const std::vector<std::vector<int32_t>> garbage = {
      {500, 200, 900, 100},            // decreasing
      {-50, 300, -7, 600},             // negative
      {100, 5000, 70000, 2147483647},  // past M
      {-2147483647 - 1, 0, 3, 1 << 30},
  };
  int i = 0;
  for (const auto& raw : garbage) {
    Forward f;
    f.name = "garbage offsets " + std::to_string(i++);
    f.m = 800;
    f.n = 256;
    f.k = 64;
    f.raw_offsets = raw;
    f.generate_c = true;
    f.zero_tail = i % 2 == 0;
    check_forward(f);
  }
  // The GLU kernel, with the options that read per-expert and per-row data (alpha, bias, prob) at the
  // clamped ranges; each activation and pairing in turn.
  const Activation activations[] = {Activation::swiglu, Activation::geglu, Activation::swiglu_clamped};
  const GluLayout pairings[] = {GluLayout::halves, GluLayout::interleaved32, GluLayout::interleaved32_up_first};
  i = 0;
  for (const auto& raw : garbage) {
    Forward f;
    f.name = "glu, garbage offsets " + std::to_string(i);
    f.glu = true;
    f.glu_params.activation = activations[i % 3];
    f.glu_params.layout = pairings[(i + 1) % 3];
    f.m = 800;
    f.n = 256;
    f.k = 64;
    f.raw_offsets = raw;
    f.alpha = true;
    f.prob = true;
    f.bias = 1 + i % 2;
    f.generate_c = true;
    f.zero_tail = i % 2 == 1;
    f.seed = 60 + i++;
    check_forward(f);
  }
}

TEST(ForwardGpu, RepeatsAreBitwiseIdentical) {
  REQUIRE_GPU();
  for (bool glu : {false, true}) {
    Forward f;
    f.glu = glu;
    f.m = 3000;
    f.n = 1024;
    f.k = 512;
    f.sizes = random_group_sizes(16, 2950, 5, 0.1);
    f.prob = true;
    f.generate_c = true;
    Inputs in(f);
    const Outputs first = run(f, in, true);
    for (int r = 0; r < 20; ++r) {
      const Outputs again = run(f, in, true);
      ASSERT_EQ(0, std::memcmp(first.d.data(), again.d.data(), first.d.storage_bytes())) << "repeat " << r;
      ASSERT_EQ(0, std::memcmp(first.c.data(), again.c.data(), first.c.storage_bytes())) << "repeat " << r;
    }
  }
}

TEST(ForwardGpu, CudaGraphReplayMatchesEager) {
  REQUIRE_GPU();
  Forward f;
  f.glu = true;
  f.m = 2000;
  f.n = 768;
  f.k = 256;
  f.sizes = random_group_sizes(8, 1900, 9, 0.2);
  f.prob = true;
  f.zero_tail = true;
  Inputs in(f);
  const Outputs eager = run(f, in, true);

  Outputs graph_out = make_outputs(f);
  DeviceTensor dd(graph_out.d);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreate(&stream), "stream");
  GroupedGemmGluArgs args;
  fill_common(args, f, in, true);
  args.glu = f.glu_params;
  args.d = dd.view();
  // The workspace (the dynamic tile order's counter, where the launch takes it) outlives the graph.
  const Workspace ws(grouped_gemm_glu_workspace_bytes(args), stream);
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  grouped_gemm_glu(args, ws.data(), ws.bytes(), stream);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int r = 0; r < 3; ++r) {
    poison(graph_out.d);
    dd.upload(graph_out.d);
    cuda_ok(cudaGraphLaunch(exec, stream), "replay");
    cuda_ok(cudaStreamSynchronize(stream), "replay sync");
    dd.download(graph_out.d);
    ASSERT_EQ(0, std::memcmp(eager.d.data(), graph_out.d.data(), eager.d.storage_bytes())) << "replay " << r;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Every sm_90 device in turn, each after device 0 has run the same kernels: a kernel's dynamic shared memory
// limit belongs to it on one device, so each device needs its own set-up (src/sm90/dispatch.cuh). The plain
// GEMM (cooperative kernel) and the GLU (ping-pong kernel) on each.
TEST(ForwardGpu, EveryDeviceInTurn) {
  REQUIRE_TWO_GPUS(devices);
  for (int device : devices) {
    const CurrentDevice current(device);
    for (bool glu : {false, true}) {
      Forward f;
      f.name = "device " + std::to_string(device) + (glu ? " glu" : " plain");
      f.glu = glu;
      f.m = 1000;
      f.n = 768;
      f.k = 2048;
      f.sizes = {300, 0, 1, 250, 400};
      f.prob = true;
      f.generate_c = true;
      f.seed = 900 + device;
      check_forward(f);
    }
  }
}

// Calls from several host threads at once, each on a non-blocking stream of its own, five calls each: the
// plain GEMM and the GLU, both B layouts, three activations and 16- and 32-bit outputs among them. The launch
// path's shared state (each kernel's per-device set-up, the per-thread device facts) is reached from all the
// threads; every thread's last outputs must match the reference.
TEST(ForwardGpu, CallsFromSeveralThreadsAtOnce) {
  REQUIRE_GPU();
  std::vector<Forward> problems(6);
  for (size_t i = 0; i < problems.size(); ++i) {
    Forward& f = problems[i];
    f.name = "thread " + std::to_string(i);
    f.m = 1500;
    f.k = 512;
    f.n = i % 2 ? 2048 : 768;
    f.layout = i % 3 == 1 ? BLayout::kn : BLayout::nk;
    f.sizes = random_group_sizes(7, 1450, 40 + i, 0.2);
    f.prob = i % 2 == 0;
    f.generate_c = i < 3;
    f.out = i == 4 ? DType::f32 : DType::bf16;
    f.glu = i >= 3;
    f.glu_params.activation = i == 3 ? Activation::swiglu : i == 4 ? Activation::geglu : Activation::swiglu_clamped;
    f.glu_params.layout = i == 4 ? GluLayout::interleaved32 : GluLayout::halves;
    f.seed = 1200 + i;
  }
  std::vector<std::unique_ptr<Inputs>> inputs;
  for (const Forward& f : problems) inputs.push_back(std::make_unique<Inputs>(f));
  std::vector<Outputs> got(problems.size());
  std::vector<std::string> errors(problems.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < problems.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        cudaStream_t stream;
        cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        for (int call = 0; call < 5; ++call) got[i] = run(problems[i], *inputs[i], true, stream);
        cuda_ok(cudaStreamDestroy(stream), "stream destroy");
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < problems.size(); ++i) {
    const Forward& f = problems[i];
    SCOPED_TRACE(f.name);
    ASSERT_EQ("", errors[i]);
    const Outputs ref = run(f, *inputs[i], false);
    const int64_t end = addressed_end(inputs[i]->offsets, f.m);
    EXPECT_TRUE(matches(got[i].d, expect_rows(ref.d, end, f.zero_tail))) << "output d";
    if (f.generate_c) {
      EXPECT_TRUE(matches(got[i].c, expect_rows(ref.c, end, f.zero_tail))) << "output c";
    }
  }
}

TEST(ForwardGpu, GemmSwigluDense) {
  REQUIRE_GPU();
  for (GluLayout pairing : {GluLayout::interleaved32_up_first, GluLayout::halves}) {
    const int64_t m = 1000, n = 1024, k = 512;
    HostTensor a = random_tensor(DType::bf16, {m, k}, 71);
    // b's rows padded by 40 elements (80 bytes), poisoned: the op reads them at their row stride
    HostTensor b(DType::bf16, {n, k}, 40);
    poison(b);
    fill_uniform(b, 72, -0.05, 0.05);
    auto run_dense = [&](bool device) {
      HostTensor ab12(DType::f32, {m, n}), c(DType::bf16, {m, n / 2});
      poison(ab12);
      poison(c);
      DeviceTensor da(a), db(b), dab(ab12), dcc(c);
      GemmSwigluArgs args;
      args.a = device ? da.view() : a.view();
      args.b = device ? db.view() : b.view();
      args.alpha = 0.75f;
      args.layout = pairing;
      args.ab12 = device ? dab.view() : ab12.view();
      args.c = device ? dcc.view() : c.view();
      call_op(gemm_swiglu_workspace_bytes, gemm_swiglu, args, device);
      if (device) {
        dab.download(ab12);
        dcc.download(c);
      }
      return std::make_pair(std::move(ab12), std::move(c));
    };
    auto ref = run_dense(false);
    auto got = run_dense(true);
    EXPECT_TRUE(matches(got.first, expect_rows(ref.first, m, false))) << "ab12";
    EXPECT_TRUE(matches(got.second, expect_rows(ref.second, m, false))) << "c";
  }
}

TEST(ForwardGpu, OneRowWithAnyRowStride) {
  // The contract leaves the row stride of a one-row matrix free (no second row is addressed): strides that
  // are no multiple of 16 bytes on a, d and c (past the row, or 1 as torch gives size-1 dims) must not reach
  // the tensor maps, which cannot encode them.
  REQUIRE_GPU();
  const int64_t n = 256, k = 128;
  const HostTensor a = random_tensor(DType::bf16, {1, k}, 81, -1.0, 1.0, 3);
  const HostTensor b = random_tensor(DType::bf16, {2, n, k}, 82, -0.08, 0.08);
  const HostTensor offsets = offsets_from_sizes({0, 1});
  for (bool unit_stride : {false, true}) {
    SCOPED_TRACE(unit_stride ? "row strides 1" : "row strides past the row");
    // The same row under a view whose row stride is 1 instead of the storage's.
    auto one_row = [&](TensorView v) {
      return unit_stride ? TensorView::strided(v.data, v.dtype, {1, v.shape[1]}, {1, 1}, v.device) : v;
    };
    auto run_glu = [&](bool device) {
      HostTensor d(DType::bf16, {1, n / 2}, 5), c(DType::bf16, {1, n}, 7);
      poison(d);
      poison(c);
      DeviceTensor da(a), db(b), doffsets(offsets), dd(d), dc(c);
      GroupedGemmGluArgs args;
      args.a = one_row(device ? da.view() : a.view());
      args.b.layout = BLayout::nk;
      args.b.dense = device ? db.view() : b.view();
      args.offsets = device ? doffsets.view() : offsets.view();
      args.d = one_row(device ? dd.view() : d.view());
      args.c = one_row(device ? dc.view() : c.view());
      call_op(grouped_gemm_glu_workspace_bytes, grouped_gemm_glu, args, device);
      if (device) {
        dd.download(d);
        dc.download(c);
      }
      return std::make_pair(std::move(d), std::move(c));
    };
    const auto ref = run_glu(false);
    const auto got = run_glu(true);
    EXPECT_TRUE(matches(got.first, expect_rows(ref.first, 1, false))) << "d";
    EXPECT_TRUE(matches(got.second, expect_rows(ref.second, 1, false))) << "c";
  }
}

TEST(ForwardGpu, UnsupportedInputWritesNothing) {
  // f16 inputs have no sm_90a kernel: the op raises `unsupported` before it writes anything, the amax it
  // would have started from zero included.
  REQUIRE_GPU();
  const int64_t m = 64, n = 128, k = 64;
  const HostTensor a = random_tensor(DType::f16, {m, k}, 83);
  const HostTensor b = random_tensor(DType::f16, {n, k}, 84, -0.1, 0.1);
  HostTensor d = poisoned(DType::f16, {m, n}), amax = poisoned(DType::f32, {1});  // c and amax
  DeviceTensor da(a), db(b), dd(d), damax(amax);
  GemmAmaxArgs args;
  args.a = da.view();
  args.b = db.view();
  args.c = dd.view();
  args.amax = damax.view();
  try {
    call_op(gemm_amax_workspace_bytes, gemm_amax, args, true);
    ADD_FAILURE() << "gemm_amax with f16 inputs on the cuda backend did not raise";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
  dd.download(d);
  damax.download(amax);
  EXPECT_TRUE(same_bytes(d, poisoned(DType::f16, {m, n}))) << "c was written";
  EXPECT_TRUE(same_bytes(amax, poisoned(DType::f32, {1}))) << "amax was written";
}

TEST(ForwardGpu, C11RowTimesNPast2To31) {
  REQUIRE_GPU();
  // 1.1M rows x 2048 columns = 2.25e9 elements of D: 64-bit addressing in the epilogue.
  const int64_t m = 1100000, n = 2048, k = 64, e = 4;
  HostTensor a = random_tensor(DType::bf16, {m, k}, 81);
  HostTensor b = random_tensor(DType::bf16, {e, n, k}, 82, -0.125, 0.125);
  const std::vector<int64_t> sizes = {300000, 0, 500000, 300000};
  HostTensor offsets = offsets_from_sizes(sizes);
  DeviceTensor da(a), db(b), doff(offsets);
  void* dd = nullptr;
  cuda_ok(cudaMalloc(&dd, static_cast<size_t>(m * n) * 2), "cudaMalloc d");
  GroupedGemmArgs args;
  args.a = da.view();
  args.b.dense = db.view();
  args.offsets = doff.view();
  args.d = TensorView::contiguous(dd, DType::bf16, {m, n}, Device::cuda);
  call_op(grouped_gemm_workspace_bytes, grouped_gemm, args, true);
  // The last 256 rows belong to the last expert: compare them with a reference of those rows alone.
  const int64_t rows = 256;
  HostTensor a_tail(DType::bf16, {rows, k});
  std::memcpy(a_tail.data(), static_cast<const uint16_t*>(a.data()) + (m - rows) * k, rows * k * 2);
  HostTensor off_tail = offsets_from_sizes({0, 0, 0, rows});
  HostTensor ref(DType::bf16, {rows, n}), got(DType::bf16, {rows, n});
  poison(ref);
  GroupedGemmArgs rargs;
  rargs.a = a_tail.view();
  rargs.b.dense = b.view();
  rargs.offsets = off_tail.view();
  rargs.d = ref.view();
  call_op(grouped_gemm_workspace_bytes, grouped_gemm, rargs, false);
  cuda_ok(cudaMemcpy(got.data(), static_cast<uint16_t*>(dd) + (m - rows) * n, rows * n * 2, cudaMemcpyDeviceToHost),
          "download tail");
  cudaFree(dd);
  EXPECT_TRUE(matches(got, expect_rows(ref, rows, false)));
}

}  // namespace
}  // namespace moegemm::testing
