// The public entry points of ops.hpp: contract check, optional offsets check, then the backend of the
// operands (CPU reference for host tensors, sm_90a kernels for device tensors).
#include "moegemm/ops.hpp"

#include <cstring>
#include <string>

#include <cuda_runtime_api.h>

#include "contract/checks_pointers.hpp"
#include "contract/offsets.hpp"
#include "reference/reference.hpp"
#include "sm90/sm90.hpp"

namespace moegemm {
namespace {

/// M, the rows the offsets of an op split: of X for the weight gradient, of A for every other op.
template <class Args>
int64_t offsets_rows(const Args& args) {
  if constexpr (requires { args.x; }) return args.x.shape[0];
  else return args.a.shape[0];
}

template <class Args>
std::size_t workspace_for(const Args& args) {
  // Pointer rules skipped: the size depends only on shapes, dtypes and options.
  if (contract::check(args, contract::Pointers::ignore) == Device::host) return 0;
  return sm90::workspace_bytes(args);
}

/// The checks a call makes before it runs: the contract (pointer rules as `pointers` says), the device, then
/// validate's read of the offsets on `stream`. Returns the backend.
template <class Args>
Device check_before_run(const char* op, const Args& args, contract::Pointers pointers, cudaStream_t stream) {
  const Device backend = contract::check(args, pointers);
  if (backend == Device::cuda) sm90::require_device(op);  // before the offsets check copies from the device
  if constexpr (requires { args.validate; }) {
    if (args.validate) {
      contract::check_offsets_values(op, args.offsets, offsets_rows(args), stream);
    }
  }
  return backend;
}

template <class Args>
std::size_t check_planned(const char* op, const Args& args, cudaStream_t stream) {
  if (check_before_run(op, args, contract::Pointers::given, stream) == Device::host) return 0;
  return sm90::workspace_bytes(args);
}

/// Only the weight gradient has an operand to copy before the run: w_in, when it is not w itself.
template <class Args>
void copy_inputs(const char*, const Args&, Device, cudaStream_t) {}

/// w_in into w (both packed and disjoint, as checked), so that accumulate adds into w's values: a
/// host copy, or one device-to-device copy queued on `stream` before the kernels.
void copy_inputs(const char* op, const GroupedGemmWgradArgs& args, Device backend, cudaStream_t stream) {
  if (!args.w_in.defined() || args.w_in.data == args.w.data) return;
  const std::size_t bytes = static_cast<std::size_t>(args.w.numel()) * dtype_size(args.w.dtype);
  if (bytes == 0) return;
  if (backend == Device::host) {
    std::memcpy(args.w.data, args.w_in.data, bytes);
    return;
  }
  const cudaError_t status = cudaMemcpyAsync(args.w.data, args.w_in.data, bytes, cudaMemcpyDeviceToDevice, stream);
  if (status != cudaSuccess) {
    throw Error(ErrorCode::cuda_error,
                std::string(op) + ": w_in: copying into w failed: " + cudaGetErrorString(status));
  }
}

template <class Args>
void dispatch(const char* op, const Args& args, void* workspace, std::size_t workspace_bytes,
              cudaStream_t stream) {
  const Device backend = check_before_run(op, args, contract::Pointers::check, stream);
  if (backend == Device::host) {
    copy_inputs(op, args, backend, stream);
    reference::run(args);
    return;
  }
  const std::size_t needed = sm90::workspace_bytes(args);
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr)) {
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": workspace: expected a device buffer of at least " + std::to_string(needed) +
                    " bytes (" + op + "_workspace_bytes), got " +
                    (workspace == nullptr ? std::string("nullptr") : std::to_string(workspace_bytes) + " bytes"));
  }
  copy_inputs(op, args, backend, stream);  // after the last check: a refused call queues nothing
  sm90::run(args, workspace, workspace_bytes, stream);
}

}  // namespace

#define MOEGEMM_DEFINE_OP(name, Args)                                                                \
  std::size_t name##_workspace_bytes(const Args& args) { return workspace_for(args); }               \
  std::size_t name##_check(const Args& args, cudaStream_t stream) {                                  \
    return check_planned(#name, args, stream);                                                        \
  }                                                                                                  \
  void name(const Args& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {   \
    dispatch(#name, args, workspace, workspace_bytes, stream);                                        \
  }

MOEGEMM_DEFINE_OP(grouped_gemm, GroupedGemmArgs)
MOEGEMM_DEFINE_OP(grouped_gemm_glu, GroupedGemmGluArgs)
MOEGEMM_DEFINE_OP(grouped_gemm_dglu, GroupedGemmDgluArgs)
MOEGEMM_DEFINE_OP(grouped_gemm_srelu, GroupedGemmSreluArgs)
MOEGEMM_DEFINE_OP(grouped_gemm_dsrelu, GroupedGemmDsreluArgs)
MOEGEMM_DEFINE_OP(grouped_gemm_wgrad, GroupedGemmWgradArgs)
MOEGEMM_DEFINE_OP(gemm_swiglu, GemmSwigluArgs)
MOEGEMM_DEFINE_OP(gemm_amax, GemmAmaxArgs)
MOEGEMM_DEFINE_OP(gemm_srelu, GemmSreluArgs)
MOEGEMM_DEFINE_OP(gemm_dsrelu, GemmDsreluArgs)

#undef MOEGEMM_DEFINE_OP

void validate_offsets(const TensorView& offsets, int64_t M) {
  // The legacy default stream: the copy waits for work queued on blocking streams.
  contract::check_offsets_values("validate_offsets", offsets, M, nullptr);
}

bool device_kernels_available() { return sm90::available(); }

}  // namespace moegemm
