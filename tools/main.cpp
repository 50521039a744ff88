// The moegemm program: `run` (the main job), `gemm` (one timed grouped GEMM), `bench` (the peer benchmark).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "commands.hpp"
#include "moegemm/moegemm.hpp"
#include "usage_error.hpp"

namespace {

// Each command's lines of the usage; `moegemm <command> --help` prints its own, `moegemm --help` all of them.
constexpr const char* kRunUsage = R"(  run     one MoE layer (up-projection with fused GLU, down-projection, and their backward ops) per model
          preset: verified on sampled rows (--oracle), timed (median us, TFLOP/s) against a dense cuBLAS GEMM;
          the CPU backend runs hidden and intermediate divided by 8 (rounded up to a multiple of 8)
            --model NAME          one preset (default: every preset of the workloads file)
            --tokens N            tokens per batch, N > 0 (default: the preset's; 64 on the CPU backend)
            --routing uniform|zipf  how rows are routed to experts (default uniform)
            --seed N              seed of the routing and the data (default 0)
            --json PATH           write the results as JSON (schema in docs/cli.md)
            --workloads PATH      a workloads file instead of the built-in one
            --backend auto|cpu|gpu  (default auto: the GPU when it can run the kernels)
            --iters N, --warmup N timed and untimed calls per op on the GPU (default 20, 3)
            --oracle reference|spot  expected values from the CPU reference on the sampled rows (GPU default)
                                  or from double-precision math (CPU default)
)";
constexpr const char* kGemmUsage = R"(  gemm    one grouped_gemm (bf16) timed on the GPU, as JSON: time_us (median, us), tflops (2*rows*N*K / time,
            rows: the rows in groups, M unless --group-sizes sum to less)
            --m M --n N --k K --e E (E <= 1024) [--seed S] [--json PATH|-]
            [--group-sizes a,b,... (E sizes, their sum at most M) | --routing R]
            [--layout kn|nk (default kn)] [--iters N (default 30)] [--warmup N (default 5)]
)";
constexpr const char* kBenchUsage =
    "  bench   the peers side by side (python3 bench/peers.py [args]; --help for its options)\n";
constexpr const char* kExitCodes = "\nexit codes: 0 success, 1 verification failed or runtime error, 2 bad arguments\n";

void print_usage() {
  std::printf("usage: moegemm <command> [options]   (moegemm --version prints the version)\n\ncommands:\n%s%s%s%s",
              kRunUsage, kGemmUsage, kBenchUsage, kExitCodes);
}

void print_command_usage(const std::string& command, const char* lines) {
  std::printf("usage: moegemm %s [options]\n\n%s%s", command.c_str(), lines, kExitCodes);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moegemm::cli;
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc > 1 ? argv[1] : "";
  const bool help = std::find(args.begin(), args.end(), "--help") != args.end() ||
                    std::find(args.begin(), args.end(), "-h") != args.end();
  try {
    if (help && (command == "run" || command == "gemm")) {
      print_command_usage(command, command == "run" ? kRunUsage : kGemmUsage);
      return 0;
    }
    if (command == "run") return run_command(args);
    if (command == "gemm") return gemm_command(args);
    if (command == "bench") return bench_command(args, argv[0]);
    if (command == "--help" || command == "-h" || command == "help") {
      print_usage();
      return 0;
    }
    if (command == "--version") {
      std::printf("moegemm %s\n", moegemm::kVersion);
      return 0;
    }
    throw UsageError(command.empty() ? "missing command" : "unknown command '" + command + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "moegemm: %s\n(moegemm --help lists the commands and options)\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "moegemm: error: out of host memory for the problem's tensors (std::bad_alloc); "
                         "give fewer --tokens or smaller sizes\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moegemm: error: %s\n", e.what());
    return 1;
  }
}
