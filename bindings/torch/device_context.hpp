// The device and stream one op call runs on: a CUDA device guard and torch's current CUDA stream for
// CUDA tensors; nothing (and a null stream) for CPU tensors.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#ifdef MOEGEMM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace moegemm::torch_ops {

class DeviceContext {
 public:
  /// Makes `anchor`'s device current for the lifetime of this object (CUDA tensors) and looks up
  /// torch's current stream on it. Throws RuntimeError for a CUDA tensor when this library was built
  /// against a torch without CUDA.
  explicit DeviceContext(const at::Tensor& anchor);

  /// The stream to launch on: torch's current CUDA stream, or nullptr for CPU tensors.
  cudaStream_t stream() const { return stream_; }

 private:
#ifdef MOEGEMM_TORCH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard_;
#endif
  cudaStream_t stream_ = nullptr;
};

}  // namespace moegemm::torch_ops
