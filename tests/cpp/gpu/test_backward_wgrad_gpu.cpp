// grouped_gemm_wgrad on the sm_90a kernels against the CPU reference on the same bytes: dense, transposed
// and per-expert pointer outputs, f32 and bf16, accumulate on and off, unaligned and long experts, many
// experts, and the wgrad cases of the shared case list (C01, C02, C09). Outputs are poisoned before each
// call (accumulate: random values over poisoned padding, or in a second buffer w_in): experts with rows must
// match the reference, empty experts must be exactly 0 (accumulate: bitwise the initial values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/backward_ops.hpp"

namespace moegemm::testing {
namespace {

std::string describe(const Wgrad& p) {
  return std::string(p.ptrs ? "w_ptrs" : "dense w") + (p.transpose ? " transposed" : "") +
         (p.out == DType::f32 ? " f32" : p.out == DType::f16 ? " f16" : " bf16") + (p.accumulate ? " accumulate" : "") + (p.w_in ? " from w_in" : "") + " H=" +
         std::to_string(p.h) + " N=" + std::to_string(p.n);
}

TEST(BackwardGpu, WgradOutputModes) {
  REQUIRE_GPU();
  int variant = 0;
  for (bool ptrs : {false, true}) {
    for (bool transpose : {false, true}) {
      for (DType out : {DType::f32, DType::bf16, DType::f16}) {
        for (bool accumulate : {false, true}) {
          Wgrad p;  // sizes 1, 63, 65, 129, 1000, 0, 200 of 1500 rows
          p.ptrs = ptrs;
          p.transpose = transpose;
          p.out = out;
          p.accumulate = accumulate;
          p.seed = 10000 + 10 * variant++;
          p.name = describe(p);
          check_wgrad(p);
          if (accumulate && !ptrs) {  // the same, adding into values handed in a second buffer
            p.w_in = true;
            p.name = describe(p);
            check_wgrad(p);
          }
        }
      }
    }
  }
}

TEST(BackwardGpu, WgradShapes) {
  REQUIRE_GPU();
  int variant = 0;
  for (int64_t h : {8, 24, 136, 768}) {
    for (int64_t n : {8, 24, 136, 768}) {
      Wgrad p;
      p.m = 1300;
      p.h = h;
      p.n = n;
      p.sizes = {1, 63, 65, 129, 1000, 0};  // rows 1258..1299 belong to no expert
      p.out = variant % 2 ? DType::bf16 : DType::f32;
      p.transpose = variant % 3 == 1;
      p.ptrs = variant % 5 == 3;
      p.accumulate = variant % 4 == 2;
      p.seed = 11000 + 10 * variant++;
      p.name = describe(p);
      check_wgrad(p);
    }
  }
}

TEST(BackwardGpu, WgradLongExperts) {
  REQUIRE_GPU();
  int variant = 0;
  for (DType out : {DType::f32, DType::bf16}) {
    Wgrad p;
    p.m = 12100;
    p.h = 256;
    p.n = 136;
    p.sizes = {3000, 5000, 1, 0, 4099};  // thousands of rows in the contraction, one 1-row expert
    p.out = out;
    p.transpose = out == DType::bf16;
    p.seed = 12000 + 10 * variant++;
    p.name = "long experts " + describe(p);
    check_wgrad(p);
  }
}

TEST(BackwardGpu, WgradExpertCounts) {
  REQUIRE_GPU();
  int variant = 0;
  for (int64_t e : {1, 7, 64, 256, 1024}) {
    Wgrad p;
    p.m = std::max<int64_t>(4000, 3 * e);
    p.h = 64;
    p.n = 136;
    p.sizes = random_group_sizes(e, p.m - 37, 13 + e, e == 1 ? 0.0 : 0.6);  // many empty experts
    p.accumulate = variant % 2 == 1;
    p.ptrs = e == 64;
    p.seed = 13000 + 10 * variant++;
    p.name = "E=" + std::to_string(e) + " " + describe(p);
    check_wgrad(p);
  }
}

TEST(BackwardGpu, WgradSkewedExpertsLongestFirst) {
  // 300 experts (not a multiple of the sort's 32-expert chunks), 2 x 2 or 3 tiles each: enough tiles for the
  // dynamic order, whose scheduler then takes the experts longest first. Sizes span k-block counts of 0 to
  // 66 in no order (a few long experts among many short and empty ones): no expert's place in the sorted
  // order equals its index. Each expert's output must match and empty ones be exactly 0.
  REQUIRE_GPU();
  int variant = 0;
  for (DType out : {DType::bf16, DType::f32}) {
    Wgrad p;
    p.h = 136;
    p.n = 264;
    p.sizes.assign(300, 0);
    for (int64_t g = 0; g < 300; ++g) {
      const int64_t r = (g * 7919 + 13) % 300;
      p.sizes[g] = r < 3 ? 4000 + 97 * r : r < 150 ? (r * 37) % 200 : r < 250 ? r % 3 : 0;
    }
    p.m = 0;
    for (int64_t s : p.sizes) p.m += s;
    p.m += 29;  // rows past the last offset belong to no expert
    p.out = out;
    p.accumulate = variant == 1;
    p.seed = 15000 + 10 * variant++;
    p.name = "skewed E=300 " + describe(p);
    check_wgrad(p);
  }
}

TEST(BackwardGpu, WgradOneRowWithAnyRowStride) {
  // One row of x and dY: the contract leaves their row strides free (no second row is addressed), and a
  // stride that is no multiple of 16 bytes must not reach the tensor maps, which cannot encode it. The
  // experts around the row's own are empty (exact zeros).
  REQUIRE_GPU();
  for (DType out : {DType::f32, DType::bf16}) {
    Wgrad p;
    p.m = 1;
    p.h = 136;
    p.n = 264;
    p.sizes = {0, 1, 0};
    p.row_pad = 3;  // 6 bytes past each row
    p.out = out;
    p.seed = 16000 + (out == DType::bf16);
    p.name = "one row, row stride + 3 " + describe(p);
    check_wgrad(p);
  }
}

TEST(BackwardGpu, WgradNoRowsWithoutStorage) {
  // T = 0 with x and dY at a null address (torch's empty CUDA tensors): every expert's output is exactly 0,
  // or with accumulate bitwise unchanged, and the tensor maps must not be made over the null address.
  REQUIRE_GPU();
  int variant = 0;
  for (DType out : {DType::f32, DType::bf16}) {
    for (bool accumulate : {false, true}) {
      Wgrad p;
      p.m = 0;
      p.sizes = {0, 0, 0};
      p.out = out;
      p.accumulate = accumulate;
      p.seed = 16100 + 10 * variant++;
      p.name = "T = 0, null x and dY, " + describe(p);
      check_wgrad(p);
    }
  }
}

TEST(BackwardGpu, WgradPointerTableInsideAnExpertsOutput) {
  REQUIRE_GPU();
  // docs/ops.md rule 9: the whole w_ptrs table is read before any write through it, so an expert's output
  // stored over the table does not redirect the experts after it. 1024 experts of 4 rows, f32 (64, 64)
  // outputs of 16 KiB each, the 8 KiB table at the start of expert 0's buffer: far more tiles than CTAs, so
  // most experts' tiles run after expert 0's has been written.
  const int64_t e = 1024, rows = 4, h = 64, n = 64, t = e * rows, slot = h * n, slot_bytes = slot * 4;
  const HostTensor x = random_tensor(DType::bf16, {t, h}, 15001, -1.0, 1.0);
  const HostTensor dy = random_tensor(DType::bf16, {t, n}, 15002, -1.0, 1.0);
  const HostTensor offsets = offsets_from_sizes(std::vector<int64_t>(static_cast<size_t>(e), rows));
  const DeviceTensor dx(x), ddy(dy), doffsets(offsets);
  HostTensor ref = poisoned(DType::f32, {e, slot}), got = poisoned(DType::f32, {e, slot});
  DeviceTensor dgot(got);
  for (bool device : {false, true}) {
    char* base = static_cast<char*>(device ? dgot.view().data : ref.view().data);
    std::vector<int64_t> table(static_cast<size_t>(e));
    for (int64_t g = 0; g < e; ++g) table[static_cast<size_t>(g)] = reinterpret_cast<int64_t>(base + g * slot_bytes);
    if (device) {
      ASSERT_EQ(cudaMemcpy(base, table.data(), table.size() * 8, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      std::memcpy(base, table.data(), table.size() * 8);
    }
    GroupedGemmWgradArgs args;
    args.x = device ? dx.view() : x.view();
    args.dy = device ? ddy.view() : dy.view();
    args.offsets = device ? doffsets.view() : offsets.view();
    args.w_ptrs = TensorView::contiguous(base, DType::i64, {e}, device ? Device::cuda : Device::host);
    args.w_dtype = DType::f32;
    call_op(grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad, args, device);
  }
  dgot.download(got);
  Expected want({e, slot});
  for (int64_t i = 0; i < e * slot; ++i) want.set(i, Expected::kClose, ref.get_at(i));
  EXPECT_TRUE(matches(got, want));
}

TEST(BackwardGpu, WgradCasesC01C02C09) {
  REQUIRE_GPU();
  // C01: sizes [162, 0, 2577, 446, 0, 83], H = 2048, N = 768, output poisoned (NaN pattern) before the call:
  // experts 1 and 4 exactly 0, the others as the reference.
  for (DType out : {DType::f32, DType::bf16}) {
    Wgrad p;
    p.m = 3268;
    p.h = 2048;
    p.n = 768;
    p.sizes = {162, 0, 2577, 446, 0, 83};
    p.out = out;
    p.transpose = out == DType::bf16;
    p.seed = 14000 + (out == DType::bf16);
    p.name = "C01 " + describe(p);
    check_wgrad(p);
  }
  {
    // C02: 32 rows as [0, 8, 8, 0, 16], H = N = 16, into an output that a previous call with other sizes
    // (every expert non-empty) has written: experts 0 and 3 exactly 0, no stale values.
    SCOPED_TRACE("C02");
    Wgrad p;
    p.m = 32;
    p.h = 16;
    p.n = 16;
    p.sizes = {0, 8, 8, 0, 16};
    const WgradInputs in(p);
    const HostTensor first_offsets = offsets_from_sizes({4, 6, 8, 6, 8});
    const DeviceTensor d_first_offsets(first_offsets);
    HostTensor ref = wgrad_initial(p), got = wgrad_initial(p);
    DeviceTensor dw(got);
    for (bool device : {false, true}) {
      for (int call = 0; call < 2; ++call) {
        GroupedGemmWgradArgs args;
        args.x = in.x.view(device);
        args.dy = in.dy.view(device);
        args.offsets = call == 0 ? (device ? d_first_offsets.view() : first_offsets.view()) : in.offsets.view(device);
        args.w = device ? dw.view() : ref.view();
        call_op(grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad, args, device);
      }
    }
    dw.download(got);
    EXPECT_TRUE(matches(got, expect_wgrad(p, naive::rows(in.offsets.host, p.m), ref, wgrad_initial(p))));
  }
  // C09: X (2560, 512), dY (2560, 1536), 2..12 experts whose sizes are multiples of 8 but not of 64.
  int variant = 0;
  for (int64_t e : {2, 7, 12}) {
    Wgrad p;
    p.m = 2560;
    p.h = 512;
    p.n = 1536;
    p.sizes.assign(static_cast<size_t>(e), 0);
    int64_t left = p.m / 8;
    for (int64_t g = 0; g + 1 < e; ++g) {
      p.sizes[g] = 8 * (1 + (g * 37 + 11) % (left / (e - g)));
      left -= p.sizes[g] / 8;
    }
    p.sizes[e - 1] = 8 * left;
    bool all_64 = true;
    for (int64_t s : p.sizes) all_64 = all_64 && s % 64 == 0;
    ASSERT_FALSE(all_64) << "C09 wants offsets that are not multiples of 64";
    p.out = variant % 2 ? DType::bf16 : DType::f32;
    p.transpose = variant == 1;
    p.seed = 14100 + 10 * variant++;
    p.name = "C09 E=" + std::to_string(e) + " " + describe(p);
    check_wgrad(p);
  }
}

}  // namespace
}  // namespace moegemm::testing
