// Which rows and experts a step is verified on, and copying exactly those to the host.
#pragma once

#include <cstdint>
#include <vector>

#include "moegemm/tensor.hpp"
#include "tensor_store.hpp"

namespace moegemm::cli {

/// A few non-empty experts (the first, the last, the largest and random others) and, within each, its first
/// and last row plus random rows. Rows ascend, so they form a small grouped problem of their own.
struct RowSample {
  std::vector<int64_t> experts;  ///< global expert ids, ascending
  std::vector<int64_t> rows;     ///< global row ids, ascending, grouped by expert
  std::vector<int32_t> ends;     ///< cumulative end of each sampled expert within `rows`
};

/// At most `max_experts` experts and about `max_rows` rows (never fewer than 2 per expert that has them).
RowSample sample_rows(const std::vector<int32_t>& ends, int max_experts, int64_t max_rows, uint64_t seed);

/// `count` distinct indices of [0, extent) in 8-aligned blocks of 8 (first and last block always, then random),
/// ascending; all of [0, extent) when extent <= count. The 8-multiple keeps sub-problems within the
/// 16-byte alignment rule of the ops.
std::vector<int64_t> sample_columns(int64_t extent, int64_t count, uint64_t seed);

/// Rows `rows` of the row-major matrix view `t` (shape (R, C) or (R,)), copied to the host: rows.size() x C.
template <class T>
std::vector<T> gather_rows(const TensorView& t, const std::vector<int64_t>& rows) {
  const int64_t cols = t.rank == 1 ? 1 : t.numel() / t.shape[0];
  std::vector<T> out(rows.size() * static_cast<size_t>(cols));
  for (size_t i = 0; i < rows.size();) {  // one copy per run of consecutive rows
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    copy_to_host(out.data() + i * cols, static_cast<const T*>(t.data) + rows[i] * cols, (j - i) * cols * sizeof(T),
                 t.device);
    i = j;
  }
  return out;
}

/// Selected columns of a host row-major (rows x cols) matrix.
template <class T>
std::vector<T> select_columns(const std::vector<T>& m, int64_t cols, const std::vector<int64_t>& pick) {
  const size_t rows = m.size() / static_cast<size_t>(cols);
  std::vector<T> out;
  out.reserve(rows * pick.size());
  for (size_t r = 0; r < rows; ++r)
    for (int64_t c : pick) out.push_back(m[r * cols + c]);
  return out;
}

/// Whole slabs of the expert-major tensor `t` (E, X, Y) for `experts`, copied to the host: experts.size() x X x Y.
template <class T>
std::vector<T> gather_experts(const TensorView& t, const std::vector<int64_t>& experts) {
  const int64_t slab = t.shape[1] * t.shape[2];
  std::vector<T> out(experts.size() * static_cast<size_t>(slab));
  for (size_t i = 0; i < experts.size(); ++i)
    copy_to_host(out.data() + i * slab, static_cast<const T*>(t.data) + experts[i] * slab, slab * sizeof(T), t.device);
  return out;
}

/// Rows of the expert-major weight tensor (E, X, Y) as a (E*X, Y) matrix: expert e's row x is e*X + x.
TensorView flatten_experts(const TensorView& t);

/// Widens host values (bf16, float, ...) to double.
template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(static_cast<float>(v[i]));
  return out;
}

}  // namespace moegemm::cli
