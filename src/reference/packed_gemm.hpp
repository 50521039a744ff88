// The dense GEMM core of the CPU reference: B converted once per expert to a compute-type panel packed in
// column strips, and a register-blocked kernel over row blocks of A. Each output element is the sum over
// k in ascending order, whatever the blocking or thread count, so results are bitwise reproducible.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/parallel.hpp"

namespace moegemm::reference {

/// Micro-tile: kMR rows x kNR columns of the product held in registers.
inline constexpr int kMR = 6;
inline constexpr int kNR = 16;

/// B (K, N) in the compute type, as ceil(N / kNR) strips of (K, kNR), zero-padded past N.
template <class T>
struct PackedB {
  int64_t K = 0, N = 0, strips = 0;
  std::vector<T> data;

  int64_t padded_n() const { return strips * kNR; }
  const T* strip(int64_t s) const { return data.data() + s * K * kNR; }

  /// Fill from get(k, n) -> T, the (K, N) view of B (whatever its storage).
  template <class Get>
  void pack(int64_t k, int64_t n, Get&& get) {
    K = k;
    N = n;
    strips = (n + kNR - 1) / kNR;
    data.assign(static_cast<size_t>(strips * K * kNR), T(0));
    parallel_for(strips, double(K) * kNR * 8, [&](int64_t s) {
      T* dst = data.data() + s * K * kNR;
      const int64_t n0 = s * kNR, w = std::min<int64_t>(kNR, N - n0);
      for (int64_t kk = 0; kk < K; ++kk)
        for (int64_t j = 0; j < w; ++j) dst[kk * kNR + j] = get(kk, n0 + j);
    });
  }
};

/// c[i, n] = sum_k a[i, k] * b[k, n] for i < rows_padded (a multiple of kMR) and n < b.padded_n().
/// a: row-major with leading dimension lda >= K; c: row-major with leading dimension ldc >= padded_n.
void packed_gemm(const float* a, int64_t lda, int64_t rows_padded, const PackedB<float>& b, float* c,
                 int64_t ldc);
void packed_gemm(const double* a, int64_t lda, int64_t rows_padded, const PackedB<double>& b, double* c,
                 int64_t ldc);

}  // namespace moegemm::reference
