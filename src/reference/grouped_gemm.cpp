// CPU reference of grouped_gemm (docs/ops.md §1) and gemm_amax (§6).
#include <vector>

#include "reference/grouped_product.hpp"
#include "reference/reductions.hpp"
#include "reference/reference.hpp"

namespace moegemm::reference {
namespace {

template <class T>
void grouped_gemm_impl(const GroupedGemmArgs& args) {
  const int64_t M = args.a.shape[0], K = args.a.shape[1], N = args.d.shape[1];
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
          if (args.c.defined()) put_row<T>(args.c, r, g.data(), N);
          if (args.prob.defined()) {
            const T prob = at<T>(args.prob, r);
            for (int64_t n = 0; n < N; ++n) g[n] *= prob;
          }
          put_row<T>(args.d, r, g.data(), N);
        }
      });
  if (args.zero_tail) {
    zero_rows<T>(args.d, rows.end_all);
    zero_rows<T>(args.c, rows.end_all);
  }
}

template <class T>
void gemm_amax_impl(const GemmAmaxArgs& args) {
  const int64_t M = args.a.shape[0], N = args.c.shape[1];
  const ExpertRows rows{{0}, {M}, M};
  const TaskList tl = make_tasks(rows);
  TaskPartials<T> maxima(static_cast<int64_t>(tl.tasks.size()), 1);
  for_each_product<T>(
      args.a, N, rows, tl, [&](int64_t) { return dense_b(args.b, args.b_layout); },
      [&](int64_t ti, const RowTask& t, const T* p, int64_t ldp) {
        T m = T(0);
        for (int64_t r = t.row_begin; r < t.row_end; ++r) {
          const T* pr = p + (r - t.row_begin) * ldp;
          for (int64_t n = 0; n < N; ++n) {
            put<T>(args.c, r, n, pr[n]);
            m = abs_max(m, pr[n]);
          }
        }
        maxima.task(ti)[0] = m;
      });
  write_amax(args.amax, maxima, static_cast<int64_t>(tl.tasks.size()));
}

}  // namespace

void run(const GroupedGemmArgs& args) {
  use_f64(args.a) ? grouped_gemm_impl<double>(args) : grouped_gemm_impl<float>(args);
}
void run(const GemmAmaxArgs& args) {
  use_f64(args.a) ? gemm_amax_impl<double>(args) : gemm_amax_impl<float>(args);
}

}  // namespace moegemm::reference
