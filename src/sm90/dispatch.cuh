// Kernel launch templates: one instantiation per (tile shape, scheduler, epilogue). Each epilogue's
// instantiations live in their own translation unit (instantiate_*.cu) so that they compile in parallel.
#pragma once

#include <algorithm>
#include <mutex>
#include <string>

#include "moegemm/error.hpp"
#include "sm90/instances.hpp"
#include "sm90/kernel.cuh"
#include "sm90/kernel_pingpong.cuh"
#include "sm90/scheduler_ragged_k.cuh"

namespace moegemm::sm90 {

using MGroupedScheduler = ExpertTileScheduler<kKernelThreads, kSchedulerMaxExperts>;
using KGroupedScheduler = RaggedKScheduler<kKernelThreads, kSchedulerMaxExperts>;

/// Launches persistent kernel kKernel with kSmemBytes of dynamic shared memory (the attribute is set once
/// per kernel).
template <auto kKernel, int kSmemBytes>
void launch_persistent(const KernelParams& p, int grid, cudaStream_t stream) {
  static std::once_flag once;
  std::call_once(once, [&] {
    const cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) {
      throw Error(ErrorCode::cuda_error,
                  std::string("cudaFuncSetAttribute(max dynamic shared memory): ") + cudaGetErrorString(err));
    }
  });
  kKernel<<<grid, kKernelThreads, kSmemBytes, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw Error(ErrorCode::cuda_error, std::string("grouped GEMM kernel launch: ") + cudaGetErrorString(err));
}

/// The cooperative kernel in cluster pairs that multicast B (kernel.cuh, kPair = 2): `grid` CTAs rounded down
/// to whole pairs, at most as many pairs as fit on the device at once.
template <class Shape, class Scheduler, class Epilogue>
void launch_pair_kernel(const KernelParams& p, int grid, cudaStream_t stream) {
  constexpr auto kKernel = grouped_gemm_kernel<Shape, Scheduler, Epilogue, 2>;
  constexpr int kSmemBytes = SharedLayout<Shape, Scheduler, Epilogue>::kAllocBytes;
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.blockDim = dim3(kKernelThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  static int max_pairs = 0;
  static std::once_flag once;
  std::call_once(once, [&] {
    cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err == cudaSuccess) {
      config.gridDim = dim3(2);
      err = cudaOccupancyMaxActiveClusters(&max_pairs, kKernel, &config);
    }
    if (err != cudaSuccess) {
      throw Error(ErrorCode::cuda_error, std::string("cluster-pair kernel set-up: ") + cudaGetErrorString(err));
    }
  });
  config.gridDim = dim3(2 * std::max(1, std::min(grid / 2, max_pairs)));
  cudaError_t err = cudaLaunchKernelEx(&config, kKernel, p);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw Error(ErrorCode::cuda_error, std::string("grouped GEMM cluster-pair kernel launch: ") + cudaGetErrorString(err));
  }
}

/// The cooperative kernel (kernel.cuh) of one (tile shape, scheduler, epilogue): single CTAs (kPair = 1) or
/// cluster pairs (launch_pair_kernel).
template <class Shape, class Scheduler, class Epilogue, int kPair = 1>
void launch_kernel(const KernelParams& p, int grid, cudaStream_t stream) {
  if constexpr (kPair == 1) {
    launch_persistent<grouped_gemm_kernel<Shape, Scheduler, Epilogue>,
                      SharedLayout<Shape, Scheduler, Epilogue>::kAllocBytes>(p, grid, stream);
  } else {
    launch_pair_kernel<Shape, Scheduler, Epilogue>(p, grid, stream);
  }
}

/// The ping-pong kernel (kernel_pingpong.cuh) of one (tile shape, scheduler, epilogue).
template <class Shape, class Scheduler, class Epilogue>
void launch_pingpong_kernel(const KernelParams& p, int grid, cudaStream_t stream) {
  launch_persistent<grouped_gemm_pingpong_kernel<Shape, Scheduler, Epilogue>,
                    PingPongLayout<Shape, Scheduler, Epilogue>::kAllocBytes>(p, grid, stream);
}

/// m-grouped launch of `Epilogue` with BN = block_n (128 or 256) and B's layout, in single CTAs or (kPair = 2)
/// cluster pairs.
template <class Epilogue, int kPair = 1>
void dispatch_m_grouped(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  using S = MGroupedScheduler;
  if (layout == BLayout::nk) {
    if (block_n == 256) launch_kernel<TileShape<256, Major::k>, S, Epilogue, kPair>(p, grid, stream);
    else launch_kernel<TileShape<128, Major::k>, S, Epilogue, kPair>(p, grid, stream);
  } else {
    if (block_n == 256) launch_kernel<TileShape<256, Major::mn>, S, Epilogue, kPair>(p, grid, stream);
    else launch_kernel<TileShape<128, Major::mn>, S, Epilogue, kPair>(p, grid, stream);
  }
}

}  // namespace moegemm::sm90
