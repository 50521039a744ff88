// Turns a failed CUDA runtime call into moegemm::Error(cuda_error) naming the call.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "moegemm/error.hpp"

namespace moegemm::cli {

inline void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(ErrorCode::cuda_error, std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace moegemm::cli

#define MOEGEMM_CLI_CUDA(call) ::moegemm::cli::cuda_check((call), #call)
