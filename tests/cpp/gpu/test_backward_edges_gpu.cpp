// Group-size edge cases, garbage offsets and the shared case list (C03, C05, C10, C12) for the grouped
// backward-family ops on the sm_90a kernels, against the CPU reference on the same bytes. The garbage-offset
// and edge-case tests are also the compute-sanitizer (memcheck) targets of scripts/gpu_check.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/backward_ops.hpp"

namespace moegemm::testing {
namespace {

/// The same group sizes through every grouped backward-family op: dglu (dC, dprob, dbias, amax), srelu
/// (D, C), dsrelu (dC, dprob, dbias, amax) and wgrad. `variant` rotates options between calls.
void check_every_op(const std::string& name, int64_t m, const std::vector<int64_t>& sizes,
                    const std::vector<int32_t>& raw_offsets, int variant) {
  const bool zero_tail = variant % 2 == 1;
  Grouped g;
  g.name = name;
  g.m = m;
  g.sizes = sizes;
  g.raw_offsets = raw_offsets;
  g.k = 136;
  g.alpha = true;
  g.prob = true;
  g.zero_tail = zero_tail;
  g.seed = 20000 + 100 * variant;

  Grouped dglu = g;
  dglu.op = GroupedOp::dglu;
  dglu.n = 128;
  dglu.glu.layout = variant % 2 ? GluLayout::halves : GluLayout::interleaved32;
  dglu.beta = variant % 3 == 0;
  dglu.dprob = true;
  dglu.dbias = 1;
  dglu.amax = true;
  check_grouped(dglu);

  Grouped srelu = g;
  srelu.op = GroupedOp::srelu;
  srelu.n = 264;
  srelu.c_out = true;
  srelu.bias = 2;
  srelu.layout = BLayout::kn;
  check_grouped(srelu);

  Grouped dsrelu = g;
  dsrelu.op = GroupedOp::dsrelu;
  dsrelu.n = 264;
  dsrelu.dprob = true;
  dsrelu.dbias = 2;
  dsrelu.amax = true;
  dsrelu.ptrs = variant % 3 == 1;
  check_grouped(dsrelu);

  Wgrad w;
  w.name = name;
  w.m = m;
  w.sizes = sizes;
  w.raw_offsets = raw_offsets;
  const bool many_experts = w.experts() > 64;  // keeps the host side of C03's 256 experts cheap
  w.h = many_experts ? 24 : 136;
  w.n = many_experts ? 64 : 264;
  w.accumulate = variant % 3 == 1;
  w.ptrs = variant % 4 == 2;
  w.seed = 20050 + 100 * variant;
  check_wgrad(w);
}

TEST(BackwardGpu, GroupSizeEdgeCases) {
  REQUIRE_GPU();
  // M = 1024 everywhere: every pattern leaves at least 24 tail rows (untouched, or zero with zero_tail).
  const std::vector<std::pair<std::string, std::vector<int64_t>>> patterns = {
      {"random", {130, 7, 301, 64, 1, 250, 99, 148}},
      {"empty first", {0, 200, 300, 100, 0, 120, 80, 200}},
      {"empty middle", {200, 100, 0, 0, 300, 150, 50, 200}},
      {"empty last", {300, 200, 100, 150, 150, 50, 50, 0}},
      {"all empty", {0, 0, 0, 0, 0, 0, 0, 0}},
      {"one expert holds every row", {0, 0, 0, 1000, 0, 0, 0, 0}},
      {"1-row experts", {1, 1, 1, 1, 1, 1, 1, 993}},
      {"only 1-row experts, long tail", {1, 1, 1, 1, 1, 1, 1, 1}},
      {"offsets[-1] well below M", {100, 100, 100, 100, 100, 100, 100, 44}},
  };
  int variant = 0;
  for (const auto& [name, sizes] : patterns) check_every_op(name, 1024, sizes, {}, variant++);
}

TEST(BackwardGpu, GarbageOffsetsClampLikeTheReference) {
  REQUIRE_GPU();
  // The kernels clamp every end into [previous end, M] exactly as the reference does: same results, and
  // nothing written outside the rows the clamped offsets address.
  const std::vector<std::vector<int32_t>> garbage = {
      {500, 200, 900, 100},            // decreasing
      {-50, 300, -7, 600},             // negative
      {100, 5000, 70000, 2147483647},  // past M, INT32_MAX
      {-2147483647 - 1, 0, 3, 1 << 30},
      {799, 800, 2147483647, -1},  // reaches M, then garbage
  };
  int variant = 0;
  for (const auto& raw : garbage) {
    check_every_op("garbage offsets " + std::to_string(variant), 800, {}, raw, variant);
    ++variant;
  }
}

TEST(BackwardGpu, CasesC03C12EmptyExperts) {
  REQUIRE_GPU();
  // C03: 256 experts, 240 of them empty, the rest 1..40 rows; then all 256 empty with M = 128.
  std::vector<int64_t> sparse(256, 0);
  std::mt19937 rng(3);
  int64_t total = 0;
  for (int i = 0; i < 16; ++i) {
    const int64_t s = 1 + static_cast<int64_t>(rng() % 40);
    sparse[static_cast<size_t>(rng() % 256)] += s;
    total += s;
  }
  // check_every_op uses zero_tail on odd variants.
  check_every_op("C03 sparse", total + 5, sparse, {}, 0);
  check_every_op("C03 sparse, zero_tail", total + 5, sparse, {}, 1);
  check_every_op("C03 all 256 empty", 128, std::vector<int64_t>(256, 0), {}, 2);
  check_every_op("C03 all 256 empty, zero_tail", 128, std::vector<int64_t>(256, 0), {}, 3);
  // C12: last expert empty; every expert empty.
  check_every_op("C12 last expert empty", 64, {40, 24, 0}, {}, 4);
  check_every_op("C12 every expert empty", 64, {0, 0, 0}, {}, 6);
  check_every_op("C12 every expert empty, zero_tail", 64, {0, 0, 0}, {}, 7);
}

// ---------------------------------------------------------------------------------------------------------
// C05: forward and backward twice in a row over the same rows (M = 1000, offsets[-1] = 744), with every
// output buffer dirtied in between: addressed rows bitwise identical in both iterations (no garbage leaks
// in), tail rows untouched (zero with zero_tail); each stage of the first iteration matches the reference
// run on the bytes that stage got on the device.

/// Outputs of one forward + backward pass (host copies).
struct Pass {
  HostTensor h, c, dc, dprob, dx, dw1;
};

/// Every storage byte of t set to `byte` (0xff: a NaN in every float dtype).
void fill_bytes(HostTensor& t, unsigned char byte) { std::memset(t.data(), byte, t.storage_bytes()); }

/// Rows [0, end) of `second` equal `first` bitwise; rows past end are exactly 0 (zero_tail) or every byte
/// still `dirt`.
::testing::AssertionResult same_rows_and_tail(const HostTensor& first, const HostTensor& second, int64_t end,
                                              bool zero_tail, unsigned char dirt) {
  const int64_t cols = second.rank() >= 2 ? second.size(1) : 1;
  uint64_t dirt_bits = 0;
  std::memset(&dirt_bits, dirt, dtype_size(second.dtype()));
  for (int64_t i = 0; i < second.numel(); ++i) {
    const int64_t off = second.offset_of_linear(i), row = i / cols;
    if (row < end && second.bits_at(off) != first.bits_at(off))
      return ::testing::AssertionFailure() << "row " << row << " differs between the iterations (element " << i << ")";
    if (row >= end && zero_tail && second.get_at(off) != 0.0)
      return ::testing::AssertionFailure() << "tail row " << row << " not zeroed";
    if (row >= end && !zero_tail && second.bits_at(off) != dirt_bits)
      return ::testing::AssertionFailure() << "tail row " << row << " written";
  }
  return ::testing::AssertionSuccess();
}

TEST(BackwardGpu, CaseC05ForwardBackwardTwiceOverDirtyBuffers) {
  REQUIRE_GPU();
  const int64_t m = 1000, hidden = 256, inter = 128, e = 8;
  const std::vector<int64_t> sizes{100, 93, 0, 151, 77, 200, 1, 122};  // 744 rows, then a 256-row tail
  const Operand x(random_tensor(DType::bf16, {m, hidden}, 51));
  const Operand dy(random_tensor(DType::bf16, {m, hidden}, 52));
  const Operand prob(random_tensor(DType::f32, {m}, 53, 0.0, 1.0));
  const Operand offsets(offsets_from_sizes(sizes));
  // Up/gate weights (E, 2I, H) and down weights (E, H, I), both in the forward's nk layout; the backward
  // reads the down weights as kn (dH = dY @ W2_g) and the up weights as kn (dX = dC @ W1_g).
  const Operand w1(random_tensor(DType::bf16, {e, 2 * inter, hidden}, 54, -1.0 / 16, 1.0 / 16));
  const Operand w2(random_tensor(DType::bf16, {e, hidden, inter}, 55, -1.0 / 11, 1.0 / 11));
  const int64_t end = addressed_end(offsets.host, m);

  // Argument sets of the four stages, on either backend, over the given output views.
  const auto up_args = [&](bool device, TensorView h, TensorView c, bool zero_tail) {
    GroupedGemmGluArgs a;
    a.a = x.view(device);
    a.b.dense = w1.view(device);
    a.offsets = offsets.view(device);
    a.prob = prob.view(device);
    a.d = h;
    a.c = c;
    a.zero_tail = zero_tail;
    return a;
  };
  const auto dglu_args = [&](bool device, TensorView c, TensorView dc, TensorView dprob, bool zero_tail) {
    GroupedGemmDgluArgs a;
    a.a = dy.view(device);
    a.b.dense = w2.view(device);
    a.b.layout = BLayout::kn;
    a.c = c;
    a.offsets = offsets.view(device);
    a.prob = prob.view(device);
    a.dc = dc;
    a.dprob = dprob;
    a.zero_tail = zero_tail;
    return a;
  };
  const auto dgrad_args = [&](bool device, TensorView dc, TensorView dx, bool zero_tail) {
    GroupedGemmArgs a;
    a.a = dc;
    a.b.dense = w1.view(device);
    a.b.layout = BLayout::kn;
    a.offsets = offsets.view(device);
    a.d = dx;
    a.zero_tail = zero_tail;
    return a;
  };
  const auto wgrad_args = [&](bool device, TensorView dc, TensorView dw1) {
    GroupedGemmWgradArgs a;
    a.x = dc;
    a.dy = x.view(device);
    a.offsets = offsets.view(device);
    a.w = dw1;
    return a;
  };

  for (bool zero_tail : {false, true}) {
    SCOPED_TRACE(zero_tail ? "zero_tail" : "tail left alone");
    // One pass on the device over buffers whose every byte is `dirt` (0xa5: the poison pattern).
    const auto device_pass = [&](unsigned char dirt) {
      Pass p{HostTensor(DType::bf16, {m, inter}), HostTensor(DType::bf16, {m, 2 * inter}),
             HostTensor(DType::bf16, {m, 2 * inter}), HostTensor(DType::f32, {m}),
             HostTensor(DType::bf16, {m, hidden}), HostTensor(DType::f32, {e, 2 * inter, hidden})};
      for (HostTensor* t : {&p.h, &p.c, &p.dc, &p.dprob, &p.dx, &p.dw1}) {
        if (dirt == 0xa5) poison(*t);
        else fill_bytes(*t, dirt);
      }
      DeviceTensor h(p.h), c(p.c), dc(p.dc), dprob(p.dprob), dx(p.dx), dw1(p.dw1);
      call_op(grouped_gemm_glu_workspace_bytes, grouped_gemm_glu, up_args(true, h.view(), c.view(), zero_tail), true);
      call_op(grouped_gemm_dglu_workspace_bytes, grouped_gemm_dglu,
              dglu_args(true, c.view(), dc.view(), dprob.view(), zero_tail), true);
      call_op(grouped_gemm_workspace_bytes, grouped_gemm, dgrad_args(true, dc.view(), dx.view(), zero_tail), true);
      call_op(grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad, wgrad_args(true, dc.view(), dw1.view()), true);
      h.download(p.h);
      c.download(p.c);
      dc.download(p.dc);
      dprob.download(p.dprob);
      dx.download(p.dx);
      dw1.download(p.dw1);
      return p;
    };
    const Pass first = device_pass(0xa5);
    const Pass second = device_pass(0xff);

    // Second pass: the addressed rows as in the first, the tail per the contract.
    EXPECT_TRUE(same_rows_and_tail(first.h, second.h, end, zero_tail, 0xff)) << "h";
    EXPECT_TRUE(same_rows_and_tail(first.c, second.c, end, zero_tail, 0xff)) << "c";
    EXPECT_TRUE(same_rows_and_tail(first.dc, second.dc, end, zero_tail, 0xff)) << "dc";
    EXPECT_TRUE(same_rows_and_tail(first.dprob, second.dprob, end, zero_tail, 0xff)) << "dprob";
    EXPECT_TRUE(same_rows_and_tail(first.dx, second.dx, end, zero_tail, 0xff)) << "dx";
    EXPECT_TRUE(same_bytes(first.dw1, second.dw1)) << "dw1";

    // First pass, stage by stage, against the reference on the bytes that stage read on the device.
    HostTensor h = poisoned(DType::bf16, {m, inter}), c = poisoned(DType::bf16, {m, 2 * inter});
    call_op(grouped_gemm_glu_workspace_bytes, grouped_gemm_glu, up_args(false, h.view(), c.view(), zero_tail), false);
    EXPECT_TRUE(matches(first.h, expect_rows(h, end, zero_tail))) << "h";
    EXPECT_TRUE(matches(first.c, expect_rows(c, end, zero_tail))) << "c";
    HostTensor dc = poisoned(DType::bf16, {m, 2 * inter}), dprob = poisoned(DType::f32, {m});
    call_op(grouped_gemm_dglu_workspace_bytes, grouped_gemm_dglu,
            dglu_args(false, first.c.view(), dc.view(), dprob.view(), zero_tail), false);
    EXPECT_TRUE(matches(first.dc, expect_rows(dc, end, zero_tail))) << "dc";
    EXPECT_TRUE(matches(first.dprob, expect_rows(dprob, end, zero_tail))) << "dprob";
    HostTensor dx = poisoned(DType::bf16, {m, hidden});
    call_op(grouped_gemm_workspace_bytes, grouped_gemm, dgrad_args(false, first.dc.view(), dx.view(), zero_tail),
            false);
    EXPECT_TRUE(matches(first.dx, expect_rows(dx, end, zero_tail))) << "dx";
    HostTensor dw1 = poisoned(DType::f32, {e, 2 * inter, hidden});
    call_op(grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad, wgrad_args(false, first.dc.view(), dw1.view()),
            false);
    Wgrad shape;
    shape.h = 2 * inter;
    shape.n = hidden;
    shape.sizes = sizes;
    EXPECT_TRUE(matches(first.dw1, expect_wgrad(shape, naive::rows(offsets.host, m), dw1, dw1))) << "dw1";
  }
}

// ---------------------------------------------------------------------------------------------------------
// C10: swiglu_clamped with gate and up exactly at, below and above +-limit (values exact in bf16). Forward:
// the pre-activation G hits the probes exactly (one-hot rows of A). Backward: the saved C holds the probes;
// the gradient passes at the boundary (docs/ops.md §3) and is exactly 0 strictly beyond it.

struct ClampProbes {
  float limit;
  double probes[8];
};
constexpr ClampProbes kClampProbes[] = {
    {7.0f, {-8.0, -7.0, -6.5, 0.5, 6.5, 7.0, 7.5, 9.0}},
    {2.5f, {-3.0, -2.5, -2.0, 0.5, 2.0, 2.5, 2.75, 3.5}},
};

/// Gate and up values of output column j in row class k (every pair of probes occurs in each class).
double probe_gate(const ClampProbes& s, int64_t j, int64_t k) { return s.probes[(j / 8 + k) % 8]; }
double probe_up(const ClampProbes& s, int64_t j, int64_t k) { return s.probes[(j + k) % 8]; }

/// swiglu_clamped forward and backward over the probes of `set` in every pairing, against the reference.
/// With `boundaries`, also: the gradient is exactly 0 strictly beyond a clamp and non-zero at its bound.
void check_clamp_probes(const ClampProbes& set, bool boundaries, int& variant) {
  const int64_t inter = 64, m = 96;  // 2I = 128: a multiple of 64 for the interleaved layouts
  for (GluLayout pairing : {GluLayout::halves, GluLayout::interleaved32, GluLayout::interleaved32_up_first}) {
    const std::string name = "limit " + std::to_string(set.limit) + " layout " + std::to_string(int(pairing));
    SCOPED_TRACE(name);
    GluParams glu;
    glu.activation = Activation::swiglu_clamped;
    glu.layout = pairing;
    glu.limit = set.limit;
    {  // Forward: A row r is one-hot at k = r % 8, so G[r, col] = B[col, r % 8] exactly.
      HostTensor a(DType::bf16, {m, 8}), b(DType::bf16, {2, 2 * inter, 8});
      for (int64_t r = 0; r < m; ++r)
        for (int64_t k = 0; k < 8; ++k) a.set({r, k}, k == r % 8 ? 1.0 : 0.0);
      for (int64_t g = 0; g < 2; ++g)
        for (int64_t k = 0; k < 8; ++k)
          for (int64_t j = 0; j < inter; ++j) {
            int64_t gc, uc;
            naive::glu_pair(pairing, inter, j, gc, uc);
            b.set({g, gc, k}, probe_gate(set, j, k));
            b.set({g, uc, k}, probe_up(set, j, k));
          }
      const Operand da(std::move(a)), db(std::move(b)), offsets(offsets_from_sizes({50, 40}));
      const Operand prob(random_tensor(DType::f32, {m}, 61 + variant, 0.25, 1.0));
      HostTensor d[2], c[2];
      for (int device = 0; device < 2; ++device) {
        d[device] = poisoned(DType::f32, {m, inter});
        c[device] = poisoned(DType::f32, {m, 2 * inter});
        OutputBuffer dout(d[device], device), cbuf(c[device], device);
        GroupedGemmGluArgs args;
        args.a = da.view(device);
        args.b.dense = db.view(device);
        args.offsets = offsets.view(device);
        args.prob = prob.view(device);
        args.glu = glu;
        args.d = dout.view();
        args.c = cbuf.view();
        call_op(grouped_gemm_glu_workspace_bytes, grouped_gemm_glu, args, device);
        fetch_all({&dout, &cbuf});
      }
      EXPECT_TRUE(matches(d[1], expect_rows(d[0], 90, false))) << "forward d";
      EXPECT_TRUE(matches(c[1], expect_rows(c[0], 90, false))) << "forward c";
    }
    {  // Backward: C holds the probes, dH random.
      Grouped p;
      p.op = GroupedOp::dglu;
      p.glu = glu;
      p.m = m;
      p.n = inter;
      p.sizes = {50, 40};
      p.prob = true;
      p.dprob = true;
      p.dbias = 1;
      p.amax = true;
      p.out = variant % 2 ? DType::bf16 : DType::f32;
      p.layout = variant % 2 ? BLayout::kn : BLayout::nk;
      p.seed = 62 + 10 * variant;
      GroupedInputs in(p);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < inter; ++j) {
          int64_t gc, uc;
          naive::glu_pair(pairing, inter, j, gc, uc);
          in.c.host.set({r, gc}, probe_gate(set, j, r % 8));
          in.c.host.set({r, uc}, probe_up(set, j, r % 8));
        }
      in.c.dev.upload(in.c.host);
      const GroupedOutputs ref = run_grouped(p, in, false);
      const GroupedOutputs got = run_grouped(p, in, true);
      expect_matches_reference(p, in, ref, got);
      if (boundaries) {
        // Strictly beyond the clamp the gradient is exactly 0; at the boundary it passes (reference non-zero).
        Expected want = expect_rows(ref.dc, 90, false);
        for (int64_t r = 0; r < 90; ++r)
          for (int64_t j = 0; j < inter; ++j) {
            int64_t gc, uc;
            naive::glu_pair(pairing, inter, j, gc, uc);
            const double gate = probe_gate(set, j, r % 8), up = probe_up(set, j, r % 8);
            const bool gate_dead = gate > set.limit, up_dead = up > set.limit || up < -set.limit;
            ASSERT_EQ(ref.dc(r, gc) == 0.0, gate_dead) << "reference d_gate at gate " << gate << ", row " << r;
            ASSERT_EQ(ref.dc(r, uc) == 0.0, up_dead) << "reference d_up at up " << up << ", row " << r;
            if (gate_dead) want.exact({r, gc}, 0.0);
            if (up_dead) want.exact({r, uc}, 0.0);
          }
        EXPECT_TRUE(matches(got.dc, want)) << "dc: exact zeros beyond the clamp";
      }
    }
    ++variant;
  }
}

TEST(BackwardGpu, CaseC10ClampBoundaries) {
  REQUIRE_GPU();
  int variant = 0;
  for (const ClampProbes& set : kClampProbes) check_clamp_probes(set, true, variant);
}

// A gate far below zero makes sigmoid(act_alpha * g) 0, h = -0 and d_gate 0. (u + linear_offset) * g alone
// would overflow to inf there (from about -4.3e37 with u + offset = 8), and act_alpha * g below about -2e38,
// so an order of products that forms either gives NaN: in D, in dC, and in dprob, dbias and amax. The
// reference and the kernels form g * s first.
TEST(BackwardGpu, ClampedHugeNegativeGateGivesZeroNotNan) {
  REQUIRE_GPU();
  constexpr ClampProbes kHuge = {7.0f, {-1e38, -6e37, -3e38, -8.0, 0.5, 7.0, 9.0, -2e37}};
  int variant = 0;
  check_clamp_probes(kHuge, false, variant);
}

/// A dGLU call with dense weights and dprob over device buffers (dc may be c's buffer, to test the aliasing rule).
GroupedGemmDgluArgs dglu_call(const DeviceTensor& dy, const DeviceTensor& w, const DeviceTensor& c,
                              const DeviceTensor& offsets, const DeviceTensor& dc, const DeviceTensor& dprob) {
  GroupedGemmDgluArgs args;
  args.a = dy.view();
  args.b.dense = w.view();
  args.c = c.view();
  args.offsets = offsets.view();
  args.dc = dc.view();
  args.dprob = dprob.view();
  return args;
}

TEST(BackwardGpu, DgluOverItsSavedActivationIsRefusedBeforeLaunch) {
  // dC written over the saved pre-activation C (an in-place call to save memory) breaks the aliasing rule
  // (docs/ops.md §0.2, rule 9): the op raises invalid_argument naming dc and c before it launches, so C keeps
  // its bytes and dprob its poison.
  REQUIRE_GPU();
  const int64_t m = 192, i = 64, k = 128;
  const std::vector<int64_t> sizes = {64, 0, 100, 28};
  const HostTensor dy = random_tensor(DType::bf16, {m, k}, 91);
  const HostTensor w = random_tensor(DType::bf16, {4, i, k}, 92, -0.1, 0.1);
  const HostTensor c = random_tensor(DType::bf16, {m, 2 * i}, 93);
  const HostTensor offsets = offsets_from_sizes(sizes);
  HostTensor dprob = poisoned(DType::f32, {m});
  DeviceTensor ddy(dy), dw(w), dc(c), doff(offsets), ddprob(dprob);
  const GroupedGemmDgluArgs args = dglu_call(ddy, dw, dc, doff, dc, ddprob);
  try {
    call_op(grouped_gemm_dglu_workspace_bytes, grouped_gemm_dglu, args, true);
    ADD_FAILURE() << "grouped_gemm_dglu with dc == c did not raise";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("grouped_gemm_dglu: dc: expected memory that no other operand"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overlapping c"), std::string::npos) << e.what();
  }
  HostTensor c_after(DType::bf16, {m, 2 * i}), dprob_after(DType::f32, {m});
  dc.download(c_after);
  ddprob.download(dprob_after);
  EXPECT_TRUE(same_bytes(c_after, c)) << "c was written";
  EXPECT_TRUE(same_bytes(dprob_after, poisoned(DType::f32, {m}))) << "dprob was written";
}

TEST(BackwardGpu, TooSmallWorkspaceIsRefusedBeforeLaunch) {
  // With I = 256 (two column tiles) the dGLU sums dprob from per-tile partials in its workspace: a buffer one
  // byte short, or none, is refused with invalid_argument naming the size (docs/ops.md §0) before any output
  // is written.
  REQUIRE_GPU();
  const int64_t m = 192, i = 256, k = 128;
  const HostTensor dy = random_tensor(DType::bf16, {m, k}, 94);
  const HostTensor w = random_tensor(DType::bf16, {4, i, k}, 95, -0.1, 0.1);
  const HostTensor c = random_tensor(DType::bf16, {m, 2 * i}, 96);
  const HostTensor offsets = offsets_from_sizes({64, 0, 100, 28});
  const HostTensor dc_poison = poisoned(DType::bf16, {m, 2 * i}), dprob_poison = poisoned(DType::f32, {m});
  DeviceTensor ddy(dy), dw(w), dsaved(c), doff(offsets), ddc(dc_poison), ddprob(dprob_poison);
  const GroupedGemmDgluArgs args = dglu_call(ddy, dw, dsaved, doff, ddc, ddprob);
  const std::size_t needed = grouped_gemm_dglu_workspace_bytes(args);
  ASSERT_GT(needed, 0u);
  Workspace ws(needed, nullptr);
  const std::string expected =
      "grouped_gemm_dglu: workspace: expected a device buffer of at least " + std::to_string(needed) +
      " bytes (grouped_gemm_dglu_workspace_bytes), got ";
  for (const bool null_buffer : {false, true}) {
    void* buffer = null_buffer ? nullptr : ws.data();
    const std::string got = null_buffer ? "nullptr" : std::to_string(needed - 1) + " bytes";
    try {
      grouped_gemm_dglu(args, buffer, null_buffer ? needed : needed - 1, nullptr);
      ADD_FAILURE() << "grouped_gemm_dglu with a workspace of " << got << " did not raise";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_EQ(std::string(e.what()), expected + got);
    }
  }
  cuda_ok(cudaDeviceSynchronize(), "refused calls");
  HostTensor dc_after(DType::bf16, {m, 2 * i}), dprob_after(DType::f32, {m});
  ddc.download(dc_after);
  ddprob.download(dprob_after);
  EXPECT_TRUE(same_bytes(dc_after, dc_poison)) << "dc was written";
  EXPECT_TRUE(same_bytes(dprob_after, dprob_poison)) << "dprob was written";
}

}  // namespace
}  // namespace moegemm::testing
