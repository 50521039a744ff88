// `moegemm gemm`: one grouped_gemm (bf16, B as (E,K,N) or (E,N,K)) timed on the GPU, with inputs rotated over
// copies that together exceed twice the L2 cache, so that no call finds its operands cached by the previous one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cuda_check.hpp"
#include "options.hpp"
#include "report.hpp"
#include "routing.hpp"
#include "tensor_store.hpp"
#include "timing.hpp"
#include "usage_error.hpp"

namespace moegemm::cli {

namespace {

/// grouped_gemm's contract on the shapes alone, through a workspace query (which reads no data): a shape the op
/// rejects is a usage error on every machine, with or without a GPU. The views are device views, as those the
/// command measures: the contract's limits for the sm_90a kernels (M, N, K at most 2^31 - 1) apply, which host
/// views, served by the CPU reference at any size, would not meet.
void check_shapes(const GemmOptions& o) {
  constexpr Device kDevice = Device::cuda;
  GroupedGemmArgs g;
  g.a = TensorView::contiguous(nullptr, DType::bf16, {o.m, o.k}, kDevice);
  g.b.dense = o.layout == BLayout::kn ? TensorView::contiguous(nullptr, DType::bf16, {o.e, o.k, o.n}, kDevice)
                                      : TensorView::contiguous(nullptr, DType::bf16, {o.e, o.n, o.k}, kDevice);
  g.b.layout = o.layout;
  g.offsets = TensorView::contiguous(nullptr, DType::i32, {o.e}, kDevice);
  g.d = TensorView::contiguous(nullptr, DType::bf16, {o.m, o.n}, kDevice);
  try {
    grouped_gemm_workspace_bytes(g);
  } catch (const Error& e) {
    throw UsageError(std::string("gemm: the shapes of --m, --n, --k and --e: ") + e.what());
  }
}

}  // namespace

int gemm_command(const std::vector<std::string>& args) {
  const GemmOptions o = parse_gemm_options(args);
  check_shapes(o);
  nlohmann::ordered_json doc = {{"schema", "moegemm-gemm/1"}, {"M", o.m}, {"N", o.n}, {"K", o.k}, {"E", o.e},
                                {"layout", o.layout == BLayout::kn ? "kn" : "nk"}, {"group_sizes", nullptr},
                                {"warmup", o.warmup}, {"iters", o.iters}};
  if (!o.group_sizes.empty()) doc["group_sizes"] = o.group_sizes;
  int code = 0;
  if (!device_kernels_available()) {
    // Routed sizes are drawn row by row, O(M): without a GPU there is nothing to draw them for.
    doc["rotating_copies"] = nullptr;  // every key of the schema is present; nothing was measured
    doc["device"] = nullptr;
    doc["status"] = "no gpu";
    doc["error"] = "no CUDA GPU that runs the sm_90a kernels was found; moegemm gemm measures the GPU only";
    doc["time_us"] = nullptr;
    doc["tflops"] = nullptr;
    std::fprintf(stderr, "%s\n", doc["error"].get<std::string>().c_str());
    code = 1;
  } else {
    int dev = 0, l2 = 0;
    cudaDeviceProp prop{};
    MOEGEMM_CLI_CUDA(cudaGetDevice(&dev));
    MOEGEMM_CLI_CUDA(cudaGetDeviceProperties(&prop, dev));
    MOEGEMM_CLI_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    doc["device"] = prop.name;
    const double operand_bytes = 2.0 * (double(o.m) * o.k + double(o.e) * o.n * o.k);
    const int copies = static_cast<int>(std::clamp(std::ceil(2.0 * l2 / operand_bytes), 1.0, 16.0));
    doc["rotating_copies"] = copies;

    const std::vector<int64_t> sizes =
        o.group_sizes.empty() ? group_sizes(o.routing, o.m, o.e, o.seed) : o.group_sizes;
    doc["group_sizes"] = sizes;
    const std::vector<int32_t> ends = end_offsets(sizes);
    const OwnedTensor offsets = make_tensor(Device::cuda, DType::i32, {o.e});
    copy_from_host(offsets.view.data, ends.data(), ends.size() * sizeof(int32_t), Device::cuda);
    const OwnedTensor d = make_tensor(Device::cuda, DType::bf16, {o.m, o.n});
    std::vector<GroupedGemmArgs> calls;
    std::vector<OwnedTensor> keep;
    for (int c = 0; c < copies; ++c) {
      OwnedTensor a = make_tensor(Device::cuda, DType::bf16, {o.m, o.k});
      OwnedTensor b = o.layout == BLayout::kn ? make_tensor(Device::cuda, DType::bf16, {o.e, o.k, o.n})
                                              : make_tensor(Device::cuda, DType::bf16, {o.e, o.n, o.k});
      fill_synthetic(a.view, o.seed + 2 * c + 1, 1.0f);
      fill_synthetic(b.view, o.seed + 2 * c + 2, 1.0f / std::sqrt(float(o.k)));
      GroupedGemmArgs g;
      g.a = a.view;
      g.b.dense = b.view;
      g.b.layout = o.layout;
      g.offsets = offsets.view;
      g.d = d.view;
      calls.push_back(g);
      keep.push_back(std::move(a));
      keep.push_back(std::move(b));
    }
    std::size_t ws_bytes = 0;
    for (const auto& g : calls) ws_bytes = std::max(ws_bytes, grouped_gemm_workspace_bytes(g));
    const OwnedTensor ws = make_tensor(Device::cuda, DType::u8, {int64_t(ws_bytes)});
    MOEGEMM_CLI_CUDA(cudaDeviceSynchronize());
    cudaStream_t stream = nullptr;
    // A blocking stream: the fills and copies on the legacy default stream order themselves with it.
    MOEGEMM_CLI_CUDA(cudaStreamCreate(&stream));
    // Every key of the schema, in its order, whichever way the call ends (docs/cli.md).
    for (const char* key : {"status", "error", "time_us", "tflops"}) doc[key] = nullptr;
    try {
      size_t next = 0;
      const double us = median_device_us(
          [&](cudaStream_t s) { grouped_gemm(calls[next++ % calls.size()], ws.view.data, ws_bytes, s); }, stream,
          o.warmup, o.iters);
      doc["status"] = "ok";
      doc["time_us"] = us;
      // The rows in groups: those past the last end are not computed (fewer than M where --group-sizes sum less).
      const double rows = ends.empty() ? 0.0 : double(ends.back());
      doc["tflops"] = 2.0 * rows * o.n * o.k / us * 1e-6;
    } catch (const Error& e) {
      doc["status"] = e.code() == ErrorCode::unsupported ? "no kernel yet" : "failed";
      doc["error"] = e.what();
      code = e.code() == ErrorCode::unsupported ? 0 : 1;
    }
    cudaStreamDestroy(stream);
  }
  doc["date"] = utc_now();
  if (!o.json || *o.json == "-") {
    std::cout << doc.dump(1) << '\n';
  } else {
    write_file(*o.json, doc.dump(1) + '\n');
  }
  return code;
}

}  // namespace moegemm::cli
