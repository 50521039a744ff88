#include "device_context.hpp"

#include <c10/util/Exception.h>

#ifdef MOEGEMM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace moegemm::torch_ops {

DeviceContext::DeviceContext(const at::Tensor& anchor) {
  if (!anchor.is_cuda()) return;
#ifdef MOEGEMM_TORCH_CUDA
  guard_.emplace(anchor.device());
  // The same stream at::cuda::getCurrentCUDAStream() returns (ATen re-exports this c10 function).
  stream_ = c10::cuda::getCurrentCUDAStream(anchor.device().index()).stream();
#else
  TORCH_CHECK(false, "moegemm: this build of the torch ops has no CUDA support (torch without CUDA at "
                     "build time); got a tensor on ", anchor.device());
#endif
}

}  // namespace moegemm::torch_ops
