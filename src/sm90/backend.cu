// The sm_90a backend entry points: decode each op's arguments into a kernel problem, or report that the
// op has no kernel yet.
#include <string>

#include "sm90/expert_maps.cuh"
#include "sm90/launch.hpp"
#include "sm90/sm90.hpp"

namespace moegemm::sm90 {
namespace {

template <class Args>
ForwardProblem grouped_problem(const char* op, const Args& args) {
  ForwardProblem f;
  f.op = op;
  f.a = args.a;
  f.m = args.a.size(0);
  f.k = args.a.size(1);
  f.b_layout = args.b.layout;
  if (args.b.dense.defined()) {
    f.b = args.b.dense.data;
    f.n = args.b.layout == BLayout::nk ? args.b.dense.size(1) : args.b.dense.size(2);
  } else {
    f.b_ptrs = args.b.ptrs.template ptr<const int64_t>();
    f.n = args.b.n;
  }
  f.offsets = args.offsets.template ptr<const int>();
  f.num_experts = args.offsets.size(0);
  f.alpha = args.alpha.defined() ? args.alpha.template ptr<const float>() : nullptr;
  f.prob = args.prob.defined() ? args.prob.template ptr<const float>() : nullptr;
  if (args.bias.defined()) {
    f.bias = args.bias.data;
    f.bias_f32 = args.bias.dtype == DType::f32;
  }
  f.d = args.d;
  f.c = args.c;
  f.zero_tail = args.zero_tail;
  return f;
}

[[noreturn]] void no_kernel(const char* op) {
  throw Error(ErrorCode::unsupported, std::string(op) + ": no sm_90a kernel for this op yet (the CPU backend "
                                                        "runs it on host tensors)");
}

}  // namespace

bool available() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

// Pointer-mode weights need one tensor map per expert in the workspace; dense weights need none.
template <class Args>
std::size_t forward_workspace(const Args& args) {
  return args.b.ptrs.defined() ? expert_maps_bytes(args.offsets.size(0)) : 0;
}

std::size_t workspace_bytes(const GroupedGemmArgs& args) { return forward_workspace(args); }
void run(const GroupedGemmArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = grouped_problem("grouped_gemm", args);
  f.workspace = workspace;
  launch_forward(f, stream);
}

std::size_t workspace_bytes(const GroupedGemmGluArgs& args) { return forward_workspace(args); }
void run(const GroupedGemmGluArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = grouped_problem("grouped_gemm_glu", args);
  f.workspace = workspace;
  f.glu_epilogue = true;
  f.glu = args.glu;
  launch_forward(f, stream);
}

std::size_t workspace_bytes(const GemmSwigluArgs&) { return 0; }
void run(const GemmSwigluArgs& args, void*, std::size_t, cudaStream_t stream) {
  ForwardProblem f;
  f.op = "gemm_swiglu";
  f.a = args.a;
  f.m = args.a.size(0);
  f.k = args.a.size(1);
  f.b = args.b.data;
  f.b_layout = args.b_layout;
  f.n = args.b_layout == BLayout::nk ? args.b.size(0) : args.b.size(1);
  f.alpha_scalar = args.alpha;
  f.c = args.ab12;  // the pre-activation
  f.d = args.c;     // the gated output
  f.glu_epilogue = true;
  f.glu.activation = Activation::swiglu;
  f.glu.layout = args.layout;
  launch_forward(f, stream);
}

#define MOEGEMM_NO_KERNEL(Args, name)                                  \
  std::size_t workspace_bytes(const Args&) { return 0; }               \
  void run(const Args&, void*, std::size_t, cudaStream_t) { no_kernel(name); }
MOEGEMM_NO_KERNEL(GroupedGemmDgluArgs, "grouped_gemm_dglu")
MOEGEMM_NO_KERNEL(GroupedGemmSreluArgs, "grouped_gemm_srelu")
MOEGEMM_NO_KERNEL(GroupedGemmDsreluArgs, "grouped_gemm_dsrelu")
MOEGEMM_NO_KERNEL(GroupedGemmWgradArgs, "grouped_gemm_wgrad")
MOEGEMM_NO_KERNEL(GemmAmaxArgs, "gemm_amax")
MOEGEMM_NO_KERNEL(GemmSreluArgs, "gemm_srelu")
MOEGEMM_NO_KERNEL(GemmDsreluArgs, "gemm_dsrelu")
#undef MOEGEMM_NO_KERNEL

}  // namespace moegemm::sm90
