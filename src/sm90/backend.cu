// The sm_90a backend entry points: decode each op's arguments into a kernel problem (m-grouped GEMM with
// the op's epilogue, or the k-grouped weight gradient), with its workspace size.
#include <string>

#include "sm90/device.hpp"
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
  // The contract admits a column-major A for grouped_gemm only (Rules::matrix_either_order).
  f.a_column_major = args.a.is_column_major();
  f.b_layout = args.b.layout;
  if (args.b.dense.defined()) {
    f.b = args.b.dense.data;
    f.b_row_stride = args.b.dense.stride(1);
    f.b_expert_stride = args.b.dense.stride(0);
    f.n = args.b.layout == BLayout::nk ? args.b.dense.size(1) : args.b.dense.size(2);
  } else {
    f.b_ptrs = args.b.ptrs.template ptr<const int64_t>();
    f.pointer_weights = true;
    f.n = args.b.n;
  }
  f.offsets = args.offsets.template ptr<const int>();
  f.num_experts = args.offsets.size(0);
  f.alpha = args.alpha.defined() ? args.alpha.template ptr<const float>() : nullptr;
  f.prob = args.prob.defined() ? args.prob.template ptr<const float>() : nullptr;
  if constexpr (requires { args.bias; }) {
    if (args.bias.defined()) {
      f.bias = args.bias.data;
      f.bias_f32 = args.bias.dtype == DType::f32;
    }
  }
  if constexpr (requires { args.d; }) f.d = args.d;
  f.c = args.c;
  f.zero_tail = args.zero_tail;
  return f;
}

template <class Args>
void set_backward_outputs(ForwardProblem& f, const Args& args) {
  f.preact = args.c;
  f.d = args.dc;
  f.c = TensorView{};
  f.dprob = args.dprob;
  f.dbias = args.dbias;
  f.amax = args.amax;
  f.bias = nullptr;
}

/// The dense (one-group) form of an m-grouped problem: B is one (N, K) or (K, N) matrix, alpha a scalar.
ForwardProblem dense_problem(const char* op, const TensorView& a, const TensorView& b, BLayout layout, float alpha) {
  ForwardProblem f;
  f.op = op;
  f.a = a;
  f.m = a.size(0);
  f.k = a.size(1);
  f.b = b.data;
  f.b_row_stride = b.stride(0);
  f.b_layout = layout;
  f.n = layout == BLayout::nk ? b.size(0) : b.size(1);
  f.alpha_scalar = alpha;
  return f;
}

}  // namespace

bool available() { return current_device().mismatch.empty(); }

void require_device(const char* op) {
  const std::string& mismatch = current_device().mismatch;
  if (mismatch.empty()) return;
  throw Error(ErrorCode::unsupported, std::string(op) +
                                          ": device: expected a GPU of compute capability 9.0 for cuda tensors "
                                          "(the sm_90a kernels: H100, H200), got " +
                                          mismatch);
}

template <class Args>
std::size_t grouped_workspace(const char* op, const Args& args) {
  return workspace_bytes(grouped_problem(op, args));
}

std::size_t workspace_bytes(const GroupedGemmArgs& args) { return grouped_workspace("grouped_gemm", args); }
void run(const GroupedGemmArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = grouped_problem("grouped_gemm", args);
  f.workspace = workspace;
  launch_forward(f, stream);
}

std::size_t workspace_bytes(const GroupedGemmGluArgs& args) { return grouped_workspace("grouped_gemm_glu", args); }
void run(const GroupedGemmGluArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = grouped_problem("grouped_gemm_glu", args);
  f.workspace = workspace;
  f.epilogue = EpilogueKind::glu;
  f.glu = args.glu;
  launch_forward(f, stream);
}

ForwardProblem dglu_problem(const GroupedGemmDgluArgs& args) {
  ForwardProblem f = grouped_problem("grouped_gemm_dglu", args);
  set_backward_outputs(f, args);
  f.epilogue = EpilogueKind::dglu;
  f.glu = args.glu;
  f.beta = args.beta.defined() ? args.beta.template ptr<const float>() : nullptr;
  return f;
}
std::size_t workspace_bytes(const GroupedGemmDgluArgs& args) { return workspace_bytes(dglu_problem(args)); }
void run(const GroupedGemmDgluArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = dglu_problem(args);
  f.workspace = workspace;
  launch_forward(f, stream);
}

