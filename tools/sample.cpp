#include "sample.hpp"

#include <algorithm>
#include <random>
#include <set>

namespace moegemm::cli {

RowSample sample_rows(const std::vector<int32_t>& ends, int max_experts, int64_t max_rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto begin_of = [&](size_t e) -> int64_t { return e == 0 ? 0 : ends[e - 1]; };
  std::vector<int64_t> nonempty;
  for (size_t e = 0; e < ends.size(); ++e)
    if (ends[e] > begin_of(e)) nonempty.push_back(static_cast<int64_t>(e));
  RowSample s;
  if (nonempty.empty()) return s;

  std::set<int64_t> chosen{nonempty.front(), nonempty.back()};
  chosen.insert(*std::max_element(nonempty.begin(), nonempty.end(), [&](int64_t a, int64_t b) {
    return ends[a] - begin_of(a) < ends[b] - begin_of(b);
  }));
  std::shuffle(nonempty.begin(), nonempty.end(), rng);
  for (int64_t e : nonempty) {
    if (static_cast<int>(chosen.size()) >= max_experts) break;
    chosen.insert(e);
  }

  const int64_t quota = std::max<int64_t>(2, max_rows / static_cast<int64_t>(chosen.size()));
  for (int64_t e : chosen) {
    const int64_t lo = begin_of(e), hi = ends[e];
    std::set<int64_t> rows{lo, hi - 1};
    std::uniform_int_distribution<int64_t> pick(lo, hi - 1);
    for (int64_t tries = 0; static_cast<int64_t>(rows.size()) < std::min(quota, hi - lo) && tries < 4 * quota; ++tries)
      rows.insert(pick(rng));
    s.experts.push_back(e);
    s.rows.insert(s.rows.end(), rows.begin(), rows.end());
    s.ends.push_back(static_cast<int32_t>(s.rows.size()));
  }
  return s;
}

std::vector<int64_t> sample_columns(int64_t extent, int64_t count, uint64_t seed) {
  std::vector<int64_t> cols;
  if (extent <= count) {
    for (int64_t c = 0; c < extent; ++c) cols.push_back(c);
    return cols;
  }
  const int64_t blocks = extent / 8, want = std::max<int64_t>(2, count / 8);
  std::set<int64_t> chosen{0, blocks - 1};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, blocks - 1);
  while (static_cast<int64_t>(chosen.size()) < std::min(want, blocks)) chosen.insert(pick(rng));
  for (int64_t b : chosen)
    for (int64_t c = 8 * b; c < 8 * b + 8; ++c) cols.push_back(c);
  return cols;
}

TensorView flatten_experts(const TensorView& t) {
  return TensorView::contiguous(t.data, t.dtype, {t.shape[0] * t.shape[1], t.shape[2]}, t.device);
}

}  // namespace moegemm::cli
