// Builders of the dense (single-group) ops: gemm_swiglu, gemm_amax, gemm_srelu, gemm_dsrelu.
#include "op_builders.hpp"

namespace moegemm::jax_binding {

GemmSwigluArgs build_gemm_swiglu(const Operands& ops, const Options& opt) {
  OperandCursor cur("gemm_swiglu", ops);
  GemmSwigluArgs args;
  args.a = cur.input("a");
  args.b = cur.input("b");
  args.b_layout = parse_b_layout(opt.text("b_layout"));
  args.alpha = opt.real("alpha");
  args.layout = parse_glu_layout(opt.text("glu_layout"));
  args.ab12 = cur.output("ab12");
  args.c = cur.output("c");
  cur.finish();
  return args;
}

GemmAmaxArgs build_gemm_amax(const Operands& ops, const Options& opt) {
  OperandCursor cur("gemm_amax", ops);
  GemmAmaxArgs args;
  args.a = cur.input("a");
  args.b = cur.input("b");
  args.b_layout = parse_b_layout(opt.text("b_layout"));
  args.c = cur.output("c");
  args.amax = cur.output("amax");
  cur.finish();
  return args;
}

GemmSreluArgs build_gemm_srelu(const Operands& ops, const Options& opt) {
  OperandCursor cur("gemm_srelu", ops);
  GemmSreluArgs args;
  args.a = cur.input("a");
  args.b = cur.input("b");
  args.b_layout = parse_b_layout(opt.text("b_layout"));
  args.alpha = opt.real("alpha");
  args.prob = cur.input_if(opt.flag("has_prob"), "prob");
  args.bias = cur.input_if(opt.flag("has_bias"), "bias");
  args.d = cur.output("d");
  args.c = cur.output_if(opt.flag("generate_c"), "c");
  cur.finish();
  return args;
}

GemmDsreluArgs build_gemm_dsrelu(const Operands& ops, const Options& opt) {
  OperandCursor cur("gemm_dsrelu", ops);
  GemmDsreluArgs args;
  args.a = cur.input("dy");
  args.b = cur.input("b");
  args.b_layout = parse_b_layout(opt.text("b_layout"));
  args.alpha = opt.real("alpha");
  args.c = cur.input("c");
  args.prob = cur.input_if(opt.flag("has_prob"), "prob");
  args.dc = cur.output("dc");
  args.dprob = cur.output_if(opt.flag("compute_dprob"), "dprob");
  args.dbias = cur.output_if(opt.flag("compute_dbias"), "dbias");
  args.amax = cur.output_if(opt.flag("compute_amax"), "amax");
  cur.finish();
  return args;
}

}  // namespace moegemm::jax_binding
