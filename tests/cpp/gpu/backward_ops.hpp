// The grouped ops of the backward family (grouped_gemm_dglu, grouped_gemm_srelu, grouped_gemm_dsrelu,
// grouped_gemm_wgrad) on both backends: problem descriptions, inputs (host tensors and device copies of the
// same bytes), one call on either backend with poisoned outputs, and the comparison of a device run with
// the CPU reference run through the same API on the same inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/offsets.hpp"
#include "gpu/harness.hpp"

namespace moegemm::testing {

/// Expert weights as the ops take them: a dense (E, N, K) (nk) / (E, K, N) (kn) stack of random bf16, or
/// (ptrs) a pointer table whose entry g addresses slot E-1-g of that stack: reversed, so that a kernel
/// reading the stack in expert order instead of going through the table fails.
struct WeightsOperand {
  BLayout layout = BLayout::nk;
  bool ptrs = false;
  int64_t n = 0;
  Operand stack;
  HostTensor host_table;  ///< host addresses into stack.host
  Operand device_table;   ///< device addresses into stack.dev (its host half holds them before upload)

  WeightsOperand() = default;
  WeightsOperand(int64_t e, int64_t n_cols, int64_t k, BLayout l, bool pointers, uint64_t seed)
      : layout(l), ptrs(pointers), n(n_cols) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(k));  // keeps the GEMM's outputs O(1)
    stack = Operand(random_tensor(DType::bf16,
                                  l == BLayout::nk ? std::vector<int64_t>{e, n, k} : std::vector<int64_t>{e, k, n},
                                  seed, -scale, scale));
    if (!ptrs) return;
    host_table = HostTensor(DType::i64, {e});
    HostTensor device_addresses(DType::i64, {e});
    const int64_t slot_bytes = n * k * 2;
    for (int64_t g = 0; g < e; ++g) {
      const int64_t slot = e - 1 - g;
      host_table.set_bits_at(g, reinterpret_cast<uintptr_t>(static_cast<const char*>(stack.host.data()) +
                                                            slot * slot_bytes));
      device_addresses.set_bits_at(
          g, reinterpret_cast<uintptr_t>(static_cast<const char*>(stack.dev.data()) + slot * slot_bytes));
    }
    device_table = Operand(std::move(device_addresses));
  }

  ExpertWeights view(bool device) const {
    ExpertWeights w;
    w.layout = layout;
    if (!ptrs) {
      w.dense = stack.view(device);
      return w;
    }
    w.ptrs = device ? device_table.dev.view() : host_table.view();
    w.n = n;
    w.dtype = DType::bf16;
    return w;
  }
};

inline HostTensor offsets_of(const std::vector<int64_t>& sizes, const std::vector<int32_t>& raw) {
  return raw.empty() ? offsets_from_sizes(sizes) : offsets_raw(raw);
}

// ---------------------------------------------------------------------------------------------------------
// grouped_gemm_dglu, grouped_gemm_srelu, grouped_gemm_dsrelu

enum class GroupedOp { dglu, srelu, dsrelu };

/// One problem of a grouped GEMM with an epilogue: shapes, group sizes and options.
struct Grouped {
  std::string name;
  GroupedOp op = GroupedOp::dglu;
  int64_t m = 640, n = 96, k = 136;  ///< A (M, K); the GEMM gives N columns (I for dglu: C and dC have 2I)
  std::vector<int64_t> sizes{100, 0, 131, 1, 64, 65, 200};  ///< rows 561..639 are the tail
  std::vector<int32_t> raw_offsets;  ///< used instead of sizes when non-empty (garbage offsets)
  BLayout layout = BLayout::nk;
  bool ptrs = false;
  bool alpha = false, beta = false, prob = false;  ///< beta: dglu only
  int bias = 0;                                    ///< srelu: 0 none, 1 bf16, 2 f32
  GluParams glu;                                   ///< dglu
  DType c_dtype = DType::bf16;  ///< dglu/dsrelu: the saved pre-activation C (input); srelu: output C
  DType out = DType::bf16;      ///< dglu/dsrelu: dC; srelu: D
  bool c_out = false;           ///< srelu: write C
  bool dprob = false, amax = false;  ///< dglu/dsrelu
  int dbias = 0;                     ///< dglu/dsrelu: 0 none, 1 f32, 2 bf16
  bool zero_tail = false;
  int64_t row_pad = 0;  ///< extra elements after every row of A, C and the (M, *) outputs
  uint64_t seed = 1;

