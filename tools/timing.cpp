#include "timing.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "cuda_check.hpp"

namespace moegemm::cli {

double median_device_us(const std::function<void(cudaStream_t)>& fn, cudaStream_t stream, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn(stream);
  std::vector<cudaEvent_t> events(2 * static_cast<size_t>(iters));
  for (auto& e : events) MOEGEMM_CLI_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    MOEGEMM_CLI_CUDA(cudaEventRecord(events[2 * i], stream));
    fn(stream);
    MOEGEMM_CLI_CUDA(cudaEventRecord(events[2 * i + 1], stream));
  }
  MOEGEMM_CLI_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> us(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    MOEGEMM_CLI_CUDA(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
    us[i] = 1e3 * ms;
  }
  for (auto& e : events) cudaEventDestroy(e);
  std::nth_element(us.begin(), us.begin() + iters / 2, us.end());
  return us[iters / 2];
}

double host_us(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace moegemm::cli
