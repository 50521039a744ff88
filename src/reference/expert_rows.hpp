// Row ranges of the experts, from device-style offsets clamped exactly as the kernels clamp them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "moegemm/tensor.hpp"

namespace moegemm::reference {

/// Rows [begin[g], end[g]) of every expert g plus the first unaddressed row (`end_all`).
struct ExpertRows {
  std::vector<int64_t> begin, end;
  int64_t end_all = 0;  ///< clamped offsets[E-1]: rows >= end_all are the tail
  int64_t experts() const { return static_cast<int64_t>(end.size()); }
  int64_t rows(int64_t g) const { return end[g] - begin[g]; }
};

/// offsets: (E,) int32 host tensor (strided), cumulative end rows. Every end is clamped into
/// [previous end, M] (docs/ops.md §0), so negative, decreasing or too large values give empty or
/// truncated experts and never an access outside [0, M).
inline ExpertRows expert_rows(const TensorView& offsets, int64_t M) {
  ExpertRows r;
  const int64_t E = offsets.shape[0];
  r.begin.resize(E);
  r.end.resize(E);
  const int32_t* o = static_cast<const int32_t*>(offsets.data);
  int64_t prev = 0;
  for (int64_t g = 0; g < E; ++g) {
    const int64_t e = std::clamp<int64_t>(o[g * offsets.strides[0]], prev, M);
    r.begin[g] = prev;
    r.end[g] = e;
    prev = e;
  }
  r.end_all = prev;
  return r;
}

}  // namespace moegemm::reference
