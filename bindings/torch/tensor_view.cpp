#include "tensor_view.hpp"

#include "operands.hpp"

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <string>
#include <string_view>

namespace moegemm::torch_ops {

DType dtype_of(at::ScalarType type, const char* op, const char* operand) {
  switch (type) {
    case at::kBFloat16: return DType::bf16;
    case at::kHalf: return DType::f16;
    case at::kFloat: return DType::f32;
    case at::kDouble: return DType::f64;
    case at::kInt: return DType::i32;
    case at::kLong: return DType::i64;
    case at::kByte: return DType::u8;
    case at::kFloat8_e4m3fn: return DType::e4m3;
    case at::kFloat8_e5m2: return DType::e5m2;
    case at::kFloat4_e2m1fn_x2: return DType::e2m1;
    default:
      // Offsets take one dtype, said as the contract says it for the dtypes it maps (torch.int64). For the
      // other operands, whose own rule (the contract's) names the dtypes each takes: the set of all of them.
      TORCH_CHECK_VALUE(std::string_view(operand) != "offsets", op, ": offsets: expected dtype torch.int32, got torch.",
                        std::string(c10::getDtypeNames(type).first));
      TORCH_CHECK_VALUE(false, op, ": ", operand, ": expected a dtype moegemm reads or writes (torch.bfloat16, "
                        "torch.float16, torch.float32 or torch.float64 for data, torch.int32 for offsets, "
                        "torch.int64 for pointer tables, torch.float8_e4m3fn or torch.float8_e5m2 for the 8-bit "
                        "paths), got torch.", std::string(c10::getDtypeNames(type).first));
  }
}

at::ScalarType scalar_type_of(DType type) {
  switch (type) {
    case DType::bf16: return at::kBFloat16;
    case DType::f16: return at::kHalf;
    case DType::f32: return at::kFloat;
    case DType::f64: return at::kDouble;
    case DType::i32: return at::kInt;
    case DType::i64: return at::kLong;
    case DType::u8: return at::kByte;
    case DType::e4m3: return at::kFloat8_e4m3fn;
    case DType::e5m2: return at::kFloat8_e5m2;
    case DType::e2m1: return at::kFloat4_e2m1fn_x2;
  }
  TORCH_CHECK(false, "moegemm: unknown element type");
}

namespace {

/// The shape of an operand that is the same vector in every op ("" for the others, whose shapes depend on
/// the op and are checked by the contract).
std::string_view vector_shape(std::string_view operand) {
  if (operand == "offsets" || operand == "alpha" || operand == "beta") return "(E,)";
  if (operand == "prob") return "(M,)";
  return "";
}

}  // namespace

TensorView view_of(const at::Tensor& t, const char* op, const char* operand, bool written) {
  TORCH_CHECK_VALUE(t.defined(), op, ": ", operand, ": expected a tensor, got an undefined one");
  const int64_t rank = t.dim();
  const std::string_view vector = vector_shape(operand);
  TORCH_CHECK_VALUE(vector.empty() || (rank >= 1 && rank <= TensorView::kMaxRank), op, ": ", operand,
                    ": expected a 1-D ", std::string(vector), " tensor, got rank ", std::to_string(rank),
                    " with shape ", shape_text(t.sizes()));
  TORCH_CHECK_VALUE(rank >= 1 && rank <= TensorView::kMaxRank, op, ": ", operand,
                    ": expected a tensor of rank 1 to ", std::to_string(TensorView::kMaxRank), ", got rank ",
                    std::to_string(rank), " with shape ", shape_text(t.sizes()));
  TensorView v;
  if (t.device().is_cpu()) {
    v.device = Device::host;
  } else if (t.device().is_cuda()) {
    v.device = Device::cuda;
  } else {
    TORCH_CHECK_VALUE(false, op, ": ", operand, ": expected a CPU or CUDA tensor, got device ",
                      t.device().str());
  }
  v.dtype = dtype_of(t.scalar_type(), op, operand);
  v.data = written ? t.data_ptr() : const_cast<void*>(t.const_data_ptr());
  v.rank = static_cast<int>(rank);
  for (int64_t d = 0; d < rank; ++d) {
    v.shape[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  return v;
}

TensorView view_of(const std::optional<at::Tensor>& t, const char* op, const char* operand) {
  if (!t.has_value() || !t->defined()) return TensorView{};
  return view_of(*t, op, operand);
}

TensorView planned_view(const TensorView& like, at::ScalarType type, std::initializer_list<int64_t> shape,
                        const char* op, const char* option) {
  return TensorView::contiguous(nullptr, dtype_of(type, op, option), shape, like.device);
}

at::Tensor allocate(TensorView& planned, const at::Tensor& like, const char* op, const char* operand) {
  at::Tensor t = at::empty(c10::IntArrayRef(planned.shape.data(), static_cast<std::size_t>(planned.rank)),
                           like.options().dtype(scalar_type_of(planned.dtype)));
  planned = view_of(t, op, operand, /*written=*/true);
  return t;
}

}  // namespace moegemm::torch_ops
