// Kernel launch templates: one instantiation per (tile shape, scheduler, epilogue). Each epilogue's
// instantiations live in their own translation unit (instantiate_*.cu) so that they compile in parallel.
#pragma once

#include <algorithm>
#include <array>
#include <mutex>
#include <string>

#include "moegemm/error.hpp"
#include "sm90/device.hpp"
#include "sm90/instances.hpp"
#include "sm90/kernel.cuh"
#include "sm90/kernel_pingpong.cuh"
#include "sm90/scheduler_ragged_k.cuh"

namespace moegemm::sm90 {

using MGroupedScheduler = ExpertTileScheduler<kKernelThreads, kSchedulerMaxExperts>;
using KGroupedScheduler = RaggedKScheduler<kKernelThreads, kSchedulerMaxExperts>;

/// Devices whose per-kernel set-up is kept; a launch on a device of a higher ordinal repeats the set-up.
constexpr int kSetUpDevices = 64;

/// The value `set_up()` gives for kernel kKernel on the current device, computed on the first launch there.
/// A kernel's attributes (its dynamic shared memory limit) belong to it on one device, so a process that
/// launches on several devices (JAX's devices of one host, torch tensors on cuda:1) sets them on each: set
/// once per process, every device but the first would refuse the launch. A set-up that throws is tried again
/// on the next launch.
template <auto kKernel, class Value, class SetUp>
Value per_device(SetUp set_up) {
  static std::array<std::once_flag, kSetUpDevices> once;
  static std::array<Value, kSetUpDevices> values{};
  const int device = current_device().ordinal;
  if (device < 0 || device >= kSetUpDevices) return set_up();
  std::call_once(once[device], [&] { values[device] = set_up(); });
  return values[device];
}

/// Raises kKernel's dynamic shared memory limit to kSmemBytes on the current device (once per device).
template <auto kKernel, int kSmemBytes>
void allow_dynamic_smem() {
  per_device<kKernel, bool>([] {
    const cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) {
      throw Error(ErrorCode::cuda_error,
                  std::string("cudaFuncSetAttribute(max dynamic shared memory): ") + cudaGetErrorString(err));
    }
    return true;
  });
}

/// Launches persistent kernel kKernel with kSmemBytes of dynamic shared memory.
template <auto kKernel, int kSmemBytes>
void launch_persistent(const KernelParams& p, int grid, cudaStream_t stream) {
  allow_dynamic_smem<kKernel, kSmemBytes>();
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
  allow_dynamic_smem<kKernel, kSmemBytes>();
  const int max_pairs = per_device<kKernel, int>([&] {
    cudaLaunchConfig_t probe = config;
    probe.gridDim = dim3(2);
    int pairs = 0;
    const cudaError_t err = cudaOccupancyMaxActiveClusters(&pairs, kKernel, &probe);
    if (err != cudaSuccess) {
      throw Error(ErrorCode::cuda_error, std::string("cluster-pair kernel set-up: ") + cudaGetErrorString(err));
    }
    return pairs;
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
