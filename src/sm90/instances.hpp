// The kernel instantiations the host launcher can reach, one function per epilogue.
#pragma once

#include <cuda_runtime_api.h>

#include "moegemm/ops.hpp"
#include "sm90/params.cuh"

namespace moegemm::sm90 {

enum class EpilogueKind : uint8_t { linear, glu, srelu, dglu, dsrelu };

/// m-grouped kernels (tiles over each expert's rows); block_n is 128 or 256 (dglu: 256 only with a saved tile).
void launch_linear(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
void launch_glu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
void launch_srelu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
void launch_dglu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
void launch_dsrelu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);

/// The k-grouped weight-gradient kernel (A and B MN-major, per-expert maps).
void launch_wgrad_kernel(const KernelParams& p, int block_n, int grid, cudaStream_t stream);

}  // namespace moegemm::sm90
