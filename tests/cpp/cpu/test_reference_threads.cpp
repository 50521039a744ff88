// The CPU reference's thread count (MOEGEMM_NUM_THREADS, OMP_NUM_THREADS, the affinity mask), and results
// that do not depend on it.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/host_tensor.hpp"
#include "common/offsets.hpp"
#include "common/random_fill.hpp"
#include "common/scoped_env.hpp"
#include "moegemm/moegemm.hpp"
#include "reference/parallel.hpp"

// Allocation failures on demand: while positive on a thread, the countdown-th operator new of that thread
// (counting from when it was set) throws std::bad_alloc. The replacement serves the whole test program, and
// allocates with malloc as the default one does.
namespace {
thread_local int fail_new_countdown = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (fail_new_countdown > 0 && --fail_new_countdown == 0) throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace moegemm::testing {
namespace {

using reference::parallel_for;
using reference::worker_count;

/// The distinct threads that run parallel_for's tasks. Each task waits (2 s in all at most) until `expected`
/// threads have taken one, so that a worker that starts late on a busy machine still counts; more count too.
int threads_used(int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::mutex mutex;
  std::condition_variable seen_all;
  std::set<std::thread::id> ids;
  parallel_for(64, 1e12, [&](int64_t) {
    std::unique_lock<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
    seen_all.notify_all();
    seen_all.wait_until(lock, deadline, [&] { return int(ids.size()) >= expected; });
  });
  return static_cast<int>(ids.size());
}

int allowed_cpus() {
  cpu_set_t set;
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

TEST(ReferenceThreads, MoegemmNumThreadsThenOmpNumThreadsSetTheCount) {
  ScopedEnv moegemm("MOEGEMM_NUM_THREADS", "3"), omp("OMP_NUM_THREADS", "5");
  EXPECT_EQ(worker_count(), 3);
  EXPECT_EQ(threads_used(3), 3);
  {
    ScopedEnv unset("MOEGEMM_NUM_THREADS", std::nullopt);
    EXPECT_EQ(worker_count(), 5);
    ScopedEnv nested("OMP_NUM_THREADS", "4,2");  // OpenMP's nested form: the outer level counts
    EXPECT_EQ(worker_count(), 4);
  }
}

TEST(ReferenceThreads, ValuesThatAreNoThreadCountAreIgnoredAndSpacesAllowed) {
  ScopedEnv omp("OMP_NUM_THREADS", "2");
  for (const char* bad : {"", " ", "0", "-3", "abc", "3x", "0x4", ",4", "2000", "99999999999999999999"}) {
    ScopedEnv moegemm("MOEGEMM_NUM_THREADS", std::string(bad));
    EXPECT_EQ(worker_count(), 2) << "MOEGEMM_NUM_THREADS=\"" << bad << "\"";
  }
  for (const char* spaced : {" 3", "3 ", "3\n", "+3", "3,1", " 3 ,1"}) {  // as OpenMP reads them
    ScopedEnv moegemm("MOEGEMM_NUM_THREADS", std::string(spaced));
    EXPECT_EQ(worker_count(), 3) << "MOEGEMM_NUM_THREADS=\"" << spaced << "\"";
  }
}

TEST(ReferenceThreads, WithoutEitherVariableTheAffinityMaskSetsTheCount) {
  ScopedEnv moegemm("MOEGEMM_NUM_THREADS", std::nullopt), omp("OMP_NUM_THREADS", std::nullopt);
  EXPECT_EQ(worker_count(), std::min(allowed_cpus(), 32));
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // as `taskset -c <cpu>` would start the process
  const int count = worker_count(), used = threads_used(1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(used, 1);
}

TEST(ReferenceThreads, EveryTaskRunsWhenThreadsCannotStart) {
  // Room in the address space for a few thread stacks only: most of the 256 threads asked for cannot start
  // (as under a container's process or memory limit), and the ones that did, with the caller, run every task.
  ScopedEnv moegemm("MOEGEMM_NUM_THREADS", "256");
  long pages = 0;
  {
    std::ifstream statm("/proc/self/statm");
    ASSERT_TRUE(statm >> pages);
  }
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (64u << 20);
  constexpr int64_t kTasks = 4096;
  std::vector<std::thread::id> ran_on(kTasks);  // allocated before the limit: the tasks allocate nothing
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  parallel_for(kTasks, 1e12, [&](int64_t i) { ran_on[i] = std::this_thread::get_id(); });
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0);
  std::set<std::thread::id> threads;
  for (const auto& id : ran_on) {
    ASSERT_NE(id, std::thread::id()) << "a task did not run";
    threads.insert(id);
  }
  EXPECT_LT(threads.size(), 256u) << "every thread started: the limit did not bite, so nothing was tested";
}

TEST(ReferenceThreads, EveryTaskRunsWhenAThreadCannotAllocateItsState) {
  // The second thread's start fails to allocate (std::thread's state, with operator new) while the first
  // runs: the call goes on with the first and the caller, where the failure used to leave a running thread
  // unjoined and end the process.
  ScopedEnv moegemm("MOEGEMM_NUM_THREADS", "4");
  constexpr int64_t kTasks = 4096;
  std::vector<std::thread::id> ran_on(kTasks);
  fail_new_countdown = 3;  // the pool's reserve, the first thread's state, then the second's
  parallel_for(kTasks, 1e12, [&](int64_t i) { ran_on[i] = std::this_thread::get_id(); });
  const int left = fail_new_countdown;
  fail_new_countdown = 0;
  ASSERT_EQ(left, 0) << "no allocation failed: nothing was tested";
  std::set<std::thread::id> threads;
  for (const auto& id : ran_on) {
    ASSERT_NE(id, std::thread::id()) << "a task did not run";
    threads.insert(id);
  }
  EXPECT_LE(threads.size(), 2u);  // the caller and the one thread that started
}

TEST(ReferenceThreads, ResultsDoNotDependOnTheThreadCount) {
  // Large enough to split over threads; the weight gradient reduces over each expert's rows.
  const int64_t M = 1200, K = 128, N = 192, E = 3;
  HostTensor x = random_tensor(DType::bf16, {M, K}, 41);
  HostTensor dy = random_tensor(DType::bf16, {M, N}, 42);
  HostTensor offsets = offsets_from_sizes({500, 0, 700});
  std::vector<std::vector<float>> runs;
  for (const char* threads : {"1", "3", "7"}) {
    ScopedEnv moegemm("MOEGEMM_NUM_THREADS", std::string(threads));
    HostTensor w(DType::f32, {E, K, N});
    GroupedGemmWgradArgs args;
    args.x = x.view();
    args.dy = dy.view();
    args.offsets = offsets.view();
    args.w = w.view();
    grouped_gemm_wgrad(args, nullptr, 0, nullptr);  // host tensors: the CPU reference, synchronously
    const auto* p = static_cast<const float*>(w.data());
    runs.emplace_back(p, p + E * K * N);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

}  // namespace
}  // namespace moegemm::testing
