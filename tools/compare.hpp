// The tolerance check of docs/ops.md §9 applied to one output of one op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moegemm::cli {

/// Tolerances that fit bf16 outputs of f32-accumulated GEMMs.
inline constexpr double kMaxRelFrobenius = 1e-2;
inline constexpr double kRtol = 2e-2;
inline constexpr double kAtol = 4e-2;

struct Comparison {
  std::string output;          ///< e.g. "D"
  int64_t elements = 0;
  double max_abs_err = 0;      ///< max |actual - expected|, in the output's units
  double rel_frobenius = 0;    ///< ||actual - expected||_F / ||expected||_F
  int64_t mismatches = 0;      ///< elements with |a - e| > atol * s + rtol * |e|, s = rms(expected); NaN counts
  bool passed = false;         ///< rel_frobenius < kMaxRelFrobenius and no mismatches
};

/// Compares `actual` with `expected` (same length). Scaling the absolute tolerance by the rms of the expected
/// values makes the check independent of the output's magnitude (wgrad sums grow with the rows).
Comparison compare(const std::string& output, const std::vector<double>& actual,
                   const std::vector<double>& expected);

/// Checks that every element of `actual` is exactly 0, as the contract requires of the weight gradient of an
/// expert with no rows (docs/ops.md §5): any other value, NaN included, is a mismatch. max_abs_err is the largest
/// |actual| and rel_frobenius its Frobenius norm (the expected norm being 0).
Comparison compare_zeros(const std::string& output, const std::vector<double>& actual);

}  // namespace moegemm::cli
