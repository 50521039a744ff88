// The kernel instantiations the host launcher can reach, one function per epilogue.
#pragma once

#include <cuda_runtime_api.h>

#include "moegemm/ops.hpp"
#include "sm90/params.cuh"

namespace moegemm::sm90 {

enum class EpilogueKind : uint8_t { linear, glu, srelu, dglu, dsrelu };

/// How the two consumer warpgroups share the work: both on one tile (cooperative), or each on its own
/// 128 x 128 tiles, one's epilogue under the other's mainloop (pingpong: the GLU, the dGLU with a saved tile,
/// the linear epilogue, the weight gradient).
enum class Schedule : uint8_t { cooperative, pingpong };

/// m-grouped kernels (tiles over each expert's rows); block_n is 128 or 256 (dglu: 256 only with a saved tile;
/// ping-pong: 128).
void launch_linear(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
/// The linear epilogue's cooperative kernel with M-major A tiles (a column-major A: p.tma_a is 3-D {M, K, 1}).
void launch_linear_m_major_a(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
/// The linear epilogue's cooperative kernel in cluster pairs that share B by TMA multicast (256-row tiles,
/// no half tiles, static order: the caller sets p.half_tiles = false and no tile counter).
void launch_linear_pairs(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
void launch_glu(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                cudaStream_t stream);
void launch_srelu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);
void launch_dglu(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                 cudaStream_t stream);
void launch_dsrelu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream);

/// The k-grouped weight-gradient kernel (A and B MN-major, per-expert maps).
void launch_wgrad_kernel(const KernelParams& p, int block_n, int grid, cudaStream_t stream);

/// The ping-pong kernels (128 x 128 tiles) of the linear epilogue (m-grouped) and of the weight gradient.
void launch_linear_pingpong(const KernelParams& p, BLayout layout, int grid, cudaStream_t stream);
void launch_wgrad_pingpong(const KernelParams& p, int grid, cudaStream_t stream);

}  // namespace moegemm::sm90
