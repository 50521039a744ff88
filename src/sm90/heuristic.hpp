// Host-side choice of the tile shape and of the ping-pong kernel (dGLU, linear, weight gradient) from the problem
// (no device data: offsets stay on the device).
#pragma once

#include <algorithm>
#include <cstdint>

namespace moegemm::sm90 {

struct TileChoice {
  int block_n;  // 128 or 256 B columns per tile (the M tile is always 128 rows)
};

/// Tiles of 128 rows x bn columns of an m-grouped launch, estimated without the offsets (they stay on the
/// device): (ceil(M / 128) + min(E, M) / 2) x ceil(N / bn), since each non-empty expert adds on average half
/// a partial M tile (tiles never straddle experts).
inline int64_t estimated_tiles(int64_t m, int64_t n, int64_t num_experts, int bn) {
  return ((m + 127) / 128 + std::min<int64_t>(num_experts, m) / 2) * ((n + bn - 1) / bn);
}

/// Picks BN in {128, 256} by estimated time = waves x per-tile time:
///  - tiles ~= estimated_tiles(BN);
///  - waves = ceil(tiles / SMs) over the persistent grid;
///  - per-tile time ~ BN / efficiency(BN); 128x256 tiles run the tensor cores about 12% more efficiently
///    than 128x128 ones (operand bytes per FLOP: 1/128 + 1/256 against 2/128).
/// Small N or fine-grained experts therefore get BN = 128, large problems BN = 256.
/// `n` counts B (pre-activation) columns: a GLU tile covers BN of them too.
inline TileChoice choose_tile(int64_t m, int64_t n, int64_t num_experts, int sms) {
  auto estimate = [&](int bn, double efficiency) {
    const int64_t tiles = estimated_tiles(m, n, num_experts, bn);
    const int64_t waves = (tiles + sms - 1) / std::max(sms, 1);
    return static_cast<double>(waves) * bn / efficiency;
  };
  const double t256 = estimate(256, 1.0);
  const double t128 = estimate(128, 0.89);
  return TileChoice{t256 <= t128 ? 256 : 128};
}

/// Largest K (the dgrad's contraction, the hidden size) for which the dGLU runs its ping-pong kernel.
inline constexpr int64_t kPingPongMaxK = 3072;

/// Whether a dGLU with a saved pre-activation tile pays for the ping-pong kernel (one warpgroup's epilogue
/// under the other's mainloop, 128 x 128 tiles): with at least two such tiles per SM, so that each consumer
/// warpgroup of the grid has its own, and K <= kPingPongMaxK. Past that the mainloop outweighs the epilogue
/// and the cooperative 128 x 256 tile's fewer operand bytes per FLOP win. H200, dGLU us, cooperative ->
/// ping-pong: qwen3-30b-a3b (K = 2048) 485 -> 444, gpt-oss-120b (K = 2880) 1314 -> 1253, mixtral-8x7b
/// (K = 4096) 2942 -> 3136, deepseek-v3 (K = 7168) 3612 -> 3830.
inline bool dglu_pingpong_pays(int64_t m, int64_t n, int64_t k, int64_t num_experts, int sms) {
  return k <= kPingPongMaxK && estimated_tiles(m, n, num_experts, 128) >= 2 * static_cast<int64_t>(sms);
}

/// Whether the linear epilogue (grouped_gemm, its dgrad, gemm_amax) pays for the ping-pong kernel, with two
/// 128 x 128 tiles per SM:
///  - where the cooperative kernel would take 128-column tiles too (choose_tile): both then read the same
///    operand bytes per FLOP, and ping-pong runs one warpgroup's epilogue under the other's MMA;
///  - where N pads to 256 columns with at least 4% of N more than to 128 (N = 2880: 3072 against 2944), the
///    waste of the cooperative 128 x 256 tile outweighing the ping-pong tile's operand bytes.
/// H200, `moegemm gemm`, two rounds, us, cooperative -> ping-pong: seed-2k (128-column tiles) 43.3-43.5 ->
/// 42.1-42.8, seed-4k 65.1-65.8 -> 63.7-63.8; gpt-oss-120b (N = 2880) down 1053-1074 -> 996-1010, up dgrad
/// 2152-2236 -> 1968-2084. Ping-pong was 3-14% slower on the shapes with 256-column tiles and N a multiple
/// of 256 (qwen3-30b-a3b, deepseek-v3 down, mixtral-8x7b down, seed-16k).
inline bool linear_pingpong_pays(int64_t m, int64_t n, int64_t num_experts, int sms) {
  if (estimated_tiles(m, n, num_experts, 128) < 2 * static_cast<int64_t>(sms)) return false;
  const int64_t extra_padding = (n + 255) / 256 * 256 - (n + 127) / 128 * 128;
  return choose_tile(m, n, num_experts, sms).block_n == 128 || extra_padding * 25 >= n;
}

/// Whether the GLU pays for the ping-pong kernel (128 x 128 tiles, one warpgroup's C and D stores and its
/// activation under the other's mainloop): with at least two such tiles per SM. Unlike the linear epilogue's
/// (linear_pingpong_pays), the GLU's epilogue is long enough against the mainloop on every workload that
/// hiding it outweighs the 128 x 128 tile's extra operand bytes. H200, glu suite of bench/peers.py, two
/// rounds, us, cooperative -> ping-pong: with C and prob, seed-4k 71.7 -> 67.8, seed-8k 220 -> 215, qwen3-up
/// 777 -> 740, gpt-oss up 2477 -> 2216, deepseek-v3 up 9564 -> 9124; D only, deepseek-v3 up 8432 -> 7132,
/// gpt-oss up 2303 -> 2120; within 2% either way on seed-16k, mixtral-8x7b up and the zipf rows of
/// deepseek-v3 up (docs/benchmarks.md).
inline bool glu_pingpong_pays(int64_t m, int64_t n, int64_t num_experts, int sms) {
  return estimated_tiles(m, n, num_experts, 128) >= 2 * static_cast<int64_t>(sms);
}

/// Whether the weight gradient pays for the ping-pong kernel (128 x 128 tiles, one warpgroup's epilogue under
/// the other's mainloop): for f32 weights whose experts average 512-1023 rows, with two tiles per SM. A tile's
/// mainloop runs its expert's rows and its epilogue writes 64 KiB of f32, so there the epilogue is long
/// against the mainloop while the writes do not yet bound the op, and ping-pong hides it. Elsewhere the
/// cooperative 128 x 256 tile, with fewer operand bytes per FLOP, mostly wins: with shorter experts the f32
/// writes bound the op whichever kernel runs, with longer ones the mainloop outweighs the epilogue, and bf16
/// weights halve the epilogue (ping-pong slower on 19 of 24 rows of the bf16 wgrad suite; the gain at 1024
/// rows was 1-2%). H200 (docs/benchmarks.md), cooperative -> ping-pong: f32, `moegemm run`, us:
/// qwen3-30b-a3b (512-row experts) up 928-948 -> 847-848, down 479-488 -> 449; deepseek-v3 (256) up
/// 11870-11920 -> 12396-12512; mixtral-8x7b (2048) up 5398 -> 6135-6203. bf16, TFLOP/s: qwen3-up 550 / 489
/// -> 500 / 456, dsv3-up 430 / 399 -> 385 / 358, gptoss-down 420 / 395 -> 403 / 363.
inline bool wgrad_pingpong_pays(int64_t rows, int64_t num_experts, int out_bytes, int64_t m, int64_t n, int sms) {
  const int64_t expert_rows = rows / std::max<int64_t>(1, num_experts);
  const int64_t tiles = num_experts * ((m + 127) / 128) * ((n + 127) / 128);
  return out_bytes == 4 && expert_rows >= 512 && expert_rows < 1024 && tiles >= 2 * static_cast<int64_t>(sms);
}

/// Fewest estimated 128 x 256 tiles for which an m-grouped launch takes the dynamic tile order: two waves of
/// an H200's 132 SMs. A count of tiles rather than of waves, since the workspace size (which holds the order's
/// counter) depends on the choice and must not depend on the device present when it is asked for (JAX asks
/// at trace time).
inline constexpr int64_t kDynamicOrderMinTiles = 264;

/// Whether an m-grouped launch on the cooperative kernel takes its tiles in the dynamic order
/// (tile_order.cuh), at the cost of a 4-byte memset of its counter before the launch: where experts average
/// at most 384 rows (three 128-row tiles) and there are two waves of tiles. There, half of an expert's tiles
/// are short or half tiles, the static order lets the CTAs drift apart, and an expert's m-tiles stop sharing
/// its weight panel in L2. The ping-pong kernel keeps the static order (see the launcher). H200, `moegemm
/// gemm`, us, static -> dynamic, uniform / zipf routing: deepseek-v3 up (256-row experts) 8468 -> 7585 /
/// 8012 -> 7946, down 4052 -> 3914 / 3967 -> 3942, gpt-oss-120b up 2270 -> 2107 / 2177 -> 2060; slower by
/// 0.5-3% with longer experts (qwen3-30b-a3b, 512 rows; seed-4k to seed-16k) and on seed-2k (below two
/// waves, where the memset weighs most).
inline bool dynamic_order_pays(int64_t m, int64_t n, int64_t num_experts) {
  return m <= 384 * num_experts && estimated_tiles(m, n, num_experts, 256) >= kDynamicOrderMinTiles;
}

/// Fewest experts for which the weight gradient takes the dynamic tile order.
inline constexpr int64_t kWgradDynamicOrderMinExperts = 16;

/// Whether the weight gradient, on the cooperative kernel, takes its tiles in the dynamic order with its
/// experts longest first (tile_order.cuh, scheduler_ragged_k.cuh): with at least kDynamicOrderMinTiles tiles
/// and kWgradDynamicOrderMinExperts experts. A tile runs its expert's rows, so the routing, which only the
/// device knows, sets its length; under the static order the CTAs that draw a long expert's tiles finish
/// last. bench/tile_order_model.py (list scheduling of tiles of 1.2 + 0.62 us per k-block on 132 SMs,
/// bench/peers.py's zipf routing) puts the static order's end 1.40x past an even split on qwen3-30b-a3b down
/// (a quarter of the rows on one expert, 48 tiles each), 1.18x on its up, 1.04-1.08x on gpt-oss-120b and
/// 1.05x on deepseek-v3 down, and the dynamic order, longest first, within 0.3% of it on every zipf workload
/// with 30 waves of tiles or more. With 8 experts each expert's tiles fill at least a wave, and the model
/// gives the orders within 3% of each other. H200, bf16 wgrad suite, two rounds, static -> dynamic: zipf
/// qwen3 down -23%, up -11%, gpt-oss -7% and -10%, deepseek-v3 -5% and -7%, uniform rows of 128-256 experts
/// within 1%; with 8 experts +4 to +6% on seed-2k and seed-4k (1024 tiles), -2 to +2% on the others
/// (docs/benchmarks.md).
inline bool wgrad_dynamic_order_pays(int64_t tiles, int64_t num_experts) {
  return tiles >= kDynamicOrderMinTiles && num_experts >= kWgradDynamicOrderMinExperts;
}

}  // namespace moegemm::sm90
