#!/usr/bin/env bash
# The main job from a fresh clone: install what the build lacks (only what is missing, only when a package
# manager is reachable), configure and build into build/ (the tree scripts/run_tests.sh uses, same options),
# then run `moegemm run "$@"` (every model preset by default; see docs/cli.md).
#
#   scripts/run_main.sh [moegemm run options]      e.g. scripts/run_main.sh --model deepseek-v3 --routing zipf
#
# Environment: MOEGEMM_BUILD_DIR (default build), MOEGEMM_JOBS (build jobs, default: every core),
# MOEGEMM_CMAKE_ARGS (extra configure arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${MOEGEMM_BUILD_DIR:-build}
JOBS=${MOEGEMM_JOBS:-$(nproc)}
PYTHON=${PYTHON:-python3}

say() { printf 'run_main: %s\n' "$*" >&2; }
# shellcheck source=scripts/build_env.sh
source scripts/build_env.sh

moegemm_install_system_packages
moegemm_ensure_nvcc
moegemm_ensure_cmake
moegemm_configure "$BUILD"
"$CMAKE" --build "$BUILD" -j"$JOBS" --target moegemm_cli
exec "$BUILD/tools/moegemm" run "$@"
