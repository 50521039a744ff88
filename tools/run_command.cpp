// `moegemm run`: for each preset, build the layer, run its six ops once, verify a sample of rows, then time them.
#include <cstdint>
#include <cstdio>
#include <string>
#include <memory>

#include <cuda_runtime_api.h>

#include "commands.hpp"
#include "cuda_check.hpp"
#include "dense_gemm.hpp"
#include "moe_layer.hpp"
#include "moegemm/version.hpp"
#include "options.hpp"
#include "report.hpp"
#include "timing.hpp"
#include "usage_error.hpp"

namespace moegemm::cli {
namespace {

// The CPU backend runs the reference on two cores: shrink the layer so that a preset takes seconds.
constexpr int64_t kCpuDimDivisor = 8;
constexpr int64_t kCpuTokens = 64;

int64_t shrink(int64_t dim) { return std::max<int64_t>(8, (dim / kCpuDimDivisor + 7) / 8 * 8); }

ModelPreset layer_shape(const ModelPreset& preset, const RunOptions& o, bool gpu) {
  ModelPreset s = preset;
  if (!gpu) {
    s.hidden = shrink(preset.hidden);
    s.intermediate = shrink(preset.intermediate);
    s.tokens = kCpuTokens;
  }
  // Rows = tokens x top_k are addressed by int32 offsets, and the largest tensors hold at most 2^60 elements;
  // a preset's own sizes were checked when its file was read, and the CPU backend's are smaller.
  if (o.tokens) {
    s.tokens = *o.tokens;
    check_rows(s.tokens, s.top_k, "--tokens", " of " + s.name);
    check_layer_elements(s, "--tokens " + std::to_string(s.tokens) + " with model " + s.name +
                                (gpu ? "" : " (the CPU backend's sizes)"));
  }
  return s;
}

std::string gpu_name() {
  cudaDeviceProp prop{};
  int dev = 0;
  MOEGEMM_CLI_CUDA(cudaGetDevice(&dev));
  MOEGEMM_CLI_CUDA(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

// Why the CPU backend runs, in one plain sentence.
std::string cpu_reason() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return "no CUDA GPU found";
  return "the CUDA GPU (" + gpu_name() + ") cannot run the sm_90a kernels";
}

void progress(size_t i, size_t n, const std::string& model, const std::string& what) {
  std::fprintf(stderr, "[%zu/%zu] %s: %s ...\n", i + 1, n, model.c_str(), what.c_str());
}

StepResult run_step(const MoeLayer& layer, const Step& step, bool gpu, const RunOptions& o, cudaStream_t stream,
                    DenseGemmTimer* dense) {
  StepResult r;
  r.label = step.label;
  r.function = step.function;
  r.m = step.m;
  r.n = step.n;
  r.k = step.k;
  r.flops = step.flops();
  std::shared_ptr<void> workspace;
  std::size_t ws_bytes = 0;
  try {
    ws_bytes = step.workspace_bytes();
    if (ws_bytes) workspace = make_tensor(gpu ? Device::cuda : Device::host, DType::u8, {int64_t(ws_bytes)}).memory;
    for (const auto& out : step.outputs) poison(out);  // catches rows the op forgets to write
    if (gpu) MOEGEMM_CLI_CUDA(cudaDeviceSynchronize());
    const auto once = [&] { step.call(workspace.get(), ws_bytes, stream); };
    if (gpu) {
      once();
      MOEGEMM_CLI_CUDA(cudaStreamSynchronize(stream));
    } else {
      r.time_us = host_us(once);
    }
  } catch (const Error& e) {
    // Steps after this one read its outputs: give them valid data again.
    for (size_t i = 0; i < step.outputs.size(); ++i) fill_synthetic(step.outputs[i], 1000 + i, 1.0f);
    if (gpu) MOEGEMM_CLI_CUDA(cudaDeviceSynchronize());
    r.status = gpu && e.code() == ErrorCode::unsupported ? StepStatus::no_kernel : StepStatus::failed;
    r.error = e.what();
    return r;
  }
  try {
    const Oracle oracle = o.oracle.value_or(gpu ? Oracle::reference : Oracle::spot_check);
    r.verification = verify_step(layer, step, oracle, o.seed + 7);
  } catch (const Error& e) {
    r.status = StepStatus::failed;
    r.error = std::string("verification: ") + e.what();
    return r;
  }
  if (gpu) {
    r.time_us = median_device_us([&](cudaStream_t s) { step.call(workspace.get(), ws_bytes, s); }, stream, o.warmup,
                                 o.iters);
    r.dense_time_us = dense->median_us(step.m, step.n, step.k, stream, o.warmup, o.iters);
  }
  return r;
}

}  // namespace

int run_command(const std::vector<std::string>& args) {
  const RunOptions o = parse_run_options(args);
  const Workloads w = o.workloads ? load_workloads(*o.workloads) : embedded_workloads();
  std::vector<ModelPreset> presets;
  if (o.model) presets.push_back(find_model(w, *o.model));
  else presets = w.models;
  if (presets.empty()) throw UsageError("workloads file " + w.source + " has no models");

  const bool kernels = device_kernels_available();
  // --backend gpu asks for the GPU's shapes even where it has no GPU: a usage error is found (exit 2) before
  // the missing GPU is (exit 1), on every machine.
  const bool gpu = o.backend == BackendChoice::gpu || (kernels && o.backend != BackendChoice::cpu);
  // Every preset's shape first: a --tokens that a preset cannot take is refused before anything is printed.
  std::vector<ModelPreset> shapes;
  for (const ModelPreset& preset : presets) shapes.push_back(layer_shape(preset, o, gpu));
  if (gpu && !kernels) {
    std::fprintf(stderr, "moegemm: error: --backend gpu: %s\n", cpu_reason().c_str());
    return 1;
  }

  RunReport report;
  report.gpu = gpu;
  report.date = utc_now();
  report.routing = o.routing;
  report.seed = o.seed;
  report.reduced = !gpu;
  report.warmup = gpu ? o.warmup : 0;
  report.iters = gpu ? o.iters : 1;
  if (gpu) {
    report.device = gpu_name();
  } else {
    report.device = "host CPU (reference backend)";
    const std::string why = o.backend == BackendChoice::cpu ? "--backend cpu" : cpu_reason();
    std::printf("%s: running the CPU reference backend on a reduced workload (tokens=%lld, hidden and intermediate "
                "/%lld); times are host times of the CPU backend, not GPU numbers\n",
                why.c_str(), (long long)(o.tokens ? *o.tokens : kCpuTokens), (long long)kCpuDimDivisor);
  }
  std::printf("moegemm %s run on %s, routing %s, seed %llu\n", kVersion, report.device.c_str(),
              routing_name(o.routing), (unsigned long long)o.seed);
  std::fflush(stdout);

  cudaStream_t stream = nullptr;
  std::unique_ptr<DenseGemmTimer> dense;
  if (gpu) {
    // A blocking stream: the fills and copies on the legacy default stream order themselves with it.
    MOEGEMM_CLI_CUDA(cudaStreamCreate(&stream));
    dense = std::make_unique<DenseGemmTimer>();
  }
  for (size_t i = 0; i < presets.size(); ++i) {
    const ModelPreset& shape = shapes[i];
    progress(i, presets.size(), shape.name, "preparing data (" + std::to_string(shape.rows()) + " rows)");
    ModelResult m;
    m.shape = shape;
    const MoeLayer layer = make_layer(shape, o.routing, gpu ? Device::cuda : Device::host, o.seed);
    m.group_sizes = layer.group_sizes;
    if (gpu) MOEGEMM_CLI_CUDA(cudaDeviceSynchronize());
    for (const Step& step : layer_steps(layer)) {
      progress(i, presets.size(), shape.name, step.label);
      m.steps.push_back(run_step(layer, step, gpu, o, stream, dense.get()));
    }
    print_model_table(m, gpu);
    report.models.push_back(std::move(m));
  }
  if (stream) cudaStreamDestroy(stream);

  if (o.json) {
    write_json(report, *o.json);
    std::printf("\nresults written to %s\n", o.json->c_str());
  }
  const bool ok = report.passed();
  std::printf("\nverification %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace moegemm::cli
