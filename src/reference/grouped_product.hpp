// The GEMM stage shared by every op of the CPU reference: for each expert g and each fixed block of its
// rows, the raw product P = A[rows] @ B_g^T (no alpha) in the compute type, handed to an epilogue.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "moegemm/ops.hpp"
#include "reference/element.hpp"
#include "reference/expert_rows.hpp"
#include "reference/packed_gemm.hpp"

namespace moegemm::reference {

/// Rows of one unit of work. Tasks are fixed by the problem (never by the thread count), so reductions
/// over per-task partials in task order are bitwise deterministic.
struct RowTask {
  int64_t expert, row_begin, row_end;
};
inline constexpr int64_t kRowsPerTask = 64;

/// Tasks of every non-empty expert in row order, and the index of each expert's first task.
struct TaskList {
  std::vector<RowTask> tasks;
  std::vector<int64_t> first;  ///< (E + 1): tasks of expert g are [first[g], first[g+1])
};
inline TaskList make_tasks(const ExpertRows& rows) {
  TaskList t;
  t.first.push_back(0);
  for (int64_t g = 0; g < rows.experts(); ++g) {
    for (int64_t r = rows.begin[g]; r < rows.end[g]; r += kRowsPerTask)
      t.tasks.push_back({g, r, std::min(rows.end[g], r + kRowsPerTask)});
    t.first.push_back(static_cast<int64_t>(t.tasks.size()));
  }
  return t;
}

/// Where expert g's weights live: element (n, k) of B_g^T's source sits at base[n * stride_n + k * stride_k].
struct BSource {
  const void* base = nullptr;
  DType dtype = DType::bf16;
  int64_t stride_n = 0, stride_k = 0;
};

/// B_g of grouped ops: dense (E, N, K) / (E, K, N) with its strides, or a row-major matrix behind ptrs[g].
inline BSource expert_b(const ExpertWeights& b, int64_t g, int64_t N, int64_t K) {
  BSource s;
  if (b.dense.defined()) {
    const TensorView& d = b.dense;
    s.dtype = d.dtype;
    s.base = static_cast<const char*>(d.data) + g * d.strides[0] * int64_t(dtype_size(d.dtype));
    s.stride_n = b.layout == BLayout::nk ? d.strides[1] : d.strides[2];
    s.stride_k = b.layout == BLayout::nk ? d.strides[2] : d.strides[1];
  } else {
    s.dtype = b.dtype;
    s.base = pointer_at(b.ptrs, g);
    s.stride_n = b.layout == BLayout::nk ? K : 1;
    s.stride_k = b.layout == BLayout::nk ? 1 : N;
  }
  return s;
}

/// B of dense ops: (N, K) for nk, (K, N) for kn, strided.
inline BSource dense_b(const TensorView& b, BLayout layout) {
  BSource s;
  s.base = b.data;
  s.dtype = b.dtype;
  s.stride_n = layout == BLayout::nk ? b.strides[0] : b.strides[1];
  s.stride_k = layout == BLayout::nk ? b.strides[1] : b.strides[0];
  return s;
}

/// Calls epi(task_index, task, p, ldp) for every task, p[i * ldp + n] = sum_k A[row_begin + i, k] * B_g[n, k]
/// (i < task rows, n < N), with `b_of(g)` giving B_g's BSource. Experts run one after the other (one packed
/// panel alive at a time); the tasks of an expert run in parallel, each on its own output rows.
template <class T, class BOf, class Epi>
void for_each_product(const TensorView& a, int64_t N, const ExpertRows& rows, const TaskList& tl, BOf&& b_of,
                      Epi&& epi) {
  const int64_t K = a.shape[1];
  PackedB<T> panel;
  for (int64_t g = 0; g < rows.experts(); ++g) {
    const int64_t t0 = tl.first[g], t1 = tl.first[g + 1];
    if (t0 == t1) continue;
    const BSource src = b_of(g);
    panel.pack(K, N, [&](int64_t k, int64_t n) {
      return load<T>(src.base, src.dtype, n * src.stride_n + k * src.stride_k);
    });
    const double flops = 2.0 * double(rows.rows(g)) * double(N) * double(K);
    parallel_for(t1 - t0, flops, [&](int64_t i) {
      const RowTask& t = tl.tasks[t0 + i];
      const int64_t nrows = t.row_end - t.row_begin;
      const int64_t padded = (nrows + kMR - 1) / kMR * kMR;
      const int64_t lda = std::max<int64_t>(K, 1);
      std::vector<T> ablock(static_cast<size_t>(padded * lda), T(0));
      for (int64_t r = 0; r < nrows; ++r)
        for (int64_t k = 0; k < K; ++k) ablock[r * lda + k] = at<T>(a, t.row_begin + r, k);
      const int64_t ldp = panel.padded_n();
      std::vector<T> p(static_cast<size_t>(padded * ldp));
      packed_gemm(ablock.data(), lda, padded, panel, p.data(), ldp);
      epi(t0 + i, t, static_cast<const T*>(p.data()), ldp);
    });
  }
}

/// zero_tail: zeros in rows [from, M) of a row-indexed output (rank 1 or 2), and nowhere else.
template <class T>
void zero_rows(const TensorView& out, int64_t from) {
  if (!out.defined()) return;
  const int64_t M = out.shape[0];
  const int64_t cols = out.rank >= 2 ? out.shape[1] : 1;
  const int64_t cstride = out.rank >= 2 ? out.strides[1] : 0;
  for (int64_t r = from; r < M; ++r)
    for (int64_t c = 0; c < cols; ++c) store<T>(out.data, out.dtype, r * out.strides[0] + c * cstride, T(0));
}

/// The grouped forward ops' pre-activation G = alpha[g] * A @ B_g^T + bias[g,:] (N columns) of every
/// expert row r: handed to saving(g) (which may adjust what C keeps, in place), written to C (when
/// requested), then handed to row(r, g) (g may be changed in place); zero_tail then zeros D's and C's rows
/// past the last expert. `Args` has a, b, offsets, alpha, bias, d, c and zero_tail.
template <class T, class Args, class Saving, class Row>
void for_each_preactivation_row(const Args& args, int64_t N, Saving&& saving, Row&& row) {
  const int64_t M = args.a.shape[0], K = args.a.shape[1];
  const ExpertRows rows = expert_rows(args.offsets, M);
  const TaskList tl = make_tasks(rows);
  for_each_product<T>(
      args.a, N, rows, tl, [&](int64_t g) { return expert_b(args.b, g, N, K); },
      [&](int64_t, const RowTask& t, const T* p, int64_t ldp) {
        const T alpha = scale_or_one<T>(args.alpha, t.expert);
        std::vector<T> bias(static_cast<size_t>(N), T(0)), g(static_cast<size_t>(N));
        if (args.bias.defined())
          for (int64_t n = 0; n < N; ++n) bias[n] = at<T>(args.bias, t.expert, n);
        for (int64_t r = t.row_begin; r < t.row_end; ++r) {
          const T* pr = p + (r - t.row_begin) * ldp;
          for (int64_t n = 0; n < N; ++n) g[n] = alpha * pr[n] + bias[n];
          saving(g.data());
          if (args.c.defined()) put_row<T>(args.c, r, g.data(), N);
          row(r, g.data());
        }
      });
  if (args.zero_tail) {
    zero_rows<T>(args.d, rows.end_all);
    zero_rows<T>(args.c, rows.end_all);
  }
}

/// for_each_preactivation_row with C keeping G as it is.
template <class T, class Args, class Row>
void for_each_preactivation_row(const Args& args, int64_t N, Row&& row) {
  for_each_preactivation_row<T>(args, N, [](T*) {}, std::forward<Row>(row));
}

/// True when the op computes in f64 (the host-only gradient-check path): inputs are f64.
inline bool use_f64(const TensorView& a) { return a.dtype == DType::f64; }

}  // namespace moegemm::reference
