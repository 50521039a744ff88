// Results of `moegemm run`: the printed table and the JSON document (schema in docs/cli.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "routing.hpp"
#include "verify.hpp"
#include "workloads.hpp"

namespace moegemm::cli {

enum class StepStatus { ok, no_kernel, failed };

struct StepResult {
  std::string label, function;
  int64_t m = 0, n = 0, k = 0;
  double flops = 0;                     ///< 2*m*n*k
  StepStatus status = StepStatus::ok;
  std::string error;                    ///< what failed (status failed) or why there is no kernel
  std::optional<double> time_us;        ///< GPU: median event time; CPU: host wall time of one call
  std::optional<double> dense_time_us;  ///< GPU only: cuBLAS dense GEMM of the same (m, n, k)
  std::optional<Verification> verification;
  bool passed() const;                  ///< no kernel yet counts as passed; a failure or a wrong value does not
  std::optional<double> tflops() const;
  std::optional<double> dense_tflops() const;
  std::optional<double> fraction_of_dense() const;  ///< tflops / dense_tflops
};

struct ModelResult {
  ModelPreset shape;
  std::vector<int64_t> group_sizes;
  std::vector<StepResult> steps;
  bool passed() const;
};

struct RunReport {
  bool gpu = false;
  std::string device;   ///< GPU name, or a description of the host
  std::string date;     ///< UTC, ISO 8601
  Routing routing = Routing::uniform;
  uint64_t seed = 0;
  bool reduced = false; ///< shapes were scaled down (CPU backend)
  int warmup = 0, iters = 0;
  std::vector<ModelResult> models;
  bool passed() const;
};

/// Human-readable table of one model's steps (stdout).
void print_model_table(const ModelResult& m, bool gpu);
/// Writes the JSON document; throws Error when the file cannot be written.
void write_json(const RunReport& r, const std::string& path);
/// Writes `text` to the file `path`; throws Error ("cannot write PATH") when it cannot be written in full.
void write_file(const std::string& path, const std::string& text);
/// Current UTC time, ISO 8601.
std::string utc_now();

}  // namespace moegemm::cli
