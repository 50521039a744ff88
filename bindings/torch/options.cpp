#include "options.hpp"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <charconv>
#include <cmath>
#include <string>
#include <tuple>

namespace moegemm::torch_ops {

BLayout parse_b_layout(std::string_view text, const char* op, bool grouped) {
  if (text == "nk") return BLayout::nk;
  if (text == "kn") return BLayout::kn;
  const char* e = grouped ? "E, " : "";
  TORCH_CHECK_VALUE(false, op, ": b_layout: expected \"nk\" (weights (", e, "N, K)) or \"kn\" (weights (", e,
                    "K, N)), got \"", text, "\"");
}

Activation parse_activation(std::string_view text, const char* op) {
  if (text == "swiglu") return Activation::swiglu;
  if (text == "geglu") return Activation::geglu;
  if (text == "swiglu_clamped") return Activation::swiglu_clamped;
  TORCH_CHECK_VALUE(false, op, ": activation: expected \"swiglu\", \"geglu\" or \"swiglu_clamped\", got \"", text,
                    "\"");
}

GluLayout parse_glu_layout(std::string_view text, const char* op) {
  if (text == "halves") return GluLayout::halves;
  if (text == "interleaved32") return GluLayout::interleaved32;
  if (text == "interleaved32_up_first") return GluLayout::interleaved32_up_first;
  TORCH_CHECK_VALUE(false, op, ": glu_layout: expected \"halves\", \"interleaved32\" or \"interleaved32_up_first\", got \"",
                    text, "\"");
}

at::ScalarType out_dtype_or(const std::optional<at::ScalarType>& requested, at::ScalarType fallback,
                            const char* op, const char* arg) {
  if (!requested.has_value()) return fallback;
  const at::ScalarType t = *requested;
  TORCH_CHECK_VALUE(t == at::kBFloat16 || t == at::kHalf || t == at::kFloat || t == at::kDouble, op, ": ", arg,
                    ": expected None, torch.bfloat16, torch.float16, torch.float32 or torch.float64, got torch.",
                    std::string(c10::getDtypeNames(t).first));
  return t;
}

at::ScalarType dbias_dtype_or_f32(const std::optional<at::ScalarType>& requested, const char* op) {
  if (!requested.has_value()) return at::kFloat;
  const at::ScalarType t = *requested;
  TORCH_CHECK_VALUE(t == at::kFloat || t == at::kBFloat16, op,
                    ": dbias_dtype: expected None, torch.float32 or torch.bfloat16, got torch.",
                    std::string(c10::getDtypeNames(t).first));
  return t;
}

GluParams glu_params(std::string_view activation, std::string_view glu_layout, double limit,
                     double act_alpha, double linear_offset, const char* op) {
  GluParams p;
  p.activation = parse_activation(activation, op);
  p.layout = parse_glu_layout(glu_layout, op);
  p.limit = static_cast<float>(limit);
  // The contract checks the f32 limit the kernels take; a positive one that f32 rounds to 0 is named here
  // with the value the caller gave (std::to_chars: no ostream in the library's messages).
  if (p.activation == Activation::swiglu_clamped && limit > 0.0 && !(p.limit > 0.0f)) {
    char given[32];
    const auto end = std::to_chars(given, given + sizeof given, limit).ptr;
    TORCH_CHECK_VALUE(false, op, ": limit: expected a positive clamp limit for swiglu_clamped (positive in f32), got ",
                      std::string(given, end), ", which f32 rounds to 0");
  }
  p.act_alpha = static_cast<float>(act_alpha);
  p.linear_offset = static_cast<float>(linear_offset);
  // Likewise a finite slope or offset that f32 rounds to infinity (the contract would report it as +-inf).
  if (p.activation == Activation::swiglu_clamped) {
    for (const auto& [name, given, taken] : {std::tuple{"act_alpha", act_alpha, p.act_alpha},
                                             std::tuple{"linear_offset", linear_offset, p.linear_offset}}) {
      if (std::isfinite(given) && !std::isfinite(taken)) {
        char text[32];
        const auto end = std::to_chars(text, text + sizeof text, given).ptr;
        TORCH_CHECK_VALUE(false, op, ": ", name, ": expected a finite ", name,
                          " for swiglu_clamped (finite in f32), got ", std::string(text, end),
                          given < 0 ? ", which f32 rounds to -inf" : ", which f32 rounds to inf");
      }
    }
  }
  return p;
}

}  // namespace moegemm::torch_ops
