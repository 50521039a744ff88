// Expert offsets for tests: cumulative end rows from group sizes, and random group sizes.
#pragma once

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "common/host_tensor.hpp"

namespace moegemm::testing {

/// (E,) int32 offsets: offsets[g] = sizes[0] + ... + sizes[g] (the cumulative end row of expert g).
inline HostTensor offsets_from_sizes(const std::vector<int64_t>& sizes) {
  HostTensor t(DType::i32, {static_cast<int64_t>(sizes.size())});
  int64_t end = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    end += sizes[g];
    t.set_at(static_cast<int64_t>(g), static_cast<double>(end));
  }
  return t;
}

/// (E,) int32 offsets with the given raw values (garbage-offset tests).
inline HostTensor offsets_raw(const std::vector<int32_t>& values) {
  HostTensor t(DType::i32, {static_cast<int64_t>(values.size())});
  for (size_t g = 0; g < values.size(); ++g) t.set_at(static_cast<int64_t>(g), values[g]);
  return t;
}

/// E random group sizes summing to `total`; each expert is empty with probability `empty_fraction`.
inline std::vector<int64_t> random_group_sizes(int64_t E, int64_t total, uint64_t seed,
                                               double empty_fraction = 0.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> w(E);
  double sum = 0;
  for (auto& x : w) {
    x = u(rng) < empty_fraction ? 0.0 : 0.05 + u(rng);
    sum += x;
  }
  std::vector<int64_t> sizes(E, 0);
  if (sum == 0) return sizes;
  int64_t assigned = 0, last_nonempty = -1;
  for (int64_t g = 0; g < E; ++g) {
    sizes[g] = static_cast<int64_t>(w[g] / sum * static_cast<double>(total));
    assigned += sizes[g];
    if (w[g] > 0) last_nonempty = g;
  }
  sizes[last_nonempty] += total - assigned;
  return sizes;
}

}  // namespace moegemm::testing
