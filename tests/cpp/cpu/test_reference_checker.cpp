// The test utilities can fail: the output checker rejects unwritten, stray, padding and inexact writes,
// a NaN reference where a value is due and a finite value where NaN is due, and the offsets helper builds
// cumulative ends.
#include <gtest/gtest.h>

#include "common/expected.hpp"
#include "common/offsets.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"

namespace moegemm::testing {
namespace {

struct CheckerFixture : ::testing::Test {
  HostTensor out{DType::bf16, {3, 4}, 2};  // 2 padding elements after each row
  Expected want{{3, 4}};
  void SetUp() override {
    poison(out);
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 4; ++c) {
        out.set({r, c}, 0.5 + r + 0.25 * c);
        want.close({r, c}, 0.5 + r + 0.25 * c);
      }
  }
};

TEST_F(CheckerFixture, AcceptsExactlyTheExpectedWrites) { EXPECT_TRUE(matches(out, want)); }

TEST_F(CheckerFixture, RejectsAnUnwrittenElement) {
  out.set_bits_at(out.offset({1, 2}), poison_bits(DType::bf16));
  EXPECT_FALSE(matches(out, want));
}

TEST_F(CheckerFixture, RejectsAWriteToAnUntouchedRow) {
  out.set({2, 0}, 1.0);
  EXPECT_FALSE(matches(out, want));
}

TEST_F(CheckerFixture, RejectsAWriteIntoRowPadding) {
  out.set_bits_at(out.offset({0, 3}) + 1, 0);
  EXPECT_FALSE(matches(out, want));
}

TEST_F(CheckerFixture, RejectsAValueOutsideTolerance) {
  out.set({0, 1}, 0.75 * 1.1);
  EXPECT_FALSE(matches(out, want));
}

TEST_F(CheckerFixture, ExactRejectsNearValues) {
  for (int64_t c = 0; c < 4; ++c) want.exact({2, c}, 0.0);
  for (int64_t c = 0; c < 4; ++c) out.set({2, c}, c == 3 ? 1e-3 : 0.0);
  EXPECT_FALSE(matches(out, want));
  out.set({2, 3}, -0.0);
  EXPECT_TRUE(matches(out, want));
}

TEST_F(CheckerFixture, CloseRejectsANanReference) {
  want.close({0, 0}, NAN);
  EXPECT_FALSE(matches(out, want));
}

TEST_F(CheckerFixture, NanWantsAWrittenNan) {
  HostTensor ref{DType::bf16, {3, 4}, 2};
  poison(ref);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 4; ++c) ref.set({r, c}, r == 1 && c == 2 ? NAN : 0.5 + r + 0.25 * c);
  want.close({1, 2}, NAN);
  int64_t nans = 0;
  const Expected with_nan = nan_where_reference_is(want, ref, &nans);
  EXPECT_EQ(nans, 1);
  EXPECT_FALSE(matches(out, with_nan));  // a finite value where NaN is due
  out.set({1, 2}, NAN);
  EXPECT_TRUE(matches(out, with_nan));
  out.set_bits_at(out.offset({1, 2}), poison_bits(DType::bf16));
  EXPECT_FALSE(matches(out, with_nan));  // the poison is a NaN, but not a written one
  // A reference that left the element poisoned does not turn the expectation into NaN.
  ref.set_bits_at(ref.offset({1, 2}), poison_bits(DType::bf16));
  EXPECT_EQ(nan_where_reference_is(want, ref, &nans).kind(want.index({1, 2})), Expected::kClose);
  EXPECT_EQ(nans, 0);
}

TEST(TestUtilities, OffsetsAreCumulativeEnds) {
  HostTensor o = offsets_from_sizes({3, 0, 5, 1});
  EXPECT_EQ(o(0), 3);
  EXPECT_EQ(o(1), 3);
  EXPECT_EQ(o(2), 8);
  EXPECT_EQ(o(3), 9);
  const std::vector<int64_t> sizes = random_group_sizes(64, 1000, 7, 0.5);
  int64_t total = 0, empty = 0;
  for (int64_t s : sizes) {
    total += s;
    empty += s == 0;
  }
  EXPECT_EQ(total, 1000);
  EXPECT_GT(empty, 10);
}

TEST(TestUtilities, RandomFillIsSeededAndNotZero) {
  HostTensor a = random_tensor(DType::bf16, {16, 16}, 5), b = random_tensor(DType::bf16, {16, 16}, 5);
  double sq = 0;
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 16; ++j) {
      EXPECT_EQ(a.bits_at(a.offset({i, j})), b.bits_at(b.offset({i, j})));
      sq += a(i, j) * a(i, j);
    }
  EXPECT_GT(sq, 10.0);
}

}  // namespace
}  // namespace moegemm::testing
