#include "routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "usage_error.hpp"

namespace moegemm::cli {

Routing parse_routing(const std::string& name) {
  if (name == "uniform") return Routing::uniform;
  if (name == "zipf") return Routing::zipf;
  throw UsageError("--routing: expected uniform or zipf, got '" + name + "'");
}

const char* routing_name(Routing r) { return r == Routing::uniform ? "uniform" : "zipf"; }

std::vector<int64_t> group_sizes(Routing routing, int64_t rows, int64_t experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> weight(static_cast<size_t>(experts), 1.0);
  if (routing == Routing::zipf) {
    std::vector<int64_t> rank(static_cast<size_t>(experts));
    std::iota(rank.begin(), rank.end(), 1);
    std::shuffle(rank.begin(), rank.end(), rng);
    for (int64_t e = 0; e < experts; ++e) weight[e] = 1.0 / std::pow(static_cast<double>(rank[e]), 1.2);
  }
  std::discrete_distribution<int64_t> pick(weight.begin(), weight.end());
  std::vector<int64_t> sizes(static_cast<size_t>(experts), 0);
  for (int64_t r = 0; r < rows; ++r) ++sizes[pick(rng)];
  return sizes;
}

std::vector<int32_t> end_offsets(const std::vector<int64_t>& sizes) {
  std::vector<int32_t> ends(sizes.size());
  int64_t end = 0;
  for (size_t e = 0; e < sizes.size(); ++e) ends[e] = static_cast<int32_t>(end += sizes[e]);
  return ends;
}

}  // namespace moegemm::cli
