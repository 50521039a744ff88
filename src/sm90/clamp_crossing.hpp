// Where rounding swiglu_clamped's pre-activation to a 16-bit C would carry a value across the clamp limit
// (docs/ops.md §2, "C keeps each clamp's decision"). The launcher works the interval out once per launch;
// the GLU epilogue moves the values in it to the 16-bit value next to their rounding, on their own side.
#pragma once

#include <cmath>
#include <cstdint>

#include "reference/numeric.hpp"

namespace moegemm::sm90 {

/// f32 values x in [lo, hi] are on one side of `limit` (x > limit: clamped) and round to a 16-bit value on
/// the other; `to` is the 16-bit value next to that rounding on x's side. The lower bound -limit mirrors it
/// (-x in [lo, hi] -> -to), since rounding to nearest is odd-symmetric. lo > hi: nothing crosses.
struct ClampCrossing {
  float lo = INFINITY, hi = -INFINITY, to = 0.f;
};

/// The crossing interval of a positive, finite `limit` for C in bf16 (else f16). Round to nearest even
/// maps (below, mid) to below and (mid, above) to above, where below <= limit < above are the 16-bit values
/// around the limit and mid their midpoint; mid itself goes to whichever is even. So the values that cross
/// lie between the limit and mid. Past the largest finite 16-bit value, `above` is inf and mid lies halfway
/// to the next power of two (65520 for f16): unclamped values from mid to the limit, whose rounding is inf,
/// move down to the largest finite value; clamped ones, which would move up to inf, keep their rounding
/// (docs/ops.md §2).
inline ClampCrossing clamp_crossing(float limit, bool bf16) {
  using namespace moegemm::reference;
  auto bits_of = [&](float x) { return bf16 ? float_to_bf16(x) : float_to_f16(x); };
  auto value_of = [&](uint16_t h) { return bf16 ? bf16_to_float(h) : f16_to_float(h); };
  if (!(limit > 0.f) || !std::isfinite(limit)) return {};
  const uint16_t r = bits_of(limit);
  // Positive 16-bit values order as their bits: the neighbours are one bit pattern apart (inf after the
  // largest finite value).
  const uint16_t below = value_of(r) <= limit ? r : static_cast<uint16_t>(r - 1);
  const uint16_t above = static_cast<uint16_t>(below + 1);
  const float lo16 = value_of(below), hi16 = value_of(above);
  // inf's place in the rounding is 2^(emax + 1): 2^16 for f16, 2^128 for bf16.
  const double hi = std::isfinite(hi16) ? hi16 : (bf16 ? 0x1p128 : 0x1p16);
  const float mid = static_cast<float>((static_cast<double>(lo16) + hi) / 2);  // exact: one bit more
  const bool mid_goes_below = bits_of(mid) == below;
  if (limit < mid) {  // (limit, mid) rounds down to below <= limit although clamped: up to `above`
    if (!std::isfinite(hi16)) return {};
    return {std::nextafter(limit, INFINITY), mid_goes_below ? mid : std::nextafter(mid, -INFINITY), hi16};
  }
  // (mid, limit] rounds up to above > limit although not clamped: down to `below`
  return {mid_goes_below ? std::nextafter(mid, INFINITY) : mid, limit, lo16};
}

}  // namespace moegemm::sm90
