// CPU reference of grouped_gemm (docs/ops.md §1) and gemm_amax (§6).
#include <vector>

#include "reference/grouped_product.hpp"
#include "reference/reductions.hpp"
#include "reference/reference.hpp"

namespace moegemm::reference {
namespace {

template <class T>
void grouped_gemm_impl(const GroupedGemmArgs& args) {
  const int64_t N = args.d.shape[1];
  for_each_preactivation_row<T>(args, N, [&](int64_t r, T* g) {
    if (args.prob.defined()) {
      const T prob = at<T>(args.prob, r);
      for (int64_t n = 0; n < N; ++n) g[n] *= prob;
    }
    put_row<T>(args.d, r, g, N);
  });
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
