#include "contract/overlap.hpp"

#include <cstdint>
#include <limits>
#include <optional>

namespace moegemm::contract {
namespace {

/// The bytes a view may touch, as `rows` ranges [base + r * pitch, base + r * pitch + width); one range for a
/// contiguous view.
struct Footprint {
  int64_t base;
  int64_t pitch;
  int64_t rows;
  int64_t width;
};

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

std::optional<Footprint> footprint(const TensorView& t) {
  if (!t.defined() || t.data == nullptr || t.numel() <= 0) return std::nullopt;
  const auto base = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data));
  const auto size = static_cast<int64_t>(dtype_size(t.dtype));
  if (t.is_contiguous()) return Footprint{base, 0, 1, t.numel() * size};
  if (t.rank == 2 && t.strides[1] == 1 && t.strides[0] >= t.shape[1]) {
    return Footprint{base, t.strides[0] * size, t.shape[0], t.shape[1] * size};
  }
  if (t.rank == 2 && t.strides[0] == 1 && t.strides[1] >= t.shape[0]) {  // column-major: columns as the rows
    return Footprint{base, t.strides[1] * size, t.shape[1], t.shape[0] * size};
  }
  // Any other view (a strided stack of weights): the bytes from its first element to its last, a superset of
  // what it touches. Strides the rules admit are non-negative; a span past int64 (no such memory) is cut.
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    int64_t step = 0;
    if (t.strides[d] < 0 || __builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return Footprint{base, 0, 1, size};
    }
  }
  int64_t width = 0;
  if (__builtin_mul_overflow(last + 1, size, &width)) width = std::numeric_limits<int64_t>::max() - base;
  return Footprint{base, 0, 1, width};
}

/// Whether footprint f has a byte in [lo, hi).
bool touches(const Footprint& f, int64_t lo, int64_t hi) {
  if (f.rows == 1) return f.base < hi && lo < f.base + f.width;
  // The first row that ends past lo, then whether it starts before hi.
  const int64_t r0 = floor_div(lo - f.base - f.width, f.pitch) + 1;
  const int64_t first = r0 < 0 ? 0 : r0;
  return first < f.rows && f.base + first * f.pitch < hi;
}

}  // namespace

bool views_overlap(const TensorView& x, const TensorView& y) {
  const std::optional<Footprint> fx = footprint(x), fy = footprint(y);
  if (!fx || !fy) return false;
  if (fx->rows == 1) return touches(*fy, fx->base, fx->base + fx->width);
  if (fy->rows == 1) return touches(*fx, fy->base, fy->base + fy->width);
  if (fx->base == fy->base) return true;
  if (fx->pitch != fy->pitch) return false;  // not established: taken as disjoint (see the header)
  // Row r of x and row s of y share a byte iff (r - s) * pitch lies strictly between d - x.width and
  // d + y.width, d = y.base - x.base, with r - s in [-(y.rows - 1), x.rows - 1]. Widths are at most the
  // pitch, so at most two multiples of it lie in that interval.
  const int64_t d = fy->base - fx->base, p = fx->pitch;
  for (int64_t q = floor_div(d + fy->width - 1, p); q * p > d - fx->width; --q) {
    if (q <= fx->rows - 1 && q >= -(fy->rows - 1)) return true;
  }
  return false;
}

}  // namespace moegemm::contract
