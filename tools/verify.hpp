// Verification of one step of the layer on a sample of its rows (docs/cli.md, "Verification").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compare.hpp"
#include "moe_layer.hpp"

namespace moegemm::cli {

/// Where the expected values come from.
enum class Oracle {
  reference,   ///< the CPU reference backend run on a small host problem built from the sampled rows
  spot_check,  ///< independent double-precision math on the sampled rows (checks the CPU backend itself)
};
const char* oracle_name(Oracle o);

struct Verification {
  Oracle oracle = Oracle::reference;
  int64_t rows = 0;     ///< sampled rows (wgrad: rows that contribute to the sampled weight entries)
  int64_t experts = 0;  ///< sampled experts
  std::vector<Comparison> outputs;
  bool passed() const;
  double max_abs_err() const;
};

/// Copies the sampled inputs and outputs of `step` (which has run) to the host, computes the expected values
/// with `oracle` and compares them.
Verification verify_step(const MoeLayer& layer, const Step& step, Oracle oracle, uint64_t seed);

}  // namespace moegemm::cli
