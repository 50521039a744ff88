// Views of torch tensors as moegemm TensorViews (no copy, strides kept as they are).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

#include <ATen/core/Tensor.h>

#include "moegemm/tensor.hpp"

namespace moegemm::torch_ops {

/// moegemm element type of a torch dtype. Throws ValueError naming "op: operand" for a dtype moegemm
/// has no element type for (e.g. int8, complex).
DType dtype_of(at::ScalarType type, const char* op, const char* operand);

/// torch dtype of a moegemm element type (the inverse of dtype_of).
at::ScalarType scalar_type_of(DType type);

/// A non-owning view of `t`: data pointer, dtype, shape, strides (elements) and backend (CPU tensors ->
/// host, CUDA tensors -> device). Throws ValueError naming "op: operand" for a rank outside 1..4, a device
/// that is neither CPU nor CUDA, or an unsupported dtype. Everything else (shapes, strides, alignment) is
/// the moegemm contract's to check. The data pointer of an operand the op only reads is taken without
/// write access (a copy-on-write tensor stays shared); `written` asks for it with (an output, accumulate's w).
TensorView view_of(const at::Tensor& t, const char* op, const char* operand, bool written = false);

/// As above; an absent optional operand gives an absent view (rank 0).
TensorView view_of(const std::optional<at::Tensor>& t, const char* op, const char* operand);

/// The view of an output not allocated yet: contiguous `shape` of `type`, on `like`'s backend, without data.
/// For the op's checks before the allocation (X_check, which skips its pointer rules). `option` names
/// the argument that chose `type` in the error for a dtype moegemm has no element type for.
TensorView planned_view(const TensorView& like, at::ScalarType type, std::initializer_list<int64_t> shape,
                        const char* op, const char* option);

/// Allocates the output `planned` describes (a planned_view whose call X_check has accepted): at::empty of
/// its shape and dtype with `like`'s device, not initialised. `planned` then views the new tensor (named
/// "op: operand" in view_of's errors). The output's shape and dtype are thus written once, in planned_view.
at::Tensor allocate(TensorView& planned, const at::Tensor& like, const char* op, const char* operand);

}  // namespace moegemm::torch_ops
