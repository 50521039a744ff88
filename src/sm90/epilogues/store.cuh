// Register tile -> 128B-swizzled shared-memory staging -> global memory.
//
// Each consumer warpgroup owns 64 rows of the tile and a private staging area laid out as 128-byte column
// blocks of 64 rows (the layout a TMA store with 128B swizzle reads, and bank-conflict free for the
// accumulator fragment). A 64-row slice that lies wholly inside its expert is written by asynchronous TMA
// stores that overlap the next tile's mainloop; the slice holding an expert's last rows (or a column
// segment that ends inside a tile) is written by bounds-checked 16-byte stores, so tiles never write past
// their expert and the N tail needs no padding.
#pragma once

#include <cuda/ptx>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "sm90/params.cuh"
#include "sm90/ptx.cuh"
#include "sm90/staging_layout.hpp"

namespace moegemm::sm90 {

/// Where each 64-column segment of a tile goes: global column base and exclusive column limit.
struct ColumnMap {
  int base[4];
  int limit[4];
};

/// a[i] for a run-time i without indexing a register array (which would move it to local memory).
__device__ __forceinline__ int pick(const int (&a)[4], int i) {
  return i == 0 ? a[0] : (i == 1 ? a[1] : (i == 2 ? a[2] : a[3]));
}

__device__ __forceinline__ int out_elem_bytes(OutType t) { return t == OutType::f32 ? 4 : 2; }

/// Fragment geometry of one m64nBN f32 accumulator (hopper-verified-facts §3): register r of thread
/// (warp w, lane l) holds row 16w + l/4 + 8*((r>>1)&1), column 8*(r>>2) + 2*(l%4) + (r&1).
template <int kBN>
struct Staging {
  static constexpr int kRowBytes = kBN * 2;       // one pass: BN bf16 columns (BN/2 f32 columns)
  static constexpr int kBlocks = kRowBytes / 128;  // 128-byte column blocks of 64 rows (8 KiB each)
  static constexpr int kBytes = 64 * kRowBytes;

  uint8_t* buf;  // this warpgroup's 64 rows, 1024-byte aligned
  int tid;       // thread index within the warpgroup
  uint32_t barrier_id;
  float* scratch;  // the epilogue's own shared scratch of this warpgroup (kScratchBytes), if it asked for any

  __device__ int row_a() const { return (tid / 32) * 16 + (tid % 32) / 4; }
  __device__ int quad() const { return tid % 4; }

  /// Byte address of (row, byte offset in the pass row) in the swizzled layout.
  __device__ uint8_t* at(int row, int byte) const { return buf + staging_offset(row, byte); }

  /// Waits until the staging area may be written: earlier TMA stores have read it and every thread of the
  /// warpgroup is done with it.
  __device__ void acquire() const {
    if (tid == 0) cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{});
    named_barrier_sync(barrier_id, 128);
  }

  /// Hands the staging area back to the producer (one arrival on `empty` per warpgroup) once this
  /// warpgroup's TMA stores have read it and every thread is done with it.
  __device__ void release(uint64_t* empty) const {
    acquire();
    if (tid == 0) cuda::ptx::mbarrier_arrive(empty);
  }

