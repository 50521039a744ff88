// Tile scheduler of the weight gradient (k-grouped): the contraction runs over each expert's own rows.
//
// Every expert owns the same grid of output tiles (ceil(m / 128) x n_tiles), so tile t belongs to expert
// t / tiles_per_expert; inside an expert the order is the forward's L2-friendly one. A tile accumulates
// ceil(rows_g / 64) k-blocks of its expert; an expert with no rows still has its tiles, with zero
// k-blocks, so its output is written (zeros). Row ranges are the forward's clamped ones.
#pragma once

#include "sm90/params.cuh"
#include "sm90/scheduler.cuh"

namespace moegemm::sm90 {

template <int kThreads, int kMaxExperts>
struct RaggedKScheduler {
  using Rows = ExpertTileScheduler<kThreads, kMaxExperts>;
  using Storage = typename Rows::Storage;
  static constexpr int kGroupM = Rows::kGroupM;
  static constexpr bool kUniformK = false;  // a tile runs its expert's k-blocks

  const Storage& s;  // only the clamped row table (row_start) is used
  int num_experts;
  int m_tiles;
  int n_tiles;
  int m;

  /// p.k = rows the offsets index, p.m x p.n = each expert's output.
  __device__ RaggedKScheduler(Storage& storage, const KernelParams& p)
      : s(storage), num_experts(p.num_experts), m_tiles((p.m + 127) / 128), n_tiles(p.n_tiles), m(p.m) {
    const Rows rows(storage, p.offsets, p.num_experts, p.k, 1, 64);  // builds the table (all threads)
  }

  __device__ int total_tiles() const { return num_experts * m_tiles * n_tiles; }

  __device__ WorkTile tile(int t) const {
    const int per_expert = m_tiles * n_tiles;
    const int g = t / per_expert;
    const int local = t - g * per_expert;
    const int group_span = kGroupM * n_tiles;
    const int group = local / group_span;
    const int m_first = group * kGroupM;
    const int group_m = min(kGroupM, m_tiles - m_first);
    const int within = local - group * group_span;
    WorkTile tl;
    tl.expert = g;
    tl.row0 = (m_first + within % group_m) * 128;
    tl.row_end = m;
    tl.n_tile = within / group_m;
    const int expert_rows = s.row_start[g + 1] - s.row_start[g];
    tl.k_blocks = (expert_rows + 63) / 64;
    tl.m_index = -1;
    return tl;
  }
};

}  // namespace moegemm::sm90
