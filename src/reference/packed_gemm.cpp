// Register-blocked kernel of the CPU reference GEMM (see packed_gemm.hpp).
#include "reference/packed_gemm.hpp"

namespace moegemm::reference {
namespace {

// One kMR x kNR tile over the whole K. Fixed trip counts let the compiler keep `acc` in vector registers.
template <class T>
inline void micro_tile(const T* a, int64_t lda, const T* strip, int64_t K, T* c, int64_t ldc) {
  T acc[kMR][kNR] = {};
  for (int64_t k = 0; k < K; ++k) {
    const T* bk = strip + k * kNR;
    for (int i = 0; i < kMR; ++i) {
      const T ai = a[i * lda + k];
      for (int j = 0; j < kNR; ++j) acc[i][j] += ai * bk[j];
    }
  }
  for (int i = 0; i < kMR; ++i)
    for (int j = 0; j < kNR; ++j) c[i * ldc + j] = acc[i][j];
}

template <class T>
inline void packed_gemm_impl(const T* a, int64_t lda, int64_t rows_padded, const PackedB<T>& b, T* c,
                             int64_t ldc) {
  for (int64_t s = 0; s < b.strips; ++s)
    for (int64_t r = 0; r < rows_padded; r += kMR)
      micro_tile(a + r * lda, lda, b.strip(s), b.K, c + r * ldc + s * kNR, ldc);
}

}  // namespace

// Wider vector units when the host has them; the choice is fixed per machine, so runs stay reproducible.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define MOEGEMM_REFERENCE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MOEGEMM_REFERENCE_CLONES
#endif

MOEGEMM_REFERENCE_CLONES
void packed_gemm(const float* a, int64_t lda, int64_t rows_padded, const PackedB<float>& b, float* c,
                 int64_t ldc) {
  packed_gemm_impl(a, lda, rows_padded, b, c, ldc);
}

MOEGEMM_REFERENCE_CLONES
void packed_gemm(const double* a, int64_t lda, int64_t rows_padded, const PackedB<double>& b, double* c,
                 int64_t ldc) {
  packed_gemm_impl(a, lda, rows_padded, b, c, ldc);
}

}  // namespace moegemm::reference