  /// Waits for this warpgroup's stores to complete (before the CTA exits).
  __device__ void drain() const {
    if (tid == 0) cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});
  }

  /// Stores two adjacent values of pass-relative column `col` of `row`, converted to the output type.
  __device__ void write_pair(int row, int col, OutType t, float v0, float v1) const {
    uint8_t* p = at(row, col * out_elem_bytes(t));
    if (t == OutType::f32) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else if (t == OutType::bf16) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
    } else {
      *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
    }
  }

  /// The thread's fragment_pair_base (staging_layout.hpp): with fragment_pair_offset, the offsets of its
  /// accumulator-fragment pairs.
  __device__ uint32_t fragment_base() const { return fragment_pair_base(row_a(), quad()); }

  /// Two 16-bit values of a type known at compile time (no per-pair type switch) at byte offset `offset`
  /// of the area (fragment_pair_offset), written from and read as floats.
  template <OutType kType>
  __device__ void write_pair16(uint32_t offset, float v0, float v1) const {
    *reinterpret_cast<uint32_t*>(buf + offset) = pack<kType>(v0, v1);
  }
  template <OutType kType>
  __device__ float2 read_pair16(uint32_t offset) const {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(buf + offset);
    // bf16 -> f32 is the 16 bits moved up: one instruction per value
    if constexpr (kType == OutType::bf16) return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
    else return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }

  /// Publishes the staged columns [col_begin, col_begin + cols) of the tile and stores them to rows
  /// [row0 + rows_first, row0 + rows_valid) of `out`: by TMA when `use_tma` (whole 64-row slice, columns
  /// clipped only by the tensor's width), else by bounds-checked 16-byte stores.
  __device__ void store(const OutMatrix& out, const CUtensorMap* map, const ColumnMap& cmap, int col_begin,
                        int cols, int64_t row0, int rows_valid, bool use_tma, int rows_first = 0) const {
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // generic-proxy writes -> TMA reads
    named_barrier_sync(barrier_id, 128);
    const int esize = out_elem_bytes(out.type);
    const int block_cols = 128 / esize;
    if (use_tma && cols % block_cols == 0) {  // a TMA box is 128 bytes wide: never store past `cols`
      if (tid == 0) {
        for (int b = 0; b * block_cols < cols; ++b) {
          const int sc = col_begin + b * block_cols;
          const int seg = sc >> 6;
          const int32_t coord[2] = {pick(cmap.base, seg) + (sc & 63), static_cast<int32_t>(row0)};
          cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, map, coord,
                                          buf + b * 8192);
        }
        cuda::ptx::cp_async_bulk_commit_group();
      }
      return;
    }
    const int chunk_cols = 16 / esize;
    const int chunks_per_row = cols / chunk_cols;
    const int total = (rows_valid - rows_first) * chunks_per_row;
    uint8_t* base = static_cast<uint8_t*>(out.ptr);
    for (int idx = tid; idx < total; idx += 128) {
      const int i = idx / chunks_per_row;
      const int r = rows_first + i;
      const int c = idx - i * chunks_per_row;
      const int sc = col_begin + c * chunk_cols;
      const int seg = sc >> 6;
      const int gcol = pick(cmap.base, seg) + (sc & 63);
      if (gcol >= pick(cmap.limit, seg)) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(at(r, c * 16));
      *reinterpret_cast<uint4*>(base + ((row0 + r) * out.ld + gcol) * esize) = v;
    }
  }

  /// Two floats as one 16-bit pair (first value in the low half: the lower column).
  template <OutType kType>
  __device__ static uint32_t pack(float lo, float hi) {
    if constexpr (kType == OutType::bf16) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&v);
    } else {
      const __half2 v = __floats2half2_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&v);
    }
  }

  /// The lane's stmatrix addresses (staging_layout.hpp): four bases, one per even chunk position of a block.
  struct ChunkAddresses {
    uint32_t base[4];
  };
  __device__ ChunkAddresses chunk_addresses() const {
    const uint32_t buf_addr = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
    ChunkAddresses a;
#pragma unroll
    for (int q = 0; q < 4; ++q) a.base[q] = buf_addr + stmatrix_chunk_base(tid / 32, tid % 32, q);
    return a;
  }

  /// Stages 16-bit chunks c and c + 1 (c even, 8 columns each) of the warpgroup's 64 rows with one
  /// stmatrix.x4: top_c / bottom_c are the lane's packed pairs of chunk c in rows lane/4 and lane/4 + 8.
  __device__ static void put_chunks(const ChunkAddresses& a, int c, uint32_t top_c, uint32_t bottom_c,
                                    uint32_t top_next, uint32_t bottom_next) {
    stmatrix_x4(a.base[(c & 7) >> 1] + (c >> 3) * 8192, top_c, bottom_c, top_next, bottom_next);
  }

  /// Stages the warpgroup's 64 x (2 kRegs) accumulator slice as 16-bit values: 16 stmatrix for 256 columns
  /// instead of 64 stores and their address arithmetic.
  template <OutType kType, int kRegs>
  __device__ void stage_16bit(const float (&acc)[kRegs]) const {
    static_assert(2 * kRegs <= kBN, "the accumulator slice fits the staging width");
    const ChunkAddresses a = chunk_addresses();
#pragma unroll
    for (int j = 0; j < kRegs / 4; j += 2) {
      put_chunks(a, j, pack<kType>(acc[4 * j], acc[4 * j + 1]), pack<kType>(acc[4 * j + 2], acc[4 * j + 3]),
                 pack<kType>(acc[4 * j + 4], acc[4 * j + 5]), pack<kType>(acc[4 * j + 6], acc[4 * j + 7]));
    }
  }

  /// Stages every register of `acc` (2 kRegs columns, at most kBN) at its own column and stores the slice's
  /// rows [rows_first, rows_valid):
  /// 16-bit outputs in one pass, f32 in one pass where the staging is twice the slice's width (a wide
  /// staging area, see WgradEpilogue) and else in two.
  template <int kRegs>
  __device__ void store_tile(const float (&acc)[kRegs], const OutMatrix& out, const CUtensorMap* map,
                             const ColumnMap& cmap, int64_t row0, int rows_valid, bool use_tma,
                             int rows_first = 0) const {
    constexpr int kCols = 2 * kRegs;
    static_assert(kCols <= kBN, "the accumulator slice fits the staging width");
    if (out.type != OutType::f32) {  // one pass, by stmatrix
      acquire();
      if (out.type == OutType::bf16) stage_16bit<OutType::bf16>(acc);
      else stage_16bit<OutType::f16>(acc);
      store(out, map, cmap, 0, kCols, row0, rows_valid, use_tma, rows_first);
      return;
    }
    constexpr int kPassCols = kRowBytes / 4 < kCols ? kRowBytes / 4 : kCols;
    const int ra = row_a();
    for (int begin = 0; begin < kCols; begin += kPassCols) {
      acquire();
#pragma unroll
      for (int i = 0; i < kCols / 8; ++i) {
        const int col = 8 * i + 2 * quad();
        if (8 * i < begin || 8 * i >= begin + kPassCols) continue;
        write_pair(ra, col - begin, OutType::f32, acc[4 * i], acc[4 * i + 1]);
        write_pair(ra + 8, col - begin, OutType::f32, acc[4 * i + 2], acc[4 * i + 3]);
      }
      store(out, map, cmap, begin, kPassCols, row0, rows_valid, use_tma, rows_first);
    }
  }
};

/// The column map of warpgroup `wg` in a half tile: its `segs` consecutive 64-column segments.
__device__ __forceinline__ ColumnMap half_columns(const ColumnMap& tile, int wg, int segs) {
  ColumnMap m;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int src = min(wg * segs + j, 3);
    m.base[j] = pick(tile.base, src);
    m.limit[j] = pick(tile.limit, src);
  }
  return m;
}

/// True when a TMA store of whole 64-column segments cannot cross a segment's column limit, i.e. every
/// segment either ends before its limit or is limited only by the tensor's width.
__device__ __forceinline__ bool segments_fit(const ColumnMap& cmap, int width) {
  bool fit = true;
#pragma unroll
  for (int j = 0; j < 4; ++j) fit &= cmap.limit[j] >= width || cmap.base[j] + 64 <= cmap.limit[j];
  return fit;
}

}  // namespace moegemm::sm90
