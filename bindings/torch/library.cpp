// The torch.ops.moegemm library: one schema per op of docs/ops.md, and its kernels on the CPU and CUDA
// dispatch keys (same code; the moegemm backend follows the tensors' device).
//
// Schema conventions (docs/torch.md):
//  - b_layout "nk": weights (E, N, K), K contiguous; "kn": weights (E, K, N), N contiguous.
//  - Optional outputs are requested with a bool flag (generate_c, compute_dprob, ...); an output not
//    requested comes back as an empty tensor of shape (0,). Every output is returned, none is Tensor?.
//  - Outputs are fresh, uninitialised tensors (at::empty); mutation is declared with Tensor(a!) only
//    where the op writes into a tensor the caller passes (grouped_gemm_wgrad.accumulate).
//  - Output dtypes default to a's dtype (dc: c's dtype); dprob and amax are float32, dbias defaults to
//    float32, wgrad to float32 (float64 for float64 inputs on the CPU backend).
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>

#include "registration.hpp"

namespace {

// Layout-sensitive ops: the kernels read the strides they are given, so compiled graphs must hand them
// exactly the strides eager mode would.
const std::vector<at::Tag> kTags = {at::Tag::needs_exact_strides};

/// The dispatcher's handle of grouped_gemm_wgrad.accumulate, for the kernels below that call the keys after
/// their own.
const auto& wgrad_accumulate_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("moegemm::grouped_gemm_wgrad", "accumulate")
                             .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         bool, bool)>();
  return op;
}

// grouped_gemm_wgrad.accumulate returns nothing, so the not-implemented fallback has no output to mark, and
// a gradient owed to x or dy would be dropped without a word: refused at the call instead. The rest is the
// fallback's: a w that requires grad is checked as torch checks the self of any in-place op (a leaf, or a
// view of one, is refused), and w's own history is kept (what the op adds does not depend on it:
// d w_after / d w_before is the identity).
void wgrad_accumulate_autograd(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& offsets,
                               const at::Tensor& w, bool transpose_output, bool validate) {
  // Forward AD ignores grad mode, and a dual tensor need not require grad: refused as the fallback refuses it
  // for the other ops (w's own tangent stays right: the sum added does not depend on w).
  for (const auto& [t, name] : {std::pair{&x, "x"}, std::pair{&dy, "dy"}}) {
    TORCH_CHECK_NOT_IMPLEMENTED(!t->_fw_grad(/*level=*/0).defined(), "grouped_gemm_wgrad.accumulate: ", name,
                                ": expected a tensor without a forward-mode tangent (the op has no forward ",
                                "derivative), got a dual tensor; pass its primal (torch.autograd.forward_ad.",
                                "unpack_dual)");
  }
  if (at::GradMode::is_enabled()) {
    for (const auto& [t, name] : {std::pair{&x, "x"}, std::pair{&dy, "dy"}}) {
      TORCH_CHECK_NOT_IMPLEMENTED(!t->requires_grad(), "grouped_gemm_wgrad.accumulate: ", name,
                                  ": expected a tensor that does not require grad (the op has no derivative ",
                                  "and returns nothing autograd could mark), got one that requires grad; detach ",
                                  "it, or call it under torch.no_grad()");
    }
  }
  torch::autograd::check_inplace(w, w.requires_grad());  // x and dy do not require grad (refused above)
  at::AutoDispatchBelowADInplaceOrView guard;
  wgrad_accumulate_op().call(x, dy, offsets, w, transpose_output, validate);
}

// torch's fallback for negative views clones a mutated argument and copies the op's output back into it, but
// accumulate returns nothing (its output is w itself): the fallback would read past the stack and free an
// argument it does not own. So a negative view of w is refused here; one of x, dy or offsets is read resolved.
void wgrad_accumulate_negative(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& offsets,
                               const at::Tensor& w, bool transpose_output, bool validate) {
  TORCH_CHECK_VALUE(!w.is_neg(), "grouped_gemm_wgrad.accumulate: w: expected a tensor that holds its own values, ",
                    "got a negative view (torch._neg_view), whose memory holds their negation");
  const at::Tensor xr = x.resolve_neg(), dyr = dy.resolve_neg(), offr = offsets.resolve_neg();
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::Negative);
  wgrad_accumulate_op().call(xr, dyr, offr, w, transpose_output, validate);
}

}  // namespace

