// Test-side encoding of real numbers into bf16/f16 bit patterns and back, written independently of the
// library's conversions (plain arithmetic on doubles), so tests can check the library's rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace moegemm::testing {

/// Round a double to the nearest value with `mant_bits` fraction bits and minimum normal exponent
/// `min_exp`, ties to even (std::nearbyint in the default rounding mode). Returns the rounded value.
inline double round_to_format(double v, int mant_bits, int min_exp) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(std::fabs(v), &e);  // |v| = f * 2^e, f in [0.5, 1)
  const int unit_exp = std::max(e - 1, min_exp) - mant_bits;  // weight of the last kept bit
  return std::ldexp(std::nearbyint(std::ldexp(v, -unit_exp)), unit_exp);
}

/// IEEE binary16 bits of v, round to nearest even; |v| >= 65520 gives inf.
inline uint16_t encode_f16(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return 0x7e00;
  const double r = std::fabs(round_to_format(v, 10, -14));
  if (r >= 65536.0 || std::isinf(r)) return sign | 0x7c00;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(r, 24));  // subnormal
  int e;
  const double f = std::frexp(r, &e);  // r = f * 2^e
  const uint16_t man = static_cast<uint16_t>(std::ldexp(f, 11)) & 0x3ff;
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) | man;
}

inline double decode_f16(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0x1f) return man ? NAN : s * INFINITY;
  if (exp == 0) return s * std::ldexp(man, -24);
  return s * std::ldexp(1024 + man, exp - 25);
}

/// bfloat16 bits of v, round to nearest even (8 significant bits, f32's exponent range).
inline uint16_t encode_bf16(double v) {
  if (std::isnan(v)) return 0x7fc0;
  const float r = static_cast<float>(round_to_format(v, 7, -126));
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return static_cast<uint16_t>(u >> 16);
}

inline double decode_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace moegemm::testing
