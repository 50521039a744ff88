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

/// The per-thread part of fragment_pair_offset for the thread whose fragment rows are `row` and row + 8
/// (row % 16 < 8) and whose pairs start at 16-bit column 2 * quad of every 8-column chunk: the row, the
/// pair's bytes, and row % 8 in bits 4-6 (the swizzle), where row * 128 + 4 * quad has zeros.
MOEGEMM_HOST_DEVICE constexpr uint32_t fragment_pair_base(int row, int quad) {
  return static_cast<uint32_t>(row * 128 + 4 * quad + ((row & 7) << 4));
}

/// staging_offset(row + 8 h, 2 (col + 2 quad)) for a chunk-aligned 16-bit column col (a multiple of 8), from
/// base = fragment_pair_base(row, quad): the chunk's swizzle is one XOR of bits 4-6, and rows + 8 h keep
/// row % 8. With col and h known at compile time this is one instruction per chunk, where staging_offset
/// of a run-time row and column takes a dozen.
MOEGEMM_HOST_DEVICE constexpr uint32_t fragment_pair_offset(uint32_t base, int col, int h) {
  return (base ^ (static_cast<uint32_t>((col >> 3) & 7) << 4)) + static_cast<uint32_t>((col >> 6) * 8192 + h * 1024);
}

}  // namespace moegemm::sm90
