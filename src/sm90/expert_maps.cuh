// Per-expert tensor maps written on the device: B maps of pointer-mode weights (from the (E,) address
// array), and the weight gradient's A and B maps over each expert's rows (from the offsets).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace moegemm::sm90 {

/// Bytes of workspace for E per-expert tensor maps (128 bytes each, 128-byte aligned).
inline std::size_t expert_maps_bytes(int64_t num_experts) { return static_cast<std::size_t>(num_experts) * 128 + 128; }

/// Enqueues a kernel that writes maps[g] = `tmpl` with its global address replaced by ptrs[g], for every
/// expert g, and releases them to the tensor-map proxy. Reads the addresses on the device only.
/// Returns the 128-byte aligned start of the maps inside `workspace`.
CUtensorMap* launch_expert_maps(const CUtensorMap& tmpl, const int64_t* ptrs, int num_experts, void* workspace,
                                cudaStream_t stream);

struct RaggedKMaps {
  const CUtensorMap* a;  // (E,) maps of A, then
  const CUtensorMap* b;  // (E,) maps of B, both in the workspace
};

/// Enqueues a kernel that writes, for every expert g, `tmpl_a` and `tmpl_b` with their base address moved to
/// the expert's first row and their row extent (dim 1) set to its row count, from the clamped offsets (as
/// the schedulers clamp them). TMA then zero-fills past the expert's last row. Needs 2 expert_maps_bytes(E).
/// Also sets *tile_counter (the dynamic tile order's, or nullptr) to 0 and, where `w_ptrs` is given, copies
/// its E entries to `w_ptrs_copy`, so that the whole table is read before the GEMM writes through it.
RaggedKMaps launch_ragged_k_maps(const CUtensorMap& tmpl_a, const CUtensorMap& tmpl_b, const void* a,
                                 int64_t a_row_bytes, const void* b, int64_t b_row_bytes, const int* offsets,
                                 int num_experts, int rows, void* workspace, int* tile_counter,
                                 const int64_t* w_ptrs, int64_t* w_ptrs_copy, cudaStream_t stream);

}  // namespace moegemm::sm90
