#include "operands.hpp"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "tensor_view.hpp"

namespace moegemm::torch_ops {

std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "(";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + (sizes.size() == 1 ? ",)" : ")");  // (64,) as the contract and Python print a 1-D shape
}

void expect_rank(const at::Tensor& t, int64_t rank, const char* op, const char* operand, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), op, ": ", operand, ": expected a tensor, got an undefined one");
  TORCH_CHECK_VALUE(t.dim() == rank, op, ": ", operand, ": expected a ", std::to_string(rank), "-D ", what,
                    " tensor, got shape ", shape_text(t.sizes()));
}

void expect_device(const at::Tensor& anchor, const char* anchor_name, const at::Tensor& t, const char* op,
                   const char* operand) {
  // An undefined tensor (None where the schema takes a Tensor) has no device: named before it is asked for one.
  TORCH_CHECK_VALUE(t.defined(), op, ": ", operand, ": expected a tensor, got an undefined one");
  TORCH_CHECK_VALUE(t.device() == anchor.device(), op, ": ", operand, ": expected a tensor on ",
                    anchor.device().str(), " (the device of ", anchor_name, "), got one on ", t.device().str());
}

void expect_device(const at::Tensor& anchor, const char* anchor_name, const std::optional<at::Tensor>& t,
                   const char* op, const char* operand) {
  if (t.has_value() && t->defined()) expect_device(anchor, anchor_name, *t, op, operand);
}

ExpertWeights dense_weights(const at::Tensor& b, BLayout layout, const char* op) {
  expect_rank(b, 3, op, "b", layout == BLayout::nk ? "(E, N, K) weight" : "(E, K, N) weight");
  ExpertWeights w;
  w.dense = view_of(b, op, "b");
  w.layout = layout;
  w.n = weights_n(b, layout);
  w.dtype = w.dense.dtype;
  return w;
}

int64_t matrix_n(const at::Tensor& b, BLayout layout, const char* op) {
  expect_rank(b, 2, op, "b", layout == BLayout::nk ? "(N, K) weight" : "(K, N) weight");
  return layout == BLayout::nk ? b.size(0) : b.size(1);
}

at::Tensor not_requested(const at::Tensor& like) { return at::empty({0}, like.options()); }

}  // namespace moegemm::torch_ops
