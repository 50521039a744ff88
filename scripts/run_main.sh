#!/usr/bin/env bash
# The main job from a fresh clone: install what the build lacks (only what is missing, only when a package
# manager is reachable), configure and build into build/ (the tree scripts/run_tests.sh uses, same options),
# then run `moegemm run "$@"` (every model preset by default; see docs/cli.md).
#
#   scripts/run_main.sh [moegemm run options]      e.g. scripts/run_main.sh --model deepseek-v3 --routing zipf
#
# Environment: MOEGEMM_BUILD_DIR (default build), MOEGEMM_CMAKE_ARGS (extra configure arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${MOEGEMM_BUILD_DIR:-build}
MIN_CMAKE=3.24  # the project's cmake_minimum_required

have() { command -v "$1" >/dev/null 2>&1; }
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
say() { printf 'run_main: %s\n' "$*" >&2; }

# Debian/Ubuntu packages the build needs; installed only when absent and apt-get can reach its mirrors.
apt_missing=()
for pkg in ninja-build nlohmann-json3-dev libgtest-dev g++; do
  dpkg -s "$pkg" >/dev/null 2>&1 || apt_missing+=("$pkg")
done
if [ ${#apt_missing[@]} -gt 0 ]; then
  if have apt-get; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && have sudo && SUDO="sudo"
    say "installing ${apt_missing[*]}"
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${apt_missing[@]}"; } >/dev/null 2>&1 ||
      say "could not install ${apt_missing[*]} (no network?); the configure step will say what is missing"
  else
    say "missing ${apt_missing[*]} and no apt-get: install them with your package manager"
  fi
fi

# CMake >= $MIN_CMAKE: the system's if new enough, else the one pip installs for this user.
export PATH="$HOME/.local/bin:$PATH"
cmake_version=$( (cmake --version 2>/dev/null || true) | head -n1 | awk '{print $3}')
if [ -z "$cmake_version" ] || ! version_ge "$cmake_version" "$MIN_CMAKE"; then
  say "CMake ${cmake_version:-not found} is older than $MIN_CMAKE: installing a newer one with pip (--user)"
  python3 -m pip install --user -q "cmake>=$MIN_CMAKE" >/dev/null 2>&1 ||
    python3 -m pip install --user -q --break-system-packages "cmake>=$MIN_CMAKE" >/dev/null 2>&1 ||
    { say "cannot install CMake >= $MIN_CMAKE (no pip or no network); install it and run again"; exit 1; }
  hash -r
fi

# The CUDA toolkit (nvcc) is needed to build, even on a machine without a GPU.
if ! have nvcc; then
  [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
  have nvcc || { say "nvcc not found: install the CUDA toolkit (12.8 or newer) or put it on PATH"; exit 1; }
fi

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEGEMM_BUILD_PYTHON=ON ${MOEGEMM_CMAKE_ARGS:-}
cmake --build "$BUILD" -j"$(nproc)" --target moegemm_cli
exec "$BUILD/tools/moegemm" run "$@"
