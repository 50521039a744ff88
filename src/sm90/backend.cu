// Temporary: every op reports that it has no sm_90a kernel yet.
#include "sm90/sm90.hpp"

namespace moegemm::sm90 {

bool available() { return false; }

#define MOEGEMM_NO_KERNEL(Args, name)                                                                \
  std::size_t workspace_bytes(const Args&) { return 0; }                                             \
  void run(const Args&, void*, std::size_t, cudaStream_t) {                                          \
    throw Error(ErrorCode::unsupported, std::string(name) + ": no sm_90a kernel for this op yet");   \
  }
MOEGEMM_NO_KERNEL(GroupedGemmArgs, "grouped_gemm")
MOEGEMM_NO_KERNEL(GroupedGemmGluArgs, "grouped_gemm_glu")
MOEGEMM_NO_KERNEL(GroupedGemmDgluArgs, "grouped_gemm_dglu")
MOEGEMM_NO_KERNEL(GroupedGemmSreluArgs, "grouped_gemm_srelu")
MOEGEMM_NO_KERNEL(GroupedGemmDsreluArgs, "grouped_gemm_dsrelu")
MOEGEMM_NO_KERNEL(GroupedGemmWgradArgs, "grouped_gemm_wgrad")
MOEGEMM_NO_KERNEL(GemmSwigluArgs, "gemm_swiglu")
MOEGEMM_NO_KERNEL(GemmAmaxArgs, "gemm_amax")
MOEGEMM_NO_KERNEL(GemmSreluArgs, "gemm_srelu")
MOEGEMM_NO_KERNEL(GemmDsreluArgs, "gemm_dsrelu")

}  // namespace moegemm::sm90
