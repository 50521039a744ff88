// Work distribution of the CPU reference over host threads. Results never depend on the thread count:
// callers split work into fixed tasks whose outputs do not overlap, and reduce partials in task order.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace moegemm::reference {

/// Threads used for large work: the hardware concurrency, capped.
inline int worker_count() {
  const unsigned hc = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hc, 1u, 32u));
}

/// Runs fn(i) for i in [0, n). Spawns threads only when `flops` (an estimate of the total work) makes
/// it worthwhile; below that, thread start-up would dominate (many tiny experts).
template <class Fn>
void parallel_for(int64_t n, double flops, Fn&& fn) {
  constexpr double kMinFlopsPerThread = 4e6;
  const int threads =
      static_cast<int>(std::min<double>({double(worker_count()), double(n), flops / kMinFlopsPerThread}));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(n);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace moegemm::reference
