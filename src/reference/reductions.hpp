// Deterministic reductions of the CPU reference (dbias, amax): each task keeps its own partial, and the
// partials are combined in task order, so the result does not depend on which thread ran which task.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/element.hpp"
#include "reference/grouped_product.hpp"

namespace moegemm::reference {

/// max(m, |v|) that keeps a NaN once one is seen (an amax must not hide a non-finite value).
template <class T> inline T abs_max(T m, T v) {
  const T a = v < T(0) ? -v : v;
  return (a > m || a != a) ? a : m;
}

/// Per-task column sums (dbias) and per-task maxima (amax), `width` values each.
template <class T>
struct TaskPartials {
  int64_t width = 0;
  std::vector<T> data;
  TaskPartials(int64_t tasks, int64_t w) : width(w), data(static_cast<size_t>(tasks * w), T(0)) {}
  T* task(int64_t i) { return data.data() + i * width; }
  const T* task(int64_t i) const { return data.data() + i * width; }
};

/// dbias[g, c] = sum over expert g's tasks (in order) of the task column sums; exact zeros for an empty
/// expert (its gradient is zero, and the op writes it).
template <class T>
void write_dbias(const TensorView& dbias, const TaskList& tl, const TaskPartials<T>& sums) {
  const int64_t E = dbias.shape[0];
  std::vector<T> acc(static_cast<size_t>(sums.width));
  for (int64_t g = 0; g < E; ++g) {
    std::fill(acc.begin(), acc.end(), T(0));
    for (int64_t t = tl.first[g]; t < tl.first[g + 1]; ++t)
      for (int64_t c = 0; c < sums.width; ++c) acc[c] += sums.task(t)[c];
    for (int64_t c = 0; c < sums.width; ++c) put<T>(dbias, g, c, acc[c]);
  }
}

/// amax[k] = max over tasks of the task maxima (0 when there are no tasks).
template <class T>
void write_amax(const TensorView& amax, const TaskPartials<T>& maxima, int64_t tasks) {
  for (int64_t k = 0; k < maxima.width; ++k) {
    T m = T(0);
    for (int64_t t = 0; t < tasks; ++t) m = abs_max(m, maxima.task(t)[k]);
    put<T>(amax, k, m);
  }
}

}  // namespace moegemm::reference
