// Deterministic, never-zero test data: element i of a tensor is a hash of (seed, i), the same on host and
// device, so a run is reproducible from its seed without shipping data around.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MOEGEMM_HD __host__ __device__
#else
#define MOEGEMM_HD
#endif

namespace moegemm::cli {

/// splitmix64 finaliser: a well-mixed 64-bit hash of x.
MOEGEMM_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// offset + scale * v with v an odd multiple of 2^-16 in (-1, 1): never exactly `offset`, so data with
/// offset 0 has no zeros even after rounding to bf16.
MOEGEMM_HD inline float synthetic_value(uint64_t seed, uint64_t index, float scale, float offset) {
  const int32_t k = static_cast<int32_t>(mix64(seed * 0x632be59bd9b4e019ull + index) >> 48) - 32768;
  return offset + scale * (static_cast<float>(2 * k + 1) * (1.0f / 65536.0f));
}

}  // namespace moegemm::cli
