// Dense (single-GEMM) ops: gemm_swiglu, gemm_amax, gemm_srelu, gemm_dsrelu.
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
using Pair = std::tuple<at::Tensor, at::Tensor>;
using Quad = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// a (M, K) and b ((N, K) for nk, (K, N) for kn) on one device; returns N.
int64_t check_matrices(const char* op, const at::Tensor& a, const at::Tensor& b, BLayout layout) {
  expect_rank(a, 2, op, "a", "(M, K)");
  expect_device(a, "a", b, op, "b");
  return matrix_n(b, layout, op);
}

Pair gemm_swiglu_op(const at::Tensor& a, const at::Tensor& b, c10::string_view b_layout, double alpha,
                    c10::string_view glu_layout, std::optional<at::ScalarType> ab12_dtype,
                    std::optional<at::ScalarType> out_dtype) {
  constexpr const char* op = "gemm_swiglu";
  GemmSwigluArgs args;
  args.b_layout = parse_b_layout(b_layout, op, /*grouped=*/false);
  args.layout = parse_glu_layout(glu_layout, op);
  const int64_t n = check_matrices(op, a, b, args.b_layout);
  args.a = view_of(a, op, "a");
  args.b = view_of(b, op, "b");
  args.alpha = static_cast<float>(alpha);
  DeviceContext context(a);
  const int64_t m = a.size(0);
  const at::ScalarType ab12_type = out_dtype_or(ab12_dtype, f32_default_dtype(a), op, "ab12_dtype");
  const at::ScalarType c_type = out_dtype_or(out_dtype, a.scalar_type(), op, "out_dtype");
  args.ab12 = planned_view(args.a, ab12_type, {m, n}, op, "ab12_dtype");
  args.c = planned_view(args.a, c_type, {m, n / 2}, op, "out_dtype");
  const std::size_t bytes = check_before_allocation(context, args, gemm_swiglu_check);
  at::Tensor ab12 = allocate(args.ab12, a, op, "ab12");
  at::Tensor c = allocate(args.c, a, op, "c");
  launch(context, a, args, bytes, gemm_swiglu);
  return {ab12, c};
}

Pair gemm_amax_op(const at::Tensor& a, const at::Tensor& b, c10::string_view b_layout,
                  std::optional<at::ScalarType> out_dtype) {
  constexpr const char* op = "gemm_amax";
  GemmAmaxArgs args;
  args.b_layout = parse_b_layout(b_layout, op, /*grouped=*/false);
  const int64_t n = check_matrices(op, a, b, args.b_layout);
  args.a = view_of(a, op, "a");
  args.b = view_of(b, op, "b");
  DeviceContext context(a);
  const auto dtype = out_dtype_or(out_dtype, a.scalar_type(), op, "out_dtype");
  args.c = planned_view(args.a, dtype, {a.size(0), n}, op, "out_dtype");
  args.amax = planned_view(args.a, at::kFloat, {1}, op, "amax");
  const std::size_t bytes = check_before_allocation(context, args, gemm_amax_check);
  at::Tensor c = allocate(args.c, a, op, "c");
  at::Tensor amax = allocate(args.amax, a, op, "amax");
  launch(context, a, args, bytes, gemm_amax);
  return {c, amax};
}

Pair gemm_srelu_op(const at::Tensor& a, const at::Tensor& b, c10::string_view b_layout, double alpha,
                   const OptTensor& prob, const OptTensor& bias, bool generate_c,
                   std::optional<at::ScalarType> out_dtype) {
  constexpr const char* op = "gemm_srelu";
  GemmSreluArgs args;
  args.b_layout = parse_b_layout(b_layout, op, /*grouped=*/false);
  const int64_t n = check_matrices(op, a, b, args.b_layout);
  expect_device(a, "a", prob, op, "prob");
  expect_device(a, "a", bias, op, "bias");
  args.a = view_of(a, op, "a");
  args.b = view_of(b, op, "b");
  args.alpha = static_cast<float>(alpha);
  args.prob = view_of(prob, op, "prob");
  args.bias = view_of(bias, op, "bias");
  DeviceContext context(a);
  const at::ScalarType type = out_dtype_or(out_dtype, a.scalar_type(), op, "out_dtype");
  args.d = planned_view(args.a, type, {a.size(0), n}, op, "out_dtype");
  if (generate_c) args.c = planned_view(args.a, type, {a.size(0), n}, op, "out_dtype");
  const std::size_t bytes = check_before_allocation(context, args, gemm_srelu_check);
  at::Tensor d = allocate(args.d, a, op, "d");
  at::Tensor c = generate_c ? allocate(args.c, a, op, "c") : not_requested(d);
  launch(context, a, args, bytes, gemm_srelu);
  return {d, c};
}

Quad gemm_dsrelu_op(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, c10::string_view b_layout,
                    double alpha, const OptTensor& prob, bool compute_dprob, bool compute_dbias,
                    bool compute_amax, std::optional<at::ScalarType> dc_dtype,
                    std::optional<at::ScalarType> dbias_dtype) {
  constexpr const char* op = "gemm_dsrelu";
  GemmDsreluArgs args;
  args.b_layout = parse_b_layout(b_layout, op, /*grouped=*/false);
  const int64_t n = check_matrices(op, a, b, args.b_layout);
  expect_rank(c, 2, op, "c", "(M, N) saved pre-activation");
  expect_device(a, "a", c, op, "c");
  expect_device(a, "a", prob, op, "prob");
  args.a = view_of(a, op, "a");
  args.b = view_of(b, op, "b");
  args.c = view_of(c, op, "c");
  args.alpha = static_cast<float>(alpha);
  args.prob = view_of(prob, op, "prob");
  DeviceContext context(a);
  const auto dtype = out_dtype_or(dc_dtype, c.scalar_type(), op, "dc_dtype");
  args.dc = planned_view(args.a, dtype, {a.size(0), n}, op, "dc_dtype");
  if (compute_dprob) args.dprob = planned_view(args.a, at::kFloat, {a.size(0)}, op, "dprob");
  // dbias (N,) and amax (1,) when requested, else empty (0,) placeholders, as for grouped_gemm_dsrelu.
  if (compute_dbias) args.dbias = planned_view(args.a, dbias_dtype_or_f32(dbias_dtype, op), {n}, op, "dbias_dtype");
  if (compute_amax) args.amax = planned_view(args.a, at::kFloat, {1}, op, "amax");
  const std::size_t bytes = check_before_allocation(context, args, gemm_dsrelu_check);
  at::Tensor dc = allocate(args.dc, a, op, "dc");
  at::Tensor dprob = compute_dprob ? allocate(args.dprob, a, op, "dprob") : not_requested(dc);
  at::Tensor dbias = compute_dbias ? allocate(args.dbias, a, op, "dbias") : not_requested(dc);
  at::Tensor amax = compute_amax ? allocate(args.amax, a, op, "amax") : not_requested(dc);
  launch(context, a, args, bytes, gemm_dsrelu);
  return {dc, dprob, dbias, amax};
}

}  // namespace

void register_dense(torch::Library& m) {
  m.impl("gemm_swiglu", TORCH_FN(gemm_swiglu_op));
  m.impl("gemm_amax", TORCH_FN(gemm_amax_op));
  m.impl("gemm_srelu", TORCH_FN(gemm_srelu_op));
  m.impl("gemm_dsrelu", TORCH_FN(gemm_dsrelu_op));
}

}  // namespace moegemm::torch_ops
