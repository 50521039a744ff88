// `moegemm bench`: the peer benchmark is Python (torch, JAX); find bench/peers.py and hand over to python3.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "commands.hpp"

#ifndef MOEGEMM_SOURCE_BENCH_DIR
#define MOEGEMM_SOURCE_BENCH_DIR ""
#endif

namespace moegemm::cli {
namespace fs = std::filesystem;

namespace {

fs::path self_path(const std::string& argv0) {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::absolute(argv0) : p;
}

// $MOEGEMM_BENCH_DIR alone where it is set and not empty (a folder asked for and missing is an error, not a
// fallback); else the installed share/moegemm/bench next to bin/, then the source tree it was built from.
fs::path find_peers_script(const fs::path& exe) {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("MOEGEMM_BENCH_DIR"); env && *env) {
    dirs.emplace_back(env);
  } else {
    dirs.push_back(exe.parent_path().parent_path() / "share" / "moegemm" / "bench");
    if (*MOEGEMM_SOURCE_BENCH_DIR) dirs.emplace_back(MOEGEMM_SOURCE_BENCH_DIR);
  }
  for (const auto& d : dirs)
    if (fs::is_regular_file(d / "peers.py")) return d / "peers.py";
  std::fprintf(stderr, "moegemm: error: bench/peers.py not found; looked in:\n");
  for (const auto& d : dirs) std::fprintf(stderr, "  %s\n", d.c_str());
  std::fprintf(stderr, "set MOEGEMM_BENCH_DIR to the folder that holds peers.py\n");
  return {};
}

// The Python package built with this program (build/python next to build/tools), after any PYTHONPATH of the
// caller's, so that peers.py imports moegemm.torch and moegemm.jax from the same build as the C++ path. An
// installed program has no such folder; its package comes from pip.
void add_build_python_path(const fs::path& exe) {
  const fs::path pkg = exe.parent_path().parent_path() / "python";
  if (!fs::is_regular_file(pkg / "moegemm" / "__init__.py")) return;
  const char* current = std::getenv("PYTHONPATH");
  const std::string path = current && *current ? std::string(current) + ":" + pkg.string() : pkg.string();
  setenv("PYTHONPATH", path.c_str(), 1);
}

}  // namespace

int bench_command(const std::vector<std::string>& args, const std::string& argv0) {
  const fs::path exe = self_path(argv0);
  const fs::path script = find_peers_script(exe);
  if (script.empty()) return 1;
  add_build_python_path(exe);
  std::vector<std::string> argv{"python3", script.string(), "--moegemm-bin", exe.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  execvp("python3", cargv.data());
  std::fprintf(stderr,
               "moegemm: error: cannot run python3 (%s); moegemm bench needs Python 3 with numpy and torch or jax\n",
               std::strerror(errno));
  return 1;
}

}  // namespace moegemm::cli
