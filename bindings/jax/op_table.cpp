// The table of ops: each entry composes an op's builder with its workspace query and its run.
#include "op_table.hpp"

#include <array>
#include <string>

#include "op_builders.hpp"

namespace moegemm::jax_binding {

namespace {

template <class Args, Args (*Build)(const Operands&, const Options&),
          std::size_t (*Workspace)(const Args&),
          void (*Run)(const Args&, void*, std::size_t, cudaStream_t)>
constexpr OpEntry entry(const char* name) {
  return OpEntry{
      name,
      [](const Operands& ops, const Options& opt) { return Workspace(Build(ops, opt)); },
      [](const Operands& ops, const Options& opt, void* ws, std::size_t ws_bytes, cudaStream_t stream) {
        Run(Build(ops, opt), ws, ws_bytes, stream);
      }};
}

const std::array<OpEntry, 10> kOps = {
    entry<GroupedGemmArgs, build_grouped_gemm, grouped_gemm_workspace_bytes, grouped_gemm>(
        "grouped_gemm"),
    entry<GroupedGemmGluArgs, build_grouped_gemm_glu, grouped_gemm_glu_workspace_bytes,
          grouped_gemm_glu>("grouped_gemm_glu"),
    entry<GroupedGemmDgluArgs, build_grouped_gemm_dglu, grouped_gemm_dglu_workspace_bytes,
          grouped_gemm_dglu>("grouped_gemm_dglu"),
    entry<GroupedGemmSreluArgs, build_grouped_gemm_srelu, grouped_gemm_srelu_workspace_bytes,
          grouped_gemm_srelu>("grouped_gemm_srelu"),
    entry<GroupedGemmDsreluArgs, build_grouped_gemm_dsrelu, grouped_gemm_dsrelu_workspace_bytes,
          grouped_gemm_dsrelu>("grouped_gemm_dsrelu"),
    entry<GroupedGemmWgradArgs, build_grouped_gemm_wgrad, grouped_gemm_wgrad_workspace_bytes,
          grouped_gemm_wgrad>("grouped_gemm_wgrad"),
    entry<GemmSwigluArgs, build_gemm_swiglu, gemm_swiglu_workspace_bytes, gemm_swiglu>("gemm_swiglu"),
    entry<GemmAmaxArgs, build_gemm_amax, gemm_amax_workspace_bytes, gemm_amax>("gemm_amax"),
    entry<GemmSreluArgs, build_gemm_srelu, gemm_srelu_workspace_bytes, gemm_srelu>("gemm_srelu"),
    entry<GemmDsreluArgs, build_gemm_dsrelu, gemm_dsrelu_workspace_bytes, gemm_dsrelu>("gemm_dsrelu"),
};

}  // namespace

const OpEntry& find_op(std::string_view name) {
  for (const OpEntry& e : kOps) {
    if (name == e.name) return e;
  }
  std::string known;
  for (const OpEntry& e : kOps) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw Error(ErrorCode::invalid_argument,
              "op: expected one of " + known + ", got \"" + std::string(name) + "\"");
}

}  // namespace moegemm::jax_binding
