// One moegemm call from a torch op: device guard, workspace from the caching allocator, current stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include <ATen/ops/empty.h>

#include "device_context.hpp"
#include "errors.hpp"

namespace moegemm::torch_ops {

/// The contract's check of `args`, the pointer rules aside; the workspace bytes the call needs. The ops run it
/// with their outputs as planned views (planned_view), before allocating them: an output may be far larger
/// than the inputs (an expanded `a`, a weight gradient of T = 0 rows), and a call the op refuses must get the
/// op's own error, not the allocator's. `op`, when given, names the errors (with_torch_errors).
template <class Args, class WorkspaceBytes>
std::size_t checked_workspace_bytes(const Args& args, WorkspaceBytes workspace_bytes, const char* op = nullptr) {
  return with_torch_errors([&] { return workspace_bytes(args); }, op);
}

/// Runs `run(args, workspace, bytes, stream)` on `context`'s stream, with a workspace of `bytes` bytes
/// (checked_workspace_bytes of the same call) allocated by at::empty on `anchor`'s device (not initialised;
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
