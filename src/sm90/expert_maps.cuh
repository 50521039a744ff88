// Per-expert B tensor maps for pointer-mode weights, written on the device from the (E,) address array.
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

}  // namespace moegemm::sm90
