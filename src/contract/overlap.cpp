#include "contract/overlap.hpp"

#include <cstdint>
#include <optional>

namespace moegemm::contract {
namespace {

/// Addresses and byte counts in 128 bits: an address may lie anywhere below 2^64 and a view's pitch times its
/// rows past 2^63, where 64-bit arithmetic would overflow.
using Wide = __int128;

/// The bytes a view may touch, as `rows` ranges [base + r * pitch, base + r * pitch + width); one range for a
/// contiguous view.
struct Footprint {
  Wide base;
  Wide pitch;
  Wide rows;
  Wide width;
};

Wide floor_div(Wide a, Wide b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

/// `rows` ranges of `width` bytes at `pitch`; one range where no padding separates them (a column-major view
/// of a contiguous block, the transpose torch makes), so that it is compared exactly with any other view.
Footprint matrix(Wide base, Wide pitch, Wide rows, Wide width) {
  if (pitch == width || rows == 1) return Footprint{base, 0, 1, rows * width};
  return Footprint{base, pitch, rows, width};
}

std::optional<Footprint> footprint(const TensorView& t) {
  if (!t.defined() || t.data == nullptr || t.numel() <= 0) return std::nullopt;
  const Wide base = static_cast<Wide>(reinterpret_cast<uintptr_t>(t.data));
  const auto size = static_cast<int64_t>(dtype_size(t.dtype));
  if (t.is_contiguous()) return Footprint{base, 0, 1, static_cast<Wide>(t.numel()) * size};
  if (t.rank == 2 && t.strides[1] == 1 && t.strides[0] >= t.shape[1]) {
    return matrix(base, static_cast<Wide>(t.strides[0]) * size, t.shape[0], static_cast<Wide>(t.shape[1]) * size);
  }
  if (t.rank == 2 && t.strides[0] == 1 && t.strides[1] >= t.shape[0]) {  // column-major: columns as the rows
    return matrix(base, static_cast<Wide>(t.strides[1]) * size, t.shape[1], static_cast<Wide>(t.shape[0]) * size);
  }
  // Any other view (a strided stack of weights): the bytes from its first element to its last, a superset of
  // what it touches. A dim of one element steps no stride, whatever its value; the strides the rules admit on
  // the others are non-negative and reach at most 2^62 bytes.
  // (Each dim's step is below 2^126; four of them could pass 2^127 only for views no rule admits, whose span
  // is then taken as everything from the base up.)
  Wide last = 0;
  for (int d = 0; d < t.stored_rank(); ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.strides[d] < 0) return Footprint{base, 0, 1, size};  // refused by the rules before any overlap check
    if (__builtin_add_overflow(last, static_cast<Wide>(t.shape[d] - 1) * t.strides[d], &last)) {
      return Footprint{base, 0, 1, Wide{1} << 100};
    }
  }
  return Footprint{base, 0, 1, (last + 1) * size};
}

/// Whether footprint f has a byte in [lo, hi).
bool touches(const Footprint& f, Wide lo, Wide hi) {
  if (f.rows == 1) return f.base < hi && lo < f.base + f.width;
  // The first row that ends past lo, then whether it starts before hi.
  const Wide r0 = floor_div(lo - f.base - f.width, f.pitch) + 1;
  const Wide first = r0 < 0 ? 0 : r0;
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
  const Wide d = fy->base - fx->base, p = fx->pitch;
  for (Wide q = floor_div(d + fy->width - 1, p); q * p > d - fx->width; --q) {
    if (q <= fx->rows - 1 && q >= -(fy->rows - 1)) return true;
  }
  return false;
}

}  // namespace moegemm::contract
