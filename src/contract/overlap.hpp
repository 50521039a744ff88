// Whether two operand views share memory (docs/ops.md §0.2, rule 9), in O(1) per pair.
#pragma once

#include "moegemm/tensor.hpp"

namespace moegemm::contract {

/// Whether views `x` and `y` have a byte in common. Exact for the layouts the operand rules admit: contiguous
/// tensors of any rank and row-major matrices with unit column stride (rows of one byte width at one row
/// pitch). Two padded matrices of different row pitches are taken as disjoint unless they start at the same
/// address (their overlap is a number-theoretic question the rules never need answered). Views without
/// elements or without data overlap nothing.
bool views_overlap(const TensorView& x, const TensorView& y);

}  // namespace moegemm::contract
