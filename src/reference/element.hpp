// Typed element access to host TensorViews for the CPU reference: read any floating dtype as the compute
// type, write the compute type rounded (RN) to the output dtype. Strides are in elements and honoured.
#pragma once

#include <cmath>
#include <cstdint>

#include "moegemm/error.hpp"
#include "moegemm/tensor.hpp"
#include "reference/numeric.hpp"

namespace moegemm::reference {

/// Element at linear element offset `i` of a floating buffer of dtype `t`, as T.
template <class T>
inline T load(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::bf16: return static_cast<T>(bf16_to_float(static_cast<const uint16_t*>(base)[i]));
    case DType::f16: return static_cast<T>(f16_to_float(static_cast<const uint16_t*>(base)[i]));
    case DType::f32: return static_cast<T>(static_cast<const float*>(base)[i]);
    case DType::f64: return static_cast<T>(static_cast<const double*>(base)[i]);
    default: throw Error(ErrorCode::internal, "reference: not a floating dtype");
  }
}

/// Store `v` at linear element offset `i`, rounded to nearest even (once: narrowed_for_16bit) for 16-bit
/// types.
template <class T>
inline void store(void* base, DType t, int64_t i, T v) {
  switch (t) {
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(narrowed_for_16bit(v)); return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_f16(narrowed_for_16bit(v)); return;
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::f64: static_cast<double*>(base)[i] = static_cast<double>(v); return;
    default: throw Error(ErrorCode::internal, "reference: not a floating dtype");
  }
}

/// Rank-1 and rank-2 strided accessors.
template <class T> inline T at(const TensorView& v, int64_t i) {
  return load<T>(v.data, v.dtype, i * v.strides[0]);
}
template <class T> inline T at(const TensorView& v, int64_t r, int64_t c) {
  return load<T>(v.data, v.dtype, r * v.strides[0] + c * v.strides[1]);
}
template <class T> inline void put(const TensorView& v, int64_t i, T x) {
  store<T>(v.data, v.dtype, i * v.strides[0], x);
}
template <class T> inline void put(const TensorView& v, int64_t r, int64_t c, T x) {
  store<T>(v.data, v.dtype, r * v.strides[0] + c * v.strides[1], x);
}

/// Row r, columns [0, n), of a rank-2 output from x[0..n): the dtype switch hoisted out of the loop.
template <class T> inline void put_row(const TensorView& v, int64_t r, const T* x, int64_t n) {
  const int64_t cs = v.strides[1];
  char* row = static_cast<char*>(v.data) + r * v.strides[0] * int64_t(dtype_size(v.dtype));
  switch (v.dtype) {
    case DType::bf16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(row);
      for (int64_t j = 0; j < n; ++j) p[j * cs] = float_to_bf16(narrowed_for_16bit(x[j]));
      return;
    }
    case DType::f16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(row);
      for (int64_t j = 0; j < n; ++j) p[j * cs] = float_to_f16(narrowed_for_16bit(x[j]));
      return;
    }
    case DType::f32: {
      float* p = reinterpret_cast<float*>(row);
      for (int64_t j = 0; j < n; ++j) p[j * cs] = static_cast<float>(x[j]);
      return;
    }
    case DType::f64: {
      double* p = reinterpret_cast<double*>(row);
      for (int64_t j = 0; j < n; ++j) p[j * cs] = static_cast<double>(x[j]);
      return;
    }
    default: throw Error(ErrorCode::internal, "reference: not a floating dtype");
  }
}

/// x as `store` then `load` would give it: rounded (RN) to dtype t, back in the compute type.
template <class T>
inline T rounded_to(DType t, T x) {
  switch (t) {
    case DType::bf16: return static_cast<T>(bf16_to_float(float_to_bf16(narrowed_for_16bit(x))));
    case DType::f16: return static_cast<T>(f16_to_float(float_to_f16(narrowed_for_16bit(x))));
    case DType::f32: return static_cast<T>(static_cast<float>(x));
    case DType::f64: return x;
    default: throw Error(ErrorCode::internal, "reference: not a floating dtype");
  }
}

/// The value of dtype t next to r (a value of t) towards +inf (up) or -inf.
template <class T>
inline T next_value(DType t, T r, bool up) {
  if (t == DType::f32) return static_cast<T>(std::nextafter(static_cast<float>(r), up ? INFINITY : -INFINITY));
  if (t == DType::f64) return static_cast<T>(std::nextafter(static_cast<double>(r), up ? INFINITY : -INFINITY));
  const bool bf16 = t == DType::bf16;
  const float f = static_cast<float>(r);
  const uint16_t bits = bf16 ? float_to_bf16(f) : float_to_f16(f);
  uint16_t next;
  if ((bits & 0x7fffu) == 0) next = up ? 0x0001u : 0x8001u;  // from +-0: the smallest subnormal
  else next = static_cast<uint16_t>(((bits & 0x8000u) != 0) != up ? bits + 1 : bits - 1);  // sign-magnitude
  return static_cast<T>(bf16 ? bf16_to_float(next) : f16_to_float(next));
}

/// Optional per-expert or per-row scale (alpha, beta, prob): 1 when the operand is absent.
template <class T> inline T scale_or_one(const TensorView& v, int64_t i) {
  return v.defined() ? at<T>(v, i) : T(1);
}

/// Element i of an (E,) int64 pointer table, as an address.
inline void* pointer_at(const TensorView& ptrs, int64_t i) {
  const int64_t addr = static_cast<const int64_t*>(ptrs.data)[i * ptrs.strides[0]];
  return reinterpret_cast<void*>(static_cast<intptr_t>(addr));
}

}  // namespace moegemm::reference
