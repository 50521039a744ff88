// Double-precision math of the layer's ops, written independently of the CPU reference so that it can check the
// reference itself (the CPU backend) on sampled rows. Inputs are host bf16 values widened to double.
#pragma once

#include <cstdint>
#include <vector>

#include "moegemm/ops.hpp"

namespace moegemm::cli::spot {

/// A small grouped problem: rows grouped by `ends` (cumulative, one per expert), experts' weights in `b`
/// of shape (E, N, K) for BLayout::nk or (E, K, N) for BLayout::kn.
struct Gemm {
  const std::vector<double>& a;  ///< (S, K)
  const std::vector<double>& b;
  BLayout layout;
  const std::vector<int32_t>& ends;
  int64_t n, k;
};

/// G[r, :] = A[r, :] @ B_g^T (or A @ B_g for kn), (S, N).
std::vector<double> grouped_gemm(const Gemm& g);

/// swiglu with halves pairing: D[r, j] = prob[r] * silu(G[r, j]) * G[r, I + j]; G is (S, 2I), D (S, I).
std::vector<double> swiglu(const std::vector<double>& g, const std::vector<double>& prob, int64_t i);

/// Backward of swiglu (halves): from dH (S, I), the saved pre-activation C (S, 2I) and prob (S,):
/// dC (S, 2I) = [dH*prob*up*silu'(gate), dH*prob*silu(gate)] and dprob (S,) = sum_j silu(gate)*up*dH.
void dswiglu(const std::vector<double>& dh, const std::vector<double>& c, const std::vector<double>& prob,
             int64_t i, std::vector<double>& dc, std::vector<double>& dprob);

/// W_g (N, H) = (X[rows_g]^T @ dY[rows_g])^T for each expert of `ends`: X (R, H), dY (R, N) -> (E, N, H).
std::vector<double> wgrad_transposed(const std::vector<double>& x, const std::vector<double>& dy,
                                     const std::vector<int32_t>& ends, int64_t h, int64_t n);

}  // namespace moegemm::cli::spot
