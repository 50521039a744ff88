// CPU reference of grouped_gemm_wgrad (docs/ops.md §5): W_g = X[rows_g]^T @ dY[rows_g], contracting over
// the expert's rows (ragged K). Empty experts get exact zeros, or are left alone with accumulate.
#include <vector>

#include "reference/grouped_product.hpp"
#include "reference/reference.hpp"

namespace moegemm::reference {
namespace {

// Output of expert g: element (h, n) of W_g lives at base[h * stride_h + n * stride_n].
struct WTarget {
  void* base;
  DType dtype;
  int64_t stride_h, stride_n;
};

WTarget expert_w(const GroupedGemmWgradArgs& args, int64_t g, int64_t H, int64_t N) {
  if (args.w.defined()) {
    const TensorView& w = args.w;
    void* base = static_cast<char*>(w.data) + g * w.strides[0] * int64_t(dtype_size(w.dtype));
    return args.transpose_output ? WTarget{base, w.dtype, w.strides[2], w.strides[1]}
                                 : WTarget{base, w.dtype, w.strides[1], w.strides[2]};
  }
  void* base = pointer_at(args.w_ptrs, g);
  return args.transpose_output ? WTarget{base, args.w_dtype, 1, H} : WTarget{base, args.w_dtype, N, 1};
}

template <class T>
void wgrad_impl(const GroupedGemmWgradArgs& args) {
  const int64_t M = args.x.shape[0], H = args.x.shape[1], N = args.dy.shape[1];
  const ExpertRows rows = expert_rows(args.offsets, M);
  PackedB<T> panel;
  // Every expert's target first, as the kernels' map prologue reads the whole table before any write: a
  // w_ptrs table inside some expert's output (not checked: docs/ops.md rule 9) is not read after it changed.
  std::vector<WTarget> targets;
  targets.reserve(static_cast<size_t>(rows.experts()));
  for (int64_t g = 0; g < rows.experts(); ++g) targets.push_back(expert_w(args, g, H, N));
  for (int64_t g = 0; g < rows.experts(); ++g) {
    const WTarget& w = targets[static_cast<size_t>(g)];
    const int64_t r0 = rows.begin[g], R = rows.rows(g);
    if (R == 0) {
      if (args.accumulate) continue;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) store<T>(w.base, w.dtype, h * w.stride_h + n * w.stride_n, T(0));
      continue;
    }
    // The expert's dY rows are the packed (K = R, N) operand; X^T blocks of kRowsPerTask H-rows are A.
    panel.pack(R, N, [&](int64_t k, int64_t n) { return at<T>(args.dy, r0 + k, n); });
    const int64_t blocks = (H + kRowsPerTask - 1) / kRowsPerTask;
    parallel_for(blocks, 2.0 * double(R) * double(H) * double(N), [&](int64_t blk) {
      const int64_t h0 = blk * kRowsPerTask, hn = std::min(kRowsPerTask, H - h0);
      const int64_t padded = (hn + kMR - 1) / kMR * kMR;
      std::vector<T> xt(static_cast<size_t>(padded * R), T(0));
      for (int64_t k = 0; k < R; ++k)
        for (int64_t i = 0; i < hn; ++i) xt[i * R + k] = at<T>(args.x, r0 + k, h0 + i);
      const int64_t ldp = panel.padded_n();
      std::vector<T> p(static_cast<size_t>(padded * ldp));
      packed_gemm(xt.data(), R, padded, panel, p.data(), ldp);
      for (int64_t i = 0; i < hn; ++i)
        for (int64_t n = 0; n < N; ++n) {
          const int64_t off = (h0 + i) * w.stride_h + n * w.stride_n;
          T v = p[i * ldp + n];
          if (args.accumulate) v += load<T>(w.base, w.dtype, off);
          store<T>(w.base, w.dtype, off, v);
        }
    });
  }
}

}  // namespace

void run(const GroupedGemmWgradArgs& args) {
  use_f64(args.x) ? wgrad_impl<double>(args) : wgrad_impl<float>(args);
}

}  // namespace moegemm::reference
