// Reductions of the backward epilogues (docs/ops.md §7): per-row sums (dprob), per-column sums over an
// expert's rows (dbias) and amax. Every sum runs in a fixed order inside the tile and lands in its own
// workspace slot; a finish kernel (sm90/reductions.cu) adds the slots in order, so results are bitwise
// reproducible. amax uses an integer atomicMax on the bits of |x|: non-negative floats order like their
// bit patterns, and max does not depend on the order of arrival.
#pragma once

#include "sm90/epilogues/common.cuh"

namespace moegemm::sm90 {

/// Sum of v over the 4 threads of a quad (they share an accumulator row).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

/// Folds max |v| of the warp into *dst (the op sets *dst to 0 before the kernel).
__device__ __forceinline__ void warp_amax(float* dst, float v) {
  const unsigned bits = __reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(v)));
  if ((threadIdx.x & 31) == 0 && bits != 0) atomicMax(reinterpret_cast<unsigned*>(dst), bits);
}

/// Row `row`'s sum over one column slot (an n-tile, or a dGLU pass): the final value when the launcher set
/// p.red.dprob (a single slot), else the slot's partial.
__device__ __forceinline__ void write_row_sum(const KernelParams& p, int slot, int64_t row, float v) {
  if (p.red.dprob) p.red.dprob[row] = v;
  else p.red.dprob_partials[static_cast<int64_t>(slot) * p.m + row] = v;
}

/// Column sums of one 64-row slice of a tile into slot (m_index * 2 + slice) of the dbias partials, over
/// kCols "virtual" columns (chunk-major: chunk c covers 8c..8c+7), through the epilogue's shared scratch
/// ([warp][kCols] floats, kBytes). Streaming, so that no array of sums competes with the accumulators for
/// registers: begin() waits until the previous tile's finish() has read the scratch, put() takes the sum of
/// the thread's two rows at one of its fragment columns and reduces the warp's 8 row groups by shuffles,
/// finish() adds the 4 warps in order and writes the slot.
template <int kCols>
struct ColumnSums {
  static constexpr int kBytes = 4 * kCols * 4;
  float* scratch;
  int tid;
  uint32_t barrier_id;

  __device__ void begin() const { named_barrier_sync(barrier_id, 128); }

  /// `v` = the thread's two-row sum at virtual column vcol0 + 2 * quad + x (vcol0 a multiple of 8).
  __device__ void put(int vcol0, int x, float v) const {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    const int lane = tid % 32;
    if (lane < 4) scratch[(tid / 32) * kCols + vcol0 + 2 * lane + x] = v;
  }

  /// `column_of(v)` maps virtual column v to its global column, or -1 when it is past the limit. The slice's
  /// first row is row0 (tile.row0 or tile.row0 + 64).
  template <class ColumnOf>
  __device__ void finish(const KernelParams& p, const WorkTile& tile, int64_t row0, int width,
                         ColumnOf&& column_of) const {
    named_barrier_sync(barrier_id, 128);
    const int slice = row0 > tile.row0 ? 1 : 0;
    float* slot = p.red.dbias_partials + (static_cast<int64_t>(tile.m_index) * 2 + slice) * width;
    for (int c = tid; c < kCols; c += 128) {
      const float total = ((scratch[c] + scratch[kCols + c]) + scratch[2 * kCols + c]) + scratch[3 * kCols + c];
      const int col = column_of(c);
      if (col >= 0) slot[col] = total;
    }
  }
};

}  // namespace moegemm::sm90
