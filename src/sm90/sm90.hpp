// The sm_90a backend: workspace sizes and launches for device tensors (contract-checked arguments).
// Ops without a kernel yet throw Error(unsupported).
#pragma once

#include <cstddef>

#include "moegemm/ops.hpp"

namespace moegemm::sm90 {

/// True when the current device is compute capability 9.0 and the sm_90a kernels are in this build.
bool available();

/// Throws Error(unsupported) "<op>: device: expected a GPU of compute capability 9.0 ..., got ..." when
/// the current device cannot run the sm_90a kernels (none, or another architecture). Before anything is
/// launched or written; the verdict is cached per thread and device.
void require_device(const char* op);

std::size_t workspace_bytes(const GroupedGemmArgs& args);
std::size_t workspace_bytes(const GroupedGemmGluArgs& args);
std::size_t workspace_bytes(const GroupedGemmDgluArgs& args);
std::size_t workspace_bytes(const GroupedGemmSreluArgs& args);
std::size_t workspace_bytes(const GroupedGemmDsreluArgs& args);
std::size_t workspace_bytes(const GroupedGemmWgradArgs& args);
std::size_t workspace_bytes(const GemmSwigluArgs& args);
std::size_t workspace_bytes(const GemmAmaxArgs& args);
std::size_t workspace_bytes(const GemmSreluArgs& args);
std::size_t workspace_bytes(const GemmDsreluArgs& args);

void run(const GroupedGemmArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GroupedGemmGluArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GroupedGemmDgluArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GroupedGemmSreluArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GroupedGemmDsreluArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GroupedGemmWgradArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GemmSwigluArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GemmAmaxArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GemmSreluArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);
void run(const GemmDsreluArgs& args, void* workspace, std::size_t bytes, cudaStream_t stream);

}  // namespace moegemm::sm90