  int64_t experts() const {
    return static_cast<int64_t>(raw_offsets.empty() ? sizes.size() : raw_offsets.size());
  }
  /// Columns of C and dC (dglu: 2I) or of D and C (srelu).
  int64_t c_cols() const { return op == GroupedOp::dglu ? 2 * n : n; }
};

inline const char* op_name(GroupedOp op) {
  switch (op) {
    case GroupedOp::dglu: return "dglu";
    case GroupedOp::srelu: return "srelu";
    case GroupedOp::dsrelu: return "dsrelu";
  }
  return "?";
}

/// Random inputs of a problem (host and device copies): A uniform in [-1, 1), weights scaled by 1/sqrt(K),
/// alpha and beta in [0.5, 1.5), prob in [0, 1), the saved C spread over the activation's interesting range.
struct GroupedInputs {
  Operand a, offsets, alpha, beta, prob, bias, c;
  WeightsOperand b;

  explicit GroupedInputs(const Grouped& p) {
    const int64_t e = p.experts();
    a = Operand(random_tensor(DType::bf16, {p.m, p.k}, p.seed, -1.0, 1.0, p.row_pad));
    b = WeightsOperand(e, p.n, p.k, p.layout, p.ptrs, p.seed + 1);
    offsets = Operand(offsets_of(p.sizes, p.raw_offsets));
    if (p.alpha) alpha = Operand(random_tensor(DType::f32, {e}, p.seed + 2, 0.5, 1.5));
    if (p.beta) beta = Operand(random_tensor(DType::f32, {e}, p.seed + 3, 0.5, 1.5));
    if (p.prob) prob = Operand(random_tensor(DType::f32, {p.m}, p.seed + 4, 0.0, 1.0));
    if (p.bias) bias = Operand(random_tensor(p.bias == 1 ? DType::bf16 : DType::f32, {e, p.n}, p.seed + 5, -0.5, 0.5));
    if (p.op != GroupedOp::srelu) {
      const double range = p.op == GroupedOp::dglu ? 4.0 : 2.0;
      c = Operand(random_tensor(p.c_dtype, {p.m, p.c_cols()}, p.seed + 6, -range, range, p.row_pad));
    }
  }
};

/// Outputs of one call (absent ones have rank 0).
struct GroupedOutputs {
  HostTensor d, c, dc, dprob, dbias, amax;
};

/// The outputs a problem asks for, poisoned (padding included).
inline GroupedOutputs poisoned_outputs(const Grouped& p) {
  GroupedOutputs o;
  if (p.op == GroupedOp::srelu) {
    o.d = poisoned(p.out, {p.m, p.n}, p.row_pad);
    if (p.c_out) o.c = poisoned(p.c_dtype, {p.m, p.n}, p.row_pad);
    return o;
  }
  o.dc = poisoned(p.out, {p.m, p.c_cols()}, p.row_pad);
  if (p.dprob) o.dprob = poisoned(DType::f32, {p.m});
  if (p.dbias) o.dbias = poisoned(p.dbias == 1 ? DType::f32 : DType::bf16, {p.experts(), p.c_cols()});
  if (p.amax) o.amax = poisoned(DType::f32, {p.op == GroupedOp::dglu ? 2 : 1});
  return o;
}

