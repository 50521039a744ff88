// Straightforward double-precision formulas of the ops (docs/ops.md), written as plain loops over the
// test's own host tensors. They are the expected values of the tests and share no code with the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/host_tensor.hpp"
#include "common/random_fill.hpp"
#include "moegemm/ops.hpp"

namespace moegemm::testing::naive {

/// Expert row ranges from raw offsets, each end clamped into [previous end, M].
struct Rows {
  std::vector<int64_t> begin, end;
  int64_t end_all = 0;
};
inline Rows rows(const HostTensor& offsets, int64_t M) {
  Rows r;
  int64_t prev = 0;
  for (int64_t g = 0; g < offsets.size(0); ++g) {
    int64_t e = static_cast<int64_t>(offsets(g));
    if (e < prev) e = prev;
    if (e > M) e = M;
    r.begin.push_back(prev);
    r.end.push_back(e);
    prev = e;
  }
  r.end_all = prev;
  return r;
}

/// (E, N, N) dense weights of `dtype` that are each the identity, so that a backward op's dH is its dY.
inline HostTensor identity_experts(DType dtype, int64_t e, int64_t n) {
  HostTensor eye(dtype, {e, n, n});
  for (int64_t g = 0; g < e; ++g)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) eye.set({g, i, j}, i == j ? 1.0 : 0.0);
  return eye;
}

/// How the expert weights are stored.
enum class BMode { dense_nk, dense_kn, ptrs_nk, ptrs_kn };

/// Expert weights B_g (N, K) in one storage mode, with random values in [-scale, scale].
struct Weights {
  BMode mode;
  int64_t E, N, K;
  HostTensor dense;
  std::vector<HostTensor> experts;
  HostTensor table;
  ExpertWeights ew;

  Weights(BMode m, DType dtype, int64_t e, int64_t n, int64_t k, uint64_t seed, double scale, int64_t row_pad = 0)
      : mode(m), E(e), N(n), K(k) {
    const bool nk = m == BMode::dense_nk || m == BMode::ptrs_nk;
    ew.layout = nk ? BLayout::nk : BLayout::kn;
    if (m == BMode::dense_nk || m == BMode::dense_kn) {
      dense = random_tensor(dtype, nk ? std::vector<int64_t>{E, N, K} : std::vector<int64_t>{E, K, N}, seed,
                            -scale, scale, row_pad);
      ew.dense = dense.view();
    } else {
      std::vector<const void*> ptrs;
      for (int64_t g = 0; g < E; ++g) {
        experts.push_back(random_tensor(dtype, nk ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N},
                                        seed + 7919 * (g + 1), -scale, scale));
        ptrs.push_back(experts.back().data());
      }
      table = pointer_table(ptrs);
      ew.ptrs = table.view();
      ew.n = N;
      ew.dtype = dtype;
    }
  }
  /// B_g[n, k]: the weight multiplying A[:, k] into output column n.
  double operator()(int64_t g, int64_t n, int64_t k) const {
    switch (mode) {
      case BMode::dense_nk: return dense(g, n, k);
      case BMode::dense_kn: return dense(g, k, n);
      case BMode::ptrs_nk: return experts[g](n, k);
      case BMode::ptrs_kn: return experts[g](k, n);
    }
    return 0;
  }
};

/// sum_k A[r, k] * B_g[n, k] in double.
template <class B>
inline double dot(const HostTensor& a, int64_t r, const B& b, int64_t g, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < a.size(1); ++k) s += a(r, k) * b(g, n, k);
  return s;
}

/// (M, N) table of dot(a, r, b, g(r), n) for every addressed row (rows of no expert stay 0).
template <class B>
inline std::vector<double> products(const HostTensor& a, const B& b, const Rows& rs, int64_t N) {
  std::vector<double> p(static_cast<size_t>(a.size(0) * N), 0.0);
  for (size_t g = 0; g < rs.end.size(); ++g)
    for (int64_t r = rs.begin[g]; r < rs.end[g]; ++r)
      for (int64_t n = 0; n < N; ++n) p[r * N + n] = dot(a, r, b, static_cast<int64_t>(g), n);
  return p;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x / (1.0 + std::exp(-x)); }
inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double relu(double x) { return x < 0 ? 0 : x; }  // keeps NaN, as torch.relu does

/// Pre-activation columns of output column j for a GLU layout (I output columns).
inline void glu_pair(GluLayout layout, int64_t I, int64_t j, int64_t& gate, int64_t& up) {
  if (layout == GluLayout::halves) {
    gate = j;
    up = I + j;
    return;
  }
  const int64_t first = (j / 32) * 64 + j % 32, second = first + 32;
  gate = layout == GluLayout::interleaved32 ? first : second;
  up = layout == GluLayout::interleaved32 ? second : first;
}

/// act(gate, up) of a GluParams, double precision.
inline double glu(const GluParams& p, double gate, double up) {
  switch (p.activation) {
    case Activation::swiglu: return silu(gate) * up;
    case Activation::geglu: return gelu_tanh(gate) * up;
    case Activation::swiglu_clamped: {
      const double g = std::min<double>(gate, p.limit);
      const double u = std::max<double>(-p.limit, std::min<double>(up, p.limit));
      return (u + p.linear_offset) * g * sigmoid(p.act_alpha * g);
    }
  }
  return 0;
}

/// Partial derivatives of glu() by central differences of the double formula away from the clamp
/// boundary, and the inclusive convention (gradient passes at the boundary, zero beyond) at it.
inline void glu_grad(const GluParams& p, double gate, double up, double& d_gate, double& d_up) {
  const double h = 1e-6;
  if (p.activation == Activation::swiglu_clamped) {
    // Inside or at the clamp: differentiate the unclamped smooth formula; beyond: zero.
    GluParams q = p;
    q.limit = 1e30f;
    d_gate = gate <= p.limit ? (glu(q, gate + h, std::clamp<double>(up, -p.limit, p.limit)) -
                                glu(q, gate - h, std::clamp<double>(up, -p.limit, p.limit))) / (2 * h)
                             : 0.0;
    const double g = std::min<double>(gate, p.limit);
    d_up = (up >= -p.limit && up <= p.limit) ? (glu(q, g, up + h) - glu(q, g, up - h)) / (2 * h) : 0.0;
    return;
  }
  d_gate = (glu(p, gate + h, up) - glu(p, gate - h, up)) / (2 * h);
  d_up = (glu(p, gate, up + h) - glu(p, gate, up - h)) / (2 * h);
}

}  // namespace moegemm::testing::naive
