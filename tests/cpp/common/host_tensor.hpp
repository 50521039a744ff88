// An owning host buffer with dtype, shape and strides, readable and writable element-wise as double, and
// viewable as a moegemm::TensorView. Backend independent: device tests copy bytes() to and from the GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/float_codec.hpp"
#include "moegemm/tensor.hpp"

namespace moegemm::testing {

class HostTensor {
 public:
  HostTensor() = default;

  /// Row-major tensor of `shape`; `row_pad` extra elements after every row (the stride of dim rank-2
  /// becomes shape[rank-1] + row_pad, outer strides follow), to exercise strided views. Storage is
  /// 64-byte aligned and not initialised: fill or poison it before use.
  HostTensor(DType dtype, std::vector<int64_t> shape, int64_t row_pad = 0)
      : dtype_(dtype), shape_(std::move(shape)) {
    const int rank = static_cast<int>(shape_.size());
    if (rank < 1 || rank > TensorView::kMaxRank) throw std::invalid_argument("HostTensor: rank 1..4");
    strides_.assign(rank, 1);
    for (int d = rank - 2; d >= 0; --d)
      strides_[d] = strides_[d + 1] * shape_[d + 1] + (d == rank - 2 ? row_pad : 0);
    storage_elems_ = 1;
    bool empty = false;
    for (int d = 0; d < rank; ++d) {
      storage_elems_ += (shape_[d] - 1) * strides_[d];
      empty |= shape_[d] == 0;
    }
    if (empty) storage_elems_ = 0;
    const size_t bytes = (static_cast<size_t>(storage_elems_) * dtype_size(dtype_) + 63) / 64 * 64;
    data_.reset(static_cast<std::byte*>(std::aligned_alloc(64, bytes ? bytes : 64)));
    if (!data_) throw std::bad_alloc();
  }

  DType dtype() const { return dtype_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size(int d) const { return shape_[d]; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    return n;
  }
  /// Elements the storage spans (view elements plus row padding).
  int64_t storage_elems() const { return storage_elems_; }
  size_t storage_bytes() const { return static_cast<size_t>(storage_elems_) * dtype_size(dtype_); }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }

  TensorView view(Device device = Device::host) const { return view_of(data_.get(), device); }
  /// The same shape and strides over another buffer (e.g. a device copy of this tensor).
  TensorView view_of(void* ptr, Device device) const {
    TensorView v;
    v.data = ptr;
    v.dtype = dtype_;
    v.device = device;
    v.rank = rank();
    for (int d = 0; d < rank(); ++d) {
      v.shape[d] = shape_[d];
      v.strides[d] = strides_[d];
    }
    return v;
  }

  /// Storage offset (elements) of a multi-index.
  int64_t offset(std::initializer_list<int64_t> idx) const {
    int64_t o = 0, d = 0;
    for (int64_t i : idx) o += i * strides_[d++];
    return o;
  }
  /// Storage offset of the row-major linear index `lin` of the view.
  int64_t offset_of_linear(int64_t lin) const {
    int64_t o = 0;
    for (int d = rank() - 1; d >= 0; --d) {
      o += (lin % shape_[d]) * strides_[d];
      lin /= shape_[d];
    }
    return o;
  }

  double get_at(int64_t off) const {
    const std::byte* p = data_.get();
    switch (dtype_) {
      case DType::bf16: return decode_bf16(reinterpret_cast<const uint16_t*>(p)[off]);
      case DType::f16: return decode_f16(reinterpret_cast<const uint16_t*>(p)[off]);
      case DType::f32: return reinterpret_cast<const float*>(p)[off];
      case DType::f64: return reinterpret_cast<const double*>(p)[off];
      case DType::i32: return reinterpret_cast<const int32_t*>(p)[off];
      case DType::i64: return static_cast<double>(reinterpret_cast<const int64_t*>(p)[off]);
      default: throw std::invalid_argument("HostTensor: dtype not readable as a number");
    }
  }
  /// Writes v rounded to nearest even for 16-bit types.
  void set_at(int64_t off, double v) {
    std::byte* p = data_.get();
    switch (dtype_) {
      case DType::bf16: reinterpret_cast<uint16_t*>(p)[off] = encode_bf16(v); return;
      case DType::f16: reinterpret_cast<uint16_t*>(p)[off] = encode_f16(v); return;
      case DType::f32: reinterpret_cast<float*>(p)[off] = static_cast<float>(v); return;
      case DType::f64: reinterpret_cast<double*>(p)[off] = v; return;
      case DType::i32: reinterpret_cast<int32_t*>(p)[off] = static_cast<int32_t>(v); return;
      case DType::i64: reinterpret_cast<int64_t*>(p)[off] = static_cast<int64_t>(v); return;
      default: throw std::invalid_argument("HostTensor: dtype not writable as a number");
    }
  }
  /// Raw bits of the element at a storage offset (zero-extended).
  uint64_t bits_at(int64_t off) const {
    uint64_t b = 0;
    std::memcpy(&b, data_.get() + off * dtype_size(dtype_), dtype_size(dtype_));
    return b;
  }
  void set_bits_at(int64_t off, uint64_t b) {
    std::memcpy(data_.get() + off * dtype_size(dtype_), &b, dtype_size(dtype_));
  }

  double operator()(int64_t i) const { return get_at(offset({i})); }
  double operator()(int64_t i, int64_t j) const { return get_at(offset({i, j})); }
  double operator()(int64_t i, int64_t j, int64_t k) const { return get_at(offset({i, j, k})); }
  void set(std::initializer_list<int64_t> idx, double v) { set_at(offset(idx), v); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_, strides_;
  int64_t storage_elems_ = 0;
  std::unique_ptr<std::byte[], Free> data_;
};

/// An (n,) int64 table of host addresses (pointer mode of weights and wgrad outputs).
inline HostTensor pointer_table(const std::vector<const void*>& ptrs) {
  HostTensor t(DType::i64, {static_cast<int64_t>(ptrs.size())});
  for (size_t i = 0; i < ptrs.size(); ++i) {
    const int64_t a = static_cast<int64_t>(reinterpret_cast<intptr_t>(ptrs[i]));
    std::memcpy(static_cast<std::byte*>(t.data()) + i * 8, &a, 8);
  }
  return t;
}

}  // namespace moegemm::testing
