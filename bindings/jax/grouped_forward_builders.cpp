// Builders of the grouped forward ops: grouped_gemm, grouped_gemm_glu, grouped_gemm_srelu.
#include "op_builders.hpp"

namespace moegemm::jax_binding {

namespace {

// The operands every grouped forward op shares, in call order.
template <class Args>
Args grouped_forward(const Options& opt, OperandCursor& cur) {
  Args args;
  args.a = cur.input("a");
  args.b = dense_weights(cur.input("b"), parse_b_layout(opt.text("b_layout")));
  args.offsets = cur.input("offsets");
  args.alpha = cur.input_if(opt.flag("has_alpha"), "alpha");
  args.prob = cur.input_if(opt.flag("has_prob"), "prob");
  args.bias = cur.input_if(opt.flag("has_bias"), "bias");
  args.d = cur.output("d");
  args.c = cur.output_if(opt.flag("generate_c"), "c");
  args.zero_tail = opt.flag("zero_tail");
  return args;
}

}  // namespace

GroupedGemmArgs build_grouped_gemm(const Operands& ops, const Options& opt) {
  OperandCursor cur("grouped_gemm", ops);
  auto args = grouped_forward<GroupedGemmArgs>(opt, cur);
  cur.finish();
  return args;
}

GroupedGemmGluArgs build_grouped_gemm_glu(const Operands& ops, const Options& opt) {
  OperandCursor cur("grouped_gemm_glu", ops);
  auto args = grouped_forward<GroupedGemmGluArgs>(opt, cur);
  args.glu = parse_glu(opt);
  cur.finish();
  return args;
}

GroupedGemmSreluArgs build_grouped_gemm_srelu(const Operands& ops, const Options& opt) {
  OperandCursor cur("grouped_gemm_srelu", ops);
  auto args = grouped_forward<GroupedGemmSreluArgs>(opt, cur);
  cur.finish();
  return args;
}

}  // namespace moegemm::jax_binding
