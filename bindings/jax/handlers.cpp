// The exported XLA FFI handlers: for every op one for platform CUDA (device kernels on XLA's stream,
// command-buffer compatible) and one for platform cpu (the CPU reference), under the symbols
// moegemm_jax_<op>_cuda and moegemm_jax_<op>_cpu.
//
// Every handler takes its operands as remaining arguments/results (the order of op_builders.hpp), the
// workspace as its last result and its options as attributes. Outputs arrive uninitialised and are
// written by the op alone, but for grouped_gemm_wgrad's w with accumulate: its input w aliased in, which the
// op adds into (or, handed in another buffer, copies into w on the stream first). The device handler never
// reads device memory on the host and launches the
// same work on every call (offsets stay on the device), hence kCmdBufferCompatible.
#include <exception>
#include <string>

#include "ffi_decode.hpp"
#include "op_table.hpp"

namespace moegemm::jax_binding {

namespace {

ffi::Error run_call(const char* op, Device device, cudaStream_t stream, const ffi::RemainingArgs& args,
                    const ffi::RemainingRets& rets, const ffi::Dictionary& attrs) {
  try {
    const OpEntry& entry = find_op(op);
    DecodedCall call = decode_call(args, rets, device);
    // Benchmarks of what a pre-filled output costs alias an extra buffer into an output; that buffer is
    // passed as trailing input(s) counted by the optional attribute "ignored_trailing_inputs" (i64)
    // and never read by the op. moegemm.jax never sets it.
    if (attrs.contains("ignored_trailing_inputs")) {
      const int64_t n = FfiOptions(attrs).count("ignored_trailing_inputs");
      if (n < 0 || static_cast<std::size_t>(n) > call.operands.in.size()) {
        throw Error(ErrorCode::invalid_argument, "ignored_trailing_inputs: expected 0.." +
                                                     std::to_string(call.operands.in.size()) + ", got " +
                                                     std::to_string(n));
      }
      call.operands.in.resize(call.operands.in.size() - static_cast<std::size_t>(n));
    }
    entry.run(call.operands, FfiOptions(attrs), call.workspace, call.workspace_bytes, stream);
    return ffi::Error::Success();
  } catch (const Error& e) {
    // The ops' own messages start with their name; the decoding's (a direct ffi_call of a target) get it here.
    const std::string message = e.what(), prefix = std::string(op) + ": ";
    if (message.rfind(prefix, 0) != 0) return to_ffi_error(Error(e.code(), prefix + message));
    return to_ffi_error(e);
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(op) + ": " + e.what());
  }
}

}  // namespace

}  // namespace moegemm::jax_binding

namespace {
namespace ffi = ::xla::ffi;
using moegemm::Device;
using moegemm::jax_binding::run_call;
}  // namespace

#define MOEGEMM_JAX_HANDLERS(op)                                                                     \
  static ffi::Error op##_cuda_impl(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, \
                                   ffi::Dictionary attrs) {                                         \
    return run_call(#op, Device::cuda, stream, args, rets, attrs);                                   \
  }                                                                                                  \
  static ffi::Error op##_cpu_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,                  \
                                  ffi::Dictionary attrs) {                                          \
    return run_call(#op, Device::host, nullptr, args, rets, attrs);                                  \
  }                                                                                                  \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(moegemm_jax_##op##_cuda, op##_cuda_impl,                             \
                                ffi::Ffi::Bind()                                                     \
                                    .Ctx<ffi::PlatformStream<cudaStream_t>>()                       \
                                    .RemainingArgs()                                                 \
                                    .RemainingRets()                                                 \
                                    .Attrs(),                                                        \
                                {ffi::Traits::kCmdBufferCompatible});                                \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(moegemm_jax_##op##_cpu, op##_cpu_impl,                               \
                                ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attrs())

MOEGEMM_JAX_HANDLERS(grouped_gemm);
MOEGEMM_JAX_HANDLERS(grouped_gemm_glu);
MOEGEMM_JAX_HANDLERS(grouped_gemm_dglu);
MOEGEMM_JAX_HANDLERS(grouped_gemm_srelu);
MOEGEMM_JAX_HANDLERS(grouped_gemm_dsrelu);
MOEGEMM_JAX_HANDLERS(grouped_gemm_wgrad);
MOEGEMM_JAX_HANDLERS(gemm_swiglu);
MOEGEMM_JAX_HANDLERS(gemm_amax);
MOEGEMM_JAX_HANDLERS(gemm_srelu);
MOEGEMM_JAX_HANDLERS(gemm_dsrelu);
