// Device copies of host test tensors, for the GPU suites.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "common/host_tensor.hpp"

namespace moegemm::testing {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Device storage mirroring a HostTensor's storage (same shape and strides, padding included). Keeps a copy
/// of the shape and strides, so the host tensor may move or go away.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& h) : meta_(h.view_of(nullptr, Device::cuda)) {
    bytes_ = h.storage_bytes();
    cuda_ok(cudaMalloc(&ptr_, bytes_ ? bytes_ : 16), "cudaMalloc");
    upload(h);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(meta_, o.meta_);
    return *this;
  }
  ~DeviceTensor() {
    if (ptr_) cudaFree(ptr_);
  }
  void upload(const HostTensor& h) { cuda_ok(cudaMemcpy(ptr_, h.data(), bytes_, cudaMemcpyHostToDevice), "upload"); }
  void download(HostTensor& h) const {
    cuda_ok(cudaMemcpy(h.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "download");
  }
  TensorView view() const {
    TensorView v = meta_;
    v.data = ptr_;
    return v;
  }
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  TensorView meta_;
};

}  // namespace moegemm::testing