std::size_t workspace_bytes(const GroupedGemmSreluArgs& args) { return grouped_workspace("grouped_gemm_srelu", args); }
void run(const GroupedGemmSreluArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = grouped_problem("grouped_gemm_srelu", args);
  f.workspace = workspace;
  f.epilogue = EpilogueKind::srelu;
  launch_forward(f, stream);
}

ForwardProblem dsrelu_problem(const GroupedGemmDsreluArgs& args) {
  ForwardProblem f = grouped_problem("grouped_gemm_dsrelu", args);
  set_backward_outputs(f, args);
  f.epilogue = EpilogueKind::dsrelu;
  return f;
}
std::size_t workspace_bytes(const GroupedGemmDsreluArgs& args) { return workspace_bytes(dsrelu_problem(args)); }
void run(const GroupedGemmDsreluArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = dsrelu_problem(args);
  f.workspace = workspace;
  launch_forward(f, stream);
}

/// W = x^T dy (H, N), or its transpose dy^T x (N, H): the operand whose columns are W's rows is A.
WgradProblem wgrad_problem(const GroupedGemmWgradArgs& args) {
  WgradProblem w;
  w.a = args.transpose_output ? args.dy : args.x;
  w.b = args.transpose_output ? args.x : args.dy;
  w.offsets = args.offsets.template ptr<const int>();
  w.num_experts = args.offsets.size(0);
  w.w = args.w;
  w.w_ptrs = args.w_ptrs.defined() ? args.w_ptrs.template ptr<const int64_t>() : nullptr;
  w.w_dtype = args.w_dtype;
  w.accumulate = args.accumulate;
  return w;
}
std::size_t workspace_bytes(const GroupedGemmWgradArgs& args) { return wgrad_workspace_bytes(args.offsets.size(0)); }
void run(const GroupedGemmWgradArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  WgradProblem w = wgrad_problem(args);
  w.workspace = workspace;
  launch_wgrad(w, stream);
}

// gemm_swiglu, gemm_amax and gemm_srelu run without a workspace (one group, no partial sums; the static tile
// order), so they ask for none.
std::size_t workspace_bytes(const GemmSwigluArgs&) { return 0; }
void run(const GemmSwigluArgs& args, void*, std::size_t, cudaStream_t stream) {
  ForwardProblem f = dense_problem("gemm_swiglu", args.a, args.b, args.b_layout, args.alpha);
  f.c = args.ab12;  // the pre-activation
  f.d = args.c;     // the gated output
  f.epilogue = EpilogueKind::glu;
  f.glu.activation = Activation::swiglu;
  f.glu.layout = args.layout;
  launch_forward(f, stream);
}

std::size_t workspace_bytes(const GemmAmaxArgs&) { return 0; }
void run(const GemmAmaxArgs& args, void*, std::size_t, cudaStream_t stream) {
  ForwardProblem f = dense_problem("gemm_amax", args.a, args.b, args.b_layout, 1.f);
  f.d = args.c;
  f.amax = args.amax;
  launch_forward(f, stream);
}

std::size_t workspace_bytes(const GemmSreluArgs&) { return 0; }
void run(const GemmSreluArgs& args, void*, std::size_t, cudaStream_t stream) {
  ForwardProblem f = dense_problem("gemm_srelu", args.a, args.b, args.b_layout, args.alpha);
  f.prob = args.prob.defined() ? args.prob.template ptr<const float>() : nullptr;
  if (args.bias.defined()) {  // the (N,) bias is the one expert's row
    f.bias = args.bias.data;
    f.bias_f32 = args.bias.dtype == DType::f32;
  }
  f.d = args.d;
  f.c = args.c;
  f.epilogue = EpilogueKind::srelu;
  launch_forward(f, stream);
}

ForwardProblem dense_dsrelu_problem(const GemmDsreluArgs& args) {
  ForwardProblem f = dense_problem("gemm_dsrelu", args.a, args.b, args.b_layout, args.alpha);
  f.prob = args.prob.defined() ? args.prob.template ptr<const float>() : nullptr;
  f.preact = args.c;
  f.d = args.dc;
  f.dprob = args.dprob;
  f.dbias = args.dbias.as_row();  // (1, N): the one expert's row
  f.amax = args.amax;
  f.epilogue = EpilogueKind::dsrelu;
  return f;
}
std::size_t workspace_bytes(const GemmDsreluArgs& args) { return workspace_bytes(dense_dsrelu_problem(args)); }
void run(const GemmDsreluArgs& args, void* workspace, std::size_t, cudaStream_t stream) {
  ForwardProblem f = dense_dsrelu_problem(args);
  f.workspace = workspace;
  launch_forward(f, stream);
}

}  // namespace moegemm::sm90
