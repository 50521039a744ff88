// Comparison tolerances of docs/ops.md §9 by output dtype.
#pragma once

#include "moegemm/tensor.hpp"

namespace moegemm::testing {

/// Elementwise |got - ref| <= atol * scale + rtol * |ref|, where scale is the RMS of the reference
/// ("after scaling": inputs of any magnitude compare alike), and ||got - ref||_F / ||ref||_F < rel_frobenius.
struct Tolerance {
  double rtol, atol, rel_frobenius;
};

/// bf16 and f16: the spec's rtol 2e-2 / atol 4e-2 / Frobenius 1e-2. f32 and f64 outputs of an f32
/// accumulation: tight bounds that still allow summation-order differences.
inline Tolerance tolerance_for(DType out) {
  switch (out) {
    case DType::bf16:
    case DType::f16: return {2e-2, 4e-2, 1e-2};
    case DType::f32: return {1e-4, 1e-4, 1e-5};
    default: return {1e-9, 1e-9, 1e-10};
  }
}

}  // namespace moegemm::testing
