// A grouped GEMM on the host backend through the installed headers and library, against a loop: exits 0
// when every row of both experts matches and the row past the last offset is untouched.
#include <moegemm/moegemm.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace moegemm;
  constexpr int64_t m = 5, k = 8, n = 8, e = 2;
  std::vector<float> a(m * k), b(e * n * k), d(m * n, -7168.f);
  for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<float>((i * 7) % 11) - 5.f;
  for (int64_t i = 0; i < e * n * k; ++i) b[i] = static_cast<float>((i * 5) % 13) - 6.f;
  std::vector<int32_t> offsets = {2, 4};  // row 4 is past the last offset
  GroupedGemmArgs args;
  args.a = TensorView::contiguous(a.data(), DType::f32, {m, k});
  args.b.dense = TensorView::contiguous(b.data(), DType::f32, {e, n, k});
  args.offsets = TensorView::contiguous(offsets.data(), DType::i32, {e});
  args.d = TensorView::contiguous(d.data(), DType::f32, {m, n});
  grouped_gemm(args, nullptr, grouped_gemm_workspace_bytes(args), nullptr);
  for (int64_t r = 0; r < m; ++r) {
    const int64_t g = r < offsets[0] ? 0 : 1;
    for (int64_t c = 0; c < n; ++c) {
      double want = -7168.0;
      if (r < offsets[1]) {
        want = 0.0;
        for (int64_t i = 0; i < k; ++i) want += double(a[r * k + i]) * b[(g * n + c) * k + i];
      }
      if (std::fabs(d[r * n + c] - want) > 1e-4) {
        std::printf("d[%lld, %lld] = %g, expected %g\n", static_cast<long long>(r), static_cast<long long>(c),
                    d[r * n + c], want);
        return 1;
      }
    }
  }
  std::printf("moegemm %s: consumer ok\n", kVersion);
  return 0;
}
