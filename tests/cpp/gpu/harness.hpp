// Shared pieces of the GPU suites: skipping without an sm_90 GPU, host tensors with device copies, outputs
// that start from the same bytes on both backends, op calls with the device workspace the op asks for, and
// what a device output must hold given the CPU reference's output on the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "common/expected.hpp"
#include "common/host_tensor.hpp"
#include "common/naive.hpp"
#include "common/poison.hpp"
#include "common/random_fill.hpp"
#include "gpu/device_buffer.hpp"
#include "moegemm/moegemm.hpp"

namespace moegemm::testing {

inline bool gpu_present() { return device_kernels_available(); }

#define REQUIRE_GPU()                                                      \
  do {                                                                     \
    if (!gpu_present()) GTEST_SKIP() << "no sm_90 GPU: GPU test not run";  \
  } while (0)

/// The ordinals of this machine's sm_90 devices, the ones the kernels run on.
inline std::vector<int> sm90_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::vector<int> devices;
  for (int d = 0; d < count; ++d) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) == cudaSuccess && major == 9 &&
        minor == 0) {
      devices.push_back(d);
    }
  }
  return devices;
}

/// Declares `devices`, this machine's sm_90 devices, and skips the test where there are fewer than two.
#define REQUIRE_TWO_GPUS(devices)                                                                     \
  REQUIRE_GPU();                                                                                     \
  const std::vector<int> devices = sm90_devices();                                                   \
  if (devices.size() < 2) GTEST_SKIP() << "fewer than two sm_90 GPUs: no launch on a second device was run"

/// Makes `device` current for its lifetime; the device current before is current again afterwards.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    cuda_ok(cudaGetDevice(&previous_), "cudaGetDevice");
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;
  ~CurrentDevice() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

/// A host tensor and its device copy (made on construction). A default-constructed Operand is an absent
/// optional operand: both of its views are undefined.
struct Operand {
  HostTensor host;
  DeviceTensor dev;

  Operand() = default;
  explicit Operand(HostTensor h) : host(std::move(h)), dev(host) {}
  bool defined() const { return host.rank() > 0; }
  TensorView view(bool device) const {
    if (!defined()) return {};
    return device ? dev.view() : host.view();
  }
};

/// A tensor of `shape` whose whole storage (row padding included) holds the poison pattern.
inline HostTensor poisoned(DType dtype, std::vector<int64_t> shape, int64_t row_pad = 0) {
  HostTensor t(dtype, std::move(shape), row_pad);
  poison(t);
  return t;
}

/// One output of a call. The host tensor holds the initial contents (poison, or the values an accumulating
/// op adds into) and receives the result: a host call writes it directly, a device call works on a device
/// copy of those bytes and fetch() downloads the result. An empty (rank 0) host tensor is an absent output.
class OutputBuffer {
 public:
  OutputBuffer(HostTensor& host, bool device) : host_(&host) {
    if (device && host.rank() > 0) dev_ = DeviceTensor(host);
  }
  TensorView view() const {
    if (host_->rank() == 0) return {};
    return dev_.data() ? dev_.view() : host_->view();
  }
  void fetch() {
    if (dev_.data()) dev_.download(*host_);
  }

 private:
  HostTensor* host_;
  DeviceTensor dev_;
};

inline void fetch_all(std::initializer_list<OutputBuffer*> outputs) {
  for (OutputBuffer* o : outputs) o->fetch();
}

/// Device scratch of a call, never zeroed: filled with a garbage pattern instead, so that an op relying on
/// zero-initialised scratch (which the contract rules out) fails rather than passing on a fresh allocation.
class Workspace {
 public:
  Workspace(std::size_t bytes, cudaStream_t stream) : bytes_(bytes) {
    if (!bytes) return;
    cuda_ok(cudaMalloc(&ptr_, bytes), "cudaMalloc workspace");
    cuda_ok(cudaMemsetAsync(ptr_, 0xa5, bytes, stream), "dirty workspace");
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    if (ptr_) cudaFree(ptr_);
  }
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Calls `op` on `args` the way a user does: the workspace size from `bytes_of(args)`, a device buffer of
/// that size for a device call (host calls need none), then waits for `stream`.
template <class Args>
void call_op(std::size_t (*bytes_of)(const Args&), void (*op)(const Args&, void*, std::size_t, cudaStream_t),
             const Args& args, bool device, cudaStream_t stream = nullptr) {
  const std::size_t bytes = bytes_of(args);
  Workspace ws(device ? bytes : 0, stream);
  op(args, ws.data(), bytes, stream);
  if (device) cuda_ok(cudaStreamSynchronize(stream), "kernel");
}

/// The first row past every expert: offsets clamped as the contract clamps them (docs/ops.md §0.1).
inline int64_t addressed_end(const HostTensor& offsets, int64_t m) { return naive::rows(offsets, m).end_all; }

/// A row-indexed output (rank 1 or 2) whose rows [0, end) are addressed: those rows close to the reference;
/// the rows past them untouched (still poisoned), or exactly zero with zero_tail.
inline Expected expect_rows(const HostTensor& ref, int64_t end, bool zero_tail) {
  Expected want(ref.shape());
  const int64_t cols = ref.rank() >= 2 ? ref.size(1) : 1;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (i / cols < end) want.set(i, Expected::kClose, ref.get_at(ref.offset_of_linear(i)));
    else if (zero_tail) want.set(i, Expected::kExact, 0.0);
    else want.set(i, Expected::kUntouched, 0.0);
  }
  return want;
}

/// An (E, cols) per-expert reduction that the op writes for every expert (dbias): rows of experts with rows
/// close to the reference, rows of empty experts exactly zero.
inline Expected expect_per_expert(const HostTensor& ref, const naive::Rows& rows) {
  Expected want(ref.shape());
  const int64_t cols = ref.size(1);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const size_t g = static_cast<size_t>(i / cols);
    if (rows.end[g] > rows.begin[g]) want.set(i, Expected::kClose, ref.get_at(ref.offset_of_linear(i)));
    else want.set(i, Expected::kExact, 0.0);
  }
  return want;
}

/// A reduction over every addressed element (amax): close to the reference, or exactly 0 over no element.
inline Expected expect_reduction(const HostTensor& ref, bool any_element) {
  Expected want(ref.shape());
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (any_element) want.set(i, Expected::kClose, ref.get_at(ref.offset_of_linear(i)));
    else want.set(i, Expected::kExact, 0.0);
  }
  return want;
}

/// Whether two host tensors hold the same bytes (storage, row padding included).
inline bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.storage_bytes() == b.storage_bytes() && std::memcmp(a.data(), b.data(), a.storage_bytes()) == 0;
}

}  // namespace moegemm::testing
