// zero_tail: zeros to exactly the rows at or past the (clamped) last expert end, nothing else.
#pragma once

#include <cuda_runtime_api.h>

#include "sm90/params.cuh"

namespace moegemm::sm90 {

/// Enqueues the zeroing of rows [end, M) of `out` (cols columns), end = min(M, max(0, offsets[0..E-1])).
/// Reads offsets on the device only; cost proportional to the tail plus one small launch of 2 * sms blocks
/// (sms: the current device's SM count, which the caller has read).
void launch_zero_tail(const OutMatrix& out, int64_t cols, const int* offsets, int num_experts, int m, int sms,
                      cudaStream_t stream);

}  // namespace moegemm::sm90
