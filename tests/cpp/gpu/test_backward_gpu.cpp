// grouped_gemm_dglu, grouped_gemm_srelu, grouped_gemm_dsrelu and the dense gemm_amax, gemm_srelu and
// gemm_dsrelu on the sm_90a kernels, against the CPU reference run through the same API on the same bytes.
// Outputs are poisoned before each call: addressed elements must be written and close to the reference,
// rows past the last expert end must keep the poison (zeros with zero_tail), per-expert reductions are
// exactly 0 for empty experts. wgrad: test_backward_wgrad_gpu.cpp; group-size edge cases, garbage offsets
// and the shared case list: test_backward_edges_gpu.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "common/scoped_env.hpp"
#include "gpu/backward_ops.hpp"

namespace moegemm::testing {
namespace {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::swiglu: return "swiglu";
    case Activation::geglu: return "geglu";
    case Activation::swiglu_clamped: return "swiglu_clamped";
  }
  return "?";
}

const char* pairing_name(GluLayout l) {
  switch (l) {
    case GluLayout::halves: return "halves";
    case GluLayout::interleaved32: return "interleaved32";
    case GluLayout::interleaved32_up_first: return "interleaved32_up_first";
  }
  return "?";
}

const char* dtype_str(DType t) { return t == DType::f32 ? "f32" : t == DType::f16 ? "f16" : "bf16"; }

constexpr Activation kActivations[] = {Activation::swiglu, Activation::geglu, Activation::swiglu_clamped};
constexpr GluLayout kPairings[] = {GluLayout::halves, GluLayout::interleaved32, GluLayout::interleaved32_up_first};

/// swiglu_clamped with a limit inside the range of the random C (|C| < 4, beta up to 1.5), so that the
/// clamp is active on part of the elements.
void clamp_inside_range(GluParams& glu) {
  if (glu.activation != Activation::swiglu_clamped) return;
  glu.limit = 3.0f;
  glu.act_alpha = 1.5f;
  glu.linear_offset = 0.75f;
}

/// A dGLU case of one activation and pairing (the clamped SwiGLU's limits inside the data's range).
Grouped dglu_case(Activation act, GluLayout pairing) {
  Grouped p;
  p.op = GroupedOp::dglu;
  p.glu.activation = act;
  p.glu.layout = pairing;
  clamp_inside_range(p.glu);
  return p;
}

TEST(BackwardGpu, DgluActivationsAndLayouts) {
  REQUIRE_GPU();
  int variant = 0;
  for (Activation act : kActivations) {
    for (GluLayout pairing : kPairings) {
      for (BLayout layout : {BLayout::nk, BLayout::kn}) {
        Grouped p = dglu_case(act, pairing);
        p.layout = layout;
        p.n = 96;  // I = 96: not a multiple of the tile; 2I = 192 is a multiple of 64 (interleaved layouts)
        p.k = variant % 2 ? 24 : 136;
        p.alpha = variant % 2 == 0;
        p.beta = variant % 3 != 0;
        p.prob = true;
        p.dprob = true;
        p.dbias = 1 + variant % 2;
        p.amax = true;
        p.c_dtype = variant % 4 == 3 ? DType::f32 : DType::bf16;
        p.out = variant % 3 == 2 ? DType::f32 : DType::bf16;
        p.zero_tail = variant % 5 == 1;
        p.seed = 1000 + 10 * variant;
        p.name = std::string(activation_name(act)) + " " + pairing_name(pairing) +
                 (layout == BLayout::nk ? " nk" : " kn") + " K=" + std::to_string(p.k);
        ++variant;
        check_grouped(p);
      }
    }
  }
}

