// One moegemm call from a torch op: device guard, workspace from the caching allocator, current stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include <ATen/ops/empty.h>

#include "device_context.hpp"
#include "errors.hpp"

namespace moegemm::torch_ops {

/// Runs `run(args, workspace, bytes, stream)` on `context`'s stream, with a workspace of
/// `workspace_bytes(args)` bytes allocated by at::empty on `anchor`'s device (not initialised; none when
/// 0). moegemm::Error from either call becomes the matching torch error.
template <class Args, class WorkspaceBytes, class Run>
void launch(const DeviceContext& context, const at::Tensor& anchor, const Args& args,
            WorkspaceBytes workspace_bytes, Run run) {
  with_torch_errors([&] {
    const std::size_t bytes = workspace_bytes(args);
    at::Tensor workspace;
    if (bytes > 0) {
      workspace = at::empty({static_cast<int64_t>(bytes)}, anchor.options().dtype(at::kByte));
    }
    run(args, bytes > 0 ? workspace.data_ptr() : nullptr, bytes, context.stream());
  });
}

}  // namespace moegemm::torch_ops