/// Runs the problem's op on the host (CPU reference) or on the device, from poisoned outputs.
inline GroupedOutputs run_grouped(const Grouped& p, const GroupedInputs& in, bool device,
                                  cudaStream_t stream = nullptr) {
  GroupedOutputs o = poisoned_outputs(p);
  OutputBuffer d(o.d, device), c(o.c, device), dc(o.dc, device), dprob(o.dprob, device), dbias(o.dbias, device),
      amax(o.amax, device);
  switch (p.op) {
    case GroupedOp::dglu: {
      GroupedGemmDgluArgs args;
      args.a = in.a.view(device);
      args.b = in.b.view(device);
      args.c = in.c.view(device);
      args.offsets = in.offsets.view(device);
      args.alpha = in.alpha.view(device);
      args.beta = in.beta.view(device);
      args.prob = in.prob.view(device);
      args.glu = p.glu;
      args.dc = dc.view();
      args.dprob = dprob.view();
      args.dbias = dbias.view();
      args.amax = amax.view();
      args.zero_tail = p.zero_tail;
      call_op(grouped_gemm_dglu_workspace_bytes, grouped_gemm_dglu, args, device, stream);
      break;
    }
    case GroupedOp::srelu: {
      GroupedGemmSreluArgs args;
      args.a = in.a.view(device);
      args.b = in.b.view(device);
      args.offsets = in.offsets.view(device);
      args.alpha = in.alpha.view(device);
      args.prob = in.prob.view(device);
      args.bias = in.bias.view(device);
      args.d = d.view();
      args.c = c.view();
      args.zero_tail = p.zero_tail;
      call_op(grouped_gemm_srelu_workspace_bytes, grouped_gemm_srelu, args, device, stream);
      break;
    }
    case GroupedOp::dsrelu: {
      GroupedGemmDsreluArgs args;
      args.a = in.a.view(device);
      args.b = in.b.view(device);
      args.c = in.c.view(device);
      args.offsets = in.offsets.view(device);
      args.alpha = in.alpha.view(device);
      args.prob = in.prob.view(device);
      args.dc = dc.view();
      args.dprob = dprob.view();
      args.dbias = dbias.view();
      args.amax = amax.view();
      args.zero_tail = p.zero_tail;
      call_op(grouped_gemm_dsrelu_workspace_bytes, grouped_gemm_dsrelu, args, device, stream);
      break;
    }
  }
  fetch_all({&d, &c, &dc, &dprob, &dbias, &amax});
  return o;
}

/// Elements per output where the reference gave NaN (inputs that hold NaN on purpose).
struct NanCounts {
  int64_t d = 0, c = 0, dc = 0, dprob = 0, dbias = 0, amax = 0;
};

/// A device run against the reference run on the same inputs: row outputs (D, C, dC, dprob) close on the
/// addressed rows and untouched (zero with zero_tail) past them; dbias close for experts with rows and
/// exactly 0 for empty ones; amax close, or exactly 0 when no row is addressed. With `nans`, NaN where the
/// reference has NaN (counted there) instead of a value.
inline void expect_matches_reference(const Grouped& p, const GroupedInputs& in, const GroupedOutputs& ref,
                                     const GroupedOutputs& got, NanCounts* nans = nullptr) {
  const naive::Rows rows = naive::rows(in.offsets.host, p.m);
  const auto want = [&](Expected e, const HostTensor& r, int64_t NanCounts::*count) {
    return nans ? nan_where_reference_is(std::move(e), r, &(nans->*count)) : e;
  };
  const auto row_output = [&](const char* what, const HostTensor& r, const HostTensor& g, int64_t NanCounts::*count) {
    if (r.rank() > 0) {
      EXPECT_TRUE(matches(g, want(expect_rows(r, rows.end_all, p.zero_tail), r, count))) << "output " << what;
    }
  };
  row_output("d", ref.d, got.d, &NanCounts::d);
  row_output("c", ref.c, got.c, &NanCounts::c);
  row_output("dc", ref.dc, got.dc, &NanCounts::dc);
  row_output("dprob", ref.dprob, got.dprob, &NanCounts::dprob);
  if (ref.dbias.rank() > 0) {
    EXPECT_TRUE(matches(got.dbias, want(expect_per_expert(ref.dbias, rows), ref.dbias, &NanCounts::dbias)))
        << "output dbias";
  }
  if (ref.amax.rank() > 0) {
    EXPECT_TRUE(matches(got.amax, want(expect_reduction(ref.amax, rows.end_all > 0), ref.amax, &NanCounts::amax)))
        << "output amax";
  }
}

