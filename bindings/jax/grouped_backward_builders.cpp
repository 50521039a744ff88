// Builders of the grouped backward ops: grouped_gemm_dglu, grouped_gemm_dsrelu, grouped_gemm_wgrad.
#include <type_traits>

#include "op_builders.hpp"

namespace moegemm::jax_binding {

namespace {

// The operands of the grouped backward ops through the activation, in call order; dglu adds beta
// and the GLU attributes.
template <class Args>
Args grouped_backward(const Options& opt, OperandCursor& cur) {
  constexpr bool glu = std::is_same_v<Args, GroupedGemmDgluArgs>;
  Args args;
  args.a = cur.input("dy");
  args.b = dense_weights(cur.input("b"), parse_b_layout(opt.text("b_layout")));
  args.c = cur.input("c");
  args.offsets = cur.input("offsets");
  args.alpha = cur.input_if(opt.flag("has_alpha"), "alpha");
  if constexpr (glu) args.beta = cur.input_if(opt.flag("has_beta"), "beta");
  args.prob = cur.input_if(opt.flag("has_prob"), "prob");
  if constexpr (glu) args.glu = parse_glu(opt);
  args.dc = cur.output("dc");
  args.dprob = cur.output_if(opt.flag("compute_dprob"), "dprob");
  args.dbias = cur.output_if(opt.flag("compute_dbias"), "dbias");
  args.amax = cur.output_if(opt.flag("compute_amax"), "amax");
  args.zero_tail = opt.flag("zero_tail");
  return args;
}

}  // namespace

GroupedGemmDgluArgs build_grouped_gemm_dglu(const Operands& ops, const Options& opt) {
  OperandCursor cur("grouped_gemm_dglu", ops);
  auto args = grouped_backward<GroupedGemmDgluArgs>(opt, cur);
  cur.finish();
  return args;
}

GroupedGemmDsreluArgs build_grouped_gemm_dsrelu(const Operands& ops, const Options& opt) {
  OperandCursor cur("grouped_gemm_dsrelu", ops);
  auto args = grouped_backward<GroupedGemmDsreluArgs>(opt, cur);
  cur.finish();
  return args;
}

GroupedGemmWgradArgs build_grouped_gemm_wgrad(const Operands& ops, const Options& opt) {
  OperandCursor cur("grouped_gemm_wgrad", ops);
  GroupedGemmWgradArgs args;
  args.x = cur.input("x");
  args.dy = cur.input("dy");
  args.offsets = cur.input("offsets");
  args.accumulate = opt.flag("accumulate");
  // With accumulate, input w is aliased into output w (the call's input_output_aliases), so that the op adds
  // into the buffer XLA filled. XLA may still hand two buffers (a dynamic-slice fusion around the call, as in
  // vmap's and scan's loops): then the op copies input w into output w first (w_in).
  args.w_in = cur.input_if(args.accumulate, "w");
  args.w = cur.output("w");
  args.w_dtype = args.w.dtype;
  args.transpose_output = opt.flag("transpose_output");
  cur.finish();
  return args;
}

}  // namespace moegemm::jax_binding
