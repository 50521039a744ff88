// Grouped forward ops (ragged M): grouped_gemm, grouped_gemm_glu, grouped_gemm_srelu.
#include <optional>
#include <tuple>

#include <c10/util/string_view.h>

#include "launch.hpp"
#include "operands.hpp"
#include "options.hpp"
#include "registration.hpp"
#include "tensor_view.hpp"

namespace moegemm::torch_ops {
namespace {

using OptTensor = std::optional<at::Tensor>;

// Operands every grouped forward op shares; ranks and devices checked, views taken.
template <class Args>
void fill_common(Args& args, const char* op, const at::Tensor& a, const at::Tensor& b, BLayout layout,
                 const at::Tensor& offsets, const OptTensor& alpha, const OptTensor& prob,
                 const OptTensor& bias, bool zero_tail, bool validate) {
  expect_rank(a, 2, op, "a", "(M, K) activation");
  expect_device(a, "a", b, op, "b");
  expect_device(a, "a", offsets, op, "offsets");
  expect_device(a, "a", alpha, op, "alpha");
  expect_device(a, "a", prob, op, "prob");
  expect_device(a, "a", bias, op, "bias");
  args.a = view_of(a, op, "a");
  args.b = dense_weights(b, layout, op);
  args.offsets = view_of(offsets, op, "offsets");
  args.alpha = view_of(alpha, op, "alpha");
  args.prob = view_of(prob, op, "prob");
  args.bias = view_of(bias, op, "bias");
  args.zero_tail = zero_tail;
  args.validate = validate;
}

// D (M, d_columns) and, with generate_c, C (M, n) in `out_dtype` (default: a's dtype), else an empty (0,)
// placeholder for C: the op's checks made on their planned views (check_before_allocation), then allocated,
// viewed and the op run through `launch`.
template <class Args, class Check, class Run>
std::tuple<at::Tensor, at::Tensor> run_forward(Args& args, const char* op, const at::Tensor& a, int64_t n,
                                               int64_t d_columns, bool generate_c,
                                               std::optional<at::ScalarType> out_dtype,
                                               Check check, Run run) {
  DeviceContext context(a);
  const at::ScalarType type = out_dtype_or(out_dtype, a.scalar_type(), op, "out_dtype");
  const int64_t m = a.size(0);
  args.d = planned_view(args.a, type, {m, d_columns}, op, "out_dtype");
  if (generate_c) args.c = planned_view(args.a, type, {m, n}, op, "out_dtype");
  const std::size_t bytes = check_before_allocation(context, args, check);
  at::Tensor d = allocate(args.d, a, op, "d");
  at::Tensor c = generate_c ? allocate(args.c, a, op, "c") : not_requested(d);
  launch(context, a, args, bytes, run);
  return {d, c};
}

std::tuple<at::Tensor, at::Tensor> grouped_gemm_op(
    const at::Tensor& a, const at::Tensor& b, const at::Tensor& offsets, c10::string_view b_layout,
    const OptTensor& alpha, const OptTensor& prob, const OptTensor& bias, bool generate_c,
    std::optional<at::ScalarType> out_dtype, bool zero_tail, bool validate) {
  constexpr const char* op = "grouped_gemm";
  const BLayout layout = parse_b_layout(b_layout, op);
  GroupedGemmArgs args;
  fill_common(args, op, a, b, layout, offsets, alpha, prob, bias, zero_tail, validate);
  const int64_t n = weights_n(b, layout);
  return run_forward(args, op, a, n, n, generate_c, out_dtype,
                     grouped_gemm_check, grouped_gemm);
}

std::tuple<at::Tensor, at::Tensor> grouped_gemm_glu_op(
    const at::Tensor& a, const at::Tensor& b, const at::Tensor& offsets, c10::string_view b_layout,
    const OptTensor& alpha, const OptTensor& prob, const OptTensor& bias, c10::string_view activation,
    c10::string_view glu_layout, double limit, double act_alpha, double linear_offset, bool generate_c,
    std::optional<at::ScalarType> out_dtype, bool zero_tail, bool validate) {
  constexpr const char* op = "grouped_gemm_glu";
  const BLayout layout = parse_b_layout(b_layout, op);
  GroupedGemmGluArgs args;
  fill_common(args, op, a, b, layout, offsets, alpha, prob, bias, zero_tail, validate);
  args.glu = glu_params(activation, glu_layout, limit, act_alpha, linear_offset, op);
  const int64_t n = weights_n(b, layout);
  // An odd N is the contract's to reject (it names b); I = N / 2 only sizes the output here.
  return run_forward(args, op, a, n, n / 2, generate_c, out_dtype,
                     grouped_gemm_glu_check, grouped_gemm_glu);
}

std::tuple<at::Tensor, at::Tensor> grouped_gemm_srelu_op(
    const at::Tensor& a, const at::Tensor& b, const at::Tensor& offsets, c10::string_view b_layout,
    const OptTensor& alpha, const OptTensor& prob, const OptTensor& bias, bool generate_c,
    std::optional<at::ScalarType> out_dtype, bool zero_tail, bool validate) {
  constexpr const char* op = "grouped_gemm_srelu";
  const BLayout layout = parse_b_layout(b_layout, op);
  GroupedGemmSreluArgs args;
  fill_common(args, op, a, b, layout, offsets, alpha, prob, bias, zero_tail, validate);
  const int64_t n = weights_n(b, layout);
  return run_forward(args, op, a, n, n, generate_c, out_dtype,
                     grouped_gemm_srelu_check, grouped_gemm_srelu);
}

}  // namespace

void register_grouped_forward(torch::Library& m) {
  m.impl("grouped_gemm", TORCH_FN(grouped_gemm_op));
  m.impl("grouped_gemm_glu", TORCH_FN(grouped_gemm_glu_op));
  m.impl("grouped_gemm_srelu", TORCH_FN(grouped_gemm_srelu_op));
}

}  // namespace moegemm::torch_ops
