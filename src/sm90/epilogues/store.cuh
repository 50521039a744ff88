// Register tile -> shared-memory staging -> coalesced, bounds-checked 16-byte global stores.
//
// Each consumer warpgroup owns 64 rows of the tile and a private staging area of 64 rows. Stores are
// masked by the expert's last row (tiles never write past their expert) and by the column limit of each
// 64-column segment, so the last tile of an expert and the N tail need no special path.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "sm90/params.cuh"
#include "sm90/ptx.cuh"

namespace moegemm::sm90 {

/// Where each 64-column segment of a staged tile goes: global column base and exclusive column limit.
struct ColumnMap {
  int base[4];
  int limit[4];
};

/// a[i] for a run-time i without indexing a register array (which would move it to local memory).
__device__ __forceinline__ int pick(const int (&a)[4], int i) {
  return i == 0 ? a[0] : (i == 1 ? a[1] : (i == 2 ? a[2] : a[3]));
}

__device__ __forceinline__ int out_elem_bytes(OutType t) { return t == OutType::f32 ? 4 : 2; }

/// Stores two adjacent values at byte offset `off` of the staging row, converted to the output type.
__device__ __forceinline__ void stage_pair(uint8_t* p, OutType t, float v0, float v1) {
  if (t == OutType::f32) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else if (t == OutType::bf16) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
  } else {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
  }
}

/// Fragment geometry of one m64nBN f32 accumulator (hopper-verified-facts §3): register r of thread
/// (warp w, lane l) holds row 16w + l/4 + 8*((r>>1)&1), column 8*(r>>2) + 2*(l%4) + (r&1).
template <int kBN>
struct Staging {
  static constexpr int kPitch = kBN * 2 + 16;  // bytes per staged row; +16 B spreads rows over banks
  static constexpr int kBytes = 64 * kPitch;

  uint8_t* buf;    // this warpgroup's 64 rows
  int tid;         // thread index within the warpgroup
  uint32_t barrier_id;

  __device__ int row_a() const { return (tid / 32) * 16 + (tid % 32) / 4; }
  __device__ int quad() const { return tid % 4; }

  /// Writes the staged columns [col_begin, col_begin + cols) to `out` rows [row0, row0 + rows_valid).
  __device__ void flush(const OutMatrix& out, const ColumnMap& cmap, int col_begin, int cols, int64_t row0,
                        int rows_valid) const {
    named_barrier_sync(barrier_id, 128);
    const int esize = out_elem_bytes(out.type);
    const int chunk_cols = 16 / esize;
    const int chunks_per_row = cols / chunk_cols;
    const int total = rows_valid * chunks_per_row;
    uint8_t* base = static_cast<uint8_t*>(out.ptr);
    for (int idx = tid; idx < total; idx += 128) {
      const int r = idx / chunks_per_row;
      const int sc = col_begin + (idx - r * chunks_per_row) * chunk_cols;
      const int seg = sc >> 6;
      const int gcol = pick(cmap.base, seg) + (sc & 63);
      if (gcol >= pick(cmap.limit, seg)) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(buf + r * kPitch + (sc - col_begin) * esize);
      *reinterpret_cast<uint4*>(base + ((row0 + r) * out.ld + gcol) * esize) = v;
    }
    named_barrier_sync(barrier_id, 128);  // the staging area is free again
  }

  /// Stages every register of `acc` at its own column and stores the whole BN-wide tile.
  template <int kRegs>
  __device__ void store_tile(const float (&acc)[kRegs], const OutMatrix& out, const ColumnMap& cmap,
                             int64_t row0, int rows_valid) const {
    const int esize = out_elem_bytes(out.type);
    const int pass_cols = (kBN * 2) / esize;  // 16-bit: one pass; f32: two passes
    const int ra = row_a();
    for (int begin = 0; begin < kBN; begin += pass_cols) {
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        const int col = 8 * i + 2 * quad();
        if (col < begin || col >= begin + pass_cols) continue;
        stage_pair(buf + ra * kPitch + (col - begin) * esize, out.type, acc[4 * i], acc[4 * i + 1]);
        stage_pair(buf + (ra + 8) * kPitch + (col - begin) * esize, out.type, acc[4 * i + 2], acc[4 * i + 3]);
      }
      flush(out, cmap, begin, pass_cols, row0, rows_valid);
    }
  }
};

}  // namespace moegemm::sm90
