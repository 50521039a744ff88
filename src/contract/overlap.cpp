#include "contract/overlap.hpp"

#include <algorithm>
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

/// a * b, or 2^100 (past every address) where it would not fit in 127 bits: only views that no rule admits
/// (extents or strides near 2^63) get there, and are then taken as reaching past every byte.
Wide product(Wide a, Wide b) {
  Wide p;
  return __builtin_mul_overflow(a, b, &p) ? Wide{1} << 100 : p;
}

Wide floor_div(Wide a, Wide b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
Wide ceil_div(Wide a, Wide b) { return -floor_div(-a, b); }

/// The sum over k in [0, n) of floor((a k + b) / m), for m > 0, modulo 2^128: only differences of two such
/// sums that fit are used, so a wrap in between cancels. Each step swaps the roles of a and m as Euclid's
/// algorithm does, so it takes O(log m) steps. The products stay below 2^128 for n < 2^63 and m <= 2^62.
using UWide = unsigned __int128;
UWide floor_sum(UWide n, UWide m, UWide a, UWide b) {
  UWide sum = 0;
  while (n > 0) {
    if (a >= m) {  // the whole multiples of m in a k
      sum += n * (n - 1) / 2 * (a / m);
      a %= m;
    }
    if (b >= m) {
      sum += n * (b / m);
      b %= m;
    }
    // Now a, b < m: floor((a k + b) / m) steps up by at most one per k. Counting the k below each step
    // instead is the same kind of sum with a and m exchanged, over the top / m steps.
    const UWide top = a * n + b;
    if (top < m) break;
    n = top / m;
    b = top % m;
    const UWide t = m;
    m = a;
    a = t;
  }
  return sum;
}

/// `rows` ranges of `width` bytes at `pitch`; one range where no padding separates them (a column-major view
/// of a contiguous block, the transpose torch makes), so that it is compared exactly with any other view.
Footprint matrix(Wide base, Wide pitch, Wide rows, Wide width) {
  if (pitch == width || rows == 1) return Footprint{base, 0, 1, product(rows, width)};
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
  return Footprint{base, 0, 1, product(last + 1, size)};
}

/// Whether footprint f has a byte in [lo, hi).
bool touches(const Footprint& f, Wide lo, Wide hi) {
  if (f.rows == 1) return f.base < hi && lo < f.base + f.width;
  // The first row that ends past lo, then whether it starts before hi.
  const Wide r0 = floor_div(lo - f.base - f.width, f.pitch) + 1;
  const Wide first = r0 < 0 ? 0 : r0;
  return first < f.rows && f.base + first * f.pitch < hi;
}

/// Whether two padded matrices (rows > 1, width < pitch) of any pitches share a byte, in O(log pitch). Row r of
/// x and row s of y share one iff r px - s py lies in [lo, hi], lo = d - x.width + 1, hi = d + y.width - 1,
/// d = y.base - x.base. Some s in [0, y.rows) is then at hand exactly for the r in [r_first, r_last] below
/// that have a multiple of py in [r px - hi, r px - lo], i.e. (r px - lo) mod py <= hi - lo: those r are
/// counted with two floor sums, (v mod m <= c) being floor(v / m) - floor((v - c - 1) / m).
bool padded_overlap(const Footprint& x, const Footprint& y) {
  // Beyond what the layout rules admit (strides reaching at most 2^62 bytes): whether the spans meet, a superset.
  if (x.pitch > (Wide{1} << 62) || y.pitch > (Wide{1} << 62)) {
    const auto end = [](const Footprint& f) {
      Wide e;
      return __builtin_add_overflow(product(f.rows - 1, f.pitch), f.base + f.width, &e) ? Wide{1} << 100 : e;
    };
    return x.base < end(y) && y.base < end(x);
  }
  const Wide d = y.base - x.base, lo = d - x.width + 1, hi = d + y.width - 1;
  const Wide r_first = std::max<Wide>(0, ceil_div(lo, x.pitch));  // some s >= 0: r px >= lo
  const Wide r_last = std::min<Wide>(x.rows - 1, floor_div(hi + (y.rows - 1) * y.pitch, x.pitch));  // some s < rows
  if (r_first > r_last) return false;
  const Wide span = hi - lo;
  if (span >= y.pitch - 1) return true;  // every residue is in range
  const Wide first = r_first * x.pitch - lo;  // >= 0
  const UWide n = static_cast<UWide>(r_last - r_first + 1), m = static_cast<UWide>(y.pitch);
  const UWide a = static_cast<UWide>(x.pitch % y.pitch), b = static_cast<UWide>(first % y.pitch);
  const UWide count = floor_sum(n, m, a, b) - floor_sum(n, m, a, b + m - static_cast<UWide>(span) - 1) + n;
  return count != 0;
}

}  // namespace

bool views_overlap(const TensorView& x, const TensorView& y) {
  const std::optional<Footprint> fx = footprint(x), fy = footprint(y);
  if (!fx || !fy) return false;
  if (fx->rows == 1) return touches(*fy, fx->base, fx->base + fx->width);
  if (fy->rows == 1) return touches(*fx, fy->base, fy->base + fy->width);
  return padded_overlap(*fx, *fy);
}

}  // namespace moegemm::contract
