// Tile scheduler of the weight gradient (k-grouped): the contraction runs over each expert's own rows.
//
// Every expert owns the same grid of output tiles (ceil(m / 128) x n_tiles). A tile accumulates
// ceil(rows_g / 64) k-blocks of its expert; an expert with no rows still has its tiles, with zero k-blocks,
// so its output is written (zeros). Row ranges are the forward's clamped ones. Tile t belongs to the
// expert in place t / tiles_per_expert of the expert order; inside an expert the order is the forward's
// L2-friendly one.
//
// The expert order is the index order, or, under the dynamic tile order (KernelParams::tile_counter),
// longest first: experts sorted by the bit length of their k-block count, descending, ties in index order.
// A tile's cost is its expert's rows, which only the device knows; claiming the long experts' tiles first
// leaves the short ones to even out the CTAs' ends (list scheduling, longest first). Every CTA derives the
// same order from the same offsets.
#pragma once

#include <cstdint>

#include "sm90/params.cuh"
#include "sm90/scheduler.cuh"

namespace moegemm::sm90 {

template <int kThreads, int kMaxExperts>
struct RaggedKScheduler {
  using Rows = ExpertTileScheduler<kThreads, kMaxExperts>;
  static constexpr int kGroupM = Rows::kGroupM;
  static constexpr bool kUniformK = false;  // a tile runs its expert's k-blocks
  static constexpr int kChunks = (kMaxExperts + 31) / 32;  // 32-expert chunks, one warp's lanes each
  static constexpr int kClasses = 32;                      // bit lengths of a k-block count (<= 26)
  static_assert(kMaxExperts <= 65535 && kThreads % 32 == 0 && kThreads >= kClasses);

  struct Storage {
    typename Rows::Storage rows;  // only the clamped row table (row_start) is used
    uint16_t order[kMaxExperts];  // longest first: the expert of place i
    uint16_t chunk_start[kChunks][kClasses];  // experts of class c in chunk j, then those before chunk j
    uint16_t class_start[kClasses];           // place of the first expert of class c
  };

  const Storage& s;
  int num_experts;
  int m_tiles;
  int n_tiles;
  int m;
  bool longest_first;

  /// p.k = rows the offsets index, p.m x p.n = each expert's output. Every thread of the CTA must call it.
  __device__ RaggedKScheduler(Storage& storage, const KernelParams& p)
      : s(storage),
        num_experts(p.num_experts),
        m_tiles((p.m - 1) / 128 + 1),  // p.m > 0; p.m + 127 would wrap past 2^31 - 128
        n_tiles(p.n_tiles),
        m(p.m),
        longest_first(p.tile_counter != nullptr) {
    const Rows rows(storage.rows, p.offsets, p.num_experts, p.k, 1, 64);  // builds the table, then syncs
    if (longest_first) sort_longest_first(storage);
  }

  __device__ int total_tiles() const { return num_experts * m_tiles * n_tiles; }

  /// ceil(rows / 64), without the rows + 63 that wraps for an expert of more than 2^31 - 64 rows.
  __device__ int k_blocks(int g) const {
    const int rows = s.rows.row_start[g + 1] - s.rows.row_start[g];
    return rows / 64 + (rows % 64 != 0);
  }

  __device__ WorkTile tile(int t) const {
    const int per_expert = m_tiles * n_tiles;
    const int place = t / per_expert;
    const int g = longest_first ? s.order[place] : place;
    const int local = t - place * per_expert;
    const int group_span = kGroupM * n_tiles;
    const int group = local / group_span;
    const int m_first = group * kGroupM;
    const int group_m = min(kGroupM, m_tiles - m_first);
    const int within = local - group * group_span;
    WorkTile tl;
    tl.expert = g;
    tl.row0 = (m_first + within % group_m) * 128;
    tl.row_first = 0;
    tl.row_end = m;
    tl.n_tile = within / group_m;
    tl.k_blocks = k_blocks(g);
    tl.m_index = -1;
    return tl;
  }

 private:
  /// Fills storage.order: a stable counting sort on the size class (bit length of the k-block count),
  /// descending. Each warp ranks the experts of its 32-expert chunks among equal classes with one
  /// __match_any_sync; per class, a prefix over chunks and a suffix over classes give each expert its place.
  /// Deterministic, so that every CTA gets the same order. Ends with __syncthreads.
  __device__ void sort_longest_first(Storage& st) const {
    constexpr int kWarps = kThreads / 32;
    constexpr int kPerWarp = (kChunks + kWarps - 1) / kWarps;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < kChunks * kClasses; i += kThreads) (&st.chunk_start[0][0])[i] = 0;
    __syncthreads();
    int cls[kPerWarp], rank[kPerWarp];
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int chunk = warp + i * kWarps;
      const int g = chunk * 32 + lane;
      cls[i] = g < num_experts ? 32 - __clz(k_blocks(g)) : kClasses;  // past the experts: no class
      rank[i] = 0;
      if (chunk < kChunks) {  // warp-uniform
        const unsigned peers = __match_any_sync(~0u, cls[i]);
        rank[i] = __popc(peers & ((1u << lane) - 1u));
        if (cls[i] < kClasses && rank[i] == 0) st.chunk_start[chunk][cls[i]] = static_cast<uint16_t>(__popc(peers));
      }
    }
    __syncthreads();
    if (threadIdx.x < kClasses) {  // warp 0, lane c: class c's prefix over chunks, then its first place
      const int c = threadIdx.x;
      int before = 0;
      for (int j = 0; j < kChunks; ++j) {
        const int n = st.chunk_start[j][c];
        st.chunk_start[j][c] = static_cast<uint16_t>(before);
        before += n;
      }
      int from_c = before;  // experts of classes >= c
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const int v = __shfl_down_sync(~0u, from_c, off);
        if (c + off < 32) from_c += v;
      }
      st.class_start[c] = static_cast<uint16_t>(from_c - before);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int chunk = warp + i * kWarps;
      if (cls[i] < kClasses) {
        st.order[st.class_start[cls[i]] + st.chunk_start[chunk][cls[i]] + rank[i]] =
            static_cast<uint16_t>(chunk * 32 + lane);
      }
    }
    __syncthreads();
  }
};

}  // namespace moegemm::sm90
