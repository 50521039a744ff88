// The launcher's crossing interval of swiglu_clamped (src/sm90/clamp_crossing.hpp) against every f32 value
// around the limit: exactly the values whose rounding to nearest (the tests' own codec) lands on the other
// side of the limit are inside, and `to` is the 16-bit value next to that rounding on their side.
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
    for (float limit : {7.0f, 7.000732421875f, 7.015625f, 7.02f, 1.0f, 0.3f, 1000.5f, 1e-6f, 3.0e38f}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f16") + " limit " + std::to_string(limit));
      const sm90::ClampCrossing x = sm90::clamp_crossing(limit, bf16);
      // Every f32 from four 16-bit spacings below the limit to four above (bf16: 2^16 f32 per spacing).
      const double spacing =
          std::max(std::ldexp(1.0, std::ilogb(limit) - (bf16 ? 7 : 10)), std::ldexp(1.0, bf16 ? -133 : -24));
      int64_t inside = 0, wrong = 0;
      for (float v = static_cast<float>(limit - 4 * spacing); v <= limit + 4 * spacing;
           v = std::nextafter(v, INFINITY)) {
        const double rn = rounded(bf16, v);
        const bool crosses = std::isfinite(rn) && (v > limit) != (rn > limit);
        const bool in = v >= x.lo && v <= x.hi;
        inside += in;
        if (in != crosses) {
          if (wrong++ < 3) ADD_FAILURE() << v << ": crosses " << crosses << ", inside " << in;
          continue;
        }
        if (!in) continue;
        // `to`: on v's side of the limit, a 16-bit value, the neighbour of rn (one spacing from it).
        const bool to_side = (x.to > limit) == (v > limit);
        if ((!to_side || rounded(bf16, x.to) != x.to || std::fabs(x.to - rn) > spacing * 1.0000001) &&
            wrong++ < 3) {
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
  // f16: 1e6 rounds to inf, and above 65504 (the largest finite f16) there is only inf.
  for (float limit : {1e6f, 65504.0f}) {
    const sm90::ClampCrossing x = sm90::clamp_crossing(limit, false);
    EXPECT_FALSE(x.lo <= x.hi) << limit;
  }
}

}  // namespace
}  // namespace moegemm::testing
