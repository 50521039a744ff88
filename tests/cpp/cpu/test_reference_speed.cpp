// Speed of the CPU reference: a 4096 x 1024 x 1024 grouped GEMM (8 experts) must take well under 2 s on
// two cores, so that CI can afford the reference on real shapes. Values are spot-checked.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/naive.hpp"
#include "common/offsets.hpp"
#include "common/random_fill.hpp"
#include "reference/reference.hpp"

namespace moegemm::testing {
namespace {

TEST(ReferenceSpeed, GroupedGemm4096x1024x1024) {
  const int64_t M = 4096, N = 1024, K = 1024, E = 8;
  HostTensor a = random_tensor(DType::bf16, {M, K}, 301);
  naive::Weights b(naive::BMode::dense_nk, DType::bf16, E, N, K, 302, 0.05);
  HostTensor offsets = offsets_from_sizes(random_group_sizes(E, M, 303));
  HostTensor d(DType::bf16, {M, N});
  GroupedGemmArgs args;
  args.a = a.view();
  args.b = b.ew;
  args.offsets = offsets.view();
  args.d = d.view();
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  reference::run(args);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;  // all threads: robust to a busy machine
  RecordProperty("seconds", std::to_string(s));
  std::printf("grouped_gemm 4096x1024x1024 on the host: %.3f s wall, %.3f s CPU (%.1f GFLOP/s per CPU second)\n",
              s, cpu, 2.0 * M * N * K / cpu / 1e9);
  const naive::Rows rs = naive::rows(offsets, M);
  for (int64_t g = 0; g < E; ++g)
    if (rs.end[g] > rs.begin[g])
      for (int64_t n : {int64_t{0}, N / 3, N - 1}) {
        const int64_t r = rs.end[g] - 1;
        const double want = naive::dot(a, r, b, g, n);
        EXPECT_NEAR(d(r, n), want, 2e-2 * std::fabs(want) + 4e-2);
      }
  // CPU seconds over all threads (2 s of wall on 2 cores), so a busy machine does not fail the test;
  // an unblocked loop takes several times longer.
  EXPECT_LT(cpu, 4.0);
}

}  // namespace
}  // namespace moegemm::testing
