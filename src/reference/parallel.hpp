// Work distribution of the CPU reference over host threads. Results never depend on the thread count:
// callers split work into fixed tasks whose outputs do not overlap, and reduce partials in task order.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace moegemm::reference {

/// A thread count from the environment variable `name`: its value, or the first entry of a comma-separated
/// list (OMP_NUM_THREADS's nested form), spaces around it allowed, when that is a decimal integer in
/// [1, 1024]; else 0 (the variable is then ignored).
inline int threads_from_env(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);  // skips leading spaces
  if (end == text) return 0;
  while (*end == ' ' || *end == '\t' || *end == '\n') ++end;
  const bool whole = *end == '\0' || *end == ',';
  return whole && n >= 1 && n <= 1024 ? static_cast<int>(n) : 0;
}

/// Threads used for large work: MOEGEMM_NUM_THREADS, else OMP_NUM_THREADS (which torchrun sets to 1 for
/// several ranks per host), else the CPUs this process may run on (its affinity mask, which taskset and
/// cpusets narrow, where hardware_concurrency counts the machine's; at most 32).
inline int worker_count() {
  for (const char* name : {"MOEGEMM_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const int n = threads_from_env(name)) return n;
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) cpus = CPU_COUNT(&allowed);
  return std::clamp(cpus, 1, 32);
}

/// Runs fn(i) for i in [0, n). Spawns threads only when `flops` (an estimate of the total work) makes
/// it worthwhile; below that, thread start-up would dominate (many tiny experts).
template <class Fn>
void parallel_for(int64_t n, double flops, Fn&& fn) {
  constexpr double kMinFlopsPerThread = 4e6;
  const double most = std::min(double(n), flops / kMinFlopsPerThread);
  const int threads = most < 2 ? 1 : static_cast<int>(std::min(double(worker_count()), most));
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
  pool.reserve(threads - 1);  // before any thread starts: a failure here leaves none to join
  for (int t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::exception&) {
      // No more threads: std::system_error at a process or memory limit, or bad_alloc of the new thread's
      // state. The started ones and this one take every task; none is left running unjoined (the pool's
      // destruction would then end the process).
      break;
    }
  }
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace moegemm::reference
