// One moegemm call from a torch op: device guard, workspace from the caching allocator, current stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include <ATen/ops/empty.h>

#include "device_context.hpp"
#include "errors.hpp"

namespace moegemm::torch_ops {

/// Every check the op makes before it launches (`check` is its X_check: the contract, the pointer rules of the
/// operands given, validate's read of the offsets on `context`'s stream); the workspace bytes the call needs.
/// The ops run it with their outputs as planned views (planned_view), before allocating them: an output may be
/// far larger than the inputs (an expanded `a`, a weight gradient of T = 0 rows), and a call the op refuses
/// must get the op's own error, not the allocator's. The offsets are then read: `args.validate` is cleared so
/// that the launch does not read them again. `op`, when given, names the errors (with_torch_errors).
template <class Args, class Check>
std::size_t check_before_allocation(const DeviceContext& context, Args& args, Check check, const char* op = nullptr) {
  const std::size_t bytes = with_torch_errors([&] { return check(args, context.stream()); }, op);
  if constexpr (requires { args.validate; }) args.validate = false;
  return bytes;
}

/// Runs `run(args, workspace, bytes, stream)` on `context`'s stream, with a workspace of `bytes` bytes
/// (check_before_allocation of the same call) allocated by at::empty on `anchor`'s device (not initialised;
/// none when 0). moegemm::Error from the run becomes the matching torch error, named after `op` when given.
template <class Args, class Run>
void launch(const DeviceContext& context, const at::Tensor& anchor, const Args& args, std::size_t bytes, Run run,
            const char* op = nullptr) {
  with_torch_errors([&] {
    at::Tensor workspace;
    if (bytes > 0) {
      workspace = at::empty({static_cast<int64_t>(bytes)}, anchor.options().dtype(at::kByte));
    }
    run(args, bytes > 0 ? workspace.data_ptr() : nullptr, bytes, context.stream());
  }, op);
}

}  // namespace moegemm::torch_ops
