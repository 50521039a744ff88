#include "tensor_store.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda_check.hpp"
#include "synthetic.hpp"

namespace moegemm::cli {

OwnedTensor make_tensor(Device device, DType dtype, std::initializer_list<int64_t> shape) {
  OwnedTensor t;
  t.view = TensorView::contiguous(nullptr, dtype, shape, device);
  // The byte count, checked: a shape whose count wraps 64 bits would otherwise get a smaller buffer.
  int64_t count = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(count, extent, &count)) {
      throw std::length_error(std::string("a ") + dtype_name(dtype) + " tensor's byte count passes 64 bits");
    }
  }
  const std::size_t bytes = std::max<std::size_t>(static_cast<std::size_t>(count), 16);  // never null, even empty
  void* p = nullptr;
  if (device == Device::cuda) {
    MOEGEMM_CLI_CUDA(cudaMalloc(&p, bytes));
    t.memory.reset(p, [](void* q) { cudaFree(q); });
  } else {
    p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) throw std::bad_alloc();
    t.memory.reset(p, [](void* q) { std::free(q); });
  }
  t.view.data = p;
  return t;
}

void fill_synthetic(const TensorView& t, uint64_t seed, float scale, float offset) {
  if (t.device == Device::cuda) return fill_synthetic_device(t, seed, scale, offset);
  const int64_t n = t.numel();
  if (t.dtype == DType::bf16) {
    auto* p = t.ptr<__nv_bfloat16>();
    for (int64_t i = 0; i < n; ++i) p[i] = __float2bfloat16(synthetic_value(seed, i, scale, offset));
  } else if (t.dtype == DType::f32) {
    auto* p = t.ptr<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = synthetic_value(seed, i, scale, offset);
  } else {
    throw Error(ErrorCode::internal, "fill_synthetic: only bf16 and f32 tensors");
  }
}

void poison(const TensorView& t) {
  const std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
  if (t.device == Device::cuda)
    MOEGEMM_CLI_CUDA(cudaMemset(t.data, 0xFF, bytes));
  else
    std::memset(t.data, 0xFF, bytes);
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, Device device) {
  if (device == Device::cuda)
    MOEGEMM_CLI_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  else
    std::memcpy(dst, src, bytes);
}

void copy_from_host(void* dst, const void* src, std::size_t bytes, Device device) {
  if (device == Device::cuda)
    MOEGEMM_CLI_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  else
    std::memcpy(dst, src, bytes);
}

}  // namespace moegemm::cli
