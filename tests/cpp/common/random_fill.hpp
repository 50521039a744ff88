// Seeded random contents for host tensors: uniform values rounded to the tensor's dtype, never all zero.
#pragma once

#include <cstdint>
#include <random>

#include "common/host_tensor.hpp"

namespace moegemm::testing {

/// Every view element uniform in [lo, hi), rounded to nearest even to the dtype. Padding is left alone.
inline void fill_uniform(HostTensor& t, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set_at(t.offset_of_linear(i), dist(rng));
}

/// A tensor of `shape` filled by fill_uniform.
inline HostTensor random_tensor(DType dtype, std::vector<int64_t> shape, uint64_t seed, double lo = -1.0,
                                double hi = 1.0, int64_t row_pad = 0) {
  HostTensor t(dtype, std::move(shape), row_pad);
  fill_uniform(t, seed, lo, hi);
  return t;
}

}  // namespace moegemm::testing
