// The current CUDA device as the sm_90a launches see it: whether it can run the kernels, and its SM count.
#pragma once

#include <string>

namespace moegemm::sm90 {

/// What the launches need of the current device, read once per thread and device (neither can change).
struct DeviceFacts {
  std::string mismatch;  ///< "" when the device can run the sm_90a kernels, else what it is instead
  int sms = 0;           ///< SM count; 0 where `mismatch` is set
  int ordinal = -1;      ///< the device's runtime ordinal (cudaGetDevice); -1 where no device is current
};

/// The current device's facts. Never throws: a failing CUDA query becomes the mismatch text. On the first call
/// for a device that can run the kernels it also makes the device's primary context current on this thread: the
/// driver's tensor-map encoder needs one, and a thread that has only selected a device (e.g. torch's autograd
/// worker) may not have it yet.
const DeviceFacts& current_device();

}  // namespace moegemm::sm90
