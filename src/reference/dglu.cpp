// CPU reference of grouped_gemm_dglu (docs/ops.md §3): the backward of grouped_gemm_glu's activation.
// alpha scales the GEMM term once (dH = alpha * dY @ B^T), unlike cuDNN's alpha^2, so that this op is the
// exact derivative of the forward. beta scales the saved C before the activation; dC is the gradient with
// respect to that scaled pre-activation (no beta factor), as in cuDNN.
#include "reference/glu.hpp"
#include "reference/grouped_product.hpp"
#include "reference/reductions.hpp"
#include "reference/reference.hpp"

namespace moegemm::reference {
namespace {

template <class T>
void grouped_gemm_dglu_impl(const GroupedGemmDgluArgs& args) {
  const int64_t M = args.a.shape[0], K = args.a.shape[1], N2 = args.dc.shape[1], I = N2 / 2;
  require_glu_width(args.glu.layout, N2, "grouped_gemm_dglu");
  const ExpertRows rows = expert_rows(args.offsets, M);
  const TaskList tl = make_tasks(rows);
  const int64_t tasks = static_cast<int64_t>(tl.tasks.size());
  TaskPartials<T> dbias_sums(args.dbias.defined() ? tasks : 0, N2);
  TaskPartials<T> maxima(tasks, 2);
  for_each_product<T>(
      args.a, I, rows, tl, [&](int64_t g) { return expert_b(args.b, g, I, K); },
      [&](int64_t ti, const RowTask& t, const T* p, int64_t ldp) {
        const T alpha = scale_or_one<T>(args.alpha, t.expert);
        const T beta = scale_or_one<T>(args.beta, t.expert);
        T* sums = args.dbias.defined() ? dbias_sums.task(ti) : nullptr;
        T amax_gate = T(0), amax_up = T(0);
        for (int64_t r = t.row_begin; r < t.row_end; ++r) {
          const T* pr = p + (r - t.row_begin) * ldp;
          const T prob = scale_or_one<T>(args.prob, r);
          T dprob = T(0);
          for (int64_t j = 0; j < I; ++j) {
            const GluColumns col = glu_columns(args.glu.layout, I, j);
            const T dh = alpha * pr[j];
            const T gate = beta * at<T>(args.c, r, col.gate);
            const T up = beta * at<T>(args.c, r, col.up);
            const GluValue<T> v = glu_eval<T, true>(args.glu, gate, up);
            const T d_gate = v.gate_passes ? dh * prob * v.d_gate : T(0);
            const T d_up = v.up_passes ? dh * prob * v.d_up : T(0);
            put<T>(args.dc, r, col.gate, d_gate);
            put<T>(args.dc, r, col.up, d_up);
            dprob += v.h * dh;
            amax_gate = abs_max(amax_gate, d_gate);
            amax_up = abs_max(amax_up, d_up);
            if (sums) {
              sums[col.gate] += d_gate;
              sums[col.up] += d_up;
            }
          }
          if (args.dprob.defined()) put<T>(args.dprob, r, dprob);
        }
        maxima.task(ti)[0] = amax_gate;
        maxima.task(ti)[1] = amax_up;
      });
  if (args.dbias.defined()) write_dbias(args.dbias, tl, dbias_sums);
  if (args.amax.defined()) write_amax(args.amax, maxima, tasks);
  if (args.zero_tail) {
    zero_rows<T>(args.dc, rows.end_all);
    zero_rows<T>(args.dprob, rows.end_all);
  }
}

}  // namespace

void run(const GroupedGemmDgluArgs& args) {
  use_f64(args.a) ? grouped_gemm_dglu_impl<double>(args) : grouped_gemm_dglu_impl<float>(args);
}

}  // namespace moegemm::reference
