// Owned host or device tensors of the program, with the few operations it needs on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>

#include "moegemm/tensor.hpp"

namespace moegemm::cli {

/// Memory it owns plus a dense row-major view of it. Device memory comes from cudaMalloc.
struct OwnedTensor {
  std::shared_ptr<void> memory;
  TensorView view;
  std::size_t bytes() const { return static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype); }
};

/// An uninitialised dense tensor on `device`.
OwnedTensor make_tensor(Device device, DType dtype, std::initializer_list<int64_t> shape);

/// Fills a bf16/f32 tensor with offset + scale * u, u a hash of (seed, index) in (-1, 1), never 0.
void fill_synthetic(const TensorView& t, uint64_t seed, float scale, float offset = 0.0f);
/// Device half of fill_synthetic (synthetic_fill.cu).
void fill_synthetic_device(const TensorView& t, uint64_t seed, float scale, float offset);

/// Sets every byte to 0xFF (a NaN in bf16, f16 and f32), so unwritten outputs are caught by verification.
void poison(const TensorView& t);

/// Copies `bytes` bytes at `src` (on `device`) to host memory `dst`.
void copy_to_host(void* dst, const void* src, std::size_t bytes, Device device);
/// Copies host memory to `dst` on `device`.
void copy_from_host(void* dst, const void* src, std::size_t bytes, Device device);

}  // namespace moegemm::cli
