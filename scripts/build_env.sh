# Sourced by scripts/run_main.sh and scripts/run_tests.sh: what the build needs on a fresh machine and the one
# configure line both use, so that the two README commands share build/ and install the same things.
# Expects `say` (the caller's message function) and PYTHON; sets CMAKE and CTEST.

MOEGEMM_MIN_CMAKE=3.24  # the project's cmake_minimum_required

# Debian/Ubuntu packages of the build; installs the missing ones when apt-get can reach its mirrors, and
# otherwise leaves it to the configure step to name what is missing (e.g. an offline GPU machine).
moegemm_install_system_packages() {
  local pkg missing=()
  command -v dpkg-query > /dev/null || return 0
  for pkg in cmake ninja-build g++ libgtest-dev nlohmann-json3-dev python3-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && command -v sudo > /dev/null && sudo="sudo"
  if command -v apt-get > /dev/null; then
    say "installing ${missing[*]}"
    { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
      > /dev/null 2>&1 || say "could not install ${missing[*]} (no network?); configure will name what is missing"
  else
    say "missing ${missing[*]} and no apt-get: install them with your package manager"
  fi
}

# nvcc: on PATH, or the toolkit's default location. Needed to build even without a GPU.
moegemm_ensure_nvcc() {
  command -v nvcc > /dev/null && return 0
  [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
  command -v nvcc > /dev/null || { say "nvcc not found: install the CUDA toolkit (13.0) or put it on PATH"; exit 1; }
}

# CMAKE/CTEST: the system's CMake when it is new enough, else one installed from PyPI (for this interpreter,
# or for the user when the interpreter's site-packages are not writable).
moegemm_ensure_cmake() {
  CMAKE=cmake
  local version
  version=$( (cmake --version 2> /dev/null || true) | head -n1 | awk '{print $3}')
  if [ -z "$version" ] || [ "$(printf '%s\n%s\n' "$MOEGEMM_MIN_CMAKE" "$version" | sort -V | head -n1)" != "$MOEGEMM_MIN_CMAKE" ]; then
    say "CMake ${version:-not found} is older than $MOEGEMM_MIN_CMAKE: installing one from PyPI"
    "$PYTHON" -m pip install -q "cmake>=$MOEGEMM_MIN_CMAKE" > /dev/null 2>&1 ||
      "$PYTHON" -m pip install -q --user "cmake>=$MOEGEMM_MIN_CMAKE" > /dev/null 2>&1 ||
      { say "cannot install CMake >= $MOEGEMM_MIN_CMAKE (no pip or no network); install it and run again"; exit 1; }
    # The launcher sits in the interpreter's (or the user's) scripts folder; asked from / so that the
    # repository's own cmake/ folder is not mistaken for the package.
    local dir
    for dir in "$(cd / && "$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')" \
               "$(cd / && "$PYTHON" -c 'import os, sysconfig; print(sysconfig.get_path("scripts", os.name + "_user"))')"; do
      [ -x "$dir/cmake" ] && { CMAKE="$dir/cmake"; break; }
    done
  fi
  CTEST="$(dirname "$(command -v "$CMAKE")")/ctest"
}

# Configures build dir $1 the way both commands do (Release, Ninja, the Python package); extra arguments
# from MOEGEMM_CMAKE_ARGS.
moegemm_configure() {
  # shellcheck disable=SC2086
  "$CMAKE" -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEGEMM_BUILD_PYTHON=ON \
    -DPython3_EXECUTABLE="$(command -v "$PYTHON")" ${MOEGEMM_CMAKE_ARGS:-}
}