TEST(BackwardGpu, DgluOptions) {
  REQUIRE_GPU();
  // Every combination of alpha, beta, prob and zero_tail; the other options rotate through all their values.
  // (C, dC): all four of bf16/f32 over the first 16 variants; then f16 dC over each C dtype, and f16 C.
  const DType f16_c[] = {DType::bf16, DType::f16, DType::f32, DType::f16};
  const DType f16_dc[] = {DType::f16, DType::f16, DType::f16, DType::bf16};
  for (int v = 0; v < 24; ++v) {
    Grouped p;
    p.op = GroupedOp::dglu;
    p.glu.activation = kActivations[v % 3];
    p.glu.layout = kPairings[(v / 3) % 3];
    clamp_inside_range(p.glu);
    p.alpha = v & 1;
    p.beta = v & 2;
    p.prob = v & 4;
    p.zero_tail = v & 8;
    p.dprob = v % 5 != 2;
    p.dbias = v % 3;  // none, f32, bf16
    p.amax = v % 2 == 0 || v == 15;
    p.c_dtype = v >= 16 ? f16_c[v % 4] : v % 4 < 2 ? DType::bf16 : DType::f32;
    p.out = v >= 16 ? f16_dc[v % 4] : (v % 4 == 0 || v % 4 == 3) ? DType::bf16 : DType::f32;
    p.layout = v % 2 ? BLayout::kn : BLayout::nk;
    p.ptrs = v % 3 == 2;
    p.row_pad = v % 7 == 3 ? 8 : 0;
    p.k = v % 2 ? 136 : 24;
    p.seed = 2000 + 10 * v;
    p.name = "options " + std::to_string(v) + " (alpha " + std::to_string(p.alpha) + ", beta " +
             std::to_string(p.beta) + ", prob " + std::to_string(p.prob) + ", zero_tail " +
             std::to_string(p.zero_tail) + ", C " + dtype_str(p.c_dtype) + ", dC " + dtype_str(p.out) +
             (p.ptrs ? ", pointer weights" : "") + ")";
    check_grouped(p);
  }
}

TEST(BackwardGpu, DgluShapes) {
  REQUIRE_GPU();
  int variant = 0;
  for (int64_t i : {32, 96, 136, 768, 1440}) {
    for (int64_t k : {24, 136, 1024}) {
      Grouped p;
      p.op = GroupedOp::dglu;
      // I = 136: 2I = 272 is not a multiple of 64, so halves only.
      p.glu.layout = i == 136 ? GluLayout::halves : kPairings[variant % 3];
      p.glu.activation = kActivations[(variant / 3) % 3];
      clamp_inside_range(p.glu);
      p.m = 400;
      p.n = i;
      p.k = k;
      p.sizes = {150, 0, 1, 129, 70};
      p.layout = variant % 2 ? BLayout::kn : BLayout::nk;
      p.prob = true;
      p.dprob = true;
      p.dbias = 1;
      p.amax = true;
      p.seed = 3000 + 10 * variant++;
      p.name = "I=" + std::to_string(i) + " K=" + std::to_string(k) + " " + pairing_name(p.glu.layout);
      check_grouped(p);
    }
  }
}

TEST(BackwardGpu, DgluWholePassesWithoutReductions) {
  REQUIRE_GPU();
  // dprob only (no amax, no dbias), no beta, 16-bit C and dC, I a multiple of 128 and experts of more than 64
  // rows: most 64-row slices take the saved-tile epilogue's loop without the per-chunk amax and dbias code
  // (swiglu and geglu; swiglu_clamped has no whole-pass loop and takes the general one).
  int variant = 0;
  for (Activation act : kActivations) {
    for (GluLayout pairing : kPairings) {
      Grouped p = dglu_case(act, pairing);
      p.m = 512;
      p.n = variant % 2 ? 768 : 384;
      p.k = variant % 3 ? 136 : 1024;
      p.sizes = {150, 0, 1, 129, 70, 100};
      p.layout = variant % 2 ? BLayout::kn : BLayout::nk;
      p.alpha = variant % 2 == 0;
      p.prob = true;
      p.dprob = true;
      p.seed = 5000 + 10 * variant++;
      p.name = std::string(activation_name(act)) + " whole passes I=" + std::to_string(p.n) +
               " K=" + std::to_string(p.k) + " " + pairing_name(pairing);
      check_grouped(p);
    }
  }
}

