// CPU reference of the squared-ReLU ops: grouped_gemm_srelu / grouped_gemm_dsrelu (docs/ops.md §4) and
// their one-group forms gemm_srelu / gemm_dsrelu (§6). In the backward the GEMM gives dH = alpha dY B^T
// and C is the saved forward pre-activation (the grouped convention, for the dense op too).
#include "reference/grouped_product.hpp"
#include "reference/reductions.hpp"
#include "reference/reference.hpp"

namespace moegemm::reference {
namespace {

// Operands shared by the grouped and dense forms.
struct SreluForward {
  const TensorView &a, &alpha, &prob, &bias, &d, &c;
  double alpha_scalar;  // used when `alpha` is absent
  bool zero_tail;
};

template <class T, class BOf>
void srelu_forward(const SreluForward& f, const ExpertRows& rows, BOf&& b_of) {
  const int64_t N = f.d.shape[1];
  const TaskList tl = make_tasks(rows);
  for_each_product<T>(f.a, N, rows, tl, b_of, [&](int64_t, const RowTask& t, const T* p, int64_t ldp) {
    const T alpha = f.alpha.defined() ? at<T>(f.alpha, t.expert) : T(f.alpha_scalar);
    for (int64_t r = t.row_begin; r < t.row_end; ++r) {
      const T* pr = p + (r - t.row_begin) * ldp;
      const T prob = scale_or_one<T>(f.prob, r);
      for (int64_t n = 0; n < N; ++n) {
        T g = alpha * pr[n];
        if (f.bias.defined()) g += at<T>(f.bias, t.expert, n);
        if (f.c.defined()) put<T>(f.c, r, n, g);
        const T s = relu(g);
        put<T>(f.d, r, n, prob * s * s);
      }
    }
  });
  if (f.zero_tail) {
    zero_rows<T>(f.d, rows.end_all);
    zero_rows<T>(f.c, rows.end_all);
  }
}

struct SreluBackward {
  const TensorView &a, &c, &alpha, &prob, &dc, &dprob, &dbias, &amax;
  double alpha_scalar;
  bool zero_tail;
};

template <class T, class BOf>
void srelu_backward(const SreluBackward& f, const ExpertRows& rows, BOf&& b_of) {
  const int64_t N = f.dc.shape[1];
  const TaskList tl = make_tasks(rows);
  const int64_t tasks = static_cast<int64_t>(tl.tasks.size());
  TaskPartials<T> dbias_sums(f.dbias.defined() ? tasks : 0, N);
  TaskPartials<T> maxima(tasks, 1);
  for_each_product<T>(f.a, N, rows, tl, b_of, [&](int64_t ti, const RowTask& t, const T* p, int64_t ldp) {
    const T alpha = f.alpha.defined() ? at<T>(f.alpha, t.expert) : T(f.alpha_scalar);
    T* sums = f.dbias.defined() ? dbias_sums.task(ti) : nullptr;
    T m = T(0);
    for (int64_t r = t.row_begin; r < t.row_end; ++r) {
      const T* pr = p + (r - t.row_begin) * ldp;
      const T prob = scale_or_one<T>(f.prob, r);
      T dprob = T(0);
      for (int64_t n = 0; n < N; ++n) {
        const T dh = alpha * pr[n];
        const T s = relu(at<T>(f.c, r, n));
        // 0 where C <= 0 whatever dH is (an infinite or NaN dH included), as autodiff of relu(C)^2 gives in
        // torch and JAX; a NaN C keeps its NaN.
        const T d = s != T(0) ? T(2) * s * dh * prob : T(0);
        put<T>(f.dc, r, n, d);
        dprob += s * s * dh;
        m = abs_max(m, d);
        if (sums) sums[n] += d;
      }
      if (f.dprob.defined()) put<T>(f.dprob, r, dprob);
    }
    maxima.task(ti)[0] = m;
  });
  if (f.dbias.defined()) write_dbias(f.dbias, tl, dbias_sums);
  if (f.amax.defined()) write_amax(f.amax, maxima, tasks);
  if (f.zero_tail) {
    zero_rows<T>(f.dc, rows.end_all);
    zero_rows<T>(f.dprob, rows.end_all);
  }
}

const TensorView kAbsent{};

template <class T>
void run_grouped_srelu(const GroupedGemmSreluArgs& a) {
  const int64_t M = a.a.shape[0], K = a.a.shape[1], N = a.d.shape[1];
  srelu_forward<T>({a.a, a.alpha, a.prob, a.bias, a.d, a.c, 1.0, a.zero_tail}, expert_rows(a.offsets, M),
                   [&](int64_t g) { return expert_b(a.b, g, N, K); });
}
template <class T>
void run_grouped_dsrelu(const GroupedGemmDsreluArgs& a) {
  const int64_t M = a.a.shape[0], K = a.a.shape[1], N = a.dc.shape[1];
  srelu_backward<T>({a.a, a.c, a.alpha, a.prob, a.dc, a.dprob, a.dbias, a.amax, 1.0, a.zero_tail},
                    expert_rows(a.offsets, M), [&](int64_t g) { return expert_b(a.b, g, N, K); });
}
template <class T>
void run_dense_srelu(const GemmSreluArgs& a) {
  const int64_t M = a.a.shape[0];
  srelu_forward<T>({a.a, kAbsent, a.prob, a.bias.as_row(), a.d, a.c, a.alpha, false}, ExpertRows{{0}, {M}, M},
                   [&](int64_t) { return dense_b(a.b, a.b_layout); });
}
template <class T>
void run_dense_dsrelu(const GemmDsreluArgs& a) {
  const int64_t M = a.a.shape[0];
  srelu_backward<T>({a.a, a.c, kAbsent, a.prob, a.dc, a.dprob, a.dbias.as_row(), a.amax, a.alpha, false},
                    ExpertRows{{0}, {M}, M}, [&](int64_t) { return dense_b(a.b, a.b_layout); });
}

}  // namespace

void run(const GroupedGemmSreluArgs& args) {
  use_f64(args.a) ? run_grouped_srelu<double>(args) : run_grouped_srelu<float>(args);
}
void run(const GroupedGemmDsreluArgs& args) {
  use_f64(args.a) ? run_grouped_dsrelu<double>(args) : run_grouped_dsrelu<float>(args);
}
void run(const GemmSreluArgs& args) {
  use_f64(args.a) ? run_dense_srelu<double>(args) : run_dense_srelu<float>(args);
}
void run(const GemmDsreluArgs& args) {
  use_f64(args.a) ? run_dense_dsrelu<double>(args) : run_dense_dsrelu<float>(args);
}

}  // namespace moegemm::reference
