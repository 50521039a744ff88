// Extents at the kernels' 32-bit limits (docs/ops.md rule 4: M, K, N, H and the dGLU's 2I at most 2^31 - 1 on
// the cuda backend): an expert of 2^31 - 1 rows (its tile and k-block counts), the dGLU at the largest I, a
// dense weight gradient of more than 2^31 output rows (E x H, past TMA's 32-bit coordinates), and zero_tail
// over rows of 2^31 bytes and more. Each takes 13-97 GiB of device memory and skips itself where the device
// has less free (a skip is not a pass). Inputs are constant patterns filled on the device, so that the values
// are known exactly; outputs start poisoned. scripts/gpu_check.sh runs them once, with the heuristic's kernels.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/offsets.hpp"
#include "gpu/harness.hpp"

namespace moegemm::testing {
namespace {

constexpr uint16_t kBf16One = 0x3F80;
constexpr uint16_t kBf16Poison = 0x7fa5;
constexpr uint32_t kF32Poison = 0x7fa5a5a5u;

/// Skips the test where the device has less than `bytes` free.
#define REQUIRE_DEVICE_BYTES(bytes)                                                                   \
  do {                                                                                                \
    size_t free_ = 0, total_ = 0;                                                                     \
    if (cudaMemGetInfo(&free_, &total_) != cudaSuccess || free_ < static_cast<size_t>(bytes))         \
      GTEST_SKIP() << "needs " << ((bytes) >> 30) << " GiB of free device memory, has " << (free_ >> 30); \
  } while (0)

/// A raw device allocation (no host mirror: these buffers are tens of GiB).
struct Raw {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Raw(size_t n) : bytes(n) { cuda_ok(cudaMalloc(&p, n ? n : 16), "cudaMalloc"); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  ~Raw() {
    if (p) cudaFree(p);
  }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

/// Fills `count` elements of `bytes_per` bytes at dst with `pattern` (doubling device-to-device copies).
void fill_pattern(void* dst, size_t count, const void* pattern, size_t bytes_per) {
  if (!count) return;
  const size_t total = count * bytes_per;
  std::vector<uint8_t> seed(std::min<size_t>(total, 1 << 16));
  for (size_t i = 0; i < seed.size(); i += bytes_per) std::memcpy(seed.data() + i, pattern, bytes_per);
  cuda_ok(cudaMemcpy(dst, seed.data(), seed.size(), cudaMemcpyHostToDevice), "fill seed");
  for (size_t done = seed.size(); done < total;) {
    const size_t n = std::min(done, total - done);
    cuda_ok(cudaMemcpy(static_cast<uint8_t*>(dst) + done, dst, n, cudaMemcpyDeviceToDevice), "fill copy");
    done += n;
  }
}
void fill16(void* dst, size_t count, uint16_t v) { fill_pattern(dst, count, &v, 2); }
void fill32(void* dst, size_t count, uint32_t v) { fill_pattern(dst, count, &v, 4); }

float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// `count` 16-bit elements at device address `src` + `first` (elements).
std::vector<uint16_t> fetch16(const void* src, int64_t first, int64_t count) {
  std::vector<uint16_t> v(static_cast<size_t>(count));
  cuda_ok(cudaMemcpy(v.data(), static_cast<const uint16_t*>(src) + first, v.size() * 2, cudaMemcpyDeviceToHost),
          "fetch");
  return v;
}
std::vector<float> fetch32(const void* src, int64_t first, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  cuda_ok(cudaMemcpy(v.data(), static_cast<const float*>(src) + first, v.size() * 4, cudaMemcpyDeviceToHost),
          "fetch");
  return v;
}

HostTensor offsets_of_ends(const std::vector<int32_t>& ends) { return offsets_raw(ends); }

/// grouped_gemm_wgrad on the device: x (T, H) and dY (T, N) bf16, dense W (E, H, N) of `w_dtype`.
void run_dense_wgrad(const Raw& x, const Raw& dy, const DeviceTensor& offsets, const Raw& w, DType w_dtype, int64_t e,
                     int64_t t, int64_t h, int64_t n) {
  GroupedGemmWgradArgs args;
  args.x = TensorView::contiguous(x.p, DType::bf16, {t, h}, Device::cuda);
  args.dy = TensorView::contiguous(dy.p, DType::bf16, {t, n}, Device::cuda);
  args.offsets = offsets.view();
  args.w = TensorView::contiguous(w.p, w_dtype, {e, h, n}, Device::cuda);
  call_op(grouped_gemm_wgrad_workspace_bytes, grouped_gemm_wgrad, args, true);
}

// The dGLU's c and dc have 2I columns; the largest I the contract takes (2I = 2^31 - 16) puts the last
// n-tile's up columns at the top of the 32-bit range. M = 1, K = 8: ~25 GiB.
TEST(LargeExtentsGpu, DgluAtTheLargestHalfWidth) {
  REQUIRE_GPU();
  const int64_t m = 1, k = 8, i = (int64_t{1} << 30) - 8, two_i = 2 * i;
  REQUIRE_DEVICE_BYTES(i * k * 2 + 2 * two_i * 2 + (int64_t{1} << 30));
  Raw a(m * k * 2), b(i * k * 2), c(two_i * 2), dc(two_i * 2);
  fill16(a.p, m * k, kBf16One);
  fill16(b.p, i * k, kBf16One);
  fill16(c.p, two_i, kBf16One);  // gate = up = 1
  fill16(dc.p, two_i, kBf16Poison);
  HostTensor off = offsets_of_ends({1});
  DeviceTensor doff(off);
  GroupedGemmDgluArgs args;
  args.a = TensorView::contiguous(a.p, DType::bf16, {m, k}, Device::cuda);
  args.b.dense = TensorView::contiguous(b.p, DType::bf16, {1, i, k}, Device::cuda);
  args.c = TensorView::contiguous(c.p, DType::bf16, {m, two_i}, Device::cuda);
  args.dc = TensorView::contiguous(dc.p, DType::bf16, {m, two_i}, Device::cuda);
  args.offsets = doff.view();
  ASSERT_NO_THROW(call_op(grouped_gemm_dglu_workspace_bytes, grouped_gemm_dglu, args, true));
  // dH = 8 everywhere; swiglu at gate = up = 1: d_gate = 8 s (1 + (1 - s)), d_up = 8 s, s = sigmoid(1).
  const double s = 1.0 / (1.0 + std::exp(-1.0));
  const double want_gate = 8 * s * (2 - s), want_up = 8 * s;
  for (int64_t first : {int64_t{0}, i - 64}) {
    for (uint16_t v : fetch16(dc.p, first, 64)) EXPECT_NEAR(bf16_value(v), want_gate, 0.05) << "gate from " << first;
  }
  for (int64_t first : {i, two_i - 64}) {  // the last up columns
    for (uint16_t v : fetch16(dc.p, first, 64)) EXPECT_NEAR(bf16_value(v), want_up, 0.05) << "up from " << first;
  }
}

// The weight gradient with one expert of 2^31 - 1 rows: its k-block count, ceil(rows / 64), must not wrap
// (rows + 63 did), with the longest-first dynamic order (264 experts: the 263 empty ones get exact zeros)
// and with the static one (one expert). x has ones in its first and last rows and zeros between, dY is all
// ones, so every weight is exactly 2. H = N = 8: ~64 GiB.
void wgrad_one_huge_expert(int64_t e) {
  const int64_t t = INT32_MAX, h = 8, n = 8;
  REQUIRE_DEVICE_BYTES(2 * t * 8 * 2 + (int64_t{1} << 30));
  Raw x(t * h * 2), dy(t * n * 2), w(e * h * n * 4);
  cuda_ok(cudaMemset(x.p, 0, x.bytes), "x");
  fill16(x.as<uint16_t>(), h, kBf16One);                    // row 0
  fill16(x.as<uint16_t>() + (t - 1) * h, h, kBf16One);      // row T - 1
  fill16(dy.p, t * n, kBf16One);
  fill32(w.p, e * h * n, kF32Poison);
  HostTensor off = offsets_of_ends(std::vector<int32_t>(static_cast<size_t>(e), INT32_MAX));  // all rows: expert 0
  DeviceTensor doff(off);
  ASSERT_NO_THROW(run_dense_wgrad(x, dy, doff, w, DType::f32, e, t, h, n));
  const std::vector<float> got = fetch32(w.p, 0, e * h * n);
  for (int64_t j = 0; j < h * n; ++j) EXPECT_EQ(got[static_cast<size_t>(j)], 2.0f) << "expert 0, element " << j;
  for (int64_t j = h * n; j < e * h * n; ++j) {
    ASSERT_EQ(got[static_cast<size_t>(j)], 0.0f) << "empty expert, element " << j;
  }
}
TEST(LargeExtentsGpu, WgradExpertOf2To31MinusOneRowsDynamicOrder) {
  REQUIRE_GPU();
  wgrad_one_huge_expert(264);
}
TEST(LargeExtentsGpu, WgradExpertOf2To31MinusOneRowsStaticOrder) {
  REQUIRE_GPU();
  wgrad_one_huge_expert(1);
}

// grouped_gemm with one expert of 2^31 - 1 rows: its tile count, ceil(rows / 128), must not wrap (rows + 127
// did, and the kernel computed no tile). K = N = 8, a has ones in its first and last rows: ~64 GiB.
TEST(LargeExtentsGpu, GroupedGemmExpertOf2To31MinusOneRows) {
  REQUIRE_GPU();
  const int64_t m = INT32_MAX, k = 8, n = 8;
  REQUIRE_DEVICE_BYTES(m * k * 2 + m * n * 2 + (int64_t{1} << 30));
  Raw a(m * k * 2), b(n * k * 2), d(m * n * 2);
  cuda_ok(cudaMemset(a.p, 0, a.bytes), "a");
  fill16(a.as<uint16_t>(), k, kBf16One);
  fill16(a.as<uint16_t>() + (m - 1) * k, k, kBf16One);
  fill16(b.p, n * k, kBf16One);
  fill16(d.p, m * n, kBf16Poison);
  HostTensor off = offsets_of_ends({INT32_MAX});
  DeviceTensor doff(off);
  GroupedGemmArgs args;
  args.a = TensorView::contiguous(a.p, DType::bf16, {m, k}, Device::cuda);
  args.b.dense = TensorView::contiguous(b.p, DType::bf16, {1, n, k}, Device::cuda);
  args.offsets = doff.view();
  args.d = TensorView::contiguous(d.p, DType::bf16, {m, n}, Device::cuda);
  ASSERT_NO_THROW(call_op(grouped_gemm_workspace_bytes, grouped_gemm, args, true));
  for (int64_t row : {int64_t{0}, m / 2, m - 1}) {
    for (uint16_t v : fetch16(d.p, row * n, n)) EXPECT_EQ(bf16_value(v), row == m / 2 ? 0.0f : 8.0f) << "row " << row;
  }
}

// The dbias finish reads its slots through the same tile table: dsrelu with dbias, experts of 2^31 - 100 and
// 99 rows, K = N = 8: ~97 GiB (an H200's memory).
TEST(LargeExtentsGpu, DsreluDbiasFinishWithAnExpertPast2To31Minus128Rows) {
  REQUIRE_GPU();
  const int64_t m = INT32_MAX, k = 8, n = 8;
  REQUIRE_DEVICE_BYTES(3 * m * 8 * 2 + (int64_t{2} << 30));
  Raw a(m * k * 2), b(2 * n * k * 2), c(m * n * 2), dc(m * n * 2), dbias(2 * n * 4);
  fill16(a.p, m * k, kBf16One);
  fill16(b.p, 2 * n * k, kBf16One);
  fill16(c.p, m * n, kBf16One);  // relu(c) = 1: dC = 2 * 8 = 16 everywhere
  fill16(dc.p, m * n, kBf16Poison);
  fill32(dbias.p, 2 * n, kF32Poison);
  HostTensor off = offsets_of_ends({INT32_MAX - 99, INT32_MAX});
  DeviceTensor doff(off);
  GroupedGemmDsreluArgs args;
  args.a = TensorView::contiguous(a.p, DType::bf16, {m, k}, Device::cuda);
  args.b.dense = TensorView::contiguous(b.p, DType::bf16, {2, n, k}, Device::cuda);
  args.c = TensorView::contiguous(c.p, DType::bf16, {m, n}, Device::cuda);
  args.dc = TensorView::contiguous(dc.p, DType::bf16, {m, n}, Device::cuda);
  args.dbias = TensorView::contiguous(dbias.p, DType::f32, {2, n}, Device::cuda);
  args.offsets = doff.view();
  ASSERT_NO_THROW(call_op(grouped_gemm_dsrelu_workspace_bytes, grouped_gemm_dsrelu, args, true));
  const std::vector<float> got = fetch32(dbias.p, 0, 2 * n);
  for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(got[static_cast<size_t>(n + j)], 16.0 * 99, 1.0) << "dbias[1]";
  for (uint16_t v : fetch16(dc.p, (m - 1) * n, n)) EXPECT_EQ(bf16_value(v), 16.0f);
}

// A dense weight gradient of more than 2^31 - 1 output rows (E x H = 300 x 2^23): TMA coordinates are 32-bit,
// so these weights take the 64-bit bounds-checked stores (experts from 256 on lay past 2^31 and were never
// stored). One row per expert, all ones: every weight is exactly 1. ~43 GiB (bf16 weights).
TEST(LargeExtentsGpu, WgradDenseOutputRowsPast2To31) {
  REQUIRE_GPU();
  const int64_t e = 300, h = int64_t{1} << 23, n = 8, t = e;
  REQUIRE_DEVICE_BYTES(e * h * n * 2 + t * h * 2 + (int64_t{1} << 30));
  Raw x(t * h * 2), dy(t * n * 2), w(e * h * n * 2);
  fill16(x.p, t * h, kBf16One);
  fill16(dy.p, t * n, kBf16One);
  fill16(w.p, e * h * n, kBf16Poison);
  std::vector<int32_t> ends(static_cast<size_t>(e));
  for (int64_t g = 0; g < e; ++g) ends[static_cast<size_t>(g)] = static_cast<int32_t>(g + 1);
  HostTensor off = offsets_of_ends(ends);
  DeviceTensor doff(off);
  ASSERT_NO_THROW(run_dense_wgrad(x, dy, doff, w, DType::bf16, e, t, h, n));
  for (int64_t g : {int64_t{0}, int64_t{255}, int64_t{256}, e - 1}) {
    for (int64_t row : {int64_t{0}, h - 1}) {
      for (uint16_t v : fetch16(w.p, (g * h + row) * n, n)) {
        EXPECT_EQ(bf16_value(v), 1.0f) << "expert " << g << " row " << row;
      }
    }
  }
}

// zero_tail over rows of 2^31 bytes and more: bf16 N = 2^30 + 8, f32 N = 2^29 (the row's byte count wrapped
// in 32 bits and the tail stayed poisoned). Two rows, one in the expert: ~21 GiB (bf16) / ~13 GiB (f32).
void zero_tail_wide(DType out, int64_t n) {
  const int64_t m = 2, k = 8, es = out == DType::f32 ? 4 : 2;
  REQUIRE_DEVICE_BYTES(n * k * 2 + m * n * es + (int64_t{1} << 30));
  Raw a(m * k * 2), b(n * k * 2), d(m * n * es);
  fill16(a.p, m * k, kBf16One);
  fill16(b.p, n * k, kBf16One);
  if (es == 4) fill32(d.p, m * n, kF32Poison);
  else fill16(d.p, m * n, kBf16Poison);
  HostTensor off = offsets_of_ends({1});
  DeviceTensor doff(off);
  GroupedGemmArgs args;
  args.a = TensorView::contiguous(a.p, DType::bf16, {m, k}, Device::cuda);
  args.b.dense = TensorView::contiguous(b.p, DType::bf16, {1, n, k}, Device::cuda);
  args.offsets = doff.view();
  args.d = TensorView::contiguous(d.p, out, {m, n}, Device::cuda);
  args.zero_tail = true;
  ASSERT_NO_THROW(call_op(grouped_gemm_workspace_bytes, grouped_gemm, args, true));
  for (int64_t first : {n, n + n / 2, 2 * n - 64}) {  // row 1, the tail
    if (es == 4) {
      for (float v : fetch32(d.p, first, 64)) EXPECT_EQ(v, 0.0f) << "tail element from " << first;
    } else {
      for (uint16_t v : fetch16(d.p, first, 64)) EXPECT_EQ(v, 0) << "tail element from " << first;
    }
  }
}
TEST(LargeExtentsGpu, ZeroTailRowsOf2To31BytesBf16) {
  REQUIRE_GPU();
  zero_tail_wide(DType::bf16, (int64_t{1} << 30) + 8);  // row_bytes wraps negative
}
TEST(LargeExtentsGpu, ZeroTailRowsOf2To31BytesF32) {
  REQUIRE_GPU();
  zero_tail_wide(DType::f32, int64_t{1} << 29);  // row_bytes = INT_MIN: ~13 GiB
}

}  // namespace
}  // namespace moegemm::testing
