// Command-line options of the `run` and `gemm` sub-commands (hand-parsed: a handful of flags).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moegemm/ops.hpp"
#include "routing.hpp"
#include "verify.hpp"

namespace moegemm::cli {

enum class BackendChoice { automatic, cpu, gpu };

struct RunOptions {
  std::optional<std::string> model;    ///< --model NAME; all presets when absent
  std::optional<int64_t> tokens;       ///< --tokens N (> 0); the preset's (GPU) or a reduced count (CPU) when absent
  Routing routing = Routing::uniform;  ///< --routing uniform|zipf
  uint64_t seed = 0;                   ///< --seed N
  std::optional<std::string> json;     ///< --json PATH: write the results there
  std::optional<std::string> workloads;///< --workloads PATH: instead of the embedded file
  BackendChoice backend = BackendChoice::automatic;  ///< --backend auto|cpu|gpu
  std::optional<Oracle> oracle;        ///< --oracle reference|spot; default reference (GPU), spot (CPU)
  int iters = 20;                      ///< --iters N timed calls per op (GPU), >= 1
  int warmup = 3;                      ///< --warmup N untimed calls per op (GPU)
};

struct GemmOptions {
  int64_t m = 0, n = 0, k = 0, e = 0;    ///< --m --n --k --e (all required, > 0)
  std::vector<int64_t> group_sizes;      ///< --group-sizes a,b,c (E values summing to <= M), else from routing
  Routing routing = Routing::uniform;    ///< --routing
  uint64_t seed = 0;                     ///< --seed
  BLayout layout = BLayout::kn;          ///< --layout kn|nk
  int iters = 30;                        ///< --iters
  int warmup = 5;                        ///< --warmup
  std::optional<std::string> json;       ///< --json PATH, "-" for stdout
};

/// Throw UsageError naming the offending flag or value.
RunOptions parse_run_options(const std::vector<std::string>& args);
GemmOptions parse_gemm_options(const std::vector<std::string>& args);

/// Throws UsageError unless a file can be created at `path` (its folder exists and is writable, and the path is
/// not a folder). A new file is probed by creating and removing it; an existing one (or a link) is left as is.
void check_writable_path(const std::string& path);

}  // namespace moegemm::cli
