// Kernels for the dispatch keys of tensors that are not plain strided ones (sparse, nested, MKL-DNN,
// quantized): without them the dispatcher answers "Could not run 'moegemm::...' with arguments from the
// 'SparseCPU' backend", which names no operand. One boxed kernel serves every op: it names the first operand
// that is not a strided tensor of a plain dtype, as the Python functions' check_strided does
// (python/moegemm/_torch_errors.py).
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include "registration.hpp"

namespace moegemm::torch_ops {
namespace {

/// The layout as Python spells it (torch.sparse_coo, ...), as the errors of moegemm.torch's functions do.
std::string python_layout(c10::Layout layout) {
  switch (layout) {
    case c10::kStrided: return "torch.strided";
    case c10::kSparse: return "torch.sparse_coo";
    case c10::kSparseCsr: return "torch.sparse_csr";
    case c10::kSparseCsc: return "torch.sparse_csc";
    case c10::kSparseBsr: return "torch.sparse_bsr";
    case c10::kSparseBsc: return "torch.sparse_bsc";
    case c10::kMkldnn: return "torch._mkldnn";
    case c10::kJagged: return "torch.jagged";
    default: return "layout " + std::to_string(static_cast<int>(layout));
  }
}

/// "grouped_gemm" or "grouped_gemm_wgrad.accumulate": the op as the moegemm errors name it.
std::string op_name(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  if (const auto colons = name.find("::"); colons != std::string::npos) name.erase(0, colons + 2);
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  return name;
}

void refuse_misfit_operand(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  const auto first = stack->end() - static_cast<std::ptrdiff_t>(arguments.size());
  const std::string name = op_name(schema);
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = first[static_cast<std::ptrdiff_t>(i)];
    if (!value.isTensor()) continue;  // None for an optional tensor not given, or not a tensor
    const at::Tensor& t = value.toTensor();
    const std::string& operand = arguments[i].name();
    TORCH_CHECK_VALUE(t.layout() == c10::kStrided, name, ": ", operand, ": expected a strided (dense) tensor, got ",
                      "layout ", python_layout(t.layout()));
    TORCH_CHECK_VALUE(!t.is_nested(), name, ": ", operand, ": expected a strided (dense) tensor, got a nested ",
                      "tensor");
    TORCH_CHECK_VALUE(!t.is_quantized(), name, ": ", operand, ": expected a tensor of a plain dtype, got the ",
                      "quantized dtype torch.", c10::getDtypeNames(t.scalar_type()).first);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": no kernel for the dispatch keys ", keys);
}

}  // namespace
}  // namespace moegemm::torch_ops

// The keys a non-strided or quantized operand brings (CUDA's too in a CPU-only build: registering a kernel
// for a key needs no backend).
#define MOEGEMM_REFUSE_ON(key)                                                                    \
  TORCH_LIBRARY_IMPL(moegemm, key, m) {                                                          \
    for (const char* op : moegemm::torch_ops::kOps) {                                            \
      m.impl(op, torch::CppFunction::makeFromBoxedFunction<                                      \
                     &moegemm::torch_ops::refuse_misfit_operand>());                            \
    }                                                                                            \
  }

MOEGEMM_REFUSE_ON(SparseCPU)
MOEGEMM_REFUSE_ON(SparseCUDA)
MOEGEMM_REFUSE_ON(SparseCsrCPU)
MOEGEMM_REFUSE_ON(SparseCsrCUDA)
MOEGEMM_REFUSE_ON(NestedTensorCPU)
MOEGEMM_REFUSE_ON(NestedTensorCUDA)
MOEGEMM_REFUSE_ON(MkldnnCPU)
MOEGEMM_REFUSE_ON(QuantizedCPU)
MOEGEMM_REFUSE_ON(QuantizedCUDA)
