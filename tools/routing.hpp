// Group sizes of a routed MoE batch (see the "routing" text of bench/workloads/moe_workloads.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moegemm::cli {

enum class Routing { uniform, zipf };

/// "uniform" or "zipf"; throws UsageError otherwise.
Routing parse_routing(const std::string& name);
const char* routing_name(Routing r);

/// Rows per expert for `rows` (token, slot) pairs over `experts` experts, unaligned (no padding).
/// uniform: each row picks an expert uniformly. zipf: p_e ~ 1/rank^1.2 with the ranks randomly permuted
/// over the experts. Deterministic for a given seed; the sizes sum to `rows`.
std::vector<int64_t> group_sizes(Routing routing, int64_t rows, int64_t experts, uint64_t seed);

/// Cumulative end row of each expert (the `offsets` operand of every op).
std::vector<int32_t> end_offsets(const std::vector<int64_t>& sizes);

}  // namespace moegemm::cli
