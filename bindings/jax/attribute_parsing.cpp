// Enum attributes of the JAX calls (b_layout, activation, glu_layout) and dense expert weights.
#include "op_builders.hpp"

namespace moegemm::jax_binding {

namespace {

[[noreturn]] void bad_choice(const char* attr, const std::string& given, const char* choices) {
  throw Error(ErrorCode::invalid_argument,
              std::string(attr) + ": expected one of " + choices + ", got \"" + given + "\"");
}

}  // namespace

BLayout parse_b_layout(const std::string& text) {
  if (text == "nk") return BLayout::nk;
  if (text == "kn") return BLayout::kn;
  bad_choice("b_layout", text, "\"nk\", \"kn\"");
}

GluLayout parse_glu_layout(const std::string& text) {
  if (text == "halves") return GluLayout::halves;
  if (text == "interleaved32") return GluLayout::interleaved32;
  if (text == "interleaved32_up_first") return GluLayout::interleaved32_up_first;
  bad_choice("glu_layout", text, "\"halves\", \"interleaved32\", \"interleaved32_up_first\"");
}

GluParams parse_glu(const Options& opt) {
  GluParams p;
  const std::string act = opt.text("activation");
  if (act == "swiglu") p.activation = Activation::swiglu;
  else if (act == "geglu") p.activation = Activation::geglu;
  else if (act == "swiglu_clamped") p.activation = Activation::swiglu_clamped;
  else bad_choice("activation", act, "\"swiglu\", \"geglu\", \"swiglu_clamped\"");
  p.layout = parse_glu_layout(opt.text("glu_layout"));
  p.limit = opt.real("limit");
  p.act_alpha = opt.real("act_alpha");
  p.linear_offset = opt.real("linear_offset");
  return p;
}

ExpertWeights dense_weights(const TensorView& b, BLayout layout) {
  ExpertWeights w;
  w.dense = b;
  w.layout = layout;
  w.dtype = b.dtype;
  if (b.rank == 3) w.n = layout == BLayout::nk ? b.shape[1] : b.shape[2];
  return w;
}

}  // namespace moegemm::jax_binding
