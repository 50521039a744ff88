// The launcher's host-side choices (src/sm90/heuristic.hpp) on the workloads they were measured on (H200,
// 132 SMs): the dGLU takes its ping-pong kernel up to K = 3072 when each consumer warpgroup of the grid gets
// a 128 x 128 tile of its own, the cooperative one otherwise; the linear epilogue takes it where the
// cooperative tile would be 128 columns wide or N pads badly to 256; the GLU wherever there are two such tiles
// per SM; the weight gradient takes it for f32 weights of experts averaging 512-1023 rows.
#include <gtest/gtest.h>

#include "sm90/heuristic.hpp"

namespace moegemm::sm90 {
namespace {

constexpr int kSms = 132;

TEST(Heuristic, EstimatedTilesAddHalfAPartialTilePerExpert) {
  EXPECT_EQ(estimated_tiles(65536, 768, 128, 128), (512 + 64) * 6);
  EXPECT_EQ(estimated_tiles(420, 256, 4, 128), (4 + 2) * 2);
  EXPECT_EQ(estimated_tiles(3, 8, 8, 256), (1 + 1) * 1);  // more experts than rows: min(E, M) / 2
}

TEST(Heuristic, DgluPingPongUpToKOf3072WithTwoTilesPerSm) {
  // dGLU M x I x H (K = H), E: qwen3-30b-a3b and gpt-oss-120b take it, mixtral-8x7b and deepseek-v3 not.
  EXPECT_TRUE(dglu_pingpong_pays(65536, 768, 2048, 128, kSms));
  EXPECT_TRUE(dglu_pingpong_pays(32768, 2880, 2880, 128, kSms));
  EXPECT_FALSE(dglu_pingpong_pays(16384, 14336, 4096, 8, kSms));
  EXPECT_FALSE(dglu_pingpong_pays(65536, 2048, 7168, 256, kSms));
  // The boundary of K, and a problem too small to give each warpgroup of the grid a tile.
  EXPECT_TRUE(dglu_pingpong_pays(65536, 768, kPingPongMaxK, 128, kSms));
  EXPECT_FALSE(dglu_pingpong_pays(65536, 768, kPingPongMaxK + 8, 128, kSms));
  EXPECT_FALSE(dglu_pingpong_pays(420, 256, 64, 4, kSms));
}

TEST(Heuristic, LinearPingPongWhereTheTileIs128WideOrNPadsBadlyTo256) {
  // M, N, E. 128-column cooperative tiles (seed-2k, seed-4k): ping-pong.
  EXPECT_EQ(choose_tile(2048, 2048, 8, kSms).block_n, 128);
  EXPECT_TRUE(linear_pingpong_pays(2048, 2048, 8, kSms));
  EXPECT_TRUE(linear_pingpong_pays(4096, 2048, 8, kSms));
  // N = 2880 (gpt-oss-120b down and up dgrad): 3072 columns at 256 against 2944 at 128.
  EXPECT_EQ(choose_tile(32768, 2880, 128, kSms).block_n, 256);
  EXPECT_TRUE(linear_pingpong_pays(32768, 2880, 128, kSms));
  // 256-column tiles with N a multiple of 256, or padding under 4% of N: cooperative.
  EXPECT_FALSE(linear_pingpong_pays(65536, 2048, 128, kSms));   // qwen3-30b-a3b down
  EXPECT_FALSE(linear_pingpong_pays(65536, 1536, 128, kSms));   // qwen3-30b-a3b up (plain GEMM)
  EXPECT_FALSE(linear_pingpong_pays(65536, 7168, 256, kSms));   // deepseek-v3 down
  EXPECT_FALSE(linear_pingpong_pays(16384, 4096, 8, kSms));     // seed-16k, mixtral-8x7b down
  EXPECT_FALSE(linear_pingpong_pays(32768, 5760, 128, kSms));   // N = 5760: 5888 against 5760, 2.2%
  // Too few tiles to give each warpgroup of the grid one: its two mainloops would run one after the other.
  EXPECT_FALSE(linear_pingpong_pays(256, 2048, 8, kSms));
  EXPECT_FALSE(linear_pingpong_pays(0, 2048, 8, kSms));
}

TEST(Heuristic, GluPingPongWithTwoTilesPerSmWhateverNAndK) {
  // Every GLU workload of the benchmarks (N = 2I pre-activation columns), also where the plain GEMM of the
  // same shape stays cooperative.
  EXPECT_TRUE(glu_pingpong_pays(2048, 2048, 8, kSms));        // seed-2k: 320 estimated tiles
  EXPECT_TRUE(glu_pingpong_pays(16384, 4096, 8, kSms));       // seed-16k
  EXPECT_TRUE(glu_pingpong_pays(16384, 28672, 8, kSms));      // mixtral-8x7b up
  EXPECT_TRUE(glu_pingpong_pays(65536, 4096, 256, kSms));     // deepseek-v3 up
  EXPECT_TRUE(glu_pingpong_pays(65536, 1536, 128, kSms));     // qwen3-30b-a3b up
  EXPECT_TRUE(glu_pingpong_pays(32768, 5760, 128, kSms));     // gpt-oss-120b up
  EXPECT_FALSE(linear_pingpong_pays(16384, 28672, 8, kSms));  // its plain GEMM: cooperative
  // Fewer than two 128 x 128 tiles per SM: cooperative. N = 2048, 8 experts: (ceil(M / 128) + 4) x 16 tiles.
  EXPECT_FALSE(glu_pingpong_pays(1536, 2048, 8, kSms));       // 16 x 16 = 256 < 264
  EXPECT_TRUE(glu_pingpong_pays(1537, 2048, 8, kSms));        // 17 x 16 = 272
  EXPECT_FALSE(glu_pingpong_pays(1024, 2048, 8, kSms));       // 12 x 16 = 192
  EXPECT_FALSE(glu_pingpong_pays(0, 2048, 8, kSms));
}

TEST(Heuristic, DynamicTileOrderForShortExpertsOverTwoWaves) {
  // The benchmark workloads (M, N, K-independent): 256-row experts take it, longer ones do not.
  EXPECT_TRUE(dynamic_order_pays(65536, 4096, 256));     // deepseek-v3 up
  EXPECT_TRUE(dynamic_order_pays(65536, 7168, 256));     // deepseek-v3 down
  EXPECT_TRUE(dynamic_order_pays(32768, 5760, 128));     // gpt-oss-120b up
  EXPECT_TRUE(dynamic_order_pays(32768, 2880, 128));     // gpt-oss-120b down (its ping-pong kernel keeps static)
  EXPECT_FALSE(dynamic_order_pays(65536, 1536, 128));    // qwen3-30b-a3b up: 512-row experts
  EXPECT_FALSE(dynamic_order_pays(16384, 28672, 8));     // mixtral-8x7b up: 2048-row experts
  EXPECT_FALSE(dynamic_order_pays(2048, 2048, 8));       // seed-2k: 256-row experts, (16 + 4) x 8 = 160 tiles
  // The bounds: 384 rows per expert, and two waves (264) of estimated 128 x 256 tiles.
  EXPECT_TRUE(dynamic_order_pays(384 * 128, 2048, 128));
  EXPECT_FALSE(dynamic_order_pays(384 * 128 + 1, 2048, 128));
  EXPECT_FALSE(dynamic_order_pays(17280, 256, 256));     // 135 + 128 = 263 tiles
  EXPECT_TRUE(dynamic_order_pays(17281, 256, 256));      // 136 + 128 = 264
  EXPECT_FALSE(dynamic_order_pays(0, 2048, 8));
}

TEST(Heuristic, WgradDynamicTileOrderForManyExpertsOverTwoWaves) {
  // E x ceil(m / 128) x n-tiles (128 x 256 tiles), E: the workloads with 128 or 256 experts take it, the
  // 8-expert ones do not.
  EXPECT_TRUE(wgrad_dynamic_order_pays(128 * 6 * 8, 128));     // qwen3-30b-a3b down
  EXPECT_TRUE(wgrad_dynamic_order_pays(256 * 56 * 16, 256));   // deepseek-v3 up
  EXPECT_FALSE(wgrad_dynamic_order_pays(8 * 16 * 8, 8));       // seed-2k
  EXPECT_FALSE(wgrad_dynamic_order_pays(8 * 32 * 112, 8));     // mixtral-8x7b up
  // The bounds: two waves of an H200's 132 SMs, and 16 experts.
  EXPECT_FALSE(wgrad_dynamic_order_pays(263, 16));
  EXPECT_TRUE(wgrad_dynamic_order_pays(264, 16));
  EXPECT_FALSE(wgrad_dynamic_order_pays(4096, 15));
  EXPECT_FALSE(wgrad_dynamic_order_pays(0, 0));
}

TEST(Heuristic, WgradPingPongForF32WeightsOfMidLengthExperts) {
  // T rows, E experts, output bytes, m x n per expert (the weight's shape).
  EXPECT_TRUE(wgrad_pingpong_pays(65536, 128, 4, 1536, 2048, kSms));   // qwen3-30b-a3b up, f32: 512 rows
  EXPECT_TRUE(wgrad_pingpong_pays(65536, 128, 4, 2048, 768, kSms));    // qwen3-30b-a3b down, f32
  EXPECT_FALSE(wgrad_pingpong_pays(65536, 128, 2, 1536, 2048, kSms));  // the same in bf16
  EXPECT_FALSE(wgrad_pingpong_pays(65536, 256, 4, 4096, 7168, kSms));  // deepseek-v3 up, f32: 256 rows
  EXPECT_FALSE(wgrad_pingpong_pays(16384, 8, 4, 28672, 4096, kSms));   // mixtral-8x7b up, f32: 2048 rows
  // The bounds of the expert rows, and too few tiles to give each warpgroup of the grid one.
  EXPECT_TRUE(wgrad_pingpong_pays(1023 * 128, 128, 4, 1536, 2048, kSms));
  EXPECT_FALSE(wgrad_pingpong_pays(1024 * 128, 128, 4, 1536, 2048, kSms));
  EXPECT_FALSE(wgrad_pingpong_pays(511 * 128, 128, 4, 1536, 2048, kSms));
  EXPECT_FALSE(wgrad_pingpong_pays(4096, 8, 4, 128, 128, kSms));
  EXPECT_FALSE(wgrad_pingpong_pays(0, 0, 4, 128, 128, kSms));
}

}  // namespace
}  // namespace moegemm::sm90