TORCH_LIBRARY(moegemm, m) {
  m.def("grouped_gemm(Tensor a, Tensor b, Tensor offsets, *, str b_layout=\"nk\", Tensor? alpha=None, "
        "Tensor? prob=None, Tensor? bias=None, bool generate_c=False, ScalarType? out_dtype=None, "
        "bool zero_tail=False, bool validate=False) -> (Tensor d, Tensor c)",
        kTags);
  m.def("grouped_gemm_glu(Tensor a, Tensor b, Tensor offsets, *, str b_layout=\"nk\", Tensor? alpha=None, "
        "Tensor? prob=None, Tensor? bias=None, str activation=\"swiglu\", str glu_layout=\"halves\", "
        "float limit=7.0, float act_alpha=1.702, float linear_offset=1.0, bool generate_c=False, "
        "ScalarType? out_dtype=None, bool zero_tail=False, bool validate=False) -> (Tensor d, Tensor c)",
        kTags);
  m.def("grouped_gemm_dglu(Tensor a, Tensor b, Tensor c, Tensor offsets, *, str b_layout=\"nk\", "
        "Tensor? alpha=None, Tensor? beta=None, Tensor? prob=None, str activation=\"swiglu\", "
        "str glu_layout=\"halves\", float limit=7.0, float act_alpha=1.702, float linear_offset=1.0, "
        "bool compute_dprob=False, bool compute_dbias=False, bool compute_amax=False, "
        "ScalarType? dc_dtype=None, ScalarType? dbias_dtype=None, bool zero_tail=False, "
        "bool validate=False) -> (Tensor dc, Tensor dprob, Tensor dbias, Tensor amax)",
        kTags);
  m.def("grouped_gemm_srelu(Tensor a, Tensor b, Tensor offsets, *, str b_layout=\"nk\", Tensor? alpha=None, "
        "Tensor? prob=None, Tensor? bias=None, bool generate_c=False, ScalarType? out_dtype=None, "
        "bool zero_tail=False, bool validate=False) -> (Tensor d, Tensor c)",
        kTags);
  m.def("grouped_gemm_dsrelu(Tensor a, Tensor b, Tensor c, Tensor offsets, *, str b_layout=\"nk\", "
        "Tensor? alpha=None, Tensor? prob=None, bool compute_dprob=False, bool compute_dbias=False, "
        "bool compute_amax=False, ScalarType? dc_dtype=None, ScalarType? dbias_dtype=None, "
        "bool zero_tail=False, bool validate=False) -> (Tensor dc, Tensor dprob, Tensor dbias, Tensor amax)",
        kTags);
  m.def("grouped_gemm_wgrad(Tensor x, Tensor dy, Tensor offsets, *, bool transpose_output=False, "
        "ScalarType? out_dtype=None, bool validate=False) -> Tensor",
        kTags);
  m.def("grouped_gemm_wgrad.accumulate(Tensor x, Tensor dy, Tensor offsets, Tensor(a!) w, *, "
        "bool transpose_output=False, bool validate=False) -> ()",
        kTags);
  m.def("gemm_swiglu(Tensor a, Tensor b, *, str b_layout=\"nk\", float alpha=1.0, "
        "str glu_layout=\"interleaved32_up_first\", ScalarType? ab12_dtype=None, ScalarType? out_dtype=None) "
        "-> (Tensor ab12, Tensor c)",
        kTags);
  m.def("gemm_amax(Tensor a, Tensor b, *, str b_layout=\"nk\", ScalarType? out_dtype=None) "
        "-> (Tensor c, Tensor amax)",
        kTags);
  m.def("gemm_srelu(Tensor a, Tensor b, *, str b_layout=\"nk\", float alpha=1.0, Tensor? prob=None, "
        "Tensor? bias=None, bool generate_c=False, ScalarType? out_dtype=None) -> (Tensor d, Tensor c)",
        kTags);
  m.def("gemm_dsrelu(Tensor a, Tensor b, Tensor c, *, str b_layout=\"nk\", float alpha=1.0, "
        "Tensor? prob=None, bool compute_dprob=False, bool compute_dbias=False, bool compute_amax=False, "
        "ScalarType? dc_dtype=None, ScalarType? dbias_dtype=None) "
        "-> (Tensor dc, Tensor dprob, Tensor dbias, Tensor amax)",
        kTags);
}

TORCH_LIBRARY_IMPL(moegemm, CPU, m) {
  moegemm::torch_ops::register_grouped_forward(m);
  moegemm::torch_ops::register_grouped_backward(m);
  moegemm::torch_ops::register_wgrad(m);
  moegemm::torch_ops::register_dense(m);
}

#ifdef MOEGEMM_TORCH_CUDA
TORCH_LIBRARY_IMPL(moegemm, CUDA, m) {
  moegemm::torch_ops::register_grouped_forward(m);
  moegemm::torch_ops::register_grouped_backward(m);
  moegemm::torch_ops::register_wgrad(m);
  moegemm::torch_ops::register_dense(m);
}
#endif

// The ops have no derivative of their own (moegemm.torch builds autograd from them with
// torch.autograd.Function): calling one on inputs that require grad and back-propagating through it
// raises "derivative not implemented" instead of silently dropping the gradient.
TORCH_LIBRARY_IMPL(moegemm, Autograd, m) {
  for (const char* op : moegemm::torch_ops::kOps) {
    if (op != moegemm::torch_ops::kWgradAccumulate) m.impl(op, torch::autograd::autogradNotImplementedFallback());
  }
  m.impl("grouped_gemm_wgrad.accumulate", TORCH_FN(wgrad_accumulate_autograd));
}

TORCH_LIBRARY_IMPL(moegemm, Negative, m) {
  m.impl("grouped_gemm_wgrad.accumulate", TORCH_FN(wgrad_accumulate_negative));
}
