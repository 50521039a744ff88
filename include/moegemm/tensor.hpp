// A non-owning view of a strided tensor in host or device memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "moegemm/error.hpp"

namespace moegemm {

namespace detail {
/// a * b, saturated at the int64 range instead of overflowing (undefined behaviour in this inline code, which
/// is compiled into the caller's program): extents that large are refused by every op's size rules anyway.
constexpr int64_t saturating_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  const uint64_t ua = a < 0 ? 0 - static_cast<uint64_t>(a) : static_cast<uint64_t>(a);
  const uint64_t ub = b < 0 ? 0 - static_cast<uint64_t>(b) : static_cast<uint64_t>(b);
  const bool negative = (a < 0) != (b < 0);
  if (ua > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ub)
    return negative ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  return a * b;
}
/// A dim as an index of a TensorView's shape and strides (std::array's index is unsigned).
constexpr std::size_t index(int dim) { return static_cast<std::size_t>(dim); }
}  // namespace detail

/// Element types. f64 is accepted by the host (CPU reference) backend only, for gradient checks.
enum class DType : uint8_t { bf16, f16, f32, f64, i32, i64, u8, e4m3, e5m2, e2m1 };
enum class Device : uint8_t { host, cuda };

/// Size of one element in bytes (e2m1 packs two per byte and reports 1).
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16: case DType::f16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    default: return 1;
  }
}
/// The name of `t` in messages and docs/ops.md ("bf16", "f32", "i32", ...); "unknown" for a value outside the enum.
const char* dtype_name(DType t);

/// Pointer, dtype, shape and strides (in elements, not bytes) of a tensor of rank 1..4.
/// A default-constructed view (rank 0) means "operand absent" for optional operands; a view of negative rank
/// (set by hand) is given, and every op refuses it by name, as it refuses a rank above kMaxRank.
struct TensorView {
  static constexpr int kMaxRank = 4;
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};
  Device device = Device::host;

  bool defined() const { return rank != 0; }
  /// The extents stored: all of them, or the first kMaxRank of a view of higher rank (which every op refuses).
  int stored_rank() const { return rank < 0 ? 0 : rank < kMaxRank ? rank : kMaxRank; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < stored_rank(); ++i) n = detail::saturating_mul(n, shape[detail::index(i)]);
    return n;
  }
  int64_t size(int dim) const { return shape[detail::index(dim)]; }
  int64_t stride(int dim) const { return strides[detail::index(dim)]; }
  /// True when the view is dense row-major (last dim contiguous, no padding).
  bool is_contiguous() const {
    int64_t expect = 1;
    for (int i = stored_rank() - 1; i >= 0; --i) {
      if (shape[detail::index(i)] != 1 && strides[detail::index(i)] != expect) return false;
      expect = detail::saturating_mul(expect, shape[detail::index(i)]);
    }
    return true;
  }
  /// True when a 2-D view is column-major in the sense the ops read it: more than one row and column,
  /// stride(0) == 1 and stride(1) != 1 (a single row or column is read row-major).
  bool is_column_major() const {
    return rank == 2 && shape[0] > 1 && shape[1] > 1 && strides[0] == 1 && strides[1] != 1;
  }
  template <class T> T* ptr() const { return static_cast<T*>(data); }
  /// A vector (n,) as the one row of a (1, n) matrix: the one-group form of a per-expert (E, n) operand, which
  /// the dense ops pass to the grouped code. An absent view stays absent.
  TensorView as_row() const {
    if (rank != 1) return *this;
    TensorView v = *this;
    v.rank = 2;
    v.shape = {1, shape[0], 0, 0};
    v.strides = {detail::saturating_mul(shape[0], strides[0]), strides[0], 0, 0};
    return v;
  }

  /// A dense row-major view. A shape longer than kMaxRank keeps its rank, so that every op rejects the view
  /// by name ("expected a tensor of rank 1 to 4"); only its first kMaxRank extents are stored.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::host) {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.device = device;
    v.rank = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t s : shape) {
      if (i == kMaxRank) break;
      v.shape[detail::index(i++)] = s;
    }
    int64_t st = 1;
    for (int d = (v.rank < kMaxRank ? v.rank : kMaxRank) - 1; d >= 0; --d) {
      v.strides[detail::index(d)] = st;
      st = detail::saturating_mul(st, v.shape[detail::index(d)]);
    }
    return v;
  }
  /// A strided view; strides in elements, one per dim (at most kMaxRank are stored, as for the shape).
  /// Throws Error(invalid_argument) when the counts of strides and extents differ.
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides, Device device = Device::host) {
    if (strides.size() != shape.size())
      throw Error(ErrorCode::invalid_argument, "TensorView::strided: strides: expected one per dim (" +
                                                   std::to_string(shape.size()) + "), got " +
                                                   std::to_string(strides.size()));
    TensorView v = contiguous(data, dtype, shape, device);
    int i = 0;
    for (int64_t s : strides) {
      if (i == kMaxRank) break;
      v.strides[detail::index(i++)] = s;
    }
    return v;
  }
};

}  // namespace moegemm
