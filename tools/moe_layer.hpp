// One MoE MLP layer, forward and backward, as a sequence of moegemm ops over tensors of one backend.
//
// Forward:  pre = x @ w13_g^T (C of grouped_gemm_glu), h = prob * silu(pre_gate) * pre_up (its D),
//           y = h @ w2_g^T (grouped_gemm).
// Backward: dpre, dprob = grouped_gemm_dglu(dy, w2 seen as (E, H, I) "kn", pre, prob);
//           dx = grouped_gemm(dpre, w13 seen as (E, 2I, H) "kn");
//           dw13 = grouped_gemm_wgrad(x, dpre), dw2 = grouped_gemm_wgrad(h, dy), both stored like the weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moegemm/ops.hpp"
#include "routing.hpp"
#include "tensor_store.hpp"
#include "workloads.hpp"

namespace moegemm::cli {

/// The ops of one layer in the order they run.
enum class StepKind { up_glu, down, dglu, dgrad_up, wgrad_up, wgrad_down };
inline constexpr int kStepCount = 6;

struct MoeLayer {
  ModelPreset shape;                ///< the (possibly reduced) layer shape
  Device device = Device::host;
  std::vector<int64_t> group_sizes; ///< rows per expert
  std::vector<int32_t> ends;        ///< cumulative ends (host copy of `offsets`)
  OwnedTensor offsets;              ///< (E,) i32
  OwnedTensor x, dy;                ///< (M, H) bf16 inputs: activations and incoming gradient
  OwnedTensor w13;                  ///< (E, 2I, H) bf16: gate rows [0, I), up rows [I, 2I)
  OwnedTensor w2;                   ///< (E, H, I) bf16
  OwnedTensor prob;                 ///< (M,) f32 router probabilities in (0, 1)
  OwnedTensor pre, h, y;            ///< forward outputs (M, 2I), (M, I), (M, H) bf16
  OwnedTensor dpre, dprob, dx;      ///< (M, 2I) bf16, (M,) f32, (M, H) bf16
  OwnedTensor dw13, dw2;            ///< (E, 2I, H), (E, H, I) f32
};

/// Allocates the layer on `device`, routes its rows to experts (`routing`, `seed`: group_sizes) and fills
/// every tensor (outputs too, so that a step whose op has no kernel still leaves valid inputs for the steps
/// after it) with seeded synthetic data.
MoeLayer make_layer(const ModelPreset& shape, Routing routing, Device device, uint64_t seed);

/// One op call of the layer: its GEMM shape (FLOPs = 2*m*n*k), outputs, workspace query and launch.
struct Step {
  StepKind kind;
  std::string label;     ///< e.g. "up (glu)"
  std::string function;  ///< the moegemm function, e.g. "grouped_gemm_glu"
  int64_t m = 0, n = 0, k = 0;
  std::vector<TensorView> outputs;
  std::function<std::size_t()> workspace_bytes;
  std::function<void(void*, std::size_t, cudaStream_t)> call;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

/// The six steps over `layer` (which must outlive them).
std::vector<Step> layer_steps(const MoeLayer& layer);

/// The GLU parameters the layer uses (swiglu, halves).
GluParams layer_glu();

}  // namespace moegemm::cli
