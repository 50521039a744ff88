#include "spot_check.hpp"

#include <cmath>

namespace moegemm::cli::spot {

std::vector<double> grouped_gemm(const Gemm& g) {
  const int64_t rows = static_cast<int64_t>(g.a.size()) / g.k;
  std::vector<double> out(static_cast<size_t>(rows * g.n), 0.0);
  int64_t r = 0;
  for (size_t e = 0; e < g.ends.size(); ++e) {
    const double* b = g.b.data() + e * g.n * g.k;
    for (; r < g.ends[e]; ++r)
      for (int64_t col = 0; col < g.n; ++col) {
        double acc = 0;
        for (int64_t kk = 0; kk < g.k; ++kk)
          acc += g.a[r * g.k + kk] * (g.layout == BLayout::nk ? b[col * g.k + kk] : b[kk * g.n + col]);
        out[r * g.n + col] = acc;
      }
  }
  return out;
}

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

std::vector<double> swiglu(const std::vector<double>& g, const std::vector<double>& prob, int64_t i) {
  const size_t rows = prob.size();
  std::vector<double> d(rows * i);
  for (size_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < i; ++j) {
      const double gate = g[r * 2 * i + j], up = g[r * 2 * i + i + j];
      d[r * i + j] = prob[r] * gate * sigmoid(gate) * up;
    }
  return d;
}

void dswiglu(const std::vector<double>& dh, const std::vector<double>& c, const std::vector<double>& prob,
             int64_t i, std::vector<double>& dc, std::vector<double>& dprob) {
  const size_t rows = prob.size();
  dc.assign(rows * 2 * i, 0.0);
  dprob.assign(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < i; ++j) {
      const double gate = c[r * 2 * i + j], up = c[r * 2 * i + i + j], s = sigmoid(gate);
      const double silu = gate * s, dsilu = s * (1.0 + gate * (1.0 - s)), g = dh[r * i + j];
      dc[r * 2 * i + j] = g * prob[r] * up * dsilu;
      dc[r * 2 * i + i + j] = g * prob[r] * silu;
      dprob[r] += silu * up * g;
    }
}

std::vector<double> wgrad_transposed(const std::vector<double>& x, const std::vector<double>& dy,
                                     const std::vector<int32_t>& ends, int64_t h, int64_t n) {
  std::vector<double> w(ends.size() * n * h, 0.0);
  int64_t begin = 0;
  for (size_t e = 0; e < ends.size(); ++e) {
    double* we = w.data() + e * n * h;
    for (int64_t r = begin; r < ends[e]; ++r)
      for (int64_t col = 0; col < n; ++col)
        for (int64_t hh = 0; hh < h; ++hh) we[col * h + hh] += x[r * h + hh] * dy[r * n + col];
    begin = ends[e];
  }
  return w;
}

}  // namespace moegemm::cli::spot
