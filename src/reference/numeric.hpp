// Scalar numerics of the CPU reference: 16-bit float conversions and the activation functions with
// their derivatives. Templated on the compute type (float, or double on the f64 gradient-check path).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace moegemm::reference {

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// v in f32 rounded to odd: truncated toward zero, its last bit set when that lost anything. Rounding the
/// result to nearest even in a 16-bit type (at most 11 of f32's 24 significant bits, and f32's finer
/// subnormals) gives v correctly rounded, where v rounded to nearest in f32 first can land on a 16-bit tie
/// and round twice (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
/// rounding to odd", IEEE Trans. Computers 57(4), 2008). Past f32's range it gives FLT_MAX, which rounds to inf.
inline float to_float_round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return bits_float(float_bits(f) | 1u);
}

/// The compute type's value narrowed to f32 on its way to a 16-bit type: itself for f32, rounded to odd for
/// f64 (the gradient-check path), so that the 16-bit rounding after it is the only one.
inline float narrowed_for_16bit(float v) { return v; }
inline float narrowed_for_16bit(double v) { return to_float_round_to_odd(v); }

/// bfloat16 bits -> f32 (exact: bf16 is the upper half of an f32).
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

/// f32 -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN of the same sign.
inline uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);  // carries into the exponent give the right overflow to inf
  return static_cast<uint16_t>(u >> 16);
}

/// IEEE binary16 bits -> f32 (exact), subnormals included.
inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  // Subnormal (or zero): man * 2^-24, exact in f32.
  const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

/// f32 -> IEEE binary16 bits, round to nearest even, overflow to inf, gradual underflow.
inline uint16_t float_to_f16(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {  // normal f16 range (>= 2^-14)
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): +-0
  // Subnormal: shift the full significand right so that the unit is 2^-24, rounding to nearest even.
  const uint32_t exp = a >> 23;            // biased f32 exponent, 102..112
  const uint32_t man = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exp;       // 14..24
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rest = man & ((1u << shift) - 1u);
  uint32_t q = man >> shift;
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// ---- activations (formulas: docs/ops.md §2-§4) ----

template <class T> inline T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T> inline T silu(T x) { return x * sigmoid(x); }
/// d silu / dx = s * (1 + x * (1 - s)), s = sigmoid(x).
template <class T> inline T silu_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

// gelu, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluCubic = 0.044715;
template <class T> inline T gelu_tanh(T x) {
  const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x));
  return T(0.5) * x * (T(1) + t);
}
template <class T> inline T gelu_tanh_grad(T x) {
  const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x));
  const T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
}

/// max(x, 0) that keeps NaN, as torch.relu and jax.nn.relu do.
template <class T> inline T relu(T x) { return x < T(0) ? T(0) : x; }

}  // namespace moegemm::reference
