// The epilogue staging layout and the stmatrix lane addresses into it, host-callable so that CPU tests
// check one against the other (tests/cpp/cpu/test_staging_layout.cpp).
//
// A warpgroup's staging area holds 64 rows as 128-byte column blocks of 8 KiB (the box a TMA store with
// 128B swizzle reads): byte b of row r lives in block b / 128, at r * 128 plus its 16-byte chunk XORed with
// r % 8.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MOEGEMM_HOST_DEVICE __host__ __device__
#else
#define MOEGEMM_HOST_DEVICE
#endif

namespace moegemm::sm90 {

/// Offset of (row, byte of the row) in the staging area.
MOEGEMM_HOST_DEVICE constexpr uint32_t staging_offset(int row, int byte) {
  const int chunk = ((byte >> 4) & 7) ^ (row & 7);
  return static_cast<uint32_t>((byte >> 7) * 8192 + row * 128 + (chunk << 4) + (byte & 15));
}

/// The row (0..63) that lane `lane` of warp `warp` addresses in a stmatrix.x4 of the accumulator fragment:
/// row lane % 8 of matrix lane / 8, where matrices 0 and 2 are the warp's top 8 rows, 1 and 3 its bottom 8.
MOEGEMM_HOST_DEVICE constexpr int stmatrix_row(int warp, int lane) {
  return warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
}

/// Offset lane `lane` of warp `warp` gives to a stmatrix.x4 of 16-byte chunks c and c + 1 (c even; matrices
/// 2 and 3 are chunk c + 1): (c / 8) * 8192 plus base q = (c % 8) / 2 of stmatrix_chunk_base, since
/// ((c % 8) | lane / 16) ^ (row % 8) = (c % 8) ^ (lane / 16 ^ row % 8) for even c.
MOEGEMM_HOST_DEVICE constexpr uint32_t stmatrix_chunk_base(int warp, int lane, int q) {
  const int row = stmatrix_row(warp, lane);
  const uint32_t x = static_cast<uint32_t>(((lane >> 4) ^ (row & 7)) << 4);
  return static_cast<uint32_t>(row * 128) + ((static_cast<uint32_t>(2 * q) << 4) ^ x);
}

}  // namespace moegemm::sm90
