// The sub-commands of the moegemm program. Each returns the process exit code: 0 success, 1 failure
// (wrong values, runtime error), and throws UsageError for bad arguments (exit code 2).
#pragma once

#include <string>
#include <vector>

namespace moegemm::cli {

/// `moegemm run`: one MoE layer forward and backward per preset, verified and timed.
int run_command(const std::vector<std::string>& args);
/// `moegemm gemm`: one grouped GEMM (grouped_gemm) timed on the GPU, for the peer benchmark.
int gemm_command(const std::vector<std::string>& args);
/// `moegemm bench`: runs bench/peers.py with python3, passing `args` on.
int bench_command(const std::vector<std::string>& args, const std::string& argv0);

}  // namespace moegemm::cli
