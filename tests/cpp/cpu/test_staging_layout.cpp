// The stmatrix lane addresses of the epilogue (src/sm90/staging_layout.hpp) against the staging layout the
// TMA stores read: each lane must address the staging position of the matrix row that PTX assigns to it
// (lane t: row t % 8 of matrix t / 8; matrices 0/1 = chunk c, top/bottom 8 rows of the warp, 2/3 = chunk
// c + 1), for every warp of the warpgroup and every even chunk of a 256-column (512-byte) staging row.
#include <gtest/gtest.h>

#include <set>

#include "sm90/staging_layout.hpp"

namespace moegemm::sm90 {
namespace {

TEST(StagingLayout, StmatrixAddressesMatchTheSwizzledLayout) {
  for (int warp = 0; warp < 4; ++warp) {
    for (int c = 0; c < 32; c += 2) {
      for (int lane = 0; lane < 32; ++lane) {
        const int matrix = lane / 8, row_in_matrix = lane % 8;
        const int row = warp * 16 + row_in_matrix + 8 * (matrix & 1);
        const int chunk = c + (matrix >> 1);
        const uint32_t got = stmatrix_chunk_base(warp, lane, (c & 7) >> 1) + static_cast<uint32_t>(c >> 3) * 8192;
        EXPECT_EQ(got, staging_offset(row, chunk * 16)) << "warp " << warp << " chunk " << c << " lane " << lane;
        EXPECT_EQ(stmatrix_row(warp, lane), row);
      }
    }
  }
}

TEST(StagingLayout, EveryChunkOfTheAreaHasItsOwnPlace) {
  std::set<uint32_t> seen;
  for (int row = 0; row < 64; ++row) {
    for (int byte = 0; byte < 512; byte += 16) {
      const uint32_t off = staging_offset(row, byte);
      EXPECT_EQ(off % 16, 0u);
      EXPECT_LT(off, 64u * 512u);
      EXPECT_TRUE(seen.insert(off).second) << "row " << row << " byte " << byte;
    }
  }
}

// The dGLU epilogue's addressing of its accumulator-fragment pairs (rows r and r + 8, columns 2q, 2q + 1 of
// each 8-column chunk) against the layout itself, over a 256-column (512-byte) staging row.
TEST(StagingLayout, FragmentPairOffsetsMatchTheSwizzledLayout) {
  for (int warp = 0; warp < 4; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      const int row = warp * 16 + lane / 4, quad = lane % 4;
      const uint32_t base = fragment_pair_base(row, quad);
      for (int col = 0; col < 256; col += 8) {
        for (int h = 0; h < 2; ++h) {
          EXPECT_EQ(fragment_pair_offset(base, col, h), staging_offset(row + 8 * h, 2 * (col + 2 * quad)))
              << "warp " << warp << " lane " << lane << " column " << col << " h " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moegemm::sm90
