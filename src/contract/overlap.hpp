// Whether two operand views share memory (docs/ops.md §0.2, rule 9), in O(log pitch) per pair.
#pragma once

#include "moegemm/tensor.hpp"

namespace moegemm::contract {

/// Whether views `x` and `y` have a byte in common. Exact for contiguous tensors of any rank, row-major
/// matrices with unit column stride (rows of one byte width at one row pitch), and column-major ones (the
/// same with columns for rows; without padding, one range like a contiguous tensor); any other view (a strided
/// stack of expert weights, an input) counts as the whole span from its first byte to its last, so that an
/// output inside its gaps is refused too. Two padded matrices are compared exactly whatever their row pitches,
/// by counting, in O(log pitch), the rows of one that meet a row of the other.
/// Views without elements or without data overlap nothing.
bool views_overlap(const TensorView& x, const TensorView& y);

}  // namespace moegemm::contract
