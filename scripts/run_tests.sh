#!/usr/bin/env bash
# Builds moegemm with its Python package and runs every test suite this machine can run:
#   1. installs the Debian packages (scripts/build_env.sh) and the Python packages of requirements-test.txt
#      that are not installed yet (nothing is fetched when all are present, so it works offline on a prepared
#      machine);
#   2. configures and builds build/ (-DMOEGEMM_BUILD_PYTHON=ON) with 2 jobs;
#   3. ctest -L cpu; ctest -L gpu only when `nvidia-smi -L` lists a GPU;
#   4. pytest tests/python with PYTHONPATH=build/python (collecting no test counts as a failure).
# Environment: MOEGEMM_BUILD_DIR (default build), MOEGEMM_JOBS (default 2), PYTHON (default python3).
# Exit status: 0 only when every suite that ran passed.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${MOEGEMM_BUILD_DIR:-build}
JOBS=${MOEGEMM_JOBS:-2}
PYTHON=${PYTHON:-python3}

say() { printf '\n=== %s\n' "$*"; }
# shellcheck source=scripts/build_env.sh
source scripts/build_env.sh

moegemm_install_system_packages

# ---- Python packages: install only what is missing ------------------------------------------------------
missing=$("$PYTHON" - requirements-test.txt <<'PY'
import re, sys
from importlib import metadata
for line in open(sys.argv[1]):
    req = line.split("#", 1)[0].strip()
    name = re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]
    if not name or name == "cmake":  # cmake: only when the system's is too old (below)
        continue
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        print(req)
PY
)
if [ -n "$missing" ]; then
  say "installing missing Python packages: $(echo $missing)"
  # shellcheck disable=SC2086
  if ! "$PYTHON" -m pip install --quiet $missing; then
    echo "run_tests: pip could not install: $(echo $missing)" >&2
    exit 1
  fi
fi

# ---- Tools: nvcc and CMake ---------------------------------------------------------------------------------
moegemm_ensure_nvcc
moegemm_ensure_cmake
echo "cmake: $("$CMAKE" --version | head -1) ($CMAKE)"

# ---- Build ------------------------------------------------------------------------------------------------
say "configure $BUILD"
moegemm_configure "$BUILD"
say "build $BUILD (-j$JOBS)"
"$CMAKE" --build "$BUILD" -j"$JOBS"

# ---- Tests ------------------------------------------------------------------------------------------------
status=0
failed=()

say "C++ tests on the CPU (ctest -L cpu)"
"$CTEST" --test-dir "$BUILD" -L cpu --output-on-failure -j"$JOBS" || { status=1; failed+=("ctest -L cpu"); }

if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  say "C++ tests on the GPU (ctest -L gpu)"
  "$CTEST" --test-dir "$BUILD" -L gpu --output-on-failure || { status=1; failed+=("ctest -L gpu"); }
else
  say "GPU suite NOT run: nvidia-smi -L lists no GPU on this machine (ctest -L gpu skipped)"
fi

say "Python tests (pytest tests/python)"
set +e
PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m pytest tests/python -q -rs
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "run_tests: pytest collected no tests in tests/python: that is a failure" >&2
  status=1
  failed+=("pytest (no tests collected)")
elif [ "$rc" -ne 0 ]; then
  status=1
  failed+=("pytest (exit $rc)")
fi

if [ "$status" -eq 0 ]; then
  say "all suites that ran passed"
else
  say "FAILED: ${failed[*]}"
fi
exit "$status"
