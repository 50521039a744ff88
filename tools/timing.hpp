// Timing of device work (CUDA events) and of host work (steady clock), in microseconds.
#pragma once

#include <functional>

#include <cuda_runtime_api.h>

namespace moegemm::cli {

/// Median over `iters` calls of the device time of fn(stream), each call bracketed by its own pair of CUDA
/// events, after `warmup` untimed calls. µs.
double median_device_us(const std::function<void(cudaStream_t)>& fn, cudaStream_t stream, int warmup, int iters);

/// Wall time of one call of fn() on the host. µs.
double host_us(const std::function<void()>& fn);

}  // namespace moegemm::cli
