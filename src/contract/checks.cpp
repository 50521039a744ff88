// contract::check of every op: the operand rules of rules.hpp composed per docs/ops.md.
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "contract/checks_pointers.hpp"
#include "contract/rules.hpp"

namespace moegemm::contract {
namespace {

/// Sizes every operand of one call is checked against.
struct Problem {
  int64_t M = 0;  ///< rows of A (tokens x top-k)
  int64_t K = 0;  ///< contraction
  int64_t N = 0;  ///< GEMM output columns
  int64_t E = 0;  ///< experts (0 for the dense ops)
  DType input = DType::bf16;
};

const char* glu_layout_name(GluLayout l) {
  switch (l) {
    case GluLayout::halves: return "halves";
    case GluLayout::interleaved32: return "interleaved32";
    case GluLayout::interleaved32_up_first: return "interleaved32_up_first";
  }
  return "?";
}

constexpr Role kIn = Role::input;
constexpr Role kOut = Role::output;

int64_t check_offsets(Rules& r, const TensorView& offsets) {
  r.shape("offsets", offsets, {{"E"}});
  const int64_t E = offsets.shape[0];
  if (E < 1 || E > kMaxExperts) {
    r.fail(ErrorCode::invalid_argument, "offsets",
           "1 <= E <= " + std::to_string(kMaxExperts) + " experts", "E=" + std::to_string(E));
  }
  r.dtype_is("offsets", offsets.dtype, DType::i32);
  r.vector("offsets", offsets);
  return E;
}

/// A (M, K): the rows and the contraction of every GEMM; row-major, or either order where `either_order`
/// (grouped_gemm).
void check_a(Rules& r, const TensorView& a, Problem& p, bool either_order = false) {
  r.shape("a", a, {{"M"}, {"K"}});
  r.input_dtype("a", a.dtype);
  p.M = a.shape[0];
  p.K = a.shape[1];
  p.input = a.dtype;
  r.positive("a", "K", p.K);
  if (either_order) r.matrix_either_order("a", a, "M", "K");
  else r.matrix("a", a, "K");
  r.kernel_extent("a", "M", p.M);
  r.kernel_extent("a", "K", p.K);
}

void check_b_layout(Rules& r, const char* name, BLayout layout) {
  r.option(name, static_cast<int>(layout), {"nk", "kn"});
}

/// One (N, K) / (K, N) weight matrix of the dense ops; sets p.N.
void check_dense_b(Rules& r, const TensorView& b, BLayout layout, Problem& p) {
  check_b_layout(r, "b_layout", layout);
  if (layout == BLayout::nk) {
    r.shape("b", b, {{"N"}, {"K", p.K, "a"}});
    p.N = b.shape[0];
  } else {
    r.shape("b", b, {{"K", p.K, "a"}, {"N"}});
    p.N = b.shape[1];
  }
  r.same_dtype("b", b.dtype, "a", p.input);  // a mismatch is named as one, before the dtype rule
  r.input_dtype("b", b.dtype);
  r.positive("b", "N", p.N);
  r.matrix("b", b, layout == BLayout::nk ? "K" : "N");
  r.row_bytes("b", "N", p.N, b.dtype);
  r.kernel_extent("b", "N", p.N);
}

/// Expert weights, dense (E, N, K) / (E, K, N) or a pointer table; sets p.N.
void check_weights(Rules& r, const ExpertWeights& b, Problem& p) {
  const bool dense = b.dense.defined();
  if (dense == b.ptrs.defined()) {
    r.fail(ErrorCode::invalid_argument, "b", "exactly one of b.dense or b.ptrs",
           dense ? "both" : "neither");
  }
  check_b_layout(r, "b.layout", b.layout);
  if (dense) {
    const TensorView& w = b.dense;
    if (b.layout == BLayout::nk) {
      r.shape("b", w, {{"E", p.E, "offsets"}, {"N"}, {"K", p.K, "a"}});
      p.N = w.shape[1];
    } else {
      r.shape("b", w, {{"E", p.E, "offsets"}, {"K", p.K, "a"}, {"N"}});
      p.N = w.shape[2];
    }
    r.same_dtype("b", w.dtype, "a", p.input);
    r.input_dtype("b", w.dtype);
    r.positive("b", "N", p.N);
    r.expert_matrices("b", w, b.layout == BLayout::nk ? "K" : "N");
    r.row_bytes("b", "N", p.N, w.dtype);
    r.row_bytes("b", "K", p.K, w.dtype);
    r.kernel_extent("b", "N", p.N);
    return;
  }
  r.shape("b.ptrs", b.ptrs, {{"E", p.E, "offsets"}});
  r.dtype_is("b.ptrs", b.ptrs.dtype, DType::i64);
  r.vector("b.ptrs", b.ptrs);
  r.positive("b.n", "N", b.n);
  r.same_dtype("b.dtype", b.dtype, "a", p.input);
  r.input_dtype("b.dtype", b.dtype);
  if (b.layout == BLayout::nk) {
    r.table_matrices("b.ptrs", "N", b.n, "K", p.K, b.dtype);
  } else {
    r.table_matrices("b.ptrs", "K", p.K, "N", b.n, b.dtype);
  }
  p.N = b.n;
  r.row_bytes("b", "N", p.N, b.dtype);
  r.row_bytes("b", "K", p.K, b.dtype);
  r.kernel_extent("b.n", "N", p.N);
  r.pointer_table("b.ptrs", b.ptrs);
}

void check_per_expert(Rules& r, const char* name, const TensorView& t, const Problem& p) {
  if (!t.defined()) return;
  r.shape(name, t, {{"E", p.E, "offsets"}});
  r.dtype_is(name, t.dtype, DType::f32);
  r.vector(name, t);
}

void check_per_row(Rules& r, const char* name, const TensorView& t, const Problem& p) {
  if (!t.defined()) return;
  r.shape(name, t, {{"M", p.M, "a"}});
  r.dtype_is(name, t.dtype, DType::f32);
  r.vector(name, t);
}

void check_bias(Rules& r, const TensorView& bias, const Problem& p) {
  if (!bias.defined()) return;
  r.shape("bias", bias, {{"E", p.E, "offsets"}, {"N", p.N, "b"}});
  r.bias_dtype("bias", bias.dtype);
  r.matrix("bias", bias, "N");
  r.contiguous_rows_on_device("bias", bias, "N");
}

/// The dense ops' (N,) bias: one expert's row of check_bias.
void check_dense_bias(Rules& r, const TensorView& bias, const Problem& p) {
  if (!bias.defined()) return;
  r.shape("bias", bias, {{"N", p.N, "b"}});
  r.bias_dtype("bias", bias.dtype);
  r.vector("bias", bias);
}

/// The dense ops' (N,) dbias: one expert's row of check_dbias.
void check_dense_dbias(Rules& r, const TensorView& dbias, const Problem& p) {
  if (!dbias.defined()) return;
  r.shape("dbias", dbias, {{"N", p.N, "b"}});
  r.dtype_in("dbias", dbias.dtype, DType::f32, DType::bf16);
  r.vector("dbias", dbias);
}

/// A row-indexed (M, cols) output or saved activation; `symbol` names cols ("N", "I", "2I").
void check_rows(Rules& r, const char* name, const TensorView& t, const Problem& p, const char* symbol,
                int64_t cols) {
  r.shape(name, t, {{"M", p.M, "a"}, {symbol, cols, "b"}});
  r.output_dtype(name, t.dtype);
  r.matrix(name, t, symbol);
}

void check_amax(Rules& r, const TensorView& amax, int64_t n) {
  if (!amax.defined()) return;
  r.shape("amax", amax, {{"", n}});
  r.dtype_is("amax", amax.dtype, DType::f32);
  r.vector("amax", amax);
}

void check_dbias(Rules& r, const TensorView& dbias, const Problem& p, const char* symbol, int64_t cols) {
  if (!dbias.defined()) return;
  r.shape("dbias", dbias, {{"E", p.E, "offsets"}, {symbol, cols, "b"}});
  r.dtype_in("dbias", dbias.dtype, DType::f32, DType::bf16);
  r.matrix("dbias", dbias, symbol);
}

/// GLU column pairing of N = 2I pre-activation columns: interleaved layouts pair 32-column blocks;
/// a halves split at column I must keep the up half 16-byte aligned in every (M, 2I) tensor (and the (M, I)
/// rows of d). The error names b, whose N (`b_n`: 2I for the forward ops, I for the dGLU) sets I, and the
/// tensor whose dtype asks.
void check_glu_split(Rules& r, const char* b_name, int64_t n2, int64_t b_n, GluLayout layout, NamedViews paired) {
  // N = 2I is even already: the 16-byte rule on B's N makes it a multiple of 2 for every input dtype.
  const bool forward = b_n == n2;
  if (layout != GluLayout::halves) {
    if (n2 % 64 != 0) {
      r.fail(ErrorCode::invalid_argument, b_name,
             std::string("2I = ") + (forward ? "N" : "2N, c's columns,") + " a multiple of 64 for glu layout " +
                 glu_layout_name(layout) +
                 (layout == GluLayout::interleaved32 ? " (alternating 32-column gate and up blocks)"
                                                     : " (alternating 32-column up and gate blocks)"),
             "N=" + std::to_string(b_n) + (forward ? "" : " (2I=" + std::to_string(n2) + ")"));
    }
    return;
  }
  const int64_t i = n2 / 2;
  const char* i_of_n = forward ? "N/2" : "N";
  for (const auto& [name, t] : paired) {
    if (!t->defined()) continue;
    const auto size = static_cast<int64_t>(dtype_size(t->dtype));
    if (i % (16 / size) == 0) continue;  // I * size % 16, without the product (every element size divides 16)
    const std::string dtype = dtype_name(t->dtype);
    r.fail(ErrorCode::invalid_argument, b_name,
           std::string("I = ") + i_of_n + " with I * sizeof(" + dtype + ") a multiple of 16 bytes (gate and up " +
               "halves of I columns, in " + name + " of dtype " + dtype + "; 16-byte alignment rule: I % " +
               std::to_string(16 / size) + " == 0 for " + dtype + ")",
           "N=" + std::to_string(b_n) + " (I=" + std::to_string(i) + ")");
  }
}

void check_glu_layout(Rules& r, const char* name, GluLayout layout) {
  r.option(name, static_cast<int>(layout), {"halves", "interleaved32", "interleaved32_up_first"});
}

/// The GLU options of the grouped GLU ops: activation and layout values, swiglu_clamped's parameters.
void check_glu_params(Rules& r, const GluParams& glu) {
  r.option("glu.activation", static_cast<int>(glu.activation), {"swiglu", "geglu", "swiglu_clamped"});
  check_glu_layout(r, "glu.layout", glu.layout);
  if (glu.activation != Activation::swiglu_clamped) return;  // the other activations ignore the parameters
  // A value as given, in the shortest form that reads back (std::to_string would print 1e-30 as 0.000000),
  // and without iostreams: an ostream's number formatting goes through the locale's facets, which a library
  // linked with its own copy of libstdc++ may find under another copy's facet ids (a crash seen with torch
  // 2.11 on Ubuntu's Python 3.12).
  const auto text = [](float v) {
    char got[32];
    return std::string(got, std::to_chars(got, got + sizeof got, v).ptr);
  };
  // Named as the torch and JAX ops' arguments (in C++ they are the GluParams fields).
  if (!(glu.limit > 0.0f)) {
    r.fail(ErrorCode::invalid_argument, "limit", "a positive clamp limit for swiglu_clamped", text(glu.limit));
  }
  // NaN or infinity would turn every output into NaN (0 * inf in the sigmoid's argument or the sum).
  if (!std::isfinite(glu.act_alpha)) {
    r.fail(ErrorCode::invalid_argument, "act_alpha", "a finite act_alpha for swiglu_clamped", text(glu.act_alpha));
  }
  if (!std::isfinite(glu.linear_offset)) {
    r.fail(ErrorCode::invalid_argument, "linear_offset", "a finite linear_offset for swiglu_clamped",
           text(glu.linear_offset));
  }
}

/// The GEMM operands of every grouped op but wgrad: offsets, A, the expert weights and alpha.
Problem check_grouped_gemm(Rules& r, const TensorView& a, const ExpertWeights& b, const TensorView& offsets,
                           const TensorView& alpha, bool a_either_order = false) {
  Problem p;
  p.E = check_offsets(r, offsets);
  check_a(r, a, p, a_either_order);
  check_weights(r, b, p);
  check_per_expert(r, "alpha", alpha, p);
  return p;
}

/// Placement and the operands shared by the grouped forward ops (grouped_gemm, _glu, _srelu).
template <class Args>
Problem check_grouped_forward(Rules& r, const Args& x) {
  r.place({{"a", &x.a, kIn}, {"offsets", &x.offsets, kIn}, {"alpha", &x.alpha, kIn}, {"prob", &x.prob, kIn},
           {"bias", &x.bias, kIn}, {"d", &x.d, kOut}, {"c", &x.c, kOut}, {"b", &x.b.dense, kIn},
           {"b.ptrs", &x.b.ptrs, kIn}});
  r.settle();
  // grouped_gemm reads a column-major A too (M-major A tiles); the other ops read it row-major.
  Problem p = check_grouped_gemm(r, x.a, x.b, x.offsets, x.alpha, std::is_same_v<Args, GroupedGemmArgs>);
  check_per_row(r, "prob", x.prob, p);
  check_bias(r, x.bias, p);
  return p;
}

/// grouped_gemm and grouped_gemm_srelu: D and the optional C are (M, N).
template <class Args>
Device check_grouped_rows_forward(const char* op, const Args& x, Pointers pointers) {
  Rules r(op, pointers);
  const Problem p = check_grouped_forward(r, x);
  check_rows(r, "d", x.d, p, "N", p.N);
  if (x.c.defined()) check_rows(r, "c", x.c, p, "N", p.N);
  r.disjoint();
  return r.backend();
}

/// The operands of the grouped backward ops after the activation's own checks: the saved
/// pre-activation C and its gradient dC ((M, cols) each), dprob, dbias (E, cols) and amax (amax_n,).
template <class Args>
void check_activation_grads(Rules& r, const Args& x, const Problem& p, const char* symbol, int64_t cols,
                            int64_t amax_n) {
  check_rows(r, "c", x.c, p, symbol, cols);
  check_rows(r, "dc", x.dc, p, symbol, cols);
  check_per_row(r, "dprob", x.dprob, p);
  check_dbias(r, x.dbias, p, symbol, cols);
  check_amax(r, x.amax, amax_n);
}

}  // namespace

Device check(const GroupedGemmArgs& x, Pointers pointers) {
  return check_grouped_rows_forward("grouped_gemm", x, pointers);
}

Device check(const GroupedGemmGluArgs& x, Pointers pointers) {
  Rules r("grouped_gemm_glu", pointers);
  const Problem p = check_grouped_forward(r, x);
  check_glu_params(r, x.glu);
  check_glu_split(r, "b", p.N, p.N, x.glu.layout, {{"d", &x.d}, {"c", &x.c}});
  check_rows(r, "d", x.d, p, "I", p.N / 2);
  if (x.c.defined()) check_rows(r, "c", x.c, p, "2I", p.N);
  r.disjoint();
  return r.backend();
}

Device check(const GroupedGemmDgluArgs& x, Pointers pointers) {
  Rules r("grouped_gemm_dglu", pointers);
  r.place({{"a", &x.a, kIn}, {"c", &x.c, kIn}, {"offsets", &x.offsets, kIn}, {"alpha", &x.alpha, kIn},
           {"beta", &x.beta, kIn}, {"prob", &x.prob, kIn}, {"dc", &x.dc, kOut}, {"dprob", &x.dprob, kOut},
           {"dbias", &x.dbias, kOut}, {"amax", &x.amax, kOut}, {"b", &x.b.dense, kIn}, {"b.ptrs", &x.b.ptrs, kIn}});
  r.settle();
  // The GEMM gives dH (M, I): p.N = I.
  const Problem p = check_grouped_gemm(r, x.a, x.b, x.offsets, x.alpha);
  const int64_t I = p.N;
  check_per_expert(r, "beta", x.beta, p);
  check_per_row(r, "prob", x.prob, p);
  check_glu_params(r, x.glu);
  r.present("c", x.c, {{"M"}, {"2I"}});
  r.kernel_extent("c", "2I", 2 * I);  // c, dc and dbias have 2I columns
  check_glu_split(r, "b", 2 * I, I, x.glu.layout, {{"c", &x.c}, {"dc", &x.dc}});
  check_activation_grads(r, x, p, "2I", 2 * I, 2);
  r.disjoint();
  return r.backend();
}

Device check(const GroupedGemmSreluArgs& x, Pointers pointers) {
  return check_grouped_rows_forward("grouped_gemm_srelu", x, pointers);
}

Device check(const GroupedGemmDsreluArgs& x, Pointers pointers) {
  Rules r("grouped_gemm_dsrelu", pointers);
  r.place({{"a", &x.a, kIn}, {"c", &x.c, kIn}, {"offsets", &x.offsets, kIn}, {"alpha", &x.alpha, kIn},
           {"prob", &x.prob, kIn}, {"dc", &x.dc, kOut}, {"dprob", &x.dprob, kOut}, {"dbias", &x.dbias, kOut},
           {"amax", &x.amax, kOut}, {"b", &x.b.dense, kIn}, {"b.ptrs", &x.b.ptrs, kIn}});
  r.settle();
  const Problem p = check_grouped_gemm(r, x.a, x.b, x.offsets, x.alpha);
  check_per_row(r, "prob", x.prob, p);
  check_activation_grads(r, x, p, "N", p.N, 1);
  r.disjoint();
  return r.backend();
}

namespace {

/// w_in, the gradient accumulate adds into when XLA hands it in another buffer than w: w itself (w is a packed
/// tensor, so a packed view at its address of its shape is w), or another packed tensor of w's shape and dtype,
/// under w's own rules (16-byte aligned, non-null); disjoint() checks that it does not overlap w.
void check_w_in(const Rules& r, const GroupedGemmWgradArgs& x, bool w_in_is_w, std::initializer_list<Dim> dims,
                const char* last) {
  if (!x.accumulate) r.fail(ErrorCode::invalid_argument, "w_in", "no w_in without accumulate", "w_in");
  r.shape("w_in", x.w_in, dims);
  r.same_dtype("w_in", x.w_in.dtype, "w", x.w.dtype);
  if (!w_in_is_w) {
    r.stacked_matrices("w_in", x.w_in, last);
  } else if (!x.w_in.is_contiguous()) {
    r.fail(ErrorCode::invalid_argument, "w_in", "w itself (packed, as w) or another buffer",
           "w's address with strides " + format_strides(x.w_in));
  }
}

}  // namespace

Device check(const GroupedGemmWgradArgs& x, Pointers pointers) {
  Rules r("grouped_gemm_wgrad", pointers);
  // w with accumulate is read and written as one operand: it overlaps neither x nor dy, and it must exist.
  // w_in that is w itself is that operand, not a second one.
  const TensorView absent;
  const bool w_in_is_w = x.w_in.defined() && x.w_in.data != nullptr && x.w_in.data == x.w.data;
  r.place({{"x", &x.x, kIn}, {"dy", &x.dy, kIn}, {"offsets", &x.offsets, kIn},
           {"w", &x.w, x.accumulate ? Role::updated : kOut}, {"w_ptrs", &x.w_ptrs, kIn},
           {"w_in", w_in_is_w ? &absent : &x.w_in, kIn}});
  r.settle();
  Problem p;
  p.E = check_offsets(r, x.offsets);
  r.shape("x", x.x, {{"M"}, {"H"}});
  r.input_dtype("x", x.x.dtype);
  p.M = x.x.shape[0];
  const int64_t H = x.x.shape[1];
  r.positive("x", "H", H);
  r.matrix("x", x.x, "H");
  r.kernel_extent("x", "M", p.M);
  r.kernel_extent("x", "H", H);
  r.shape("dy", x.dy, {{"M", p.M, "x"}, {"N"}});
  r.same_dtype("dy", x.dy.dtype, "x", x.x.dtype);
  r.input_dtype("dy", x.dy.dtype);
  p.N = x.dy.shape[1];
  r.positive("dy", "N", p.N);
  r.matrix("dy", x.dy, "N");
  r.kernel_extent("dy", "N", p.N);

  const bool dense = x.w.defined();
  if (dense == x.w_ptrs.defined()) {
    r.fail(ErrorCode::invalid_argument, "w", "exactly one of w or w_ptrs", dense ? "both" : "neither");
  }
  const char* last = x.transpose_output ? "H" : "N";
  const int64_t last_size = x.transpose_output ? H : p.N;
  if (dense) {
    if (x.transpose_output) {
      r.shape("w", x.w, {{"E", p.E, "offsets"}, {"N", p.N, "dy"}, {"H", H, "x"}});
    } else {
      r.shape("w", x.w, {{"E", p.E, "offsets"}, {"H", H, "x"}, {"N", p.N, "dy"}});
    }
    r.output_dtype("w", x.w.dtype);
    r.stacked_matrices("w", x.w, last);
    if (x.w_in.defined()) {
      if (x.transpose_output) {
        check_w_in(r, x, w_in_is_w, {{"E", p.E, "offsets"}, {"N", p.N, "dy"}, {"H", H, "x"}}, last);
      } else {
        check_w_in(r, x, w_in_is_w, {{"E", p.E, "offsets"}, {"H", H, "x"}, {"N", p.N, "dy"}}, last);
      }
    }
  } else {
    if (x.w_in.defined()) r.fail(ErrorCode::invalid_argument, "w_in", "no w_in with w_ptrs (a dense w only)", "w_in");
    r.shape("w_ptrs", x.w_ptrs, {{"E", p.E, "offsets"}});
    r.dtype_is("w_ptrs", x.w_ptrs.dtype, DType::i64);
    r.vector("w_ptrs", x.w_ptrs);
    r.output_dtype("w_dtype", x.w_dtype);
    if (x.transpose_output) {
      r.table_matrices("w_ptrs", "N", p.N, "H", H, x.w_dtype);
    } else {
      r.table_matrices("w_ptrs", "H", H, "N", p.N, x.w_dtype);
    }
    r.row_bytes("w_ptrs", last, last_size, x.w_dtype);
    r.pointer_table("w_ptrs", x.w_ptrs);
  }
  r.disjoint();
  return r.backend();
}

Device check(const GemmSwigluArgs& x, Pointers pointers) {
  Rules r("gemm_swiglu", pointers);
  r.place({{"a", &x.a, kIn}, {"b", &x.b, kIn}, {"ab12", &x.ab12, kOut}, {"c", &x.c, kOut}});
  r.settle();
  Problem p;
  check_a(r, x.a, p);
  check_dense_b(r, x.b, x.b_layout, p);
  check_glu_layout(r, "layout", x.layout);
  check_glu_split(r, "b", p.N, p.N, x.layout, {{"ab12", &x.ab12}, {"c", &x.c}});
  check_rows(r, "ab12", x.ab12, p, "N", p.N);
  check_rows(r, "c", x.c, p, "N/2", p.N / 2);
  r.disjoint();
  return r.backend();
}

Device check(const GemmAmaxArgs& x, Pointers pointers) {
  Rules r("gemm_amax", pointers);
  r.place({{"a", &x.a, kIn}, {"b", &x.b, kIn}, {"c", &x.c, kOut}, {"amax", &x.amax, kOut}});
  r.settle();
  Problem p;
  check_a(r, x.a, p);
  check_dense_b(r, x.b, x.b_layout, p);
  check_rows(r, "c", x.c, p, "N", p.N);
  r.present("amax", x.amax, {{"", 1}});
  check_amax(r, x.amax, 1);
  r.disjoint();
  return r.backend();
}

Device check(const GemmSreluArgs& x, Pointers pointers) {
  Rules r("gemm_srelu", pointers);
  r.place({{"a", &x.a, kIn}, {"b", &x.b, kIn}, {"prob", &x.prob, kIn}, {"bias", &x.bias, kIn}, {"d", &x.d, kOut},
           {"c", &x.c, kOut}});
  r.settle();
  Problem p;
  check_a(r, x.a, p);
  check_dense_b(r, x.b, x.b_layout, p);
  check_per_row(r, "prob", x.prob, p);
  check_dense_bias(r, x.bias, p);
  check_rows(r, "d", x.d, p, "N", p.N);
  if (x.c.defined()) check_rows(r, "c", x.c, p, "N", p.N);
  r.disjoint();
  return r.backend();
}

Device check(const GemmDsreluArgs& x, Pointers pointers) {
  Rules r("gemm_dsrelu", pointers);
  r.place({{"a", &x.a, kIn}, {"b", &x.b, kIn}, {"c", &x.c, kIn}, {"prob", &x.prob, kIn}, {"dc", &x.dc, kOut},
           {"dprob", &x.dprob, kOut}, {"dbias", &x.dbias, kOut}, {"amax", &x.amax, kOut}});
  r.settle();
  Problem p;
  check_a(r, x.a, p);
  check_dense_b(r, x.b, x.b_layout, p);
  check_per_row(r, "prob", x.prob, p);
  check_rows(r, "c", x.c, p, "N", p.N);
  check_rows(r, "dc", x.dc, p, "N", p.N);
  check_per_row(r, "dprob", x.dprob, p);
  check_dense_dbias(r, x.dbias, p);
  check_amax(r, x.amax, 1);
  r.disjoint();
  return r.backend();
}

Device check(const GroupedGemmArgs& args) { return check(args, Pointers::check); }
Device check(const GroupedGemmGluArgs& args) { return check(args, Pointers::check); }
Device check(const GroupedGemmDgluArgs& args) { return check(args, Pointers::check); }
Device check(const GroupedGemmSreluArgs& args) { return check(args, Pointers::check); }
Device check(const GroupedGemmDsreluArgs& args) { return check(args, Pointers::check); }
Device check(const GroupedGemmWgradArgs& args) { return check(args, Pointers::check); }
Device check(const GemmSwigluArgs& args) { return check(args, Pointers::check); }
Device check(const GemmAmaxArgs& args) { return check(args, Pointers::check); }
Device check(const GemmSreluArgs& args) { return check(args, Pointers::check); }
Device check(const GemmDsreluArgs& args) { return check(args, Pointers::check); }

}  // namespace moegemm::contract
