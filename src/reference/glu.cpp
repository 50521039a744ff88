// CPU reference of grouped_gemm_glu (docs/ops.md §2) and gemm_swiglu (§6).
#include "reference/glu.hpp"
#include "reference/grouped_product.hpp"
#include "reference/reference.hpp"

namespace moegemm::reference {
namespace {

template <class T>
void grouped_gemm_glu_impl(const GroupedGemmGluArgs& args) {
  const int64_t I = args.d.shape[1], N = 2 * I;
  require_glu_width(args.glu.layout, N, "grouped_gemm_glu");
  // swiglu_clamped: C keeps each clamp's decision (saved_on_clamp_side).
  const bool keep_sides = args.glu.activation == Activation::swiglu_clamped && args.c.defined();
  const T limit = T(args.glu.limit);
  auto saving = [&](T* g) {
    if (!keep_sides) return;
    for (int64_t j = 0; j < I; ++j) {
      const GluColumns col = glu_columns(args.glu.layout, I, j);
      g[col.gate] = saved_on_clamp_side(g[col.gate], limit, true, args.c.dtype);
      g[col.up] = saved_on_clamp_side(g[col.up], limit, true, args.c.dtype);
      g[col.up] = saved_on_clamp_side(g[col.up], -limit, false, args.c.dtype);
    }
  };
  for_each_preactivation_row<T>(args, N, saving, [&](int64_t r, const T* g) {
    const T prob = scale_or_one<T>(args.prob, r);
    std::vector<T> d(static_cast<size_t>(I));
    for (int64_t j = 0; j < I; ++j) {
      const GluColumns col = glu_columns(args.glu.layout, I, j);
      d[j] = prob * glu_eval<T, false>(args.glu, g[col.gate], g[col.up]).h;
    }
    put_row<T>(args.d, r, d.data(), I);
  });
}

template <class T>
void gemm_swiglu_impl(const GemmSwigluArgs& args) {
  const int64_t M = args.a.shape[0], N = args.ab12.shape[1], I = N / 2;
  require_glu_width(args.layout, N, "gemm_swiglu");
  const ExpertRows rows{{0}, {M}, M};
  const TaskList tl = make_tasks(rows);
  const GluParams swiglu{Activation::swiglu, args.layout};
  const T alpha = T(args.alpha);
  for_each_product<T>(
      args.a, N, rows, tl, [&](int64_t) { return dense_b(args.b, args.b_layout); },
      [&](int64_t, const RowTask& t, const T* p, int64_t ldp) {
        std::vector<T> g(static_cast<size_t>(N));
        for (int64_t r = t.row_begin; r < t.row_end; ++r) {
          const T* pr = p + (r - t.row_begin) * ldp;
          for (int64_t n = 0; n < N; ++n) {
            g[n] = alpha * pr[n];
            put<T>(args.ab12, r, n, g[n]);
          }
          for (int64_t j = 0; j < I; ++j) {
            const GluColumns col = glu_columns(args.layout, I, j);
            put<T>(args.c, r, j, glu_eval<T, false>(swiglu, g[col.gate], g[col.up]).h);
          }
        }
      });
}

}  // namespace

void run(const GroupedGemmGluArgs& args) {
  use_f64(args.a) ? grouped_gemm_glu_impl<double>(args) : grouped_gemm_glu_impl<float>(args);
}
void run(const GemmSwigluArgs& args) {
  use_f64(args.a) ? gemm_swiglu_impl<double>(args) : gemm_swiglu_impl<float>(args);
}

}  // namespace moegemm::reference
