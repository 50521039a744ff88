// One per-thread cache of the current device's facts, for the backend's device check and the launches' grid.
#include "sm90/device.hpp"

#include <cuda_runtime.h>

namespace moegemm::sm90 {
namespace {

/// `what` failed with `err`, as a mismatch text; clears the error so that later calls do not see it.
std::string failed(int device, const char* what, cudaError_t err) {
  cudaGetLastError();
  return "device " + std::to_string(device) + ", whose " + what + " failed (" + cudaGetErrorString(err) + ")";
}

DeviceFacts read_facts(int device) {
  DeviceFacts facts;
  int major = 0, minor = 0, sms = 0;
  cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) {
    facts.mismatch = failed(device, "compute capability query", err);
    return facts;
  }
  if (major != 9 || minor != 0) {
    facts.mismatch = "compute capability " + std::to_string(major) + "." + std::to_string(minor) + " (device " +
                     std::to_string(device) + ")";
    return facts;
  }
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaSetDevice(device);  // the primary context, current on this thread
  if (err != cudaSuccess) {
    facts.mismatch = failed(device, "SM count query or context set-up", err);
    return facts;
  }
  facts.sms = sms;
  return facts;
}

}  // namespace

const DeviceFacts& current_device() {
  thread_local int cached_device = -1;
  thread_local DeviceFacts cached;
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) {  // not cached: a device may become usable later
    cudaGetLastError();
    thread_local DeviceFacts none;
    // The runtime reports a machine with no NVIDIA driver as an insufficient driver: say both.
    const char* hint = err == cudaErrorInsufficientDriver ? "; no NVIDIA driver is loaded, or it is older than the "
                                                            "CUDA runtime this library was built with"
                                                          : "";
    none.mismatch = std::string("no usable CUDA device (cudaGetDevice: ") + cudaGetErrorString(err) + hint + ")";
    return none;
  }
  if (device != cached_device) {
    cached = read_facts(device);
    cached.ordinal = device;
    cached_device = device;
  }
  return cached;
}

}  // namespace moegemm::sm90
