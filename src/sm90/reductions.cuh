// Finish kernels of the backward epilogues' reductions (docs/ops.md §7): they add the per-tile partials
// of the workspace in a fixed order, so dprob and dbias are bitwise reproducible.
#pragma once

#include <cuda_runtime_api.h>

#include "sm90/params.cuh"

namespace moegemm::sm90 {

/// dprob[r] = sum over n-tiles t (in order) of partials[t * m + r], for the addressed rows r < end of the
/// last expert (clamped offsets, as the GEMM's scheduler).
void launch_dprob_finish(const float* partials, int n_tiles, float* dprob, const int* offsets, int num_experts,
                         int m, cudaStream_t stream);

/// dbias[g, c] = sum over expert g's m-tiles (in order) of both warpgroups' partials, for every column
/// c < cols; experts without rows get 0. `partials` is [m_index * 2 + warpgroup][cols] with the m-grouped
/// scheduler's m_index numbering (128-row tiles).
void launch_dbias_finish(const float* partials, int cols, const OutMatrix& dbias, const int* offsets,
                         int num_experts, int m, cudaStream_t stream);

}  // namespace moegemm::sm90