inline void check_grouped(const Grouped& p) {
  SCOPED_TRACE(std::string(op_name(p.op)) + ": " + p.name);
  const GroupedInputs in(p);
  const GroupedOutputs ref = run_grouped(p, in, false);
  const GroupedOutputs got = run_grouped(p, in, true);
  expect_matches_reference(p, in, ref, got);
}

/// Every output of `a` holds the same bytes as that of `b`.
inline ::testing::AssertionResult same_outputs(const GroupedOutputs& a, const GroupedOutputs& b) {
  const char* names[] = {"d", "c", "dc", "dprob", "dbias", "amax"};
  const HostTensor* x[] = {&a.d, &a.c, &a.dc, &a.dprob, &a.dbias, &a.amax};
  const HostTensor* y[] = {&b.d, &b.c, &b.dc, &b.dprob, &b.dbias, &b.amax};
  for (int i = 0; i < 6; ++i)
    if (!same_bytes(*x[i], *y[i])) return ::testing::AssertionFailure() << "output " << names[i] << " differs";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------------------
// grouped_gemm_wgrad

/// One wgrad problem: W_g = X[rows_g]^T dY[rows_g], (H, N) per expert (or (N, H) transposed).
struct Wgrad {
  std::string name;
  int64_t m = 1500, h = 136, n = 264;
  std::vector<int64_t> sizes{1, 63, 65, 129, 1000, 0, 200};
  std::vector<int32_t> raw_offsets;  ///< used instead of sizes when non-empty (garbage offsets)
  DType out = DType::f32;
  bool transpose = false;
  bool ptrs = false;  ///< w_ptrs: expert g writes slot E-1-g of a stack of separate per-expert buffers
  bool accumulate = false;
  bool w_in = false;    ///< accumulate reads the initial values from a second buffer, w_in; w starts poisoned
  int64_t row_pad = 0;  ///< elements after every row of x and dY (their row strides: H or N + row_pad)
  uint64_t seed = 1;

  int64_t experts() const {
    return static_cast<int64_t>(raw_offsets.empty() ? sizes.size() : raw_offsets.size());
  }
  /// Elements per expert's output.
  int64_t per_expert() const { return h * n; }
};

struct WgradInputs {
  Operand x, dy, offsets;
  explicit WgradInputs(const Wgrad& p) {
    x = Operand(random_tensor(DType::bf16, {p.m, p.h}, p.seed, -1.0, 1.0, p.row_pad));
    dy = Operand(random_tensor(DType::bf16, {p.m, p.n}, p.seed + 1, -1.0, 1.0, p.row_pad));
    offsets = Operand(offsets_of(p.sizes, p.raw_offsets));
  }
};

/// Per-expert buffers of pointer mode are rows of an (E, H*N) stack with this much padding between them
/// (keeps every buffer 16-byte aligned; the padding must keep its poison).
inline constexpr int64_t kWgradSlotPad = 32;

/// The output storage before a call: dense (E, H, N) or (E, N, H), or the (E, H*N) stack of per-expert
/// buffers; poisoned, and with accumulate random values (the same every time) over the poisoned padding.
inline HostTensor wgrad_initial(const Wgrad& p) {
  const int64_t e = p.experts();
  HostTensor w = p.ptrs ? poisoned(p.out, {e, p.per_expert()}, kWgradSlotPad)
                        : poisoned(p.out, p.transpose ? std::vector<int64_t>{e, p.n, p.h}
                                                      : std::vector<int64_t>{e, p.h, p.n});
  if (p.accumulate) fill_uniform(w, p.seed + 2, -2.0, 2.0);
  return w;
}

/// Which expert writes storage slot s (slot = expert index, reversed in pointer mode).
inline int64_t wgrad_expert_of_slot(const Wgrad& p, int64_t s) { return p.ptrs ? p.experts() - 1 - s : s; }

/// Runs wgrad on the host (CPU reference) or on the device, from wgrad_initial's contents.
/// With p.w_in (dense w only), the initial values go to w_in, which must come back unchanged.
inline HostTensor run_wgrad(const Wgrad& p, const WgradInputs& in, bool device, cudaStream_t stream = nullptr) {
  Wgrad poisoned_w = p;
  poisoned_w.accumulate = false;
  HostTensor w = wgrad_initial(p.w_in ? poisoned_w : p);
  HostTensor w_in = p.w_in ? wgrad_initial(p) : HostTensor{};
  OutputBuffer out(w, device), source(w_in, device);
  GroupedGemmWgradArgs args;
  args.x = in.x.view(device);
  args.dy = in.dy.view(device);
  if (device && p.m == 0) {  // no rows: no storage, as torch's empty CUDA tensors have
    args.x.data = nullptr;
    args.dy.data = nullptr;
  }
  args.offsets = in.offsets.view(device);
  args.transpose_output = p.transpose;
  args.accumulate = p.accumulate;
  HostTensor table;
  DeviceTensor device_table;
  if (p.ptrs) {
    const int64_t e = p.experts();
    const TensorView storage = out.view();
    const int64_t slot_bytes = storage.strides[0] * static_cast<int64_t>(dtype_size(p.out));
    table = HostTensor(DType::i64, {e});
    for (int64_t g = 0; g < e; ++g)
      table.set_bits_at(g, reinterpret_cast<uintptr_t>(static_cast<char*>(storage.data) +
                                                       wgrad_expert_of_slot(p, g) * slot_bytes));
    if (device) device_table = DeviceTensor(table);
    args.w_ptrs = device ? device_table.view() : table.view();
    args.w_dtype = p.out;
  } else {
    args.w = out.view();
    args.w_in = source.view();
  }
  call_op(grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad, args, device, stream);
  fetch_all({&out, &source});
  if (p.w_in) EXPECT_TRUE(same_bytes(w_in, wgrad_initial(p))) << "w_in was written";
  return w;
}

/// What the device's output must hold: experts with rows close to the reference; empty experts exactly 0,
/// or (accumulate) exactly their initial values; padding between pointer-mode buffers still poisoned.
inline Expected expect_wgrad(const Wgrad& p, const naive::Rows& rows, const HostTensor& ref,
                             const HostTensor& initial) {
  Expected want(ref.shape());
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const size_t g = static_cast<size_t>(wgrad_expert_of_slot(p, i / p.per_expert()));
    if (rows.end[g] > rows.begin[g]) want.set(i, Expected::kClose, ref.get_at(ref.offset_of_linear(i)));
    else if (p.accumulate) want.set(i, Expected::kExact, initial.get_at(initial.offset_of_linear(i)));
    else want.set(i, Expected::kExact, 0.0);
  }
  return want;
}

