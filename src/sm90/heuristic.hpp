// Host-side choice of the tile shape from the problem (no device data: offsets stay on the device).
#pragma once

#include <algorithm>
#include <cstdint>

namespace moegemm::sm90 {

struct TileChoice {
  int block_n;  // 128 or 256 B columns per tile (the M tile is always 128 rows)
};

/// Picks BN in {128, 256} by estimated time = waves x per-tile time:
///  - tiles ~= (ceil(M / 128) + min(E, M) / 2) x n_tiles(BN): each non-empty expert adds on average half
///    a partial M tile, since tiles never straddle experts;
///  - waves = ceil(tiles / SMs) over the persistent grid;
///  - per-tile time ~ BN / efficiency(BN); 128x256 tiles run the tensor cores about 12% more efficiently
///    than 128x128 ones (operand bytes per FLOP: 1/128 + 1/256 against 2/128).
/// Small N or fine-grained experts therefore get BN = 128, large problems BN = 256.
/// `n` counts B (pre-activation) columns: a GLU tile covers BN of them too.
inline TileChoice choose_tile(int64_t m, int64_t n, int64_t num_experts, int sms) {
  auto estimate = [&](int bn, double efficiency) {
    const int64_t m_tiles = (m + 127) / 128 + std::min<int64_t>(num_experts, m) / 2;
    const int64_t n_tiles = (n + bn - 1) / bn;
    const int64_t tiles = m_tiles * n_tiles;
    const int64_t waves = (tiles + sms - 1) / std::max(sms, 1);
    return static_cast<double>(waves) * bn / efficiency;
  };
  const double t256 = estimate(256, 1.0);
  const double t128 = estimate(128, 0.89);
  return TileChoice{t256 <= t128 ? 256 : 128};
}

}  // namespace moegemm::sm90
