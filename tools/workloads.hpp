// The model presets and single-GEMM workloads of bench/workloads/moe_workloads.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moegemm::cli {

/// One MoE layer shape. Rows M = tokens * top_k; up-projection N = 2 * intermediate, K = hidden;
/// down-projection N = hidden, K = intermediate.
struct ModelPreset {
  std::string name;
  int64_t tokens = 0;
  int64_t top_k = 0;
  int64_t experts = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t rows() const { return tokens * top_k; }
};

/// One grouped GEMM of the "gemms" list: M rows, N output columns, K contraction, E experts.
struct GemmWorkload {
  std::string name;
  int64_t m = 0, n = 0, k = 0, e = 0;
};

struct Workloads {
  std::vector<ModelPreset> models;  ///< in file order
  std::vector<GemmWorkload> gemms;
  std::string source;               ///< "embedded" or the file path
};

/// Throws UsageError "<who>: T tokens x top_k K<detail> exceed the 2147483647 rows that int32 expert offsets
/// address" when the T x K rows of a layer do not fit the offsets.
void check_rows(int64_t tokens, int64_t top_k, const std::string& who, const std::string& detail = "");

/// Throws UsageError "<who>: <tensor> (<sizes>) elements exceed 2^60, past what 64-bit byte counts of the
/// layer's buffers hold" when one of the layer's largest tensors (T*K x hidden, T*K x 2 intermediate,
/// experts x 2 intermediate x hidden) holds more than 2^60 elements: at up to 8 bytes an element their byte
/// counts would wrap, and a buffer smaller than the layer would be written.
void check_layer_elements(const ModelPreset& layer, const std::string& who);

/// The workloads file compiled into the program.
Workloads embedded_workloads();
/// Parses a workloads file. Throws UsageError when it cannot be read or does not have the expected fields.
Workloads load_workloads(const std::string& path);
/// The preset called `name`; throws UsageError listing the known names when there is none.
const ModelPreset& find_model(const Workloads& w, const std::string& name);

}  // namespace moegemm::cli
