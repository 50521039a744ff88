// The opt-in host check of offsets values (docs/ops.md §0 "offsets").
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "moegemm/tensor.hpp"

namespace moegemm::contract {

/// Checks that offsets (E,) int32, host or device, are each in [0, M] and non-decreasing (M: the rows they
/// split, of A, or of X for the weight gradient).
/// Device offsets are copied to the host on `stream`, which is then synchronised (the only sync in the
/// library; reached only through validate=true or validate_offsets).
/// Throws Error(invalid_argument) "<op>: offsets: expected ..., got offsets[i] = v" for the first bad
/// index i, and Error(cuda_error) when the copy fails.
void check_offsets_values(const char* op, const TensorView& offsets, int64_t M, cudaStream_t stream);

}  // namespace moegemm::contract
