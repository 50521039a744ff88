// The launcher's crossing interval of swiglu_clamped (src/sm90/clamp_crossing.hpp) against every f32 value
// around the limit: exactly the values whose rounding to nearest (the tests' own codec) lands on the other
// side of the limit are inside, and `to` is the 16-bit value next to that rounding on their side; but a
// clamped value whose neighbour on its side would be inf (docs/ops.md §2), and an unclamped one whose
// rounding is inf moves to the largest finite value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/float_codec.hpp"
#include "sm90/clamp_crossing.hpp"

namespace moegemm::testing {
namespace {

double rounded(bool bf16, double x) { return bf16 ? decode_bf16(encode_bf16(x)) : decode_f16(encode_f16(x)); }

TEST(ClampCrossing, HoldsExactlyTheValuesRoundingCarriesAcrossTheLimit) {
  for (bool bf16 : {true, false}) {
    for (float limit : {7.0f, 7.000732421875f, 7.015625f, 7.02f, 1.0f, 0.3f, 1000.5f, 1e-6f, 3.0e38f, 3.3899e38f,
                        3.4e38f, 65504.0f, 65510.0f, 65530.0f, 1e6f}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f16") + " limit " + std::to_string(limit));
      const sm90::ClampCrossing x = sm90::clamp_crossing(limit, bf16);
      const double largest = bf16 ? decode_bf16(0x7f7f) : decode_f16(0x7bff);
      // Every f32 from four 16-bit spacings below the limit to four above (bf16: 2^16 f32 per spacing).
      const double spacing =
          std::max(std::ldexp(1.0, std::ilogb(limit) - (bf16 ? 7 : 10)), std::ldexp(1.0, bf16 ? -133 : -24));
      int64_t inside = 0, wrong = 0;
      for (float v = static_cast<float>(limit - 4 * spacing); v <= limit + 4 * spacing;
           v = std::nextafter(v, INFINITY)) {
        const double rn = rounded(bf16, v);
        const bool crosses = (v > limit) != (rn > limit) && !(v > limit && rn == largest);
        const bool in = v >= x.lo && v <= x.hi;
        inside += in;
        if (in != crosses) {
          if (wrong++ < 3) ADD_FAILURE() << v << ": crosses " << crosses << ", inside " << in;
          continue;
        }
        if (!in) continue;
        // `to`: on v's side of the limit, a 16-bit value, the neighbour of rn (one spacing from it).
        const bool to_side = (x.to > limit) == (v > limit);
        const bool neighbour = std::isfinite(rn) ? std::fabs(x.to - rn) <= spacing * 1.0000001 : x.to == largest;
        if ((!to_side || rounded(bf16, x.to) != x.to || !neighbour) && wrong++ < 3) {
          ADD_FAILURE() << v << " -> " << x.to << " (rounds to " << rn << ")";
        }
      }
      EXPECT_EQ(wrong, 0);
      if (limit == 7.0f) EXPECT_GT(inside, 0);
    }
  }
}

TEST(ClampCrossing, EmptyForLimitsWithoutNeighbours) {
  for (float limit : {0.0f, -1.0f, INFINITY, NAN}) {
    const sm90::ClampCrossing x = sm90::clamp_crossing(limit, true);
    EXPECT_FALSE(x.lo <= x.hi) << limit;
  }
  // f16: above 65504 (the largest finite f16) there is only inf, and below it nothing rounds past it.
  const sm90::ClampCrossing x = sm90::clamp_crossing(65504.0f, false);
  EXPECT_FALSE(x.lo <= x.hi);
}

// Past f16's range every value from 65520 (halfway to 2^16, which rounds to inf) to the limit moves to 65504.
TEST(ClampCrossing, UnclampedValuesThatRoundToInfMoveToTheLargestFinite) {
  const sm90::ClampCrossing x = sm90::clamp_crossing(1e6f, false);
  EXPECT_EQ(x.lo, 65520.0f);
  EXPECT_EQ(x.hi, 1e6f);
  EXPECT_EQ(x.to, 65504.0f);
}

}  // namespace
}  // namespace moegemm::testing