/// With accumulate, the buffers of empty experts keep their initial bytes exactly.
inline ::testing::AssertionResult empty_experts_untouched(const Wgrad& p, const naive::Rows& rows,
                                                          const HostTensor& got, const HostTensor& initial) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t slot = i / p.per_expert();
    const size_t g = static_cast<size_t>(wgrad_expert_of_slot(p, slot));
    const int64_t off = got.offset_of_linear(i);
    if (rows.end[g] == rows.begin[g] && got.bits_at(off) != initial.bits_at(off))
      return ::testing::AssertionFailure() << "expert " << g << " (empty) changed at element " << i;
  }
  return ::testing::AssertionSuccess();
}

inline void check_wgrad(const Wgrad& p) {
  SCOPED_TRACE("wgrad: " + p.name);
  const WgradInputs in(p);
  const naive::Rows rows = naive::rows(in.offsets.host, p.m);
  const HostTensor initial = wgrad_initial(p);
  Wgrad in_place = p;  // the reference adds into w itself
  in_place.w_in = false;
  const HostTensor ref = run_wgrad(in_place, in, false);
  const HostTensor got = run_wgrad(p, in, true);
  EXPECT_TRUE(matches(got, expect_wgrad(p, rows, ref, initial)));
  if (p.accumulate) {
    EXPECT_TRUE(empty_experts_untouched(p, rows, got, initial));
  }
}

}  // namespace moegemm::testing