TEST(BackwardGpu, DgluPointerWeights) {
  REQUIRE_GPU();
  int variant = 0;
  for (BLayout layout : {BLayout::nk, BLayout::kn}) {
    for (GluLayout pairing : kPairings) {
      Grouped p;
      p.op = GroupedOp::dglu;
      p.glu.layout = pairing;
      p.glu.activation = kActivations[variant % 3];
      clamp_inside_range(p.glu);
      p.m = 900;
      p.n = 256;
      p.k = 200;
      p.sizes = {100, 0, 230, 1, 64, 300, 0, 150};
      p.layout = layout;
      p.ptrs = true;
      p.alpha = true;
      p.prob = true;
      p.dprob = true;
      p.dbias = 2;
      p.amax = true;
      p.seed = 4000 + 10 * variant++;
      p.name = std::string("pointer weights ") + (layout == BLayout::nk ? "nk " : "kn ") + pairing_name(pairing);
      check_grouped(p);
    }
  }
}

TEST(BackwardGpu, GroupedSreluForward) {
  REQUIRE_GPU();
  const DType outs[] = {DType::bf16, DType::f16, DType::f32};
  for (int v = 0; v < 12; ++v) {
    Grouped p;
    p.op = GroupedOp::srelu;
    p.n = v % 3 == 0 ? 136 : v % 3 == 1 ? 264 : 768;
    p.k = v % 2 ? 24 : 200;
    p.alpha = v & 1;
    p.prob = v & 2;
    p.zero_tail = v & 4;
    p.bias = v % 3;  // none, bf16, f32
    p.c_out = v % 4 != 3;
    p.out = outs[v % 3];
    p.c_dtype = outs[(v + 1) % 3];
    p.layout = (v / 2) % 2 ? BLayout::kn : BLayout::nk;
    p.ptrs = v % 5 == 2;
    p.row_pad = v == 7 ? 8 : 0;
    p.seed = 5000 + 10 * v;
    p.name = "srelu variant " + std::to_string(v) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k) +
             " D " + dtype_str(p.out);
    check_grouped(p);
  }
}

TEST(BackwardGpu, GroupedDsreluOptions) {
  REQUIRE_GPU();
  // (C, dC): all four of bf16/f32 over the first 16 variants; then f16 dC over each C dtype, and f16 C.
  const DType f16_c[] = {DType::bf16, DType::f16, DType::f32, DType::f16};
  const DType f16_dc[] = {DType::f16, DType::f16, DType::f16, DType::bf16};
  for (int v = 0; v < 24; ++v) {
    Grouped p;
    p.op = GroupedOp::dsrelu;
    p.n = v % 3 == 0 ? 96 : v % 3 == 1 ? 264 : 1024;
    p.k = v % 2 ? 136 : 24;
    p.alpha = v & 1;
    p.prob = v & 2;
    p.zero_tail = v & 4;
    p.dprob = v & 8;
    p.dbias = v % 3;  // none, f32, bf16
    p.amax = v % 2 == 0 || v == 15;
    p.c_dtype = v >= 16 ? f16_c[v % 4] : v % 4 < 2 ? DType::bf16 : DType::f32;
    p.out = v >= 16 ? f16_dc[v % 4] : (v % 4 == 0 || v % 4 == 3) ? DType::bf16 : DType::f32;
    p.layout = (v / 2) % 2 ? BLayout::kn : BLayout::nk;
    p.ptrs = v % 5 == 3;
    p.row_pad = v == 9 ? 8 : 0;
    p.seed = 6000 + 10 * v;
    p.name = "dsrelu variant " + std::to_string(v) + " N=" + std::to_string(p.n) + " C " + dtype_str(p.c_dtype) +
             " dC " + dtype_str(p.out);
    check_grouped(p);
  }
}

