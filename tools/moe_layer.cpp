#include "moe_layer.hpp"

#include <cmath>

#include "routing.hpp"

namespace moegemm::cli {

GluParams layer_glu() { return GluParams{Activation::swiglu, GluLayout::halves}; }

MoeLayer make_layer(const ModelPreset& s, Routing routing, Device device, uint64_t seed) {
  const int64_t M = s.rows(), E = s.experts, H = s.hidden, I = s.intermediate;
  MoeLayer L;
  L.shape = s;
  L.device = device;
  L.offsets = make_tensor(device, DType::i32, {E});
  L.x = make_tensor(device, DType::bf16, {M, H});
  L.dy = make_tensor(device, DType::bf16, {M, H});
  L.w13 = make_tensor(device, DType::bf16, {E, 2 * I, H});
  L.w2 = make_tensor(device, DType::bf16, {E, H, I});
  L.prob = make_tensor(device, DType::f32, {M});
  L.pre = make_tensor(device, DType::bf16, {M, 2 * I});
  L.h = make_tensor(device, DType::bf16, {M, I});
  L.y = make_tensor(device, DType::bf16, {M, H});
  L.dpre = make_tensor(device, DType::bf16, {M, 2 * I});
  L.dprob = make_tensor(device, DType::f32, {M});
  L.dx = make_tensor(device, DType::bf16, {M, H});
  L.dw13 = make_tensor(device, DType::f32, {E, 2 * I, H});
  L.dw2 = make_tensor(device, DType::f32, {E, H, I});
  // Routed once every tensor is allocated: routing samples each of the M rows, minutes for the largest
  // --tokens, and a layer that does not fit is reported at once.
  L.group_sizes = group_sizes(routing, M, E, seed);
  L.ends = end_offsets(L.group_sizes);
  copy_from_host(L.offsets.view.data, L.ends.data(), L.ends.size() * sizeof(int32_t), device);

  // Weights scaled by 1/sqrt(K) keep every GEMM result O(1), where bf16 tolerances mean something.
  const float up_scale = 1.0f / std::sqrt(float(H)), down_scale = 1.0f / std::sqrt(float(I));
  fill_synthetic(L.x.view, seed + 1, 1.0f);
  fill_synthetic(L.dy.view, seed + 2, 1.0f);
  fill_synthetic(L.w13.view, seed + 3, up_scale);
  fill_synthetic(L.w2.view, seed + 4, down_scale);
  fill_synthetic(L.prob.view, seed + 5, 0.45f, 0.5f);
  fill_synthetic(L.pre.view, seed + 6, 2.0f);
  fill_synthetic(L.h.view, seed + 7, 1.0f);
  fill_synthetic(L.y.view, seed + 8, 1.0f);
  fill_synthetic(L.dpre.view, seed + 9, 1.0f);
  fill_synthetic(L.dprob.view, seed + 10, 1.0f);
  fill_synthetic(L.dx.view, seed + 11, 1.0f);
  fill_synthetic(L.dw13.view, seed + 12, 1.0f);
  fill_synthetic(L.dw2.view, seed + 13, 1.0f);
  return L;
}

namespace {

ExpertWeights weights(const TensorView& w, BLayout layout) {
  ExpertWeights b;
  b.dense = w;
  b.layout = layout;
  return b;
}

// A step that calls `fn(args, ...)`; the arguments are captured by value (views only, no data).
template <class Args, class WsFn, class CallFn>
Step make_step(StepKind kind, const char* label, const char* function, int64_t m, int64_t n, int64_t k,
               std::vector<TensorView> outputs, const Args& args, WsFn ws, CallFn fn) {
  return Step{kind, label, function, m, n, k, std::move(outputs), [args, ws] { return ws(args); },
              [args, fn](void* w, std::size_t bytes, cudaStream_t stream) { fn(args, w, bytes, stream); }};
}

}  // namespace

std::vector<Step> layer_steps(const MoeLayer& L) {
  const int64_t M = L.shape.rows(), H = L.shape.hidden, I = L.shape.intermediate;
  std::vector<Step> steps;

  {
    GroupedGemmGluArgs a;
    a.a = L.x.view;
    a.b = weights(L.w13.view, BLayout::nk);
    a.offsets = L.offsets.view;
    a.prob = L.prob.view;
    a.glu = layer_glu();
    a.d = L.h.view;
    a.c = L.pre.view;
    steps.push_back(make_step(StepKind::up_glu, "up (glu)", "grouped_gemm_glu", M, 2 * I, H, {L.h.view, L.pre.view}, a, grouped_gemm_glu_workspace_bytes, grouped_gemm_glu));
  }
  {
    GroupedGemmArgs a;
    a.a = L.h.view;
    a.b = weights(L.w2.view, BLayout::nk);
    a.offsets = L.offsets.view;
    a.d = L.y.view;
    steps.push_back(make_step(StepKind::down, "down", "grouped_gemm", M, H, I, {L.y.view}, a, grouped_gemm_workspace_bytes, grouped_gemm));
  }
  {
    GroupedGemmDgluArgs a;
    a.a = L.dy.view;
    a.b = weights(L.w2.view, BLayout::kn);  // (E, K=H, N=I): dH = dy @ w2_g
    a.c = L.pre.view;
    a.offsets = L.offsets.view;
    a.prob = L.prob.view;
    a.glu = layer_glu();
    a.dc = L.dpre.view;
    a.dprob = L.dprob.view;
    steps.push_back(make_step(StepKind::dglu, "down dgrad (dglu)", "grouped_gemm_dglu", M, I, H, {L.dpre.view, L.dprob.view}, a, grouped_gemm_dglu_workspace_bytes, grouped_gemm_dglu));
  }
  {
    GroupedGemmArgs a;
    a.a = L.dpre.view;
    a.b = weights(L.w13.view, BLayout::kn);  // (E, K=2I, N=H): dx = dpre @ w13_g
    a.offsets = L.offsets.view;
    a.d = L.dx.view;
    steps.push_back(make_step(StepKind::dgrad_up, "up dgrad", "grouped_gemm", M, H, 2 * I, {L.dx.view}, a, grouped_gemm_workspace_bytes, grouped_gemm));
  }
  {
    GroupedGemmWgradArgs a;
    a.x = L.x.view;
    a.dy = L.dpre.view;
    a.offsets = L.offsets.view;
    a.w = L.dw13.view;  // (E, 2I, H): stored like w13
    a.transpose_output = true;
    steps.push_back(make_step(StepKind::wgrad_up, "up wgrad", "grouped_gemm_wgrad", H, 2 * I, M, {L.dw13.view}, a, grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad));
  }
  {
    GroupedGemmWgradArgs a;
    a.x = L.h.view;
    a.dy = L.dy.view;
    a.offsets = L.offsets.view;
    a.w = L.dw2.view;  // (E, H, I): stored like w2
    a.transpose_output = true;
    steps.push_back(make_step(StepKind::wgrad_down, "down wgrad", "grouped_gemm_wgrad", I, H, M, {L.dw2.view}, a, grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad));
  }
  return steps;
}

}  // namespace moegemm::cli
