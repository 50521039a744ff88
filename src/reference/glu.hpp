// Gated linear units of the CPU reference: which pre-activation columns pair up, and the activation with
// its partial derivatives (docs/ops.md §2, §3).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "moegemm/ops.hpp"
#include "reference/element.hpp"
#include "reference/numeric.hpp"

namespace moegemm::reference {

/// Pre-activation columns (gate, up) that feed output column j of an op with I output columns.
struct GluColumns {
  int64_t gate, up;
};
inline GluColumns glu_columns(GluLayout layout, int64_t I, int64_t j) {
  const int64_t block = j / 32, c = j % 32;
  switch (layout) {
    case GluLayout::halves: return {j, I + j};
    case GluLayout::interleaved32: return {64 * block + c, 64 * block + 32 + c};
    case GluLayout::interleaved32_up_first: return {64 * block + 32 + c, 64 * block + c};
  }
  return {j, I + j};
}

/// Interleaved layouts pair whole 32-column blocks; anything else would address columns past 2I.
inline void require_glu_width(GluLayout layout, int64_t two_i, const char* op) {
  if (layout != GluLayout::halves && two_i % 64 != 0)
    throw Error(ErrorCode::invalid_argument, std::string(op) +
                ": interleaved GLU layouts need the pre-activation width to be a multiple of 64, got " +
                std::to_string(two_i));
  if (two_i % 2 != 0)
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": GLU pre-activation width must be even, got " + std::to_string(two_i));
}

/// What a saved pre-activation of dtype t keeps of x next to a clamp bound (swiglu_clamped, docs/ops.md §2):
/// x itself where its rounding to t stays on x's side of `bound` (the clamp acts for x > bound when `above`,
/// else for x < bound); else the value of t next to that rounding, back on x's side. The dGLU of the saved
/// C then cuts off exactly the gradients the forward's clamps cut off, as autodiff of the forward does.
/// The forward computes D from the returned value too, as the kernels do. An unclamped x whose rounding is
/// infinite (past a bound beyond t's largest finite value) moves to that largest value. Where t has no finite
/// value on x's side (a clamped x next to a bound at or past t's largest finite value), x itself: C then
/// holds x's plain rounding, and no value of C lies further than that from G.
template <class T>
inline T saved_on_clamp_side(T x, T bound, bool above, DType t) {
  const T r = rounded_to(t, x);
  const bool clamped = above ? x > bound : x < bound;
  const bool saved_clamped = above ? r > bound : r < bound;
  if (clamped == saved_clamped) return x;
  const T moved = next_value(t, r, clamped == above);
  return std::isfinite(moved) ? moved : x;
}

/// h = act(gate, up) and, for the backward, dh/dgate and dh/dup.
template <class T>
struct GluValue {
  T h, d_gate, d_up;
  // Whether the gradient passes each clamp (swiglu_clamped; always for the other activations). Where it
  // does not, dC is 0 whatever dH is, as torch's clamp backward gives: a product with the zero derivative
  // would be NaN for an infinite or NaN dH.
  bool gate_passes = true, up_passes = true;
};

/// The activation of `p` at (gate, up). swiglu_clamped's gradient convention (docs/ops.md §3): the
/// gradient passes where the clamp is inactive *or at its boundary* (gate <= limit; -limit <= up <= limit),
/// and is zero strictly beyond it.
template <class T, bool kGrad>
inline GluValue<T> glu_eval(const GluParams& p, T gate, T up) {
  GluValue<T> v{};
  switch (p.activation) {
    case Activation::swiglu: {
      const T s = sigmoid(gate);
      v.h = gate * s * up;
      if (kGrad) {
        v.d_gate = up * s * (T(1) + gate * (T(1) - s));
        v.d_up = gate * s;
      }
      break;
    }
    case Activation::geglu: {
      v.h = gelu_tanh(gate) * up;
      if (kGrad) {
        v.d_gate = up * gelu_tanh_grad(gate);
        v.d_up = gelu_tanh(gate);
      }
      break;
    }
    case Activation::swiglu_clamped: {
      const T limit = T(p.limit), aa = T(p.act_alpha), lo = T(p.linear_offset);
      const T g = std::min(gate, limit);
      const T u = std::clamp(up, -limit, limit);
      const T s = sigmoid(aa * g);
      // g * s first (gpt-oss's order): for a gate below about -4e37 (f32), (u + lo) * g overflows to -inf,
      // and times s (0 there) would give NaN where h is -0. Likewise d_gate = (u + lo) * s * (1 + aa g (1 - s))
      // is formed as s + aa * (g s (1 - s)): aa * g overflows below about -2e38 (aa = 1.702).
      v.h = (u + lo) * (g * s);
      if (kGrad) {
        v.gate_passes = gate <= limit;
        v.up_passes = up >= -limit && up <= limit;
        v.d_gate = v.gate_passes ? (u + lo) * (s + aa * ((g * s) * (T(1) - s))) : T(0);
        v.d_up = v.up_passes ? g * s : T(0);
      }
      break;
    }
  }
  return v;
}

}  // namespace moegemm::reference