// 1 to 1024 experts (kMaxExperts), a fifth of them empty, through dglu, srelu and dsrelu with every
// per-expert operand (alpha, beta, bias, pointer weights) and per-expert output (dbias) the op has.
TEST(BackwardGpu, ExpertCounts) {
  REQUIRE_GPU();
  int variant = 0;
  for (int64_t e : {1, 7, 64, 256, 1024}) {
    for (GroupedOp op : {GroupedOp::dglu, GroupedOp::srelu, GroupedOp::dsrelu}) {
      Grouped p;
      p.op = op;
      p.m = std::max<int64_t>(1500, 3 * e);
      p.n = op == GroupedOp::dglu ? 128 : 264;
      p.k = 136;
      p.sizes = random_group_sizes(e, p.m - 37, 17 + e, e == 1 ? 0.0 : 0.2);  // the one expert is never empty
      ASSERT_GT(std::accumulate(p.sizes.begin(), p.sizes.end(), int64_t{0}), 0);
      p.glu.layout = kPairings[variant % 3];
      p.glu.activation = kActivations[(variant / 3) % 3];
      clamp_inside_range(p.glu);
      p.layout = variant % 2 ? BLayout::kn : BLayout::nk;
      p.ptrs = e == 1024 && op != GroupedOp::srelu;
      p.alpha = true;
      p.beta = op == GroupedOp::dglu;
      p.prob = true;
      p.bias = op == GroupedOp::srelu ? 1 + variant % 2 : 0;
      p.c_out = true;
      p.dprob = true;
      p.dbias = op == GroupedOp::srelu ? 0 : 1 + variant % 2;
      p.amax = true;
      p.zero_tail = variant % 2 == 1;
      p.seed = 9000 + 10 * variant++;
      p.name = "E=" + std::to_string(e) + (p.ptrs ? ", pointer weights" : "");
      check_grouped(p);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Dense ops (§6): one GEMM, every row addressed, scalar alpha.

enum class DenseOp { amax, srelu, dsrelu };

struct Dense {
  std::string name;
  DenseOp op = DenseOp::amax;
  int64_t m = 300, n = 264, k = 136;
  BLayout layout = BLayout::nk;
  float alpha = 1.0f;
  bool prob = false, c_out = false, dprob = false;
  bool bias = false;            ///< srelu: an (N,) bias, f32 or bf16 by seed
  int dbias = 0;                ///< dsrelu: none, f32, bf16 (N,) column sums of dC
  bool dsrelu_amax = false;     ///< dsrelu: amax (1,)
  DType out = DType::bf16;      ///< amax: C; srelu: D; dsrelu: dC
  DType c_dtype = DType::bf16;  ///< srelu: output C; dsrelu: the saved pre-activation C
  uint64_t seed = 1;
};

struct DenseInputs {
  Operand a, b, prob, c, bias;
  explicit DenseInputs(const Dense& p) {
    a = Operand(random_tensor(DType::bf16, {p.m, p.k}, p.seed));
    const double scale = 1.0 / std::sqrt(static_cast<double>(p.k));
    b = Operand(random_tensor(DType::bf16, p.layout == BLayout::nk ? std::vector<int64_t>{p.n, p.k}
                                                                   : std::vector<int64_t>{p.k, p.n},
                              p.seed + 1, -scale, scale));
    if (p.prob) prob = Operand(random_tensor(DType::f32, {p.m}, p.seed + 2, 0.0, 1.0));
    if (p.op == DenseOp::dsrelu) c = Operand(random_tensor(p.c_dtype, {p.m, p.n}, p.seed + 3, -2.0, 2.0));
    if (p.bias) bias = Operand(random_tensor(p.seed % 2 ? DType::bf16 : DType::f32, {p.n}, p.seed + 4, -1.0, 1.0));
  }
};

struct DenseOutputs {
  HostTensor main, c, dprob, amax, dbias;  ///< main: C of gemm_amax, D of gemm_srelu, dC of gemm_dsrelu
};

DenseOutputs run_dense(const Dense& p, const DenseInputs& in, bool device) {
  DenseOutputs o;
  o.main = poisoned(p.out, {p.m, p.n});
  if (p.op == DenseOp::amax) o.amax = poisoned(DType::f32, {1});
  if (p.op == DenseOp::srelu && p.c_out) o.c = poisoned(p.c_dtype, {p.m, p.n});
  if (p.op == DenseOp::dsrelu && p.dprob) o.dprob = poisoned(DType::f32, {p.m});
  if (p.op == DenseOp::dsrelu && p.dbias) o.dbias = poisoned(p.dbias == 1 ? DType::f32 : DType::bf16, {p.n});
  if (p.op == DenseOp::dsrelu && p.dsrelu_amax) o.amax = poisoned(DType::f32, {1});
  OutputBuffer main(o.main, device), c(o.c, device), dprob(o.dprob, device), amax(o.amax, device),
      dbias(o.dbias, device);
  switch (p.op) {
    case DenseOp::amax: {
      GemmAmaxArgs args;
      args.a = in.a.view(device);
      args.b = in.b.view(device);
      args.b_layout = p.layout;
      args.c = main.view();
      args.amax = amax.view();
      call_op(gemm_amax_workspace_bytes, gemm_amax, args, device);
      break;
    }
    case DenseOp::srelu: {
      GemmSreluArgs args;
      args.a = in.a.view(device);
      args.b = in.b.view(device);
      args.b_layout = p.layout;
      args.alpha = p.alpha;
      args.prob = in.prob.view(device);
      args.bias = in.bias.view(device);
      args.d = main.view();
      args.c = c.view();
      call_op(gemm_srelu_workspace_bytes, gemm_srelu, args, device);
      break;
    }
    case DenseOp::dsrelu: {
      GemmDsreluArgs args;
      args.a = in.a.view(device);
      args.b = in.b.view(device);
      args.b_layout = p.layout;
      args.alpha = p.alpha;
      args.c = in.c.view(device);
      args.prob = in.prob.view(device);
      args.dc = main.view();
      args.dprob = dprob.view();
      args.dbias = dbias.view();
      args.amax = amax.view();
      call_op(gemm_dsrelu_workspace_bytes, gemm_dsrelu, args, device);
      break;
    }
  }
  fetch_all({&main, &c, &dprob, &amax, &dbias});
  return o;
}

void check_dense(const Dense& p) {
  SCOPED_TRACE(p.name);
  const DenseInputs in(p);
  const DenseOutputs ref = run_dense(p, in, false);
  const DenseOutputs got = run_dense(p, in, true);
  EXPECT_TRUE(matches(got.main, expect_rows(ref.main, p.m, false))) << "main output";
  if (ref.c.rank() > 0) {
    EXPECT_TRUE(matches(got.c, expect_rows(ref.c, p.m, false))) << "output c";
  }
  if (ref.dprob.rank() > 0) {
    EXPECT_TRUE(matches(got.dprob, expect_rows(ref.dprob, p.m, false))) << "output dprob";
  }
  // amax and dbias are written even for M = 0, then exactly 0.
  if (ref.amax.rank() > 0) {
    EXPECT_TRUE(matches(got.amax, expect_reduction(ref.amax, p.m > 0))) << "output amax";
  }
  if (ref.dbias.rank() > 0) {
    EXPECT_TRUE(matches(got.dbias, expect_reduction(ref.dbias, p.m > 0))) << "output dbias";
  }
}

TEST(BackwardGpu, GemmAmax) {
  REQUIRE_GPU();
  const DType outs[] = {DType::bf16, DType::f32, DType::f16};
  int variant = 0;
  for (int64_t m : {0, 1, 300, 1000}) {
    for (BLayout layout : {BLayout::nk, BLayout::kn}) {
      Dense p;
      p.op = DenseOp::amax;
      p.m = m;
      p.n = variant % 3 == 0 ? 136 : variant % 3 == 1 ? 768 : 24;
      p.k = variant % 2 ? 24 : 520;
      p.layout = layout;
      p.out = outs[variant % 3];
      p.seed = 7000 + 10 * variant++;
      p.name = "gemm_amax M=" + std::to_string(m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k) +
               (layout == BLayout::nk ? " nk " : " kn ") + dtype_str(p.out);
      check_dense(p);
    }
  }
}

TEST(BackwardGpu, GemmSreluAndDsrelu) {
  REQUIRE_GPU();
  const DType types[] = {DType::bf16, DType::f32, DType::f16};
  // gemm_dsrelu from variant 8 on: f16 dC over each C dtype, and f16 C.
  const DType f16_c[] = {DType::bf16, DType::f16, DType::f32, DType::f16};
  const DType f16_dc[] = {DType::f16, DType::f16, DType::f16, DType::bf16};
  for (int v = 0; v < 12; ++v) {
    for (DenseOp op : {DenseOp::srelu, DenseOp::dsrelu}) {
      Dense p;
      p.op = op;
      p.m = v == 7 ? 0 : v % 4 == 3 ? 1 : 517;
      p.n = v % 2 ? 264 : 96;
      p.k = v % 3 == 0 ? 24 : 136;
      p.layout = (v / 2) % 2 ? BLayout::kn : BLayout::nk;
      p.alpha = v % 2 ? 0.75f : 1.0f;
      p.prob = v & 1;
      p.c_out = v % 3 != 2;
      p.dprob = (v & 4) != 0;
      p.bias = v % 3 != 1;
      p.dbias = v % 3;  // none, f32, bf16
      p.dsrelu_amax = v % 2 == 0 || v == 7;
      if (op == DenseOp::srelu) {  // forward outputs: bf16, f16 or f32
        p.out = types[v % 3];
        p.c_dtype = types[(v + 1) % 3];
      } else if (v < 8) {  // the saved C and dC of the backward: all four of bf16/f32
        p.out = v % 2 ? DType::f32 : DType::bf16;
        p.c_dtype = (v / 2) % 2 ? DType::f32 : DType::bf16;
      } else {
        p.out = f16_dc[v % 4];
        p.c_dtype = f16_c[v % 4];
      }
      p.seed = 8000 + 10 * v + (op == DenseOp::dsrelu);
      p.name = std::string(op == DenseOp::srelu ? "gemm_srelu" : "gemm_dsrelu") + " variant " + std::to_string(v) +
               " out " + dtype_str(p.out) + " C " + dtype_str(p.c_dtype);
      check_dense(p);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Determinism and the compute-sanitizer target.

TEST(BackwardGpu, RepeatsAreBitwiseIdentical) {
  REQUIRE_GPU();
  for (GroupedOp op : {GroupedOp::dglu, GroupedOp::dsrelu}) {
    SCOPED_TRACE(op_name(op));
    Grouped p;
    p.op = op;
    p.glu.layout = GluLayout::interleaved32;
    p.m = 3000;
    p.n = 1024;
    p.k = 512;
    p.sizes = random_group_sizes(16, 2950, 5, 0.1);
    p.alpha = true;
    p.prob = true;
    p.dprob = true;
    p.dbias = 1;
    p.amax = true;
    const GroupedInputs in(p);
    const GroupedOutputs first = run_grouped(p, in, true);
    for (int r = 0; r < 20; ++r) ASSERT_TRUE(same_outputs(first, run_grouped(p, in, true))) << "repeat " << r;
  }
  Wgrad w;
  w.m = 6000;
  w.h = 512;
  w.n = 768;
  w.sizes = {1, 2500, 63, 0, 1900, 129, 1000};
  const WgradInputs in(w);
  const HostTensor first = run_wgrad(w, in, true);
  for (int r = 0; r < 20; ++r) ASSERT_TRUE(same_bytes(first, run_wgrad(w, in, true))) << "wgrad repeat " << r;
}

// The launcher reads MOEGEMM_DGLU_SCHEDULE at every launch only where it is set at the first one (launch.cu,
// SwitchableEnv): set it before any (empty, the launcher's own choice, unless the environment has a value),
// so that DgluKernelsAgreeBitwise can switch kernels between calls.
[[maybe_unused]] const bool kDgluScheduleSwitchable = setenv("MOEGEMM_DGLU_SCHEDULE", "", 0) == 0;

// The cooperative kernel (tiles of 128 or 256 dH columns) and the ping-pong kernel (128) give bitwise the same
// dC, dprob, dbias and amax: the launcher's choice depends on M and the SM count, so rows split over devices
// may take either kernel, and docs/jax.md promises each device's rows bitwise as the unsplit call gives them.
// I = 224 and 1440 end in a partial pass (96 and 32 columns of the last 128).
TEST(BackwardGpu, DgluKernelsAgreeBitwise) {
  REQUIRE_GPU();
  int variant = 0;
  for (Activation act : kActivations) {
    for (GluLayout pairing : kPairings) {
      Grouped p = dglu_case(act, pairing);
      p.m = 1300;
      p.n = variant % 2 ? 1440 : 224;
      p.k = 520;
      p.sizes = {300, 0, 1, 129, 70, 513, 64, 100};
      p.layout = variant % 2 ? BLayout::kn : BLayout::nk;
      p.alpha = true;
      p.beta = variant % 3 == 1;
      p.prob = true;
      p.dprob = true;
      p.dbias = 1 + variant % 2;
      p.amax = variant % 3 != 2;
      p.seed = 7000 + 10 * variant++;
      SCOPED_TRACE(std::string(activation_name(act)) + " " + pairing_name(pairing) + " I=" + std::to_string(p.n));
      const GroupedInputs in(p);
      GroupedOutputs cooperative, pingpong;
      {
        const ScopedEnv schedule("MOEGEMM_DGLU_SCHEDULE", "cooperative");
        cooperative = run_grouped(p, in, true);
      }
      {
        const ScopedEnv schedule("MOEGEMM_DGLU_SCHEDULE", "pingpong");
        pingpong = run_grouped(p, in, true);
      }
      EXPECT_TRUE(same_outputs(cooperative, pingpong));
    }
  }
}

/// Element (row, col) of an operand becomes NaN, on the host and in its device copy.
void put_nan(Operand& o, int64_t row, int64_t col) {
  o.host.set({row, col}, NAN);
  o.dev = DeviceTensor(o.host);
}

// NaN inputs give NaN exactly where the reference gives it: the clamps of swiglu_clamped, relu and amax keep
// NaN, as torch.clamp, torch.relu and torch.amax do. dGLU on both epilogue paths (16-bit C and dC through the
// staging area; f32 C read from global memory), dsrelu, and gemm_amax.
TEST(BackwardGpu, NanInputsPropagateLikeTheReference) {
  REQUIRE_GPU();
  int variant = 0;
  for (Activation act : kActivations) {
    for (DType io : {DType::bf16, DType::f32}) {
      Grouped p;
      p.op = GroupedOp::dglu;
      p.glu.activation = act;
      p.glu.layout = variant % 2 ? GluLayout::interleaved32 : GluLayout::halves;
      clamp_inside_range(p.glu);
      p.n = 256;
      p.prob = true;
      p.dprob = true;
      p.dbias = 1;
      p.amax = true;
      p.c_dtype = io;
      p.out = io;
      p.seed = 4000 + 10 * variant++;
      p.name = std::string("NaN in C, ") + activation_name(act) + " " + pairing_name(p.glu.layout) + " " +
               dtype_str(io);
      SCOPED_TRACE(p.name);
      GroupedInputs in(p);
      put_nan(in.c, 7, 5);              // a gate column of expert 0 (both pairings)
      put_nan(in.c, 240, 2 * p.n - 3);  // an up column of expert 4 (also in expert 3's tile, past its end)
      const GroupedOutputs ref = run_grouped(p, in, false);
      const GroupedOutputs got = run_grouped(p, in, true);
      NanCounts nans;
      expect_matches_reference(p, in, ref, got, &nans);
      EXPECT_GT(nans.dc, 0);
      EXPECT_EQ(nans.dprob, 2);  // h is NaN in both rows, for every activation
      EXPECT_GT(nans.dbias, 0);
      EXPECT_GT(nans.amax, 0);
    }
  }
  {
    Grouped p;
    p.op = GroupedOp::dsrelu;
    p.name = "NaN in dY, dsrelu";
    SCOPED_TRACE(p.name);
    p.prob = true;
    p.dprob = true;
    p.dbias = 1;
    p.amax = true;
    GroupedInputs in(p);
    // Row 50 of expert 0: every dH of the row is NaN, so is dC (2 relu(c) dH prob) where c > 0; where c <= 0
    // dC is 0 whatever dH is (docs/ops.md §4), and so is dbias's column.
    put_nan(in.a, 50, 3);
    int64_t positive = 0;
    for (int64_t n = 0; n < p.n; ++n) positive += in.c.host(50, n) > 0;
    ASSERT_GT(positive, 0);
    ASSERT_LT(positive, p.n);
    const GroupedOutputs ref = run_grouped(p, in, false);
    const GroupedOutputs got = run_grouped(p, in, true);
    NanCounts nans;
    expect_matches_reference(p, in, ref, got, &nans);
    EXPECT_EQ(nans.dc, positive);
    EXPECT_EQ(nans.dprob, 1);
    EXPECT_EQ(nans.dbias, positive);
    EXPECT_EQ(nans.amax, 1);
  }
  {
    Dense p;
    p.op = DenseOp::amax;
    SCOPED_TRACE("NaN in A, gemm_amax");
    DenseInputs in(p);
    put_nan(in.a, 17, 3);
    const DenseOutputs ref = run_dense(p, in, false);
    const DenseOutputs got = run_dense(p, in, true);
    int64_t c_nans = 0, amax_nans = 0;
    EXPECT_TRUE(matches(got.main, nan_where_reference_is(expect_rows(ref.main, p.m, false), ref.main, &c_nans)));
    EXPECT_TRUE(matches(got.amax, nan_where_reference_is(expect_reduction(ref.amax, true), ref.amax, &amax_nans)));
    EXPECT_EQ(c_nans, p.n);
    EXPECT_EQ(amax_nans, 1);
  }
}

// A NaN dH (from a NaN in dY) gives 0 where swiglu_clamped's clamps cut the gradient off, as torch's clamp
// backward does, and NaN elsewhere: on both dGLU epilogue paths (16-bit C through the staging area, f32 C
// from global memory).
TEST(BackwardGpu, ClampedDgluMasksANonFiniteDh) {
  REQUIRE_GPU();
  for (DType io : {DType::bf16, DType::f32}) {
    Grouped p;
    p.op = GroupedOp::dglu;
    p.glu.activation = Activation::swiglu_clamped;
    clamp_inside_range(p.glu);
    p.n = 256;
    p.prob = true;
    p.dprob = true;
    p.dbias = 1;
    p.amax = true;
    p.c_dtype = io;
    p.out = io;
    p.seed = 4600;
    p.name = std::string("NaN in dY, swiglu_clamped ") + dtype_str(io);
    SCOPED_TRACE(p.name);
    GroupedInputs in(p);
    put_nan(in.a, 50, 3);  // row 50 of expert 0
    int64_t cut = 0;  // gates above the limit and ups beyond +-limit in row 50 (halves: gates, then ups)
    for (int64_t i = 0; i < p.n; ++i) {
      cut += in.c.host(50, i) > p.glu.limit;
      cut += std::fabs(in.c.host(50, p.n + i)) > p.glu.limit;
    }
    ASSERT_GT(cut, 0);
    const GroupedOutputs ref = run_grouped(p, in, false);
    const GroupedOutputs got = run_grouped(p, in, true);
    NanCounts nans;
    expect_matches_reference(p, in, ref, got, &nans);
    EXPECT_EQ(nans.dc, 2 * p.n - cut);
    EXPECT_EQ(nans.dbias, 2 * p.n - cut);
    EXPECT_EQ(nans.dprob, 1);
    EXPECT_EQ(nans.amax, 2);
  }
}

// Small on purpose: the racecheck target of scripts/gpu_check.sh (dglu's cross-tile dprob/dbias/amax
// reductions, and wgrad's ragged contraction).
TEST(BackwardGpu, DgluReductionsAndWgradSmall) {
  REQUIRE_GPU();
  Grouped p;
  p.op = GroupedOp::dglu;
  p.name = "dglu with dprob, dbias and amax";
  p.m = 420;
  p.n = 256;
  p.k = 64;
  p.sizes = {150, 0, 37, 200};
  p.prob = true;
  p.dprob = true;
  p.dbias = 1;
  p.amax = true;
  check_grouped(p);
  Wgrad w;
  w.name = "small";
  w.m = 420;
  w.h = 64;
  w.n = 136;
  w.sizes = {150, 0, 37, 200};
  check_wgrad(w);
}

// Every sm_90 device in turn, each after device 0 has run the same kernels (a kernel's set-up is per device,
// src/sm90/dispatch.cuh): the dGLU with its reductions and the weight gradient on each.
TEST(BackwardGpu, EveryDeviceInTurn) {
  REQUIRE_TWO_GPUS(devices);
  for (int device : devices) {
    const CurrentDevice current(device);
    Grouped p;
    p.op = GroupedOp::dglu;
    p.name = "device " + std::to_string(device) + " dglu";
    p.m = 1000;
    p.n = 384;
    p.k = 4096;
    p.sizes = {300, 0, 1, 250, 400};
    p.prob = true;
    p.dprob = true;
    p.dbias = 1;
    p.amax = true;
    p.seed = 950 + device;
    check_grouped(p);
    Wgrad w;
    w.name = "device " + std::to_string(device) + " wgrad";
    w.seed = 970 + device;
    check_wgrad(w);
  }
}

}  // namespace
}  // namespace moegemm::testing
