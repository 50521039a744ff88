// Register-blocked kernel of the CPU reference GEMM (see packed_gemm.hpp).
#include "reference/packed_gemm.hpp"

#include <cstring>

namespace moegemm::reference {
namespace {

// Always inlined, so that each target clone below compiles it for its own vector width.
#if defined(__GNUC__)
#define MOEGEMM_REFERENCE_INLINE inline __attribute__((always_inline))
#else
#define MOEGEMM_REFERENCE_INLINE inline
#endif

// One kMR x kNR tile over the whole K, accumulated in kMR vectors of kNR lanes (GCC vector extensions:
// each clone maps them onto its own registers). Lane j only ever sees column j, in k order.
template <class T>
MOEGEMM_REFERENCE_INLINE void micro_tile(const T* a, int64_t lda, const T* strip, int64_t K, T* c, int64_t ldc) {
  typedef T Vec __attribute__((vector_size(kNR * sizeof(T))));
  Vec acc[kMR];
  for (int i = 0; i < kMR; ++i) acc[i] = Vec{} ;
  for (int64_t k = 0; k < K; ++k) {
    Vec b;
    std::memcpy(&b, strip + k * kNR, sizeof(Vec));
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) acc[i] += a[i * lda + k] * b;
  }
  for (int i = 0; i < kMR; ++i) std::memcpy(c + i * ldc, &acc[i], sizeof(Vec));
}

template <class T>
MOEGEMM_REFERENCE_INLINE void packed_gemm_impl(const T* a, int64_t lda, int64_t rows_padded, const PackedB<T>& b, T* c,
                             int64_t ldc) {
  for (int64_t s = 0; s < b.strips; ++s)
    for (int64_t r = 0; r < rows_padded; r += kMR)
      micro_tile(a + r * lda, lda, b.strip(s), b.K, c + r * ldc + s * kNR, ldc);
}

}  // namespace

// Wider vector units when the host has them; the choice is fixed per machine, so runs stay reproducible.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define MOEGEMM_REFERENCE_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
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
