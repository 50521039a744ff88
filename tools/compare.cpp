#include "compare.hpp"

#include <cmath>

namespace moegemm::cli {
namespace {

// The largest |error| so far: a NaN stays, whatever comes after it; inf is larger than any finite value.
void track_max(double& max_abs_err, double d) {
  if (std::isnan(max_abs_err)) return;
  if (std::isnan(d) || d > max_abs_err) max_abs_err = d;
}

}  // namespace

Comparison compare(const std::string& output, const std::vector<double>& actual,
                   const std::vector<double>& expected) {
  Comparison c;
  c.output = output;
  c.elements = static_cast<int64_t>(expected.size());
  double sum_e2 = 0, sum_d2 = 0;
  for (double e : expected) sum_e2 += e * e;
  const double scale = expected.empty() || sum_e2 == 0 ? 1.0 : std::sqrt(sum_e2 / double(expected.size()));
  bool finite = true;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double d = std::abs(actual[i] - expected[i]);
    if (!std::isfinite(d)) finite = false;
    sum_d2 += d * d;
    if (!(d <= kAtol * scale + kRtol * std::abs(expected[i]))) ++c.mismatches;  // NaN fails too
    track_max(c.max_abs_err, d);
  }
  c.rel_frobenius = sum_e2 > 0 ? std::sqrt(sum_d2 / sum_e2) : std::sqrt(sum_d2);
  c.passed = finite && c.rel_frobenius < kMaxRelFrobenius && c.mismatches == 0;
  return c;
}

Comparison compare_zeros(const std::string& output, const std::vector<double>& actual) {
  Comparison c;
  c.output = output;
  c.elements = static_cast<int64_t>(actual.size());
  double sum2 = 0;
  for (double a : actual) {
    const double d = std::abs(a);
    sum2 += d * d;
    if (!(a == 0)) ++c.mismatches;  // NaN counts
    track_max(c.max_abs_err, d);
  }
  c.rel_frobenius = std::sqrt(sum2);
  c.passed = c.mismatches == 0;
  return c;
}

}  // namespace moegemm::cli
