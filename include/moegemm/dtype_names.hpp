// Spelling of element types in messages: the library's names and a front end's.
#pragma once

#include <string>
#include <string_view>

#include "moegemm/tensor.hpp"

namespace moegemm {

/// Every element type, in declaration order.
inline constexpr DType kAllDTypes[] = {DType::bf16, DType::f16, DType::f32,  DType::f64,  DType::i32,
                                       DType::i64,  DType::u8,  DType::e4m3, DType::e5m2, DType::e2m1};

/// `message` with each dtype_name (bf16, f16, f32, f64, i32, i64, u8, e4m3, e5m2, e2m1: the names of the
/// library's messages and docs/ops.md) that stands as a word of its own, not inside a longer word or after
/// a dot (torch.float32), replaced by `spell(type)`: for a front end to name the dtypes of a library error
/// the way its users write them (torch.int32, int32).
std::string respell_dtypes(std::string_view message, std::string (*spell)(DType));

}  // namespace moegemm
