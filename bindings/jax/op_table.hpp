// The ops a JAX call can name: for each, its workspace size and its run, both from one call description.
#pragma once

#include <cstddef>
#include <string_view>

#include "binding_call.hpp"

namespace moegemm::jax_binding {

struct OpEntry {
  const char* name;  ///< the op's name in docs/ops.md, e.g. "grouped_gemm_glu"
  /// moegemm::X_workspace_bytes of the call (throws Error on a contract violation).
  std::size_t (*workspace_bytes)(const Operands& ops, const Options& opt);
  /// moegemm::X on the backend of the operands (throws Error).
  void (*run)(const Operands& ops, const Options& opt, void* workspace, std::size_t workspace_bytes,
              cudaStream_t stream);
};

/// The entry of op `name`; throws Error(invalid_argument) listing the known ops when there is none.
const OpEntry& find_op(std::string_view name);

}  // namespace moegemm::jax_binding
