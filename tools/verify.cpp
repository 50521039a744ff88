#include "verify.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <cuda_bf16.h>

#include "sample.hpp"
#include "spot_check.hpp"

namespace moegemm::cli {

const char* oracle_name(Oracle o) { return o == Oracle::reference ? "cpu reference" : "double spot check"; }

bool Verification::passed() const {
  return std::all_of(outputs.begin(), outputs.end(), [](const Comparison& c) { return c.passed; });
}

double Verification::max_abs_err() const {
  double m = 0;
  for (const auto& c : outputs) {
    if (std::isnan(c.max_abs_err)) return c.max_abs_err;  // std::max would drop a NaN error
    m = std::max(m, c.max_abs_err);
  }
  return m;
}

namespace {

using bf16 = __nv_bfloat16;

// Host views of the small problem's operands. The reference reads them through the public API (host tensors
// select the CPU backend), so the small problem also passes the contract checks.
TensorView host_view(const void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(const_cast<void*>(data), dtype, shape, Device::host);
}

// Experts' GEMMs of the sampled rows cost rows*N*K multiply-adds on one host core: keep that near 2^29.
int64_t row_budget(int64_t n, int64_t k) { return std::clamp<int64_t>((int64_t(1) << 29) / (n * k), 16, 96); }

constexpr int kGemmExperts = 6;
constexpr int kWgradExperts = 3;

struct Sampled {
  RowSample s;
  std::vector<bf16> a;  // (S, K)
  std::vector<bf16> b;  // experts' weights
};

Sampled sample_gemm(const MoeLayer& L, const TensorView& a, const TensorView& w, int64_t n, uint64_t seed) {
  Sampled p;
  p.s = sample_rows(L.ends, kGemmExperts, row_budget(n, a.shape[1]), seed);
  p.a = gather_rows<bf16>(a, p.s.rows);
  p.b = gather_experts<bf16>(w, p.s.experts);
  return p;
}

Verification finish(Oracle oracle, const RowSample& s, std::vector<Comparison> outputs) {
  Verification v;
  v.oracle = oracle;
  v.rows = static_cast<int64_t>(s.rows.size());
  v.experts = static_cast<int64_t>(s.experts.size());
  v.outputs = std::move(outputs);
  return v;
}

std::vector<double> run_reference_gemm(const Sampled& p, BLayout layout, int64_t n, int64_t k) {
  const int64_t S = static_cast<int64_t>(p.s.rows.size()), E = static_cast<int64_t>(p.s.experts.size());
  std::vector<float> d(S * n);
  GroupedGemmArgs args;
  args.a = host_view(p.a.data(), DType::bf16, {S, k});
  args.b.dense = layout == BLayout::nk ? host_view(p.b.data(), DType::bf16, {E, n, k})
                                       : host_view(p.b.data(), DType::bf16, {E, k, n});
  args.b.layout = layout;
  args.offsets = host_view(p.s.ends.data(), DType::i32, {E});
  args.d = host_view(d.data(), DType::f32, {S, n});
  std::vector<char> ws(grouped_gemm_workspace_bytes(args));
  grouped_gemm(args, ws.data(), ws.size(), nullptr);
  return widen(d);
}

Verification verify_gemm(const MoeLayer& L, const TensorView& a, const TensorView& w, BLayout layout,
                         const TensorView& d, Oracle oracle, uint64_t seed) {
  const int64_t k = a.shape[1], n = d.shape[1];
  const Sampled p = sample_gemm(L, a, w, n, seed);
  const std::vector<double> actual = widen(gather_rows<bf16>(d, p.s.rows));
  std::vector<double> expected;
  if (oracle == Oracle::reference) {
    expected = run_reference_gemm(p, layout, n, k);
  } else {
    const auto av = widen(p.a), bv = widen(p.b);
    expected = spot::grouped_gemm({av, bv, layout, p.s.ends, n, k});
  }
  return finish(oracle, p.s, {compare("D", actual, expected)});
}

Verification verify_glu(const MoeLayer& L, Oracle oracle, uint64_t seed) {
  const int64_t I = L.shape.intermediate, K = L.shape.hidden;
  const Sampled p = sample_gemm(L, L.x.view, L.w13.view, 2 * I, seed);
  const int64_t S = static_cast<int64_t>(p.s.rows.size()), E = static_cast<int64_t>(p.s.experts.size());
  const std::vector<float> prob = gather_rows<float>(L.prob.view, p.s.rows);
  const auto d_actual = widen(gather_rows<bf16>(L.h.view, p.s.rows));
  const auto c_actual = widen(gather_rows<bf16>(L.pre.view, p.s.rows));
  std::vector<double> d_expected, c_expected;
  if (oracle == Oracle::reference) {
    std::vector<float> d(S * I), c(S * 2 * I);
    GroupedGemmGluArgs args;
    args.a = host_view(p.a.data(), DType::bf16, {S, K});
    args.b.dense = host_view(p.b.data(), DType::bf16, {E, 2 * I, K});
    args.offsets = host_view(p.s.ends.data(), DType::i32, {E});
    args.prob = host_view(prob.data(), DType::f32, {S});
    args.glu = layer_glu();
    args.d = host_view(d.data(), DType::f32, {S, I});
    args.c = host_view(c.data(), DType::f32, {S, 2 * I});
    std::vector<char> ws(grouped_gemm_glu_workspace_bytes(args));
    grouped_gemm_glu(args, ws.data(), ws.size(), nullptr);
    d_expected = widen(d);
    c_expected = widen(c);
  } else {
    const auto av = widen(p.a), bv = widen(p.b);
    c_expected = spot::grouped_gemm({av, bv, BLayout::nk, p.s.ends, 2 * I, K});
    d_expected = spot::swiglu(c_expected, widen(prob), I);
  }
  return finish(oracle, p.s, {compare("D", d_actual, d_expected), compare("C", c_actual, c_expected)});
}

Verification verify_dglu(const MoeLayer& L, Oracle oracle, uint64_t seed) {
  const int64_t I = L.shape.intermediate, K = L.shape.hidden;
  const Sampled p = sample_gemm(L, L.dy.view, L.w2.view, I, seed);  // w2 (E, H, I) read as kn: K = H, N = I
  const int64_t S = static_cast<int64_t>(p.s.rows.size()), E = static_cast<int64_t>(p.s.experts.size());
  const std::vector<float> prob = gather_rows<float>(L.prob.view, p.s.rows);
  const std::vector<bf16> c = gather_rows<bf16>(L.pre.view, p.s.rows);
  const auto dc_actual = widen(gather_rows<bf16>(L.dpre.view, p.s.rows));
  const auto dprob_actual = widen(gather_rows<float>(L.dprob.view, p.s.rows));
  std::vector<double> dc_expected, dprob_expected;
  if (oracle == Oracle::reference) {
    std::vector<float> dc(S * 2 * I), dprob(S);
    GroupedGemmDgluArgs args;
    args.a = host_view(p.a.data(), DType::bf16, {S, K});
    args.b.dense = host_view(p.b.data(), DType::bf16, {E, K, I});
    args.b.layout = BLayout::kn;
    args.c = host_view(c.data(), DType::bf16, {S, 2 * I});
    args.offsets = host_view(p.s.ends.data(), DType::i32, {E});
    args.prob = host_view(prob.data(), DType::f32, {S});
    args.glu = layer_glu();
    args.dc = host_view(dc.data(), DType::f32, {S, 2 * I});
    args.dprob = host_view(dprob.data(), DType::f32, {S});
    std::vector<char> ws(grouped_gemm_dglu_workspace_bytes(args));
    grouped_gemm_dglu(args, ws.data(), ws.size(), nullptr);
    dc_expected = widen(dc);
    dprob_expected = widen(dprob);
  } else {
    const auto av = widen(p.a), bv = widen(p.b);
    const auto dh = spot::grouped_gemm({av, bv, BLayout::kn, p.s.ends, I, K});
    spot::dswiglu(dh, widen(c), widen(prob), I, dc_expected, dprob_expected);
  }
  return finish(oracle, p.s, {compare("dC", dc_actual, dc_expected), compare("dprob", dprob_actual, dprob_expected)});
}

// wgrad reduces over every row of an expert: sample experts whole, and a block of the weight entries
// (16 of the H columns of X, 64 of the N columns of dY).
Verification verify_wgrad(const MoeLayer& L, const TensorView& x, const TensorView& dy, const TensorView& w,
                          Oracle oracle, uint64_t seed) {
  const int64_t H = x.shape[1], N = dy.shape[1];
  RowSample s = sample_rows(L.ends, kWgradExperts, 0, seed);
  s.rows.clear();
  s.ends.clear();
  for (int64_t e : s.experts) {
    const int64_t lo = e == 0 ? 0 : L.ends[e - 1];
    for (int64_t r = lo; r < L.ends[e]; ++r) s.rows.push_back(r);
    s.ends.push_back(static_cast<int32_t>(s.rows.size()));
  }
  const std::vector<int64_t> hs = sample_columns(H, 16, seed + 1), ns = sample_columns(N, 64, seed + 2);
  const int64_t R = static_cast<int64_t>(s.rows.size()), E = static_cast<int64_t>(s.experts.size());
  const int64_t Hs = static_cast<int64_t>(hs.size()), Ns = static_cast<int64_t>(ns.size());
  const std::vector<bf16> xs = select_columns(gather_rows<bf16>(x, s.rows), H, hs);
  const std::vector<bf16> dys = select_columns(gather_rows<bf16>(dy, s.rows), N, ns);

  std::vector<int64_t> w_rows;  // rows of w flattened to (E*N, H) holding the sampled entries
  for (int64_t e : s.experts)
    for (int64_t n : ns) w_rows.push_back(e * N + n);
  const auto actual = widen(select_columns(gather_rows<float>(flatten_experts(w), w_rows), H, hs));

  std::vector<double> expected;
  if (oracle == Oracle::reference) {
    std::vector<float> out(E * Ns * Hs);
    GroupedGemmWgradArgs args;
    args.x = host_view(xs.data(), DType::bf16, {R, Hs});
    args.dy = host_view(dys.data(), DType::bf16, {R, Ns});
    args.offsets = host_view(s.ends.data(), DType::i32, {E});
    args.w = host_view(out.data(), DType::f32, {E, Ns, Hs});
    args.transpose_output = true;
    std::vector<char> ws(grouped_gemm_wgrad_workspace_bytes(args));
    grouped_gemm_wgrad(args, ws.data(), ws.size(), nullptr);
    expected = widen(out);
  } else {
    expected = spot::wgrad_transposed(widen(xs), widen(dys), s.ends, Hs, Ns);
  }
  std::vector<Comparison> outputs{compare("W", actual, expected)};
  // Experts with no rows must read exactly 0, written by the op (the bug of cases C01, C02, C12): the same block
  // of entries of the first such expert and of a random other one.
  std::vector<int64_t> empty;
  for (size_t e = 0; e < L.ends.size(); ++e)
    if (L.ends[e] == (e == 0 ? 0 : L.ends[e - 1])) empty.push_back(static_cast<int64_t>(e));
  if (!empty.empty()) {
    std::vector<int64_t> picked{empty.front()};
    if (empty.size() > 1) picked.push_back(empty[1 + (seed + 3) % (empty.size() - 1)]);
    std::vector<int64_t> zero_rows;
    for (int64_t e : picked)
      for (int64_t n : ns) zero_rows.push_back(e * N + n);
    const auto zeros = select_columns(gather_rows<float>(flatten_experts(w), zero_rows), H, hs);
    outputs.push_back(compare_zeros("W of empty experts", widen(zeros)));
  }
  return finish(oracle, s, std::move(outputs));
}

}  // namespace

Verification verify_step(const MoeLayer& L, const Step& step, Oracle oracle, uint64_t seed) {
  switch (step.kind) {
    case StepKind::up_glu: return verify_glu(L, oracle, seed);
    case StepKind::down: return verify_gemm(L, L.h.view, L.w2.view, BLayout::nk, L.y.view, oracle, seed);
    case StepKind::dglu: return verify_dglu(L, oracle, seed);
    case StepKind::dgrad_up: return verify_gemm(L, L.dpre.view, L.w13.view, BLayout::kn, L.dx.view, oracle, seed);
    case StepKind::wgrad_up: return verify_wgrad(L, L.x.view, L.dpre.view, L.dw13.view, oracle, seed);
    case StepKind::wgrad_down: return verify_wgrad(L, L.h.view, L.dy.view, L.dw2.view, oracle, seed);
  }
  throw Error(ErrorCode::internal, "verify_step: unknown step");
}

}  // namespace moegemm::cli
