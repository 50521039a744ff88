// The per-expert weight gradient (ragged K): grouped_gemm_wgrad and its accumulating overload.
#include <optional>
#include <utility>

#include <ATen/MemoryOverlap.h>
#include <torch/csrc/autograd/variable.h>

#include "launch.hpp"
#include "operands.hpp"
#include "options.hpp"
#include "registration.hpp"
#include "tensor_view.hpp"

namespace moegemm::torch_ops {
namespace {

void fill_inputs(GroupedGemmWgradArgs& args, const char* op, const at::Tensor& x, const at::Tensor& dy,
                 const at::Tensor& offsets, bool transpose_output, bool validate) {
  expect_rank(x, 2, op, "x", "(M, H)");
  expect_rank(dy, 2, op, "dy", "(M, N)");
  expect_rank(offsets, 1, op, "offsets", "(E,) torch.int32");
  expect_device(x, "x", dy, op, "dy");
  expect_device(x, "x", offsets, op, "offsets");
  args.x = view_of(x, op, "x");
  args.dy = view_of(dy, op, "dy");
  args.offsets = view_of(offsets, op, "offsets");
  args.transpose_output = transpose_output;
  args.validate = validate;
}

/// Whether the address ranges from the first to the last byte of two tensors' elements intersect: what can
/// be told of two strided tensors that at::get_overlap_status cannot decide (a w placed in the padding of an
/// x with padded rows is refused with the rest: the op cannot tell it apart from one over x's elements).
bool spans_intersect(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto span = [](const at::Tensor& t) {
    int64_t low = 0, high = 0;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t reach = (t.size(d) - 1) * t.stride(d);
      (reach < 0 ? low : high) += reach;
    }
    const auto* base = static_cast<const char*>(t.const_data_ptr());
    return std::pair{base + low * t.element_size(), base + (high + 1) * t.element_size()};
  };
  const auto [a_begin, a_end] = span(a);
  const auto [b_begin, b_end] = span(b);
  return a_begin < b_end && b_begin < a_end;
}

at::Tensor grouped_gemm_wgrad_op(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& offsets,
                                 bool transpose_output, std::optional<at::ScalarType> out_dtype,
                                 bool validate) {
  constexpr const char* op = "grouped_gemm_wgrad";
  GroupedGemmWgradArgs args;
  fill_inputs(args, op, x, dy, offsets, transpose_output, validate);
  DeviceContext context(x);
  const int64_t e = offsets.size(0), h = x.size(1), n = dy.size(1);
  const at::ScalarType w_type = out_dtype_or(out_dtype, f32_default_dtype(x), op, "out_dtype");
  // The op's checks first (the contract, the pointers of x, dy and offsets, validate), on a view of the w to
  // come: the output, E x H x N, may be far larger than x and dy (with T = 0 they are empty), and a call the
  // op refuses must get its own error, not the allocator's.
  args.w = transpose_output ? planned_view(args.x, w_type, {e, n, h}, op, "out_dtype")
                            : planned_view(args.x, w_type, {e, h, n}, op, "out_dtype");
  const std::size_t workspace_bytes = check_before_allocation(context, args, grouped_gemm_wgrad_check);
  // Not zero-filled here: the op writes every element, exact zeros for experts without rows.
  at::Tensor w = allocate(args.w, x, op, "w");
  launch(context, x, args, workspace_bytes, grouped_gemm_wgrad);
  return w;
}

void grouped_gemm_wgrad_accumulate_op(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& offsets,
                                      const at::Tensor& w, bool transpose_output, bool validate) {
  constexpr const char* op = "grouped_gemm_wgrad.accumulate";
  GroupedGemmWgradArgs args;
  fill_inputs(args, op, x, dy, offsets, transpose_output, validate);
  expect_rank(w, 3, op, "w", transpose_output ? "(E, N, H)" : "(E, H, N)");
  expect_device(x, "x", w, op, "w");
  // The kernel reads x and dy while it adds into w: memory they share would make the sums depend on the order
  // of the writes. Refused as torch's out= ops refuse it (at::assert_no_overlap: a full or partial overlap),
  // and, for strided layouts that check cannot decide, wherever the two spans of memory intersect.
  for (const auto& [input, name] : {std::pair{&x, "x"}, std::pair{&dy, "dy"}}) {
    const at::MemOverlapStatus overlap = at::get_overlap_status(w, *input);
    TORCH_CHECK_VALUE(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial, op,
                      ": w: expected memory that does not overlap ", name, ", got a w that shares memory with ",
                      name);
    TORCH_CHECK_VALUE(overlap != at::MemOverlapStatus::TooHard || !spans_intersect(w, *input), op,
                      ": w: expected memory outside the span of ", name, "'s elements (", name, " has strides ",
                      shape_text(input->strides()), ": torch cannot tell which bytes inside it ", name,
                      " uses), got a w inside that span");
  }
  DeviceContext context(x);
  args.w = view_of(w, op, "w", /*written=*/true);
  args.accumulate = true;
  // The contract names the C++ function (grouped_gemm_wgrad); this overload's errors name the overload.
  const std::size_t workspace_bytes = check_before_allocation(context, args, grouped_gemm_wgrad_check, op);
  // w is about to change in place: move its version counter, as torch's in-place ops do, so that autograd
  // refuses a w that a graph saved before this call (the Autograd fallback skips ADInplaceOrView for an op
  // that returns nothing, and torch.compile does not functionalize a custom op whose return aliases an input).
  // Before the launch: an inference tensor outside InferenceMode is refused here, with torch's own error, before
  // anything is written.
  torch::autograd::impl::bump_version(w);
  launch(context, x, args, workspace_bytes, grouped_gemm_wgrad, op);
}

}  // namespace

void register_wgrad(torch::Library& m) {
  m.impl("grouped_gemm_wgrad", TORCH_FN(grouped_gemm_wgrad_op));
  m.impl("grouped_gemm_wgrad.accumulate", TORCH_FN(grouped_gemm_wgrad_accumulate_op));
}

}  // namespace moegemm::torch_ops
