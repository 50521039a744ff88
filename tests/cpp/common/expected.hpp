// What a test expects of every element of an output, and the checker that enforces it: values close to
// a reference, exact values (load-bearing zeros), NaN (where a NaN input reaches the element), or
// "untouched" (still poisoned). The checker also
// requires row padding outside the view to keep its poison.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/host_tensor.hpp"
#include "common/poison.hpp"
#include "common/tolerance.hpp"

namespace moegemm::testing {

class Expected {
 public:
  enum Kind : uint8_t { kUntouched, kClose, kExact, kNan };

  explicit Expected(std::vector<int64_t> shape) : shape_(std::move(shape)) {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    value_.assign(static_cast<size_t>(n), 0.0);
    kind_.assign(static_cast<size_t>(n), kUntouched);
  }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return static_cast<int64_t>(value_.size()); }

  /// Row-major linear index of a multi-index.
  int64_t index(std::initializer_list<int64_t> idx) const {
    int64_t lin = 0, d = 0;
    for (int64_t i : idx) lin = lin * shape_[d++] + i;
    return lin;
  }
  void close(std::initializer_list<int64_t> idx, double v) { set(index(idx), kClose, v); }
  void exact(std::initializer_list<int64_t> idx, double v) { set(index(idx), kExact, v); }
  void untouched(std::initializer_list<int64_t> idx) { set(index(idx), kUntouched, 0.0); }
  void set(int64_t lin, Kind k, double v) {
    kind_[lin] = k;
    value_[lin] = v;
  }
  Kind kind(int64_t lin) const { return static_cast<Kind>(kind_[lin]); }
  double value(int64_t lin) const { return value_[lin]; }

 private:
  std::vector<int64_t> shape_;
  std::vector<double> value_;
  std::vector<uint8_t> kind_;
};

/// Checks `got` (poisoned before the call) against `want`:
///  - kClose elements: written, finite, within `tol` of the value (which must not be NaN); the whole set
///    within rel. Frobenius;
///  - kExact elements: exactly the value (0 compares equal to -0);
///  - kNan elements: written, and NaN (any NaN but the poison pattern);
///  - kUntouched elements and all row padding: still the poison pattern.
inline ::testing::AssertionResult matches(const HostTensor& got, const Expected& want, Tolerance tol) {
  if (got.shape() != want.shape()) return ::testing::AssertionFailure() << "shape mismatch";
  const int64_t n = want.numel();
  double ref_sq = 0, err_sq = 0;
  int64_t n_close = 0;
  for (int64_t i = 0; i < n; ++i)
    if (want.kind(i) == Expected::kClose) {
      ref_sq += want.value(i) * want.value(i);
      ++n_close;
    }
  const double scale = n_close ? std::sqrt(ref_sq / double(n_close)) : 1.0;
  std::ostringstream bad;
  int64_t n_bad = 0;
  auto report = [&](int64_t lin, const std::string& what) {
    if (n_bad++ < 8) bad << "\n  element " << lin << ": " << what;
  };
  std::vector<uint8_t> in_view(static_cast<size_t>(got.storage_elems()), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = got.offset_of_linear(i);
    in_view[off] = 1;
    const bool poisoned = is_poison(got, off);
    const double v = poisoned ? NAN : got.get_at(off);
    switch (want.kind(i)) {
      case Expected::kUntouched:
        if (!poisoned) report(i, "written (" + std::to_string(v) + ") but must be untouched");
        break;
      case Expected::kExact:
        if (poisoned || v != want.value(i))
          report(i, (poisoned ? std::string("not written") : "got " + std::to_string(v)) + ", want exactly " +
                        std::to_string(want.value(i)));
        break;
      case Expected::kNan:
        if (poisoned || !std::isnan(v))
          report(i, (poisoned ? std::string("not written") : "got " + std::to_string(v)) + ", want NaN");
        break;
      case Expected::kClose: {
        if (poisoned) {
          report(i, "not written");
          break;
        }
        const double r = want.value(i), d = v - r;
        if (std::isnan(r)) {  // NaN compares false with every tolerance: a NaN reference must be kNan
          report(i, "the reference value is NaN");
          break;
        }
        err_sq += d * d;
        if (!std::isfinite(v) || std::fabs(d) > tol.atol * scale + tol.rtol * std::fabs(r))
          report(i, "got " + std::to_string(v) + ", want " + std::to_string(r));
        break;
      }
    }
  }
  for (int64_t off = 0; off < got.storage_elems(); ++off)
    if (!in_view[off] && !is_poison(got, off)) report(-1, "padding at storage offset " + std::to_string(off) +
                                                              " was written");
  const double rel = ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  if (n_close && rel >= tol.rel_frobenius) {
    ++n_bad;
    bad << "\n  relative Frobenius error " << rel << " >= " << tol.rel_frobenius;
  }
  if (n_bad) return ::testing::AssertionFailure() << n_bad << " problem(s):" << bad.str();
  return ::testing::AssertionSuccess();
}

/// `want`, built from the reference output `ref` (same shape), with every kClose element where the reference
/// wrote a NaN expecting NaN instead (for inputs that hold NaN on purpose); *nan_count: how many. An element
/// the reference left poisoned stays kClose, and fails.
inline Expected nan_where_reference_is(Expected want, const HostTensor& ref, int64_t* nan_count) {
  *nan_count = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (want.kind(i) == Expected::kClose && std::isnan(want.value(i)) && !is_poison(ref, ref.offset_of_linear(i))) {
      want.set(i, Expected::kNan, 0.0);
      ++*nan_count;
    }
  return want;
}

inline ::testing::AssertionResult matches(const HostTensor& got, const Expected& want) {
  return matches(got, want, tolerance_for(got.dtype()));
}

}  // namespace moegemm::testing
