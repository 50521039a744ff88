// Grouped backward ops through the activation: grouped_gemm_dglu, grouped_gemm_dsrelu.
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
using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Operands both backward ops share; ranks and devices checked, views taken.
template <class Args>
void fill_common(Args& args, const char* op, const at::Tensor& a, const at::Tensor& b, BLayout layout,
                 const at::Tensor& c, const at::Tensor& offsets, const OptTensor& alpha,
                 const OptTensor& prob, bool zero_tail, bool validate) {
  expect_rank(a, 2, op, "a", "(M, K) incoming-gradient");
  expect_rank(c, 2, op, "c", "(M, N) saved pre-activation");
  expect_rank(offsets, 1, op, "offsets", "(E,) torch.int32");
  expect_device(a, "a", b, op, "b");
  expect_device(a, "a", c, op, "c");
  expect_device(a, "a", offsets, op, "offsets");
  expect_device(a, "a", alpha, op, "alpha");
  expect_device(a, "a", prob, op, "prob");
  args.a = view_of(a, op, "a");
  args.b = dense_weights(b, layout, op);
  args.c = view_of(c, op, "c");
  args.offsets = view_of(offsets, op, "offsets");
  args.alpha = view_of(alpha, op, "alpha");
  args.prob = view_of(prob, op, "prob");
  args.zero_tail = zero_tail;
  args.validate = validate;
}

// dc (M, columns) in `dc_dtype` (default: c's dtype); dprob (M,), dbias (E, columns) and amax (amax_len,)
// when requested, else empty (0,) placeholders: the op's checks made on their planned views
// (check_before_allocation), then allocated, viewed and the op run through `launch`.
template <class Args, class Check, class Run>
Outputs run_backward(Args& args, const char* op, const at::Tensor& a, const at::Tensor& c,
                     const at::Tensor& offsets, int64_t columns, int64_t amax_len, bool compute_dprob,
                     bool compute_dbias, bool compute_amax, std::optional<at::ScalarType> dc_dtype,
                     std::optional<at::ScalarType> dbias_dtype, Check check, Run run) {
  DeviceContext context(a);
  const int64_t m = a.size(0), e = offsets.size(0);
  const at::ScalarType dc_type = out_dtype_or(dc_dtype, c.scalar_type(), op, "dc_dtype");
  const at::ScalarType dbias_type = compute_dbias ? dbias_dtype_or_f32(dbias_dtype, op) : at::kFloat;
  args.dc = planned_view(args.a, dc_type, {m, columns}, op, "dc_dtype");
  if (compute_dprob) args.dprob = planned_view(args.a, at::kFloat, {m}, op, "dprob");
  if (compute_dbias) args.dbias = planned_view(args.a, dbias_type, {e, columns}, op, "dbias_dtype");
  if (compute_amax) args.amax = planned_view(args.a, at::kFloat, {amax_len}, op, "amax");
  const std::size_t bytes = check_before_allocation(context, args, check);
  at::Tensor dc = allocate(args.dc, a, op, "dc");
  at::Tensor dprob = compute_dprob ? allocate(args.dprob, a, op, "dprob") : not_requested(dc);
  at::Tensor dbias = compute_dbias ? allocate(args.dbias, a, op, "dbias") : not_requested(dc);
  at::Tensor amax = compute_amax ? allocate(args.amax, a, op, "amax") : not_requested(dc);
  launch(context, a, args, bytes, run);
  return {dc, dprob, dbias, amax};
}

Outputs grouped_gemm_dglu_op(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                             const at::Tensor& offsets, c10::string_view b_layout, const OptTensor& alpha,
                             const OptTensor& beta, const OptTensor& prob, c10::string_view activation,
                             c10::string_view glu_layout, double limit, double act_alpha,
                             double linear_offset, bool compute_dprob, bool compute_dbias,
                             bool compute_amax, std::optional<at::ScalarType> dc_dtype,
                             std::optional<at::ScalarType> dbias_dtype, bool zero_tail, bool validate) {
  constexpr const char* op = "grouped_gemm_dglu";
  const BLayout layout = parse_b_layout(b_layout, op);
  GroupedGemmDgluArgs args;
  fill_common(args, op, a, b, layout, c, offsets, alpha, prob, zero_tail, validate);
  expect_device(a, "a", beta, op, "beta");
  args.beta = view_of(beta, op, "beta");
  args.glu = glu_params(activation, glu_layout, limit, act_alpha, linear_offset, op);
  // dC has C's 2I columns: twice the GEMM's N = I.
  return run_backward(args, op, a, c, offsets, 2 * weights_n(b, layout), 2, compute_dprob, compute_dbias,
                      compute_amax, dc_dtype, dbias_dtype,
                      grouped_gemm_dglu_check, grouped_gemm_dglu);
}

Outputs grouped_gemm_dsrelu_op(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                               const at::Tensor& offsets, c10::string_view b_layout,
                               const OptTensor& alpha, const OptTensor& prob, bool compute_dprob,
                               bool compute_dbias, bool compute_amax,
                               std::optional<at::ScalarType> dc_dtype,
                               std::optional<at::ScalarType> dbias_dtype, bool zero_tail, bool validate) {
  constexpr const char* op = "grouped_gemm_dsrelu";
  const BLayout layout = parse_b_layout(b_layout, op);
  GroupedGemmDsreluArgs args;
  fill_common(args, op, a, b, layout, c, offsets, alpha, prob, zero_tail, validate);
  return run_backward(args, op, a, c, offsets, weights_n(b, layout), 1, compute_dprob, compute_dbias,
                      compute_amax, dc_dtype, dbias_dtype,
                      grouped_gemm_dsrelu_check, grouped_gemm_dsrelu);
}

}  // namespace

void register_grouped_backward(torch::Library& m) {
  m.impl("grouped_gemm_dglu", TORCH_FN(grouped_gemm_dglu_op));
  m.impl("grouped_gemm_dsrelu", TORCH_FN(grouped_gemm_dsrelu_op));
}

}  // namespace moegemm::torch_ops
