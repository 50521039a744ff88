#!/usr/bin/env bash
# Everything that needs an sm_90 GPU, in one go: build, SASS check, GPU tests, compute-sanitizer,
# benchmarks against the peers. Reports (logs, JSON, plots) go to $MOEGEMM_REPORT_DIR
# (default build-gpu-check/report).
#
#   scripts/gpu_check.sh [stage ...]    stages: build sass test sanitize pytest bench   (default: all)
#
# Options through the environment:
#   MOEGEMM_BUILD_DIR       build tree (default build-gpu-check)
#   MOEGEMM_CMAKE_ARGS      extra CMake arguments (e.g. -DMOEGEMM_GTEST_SOURCE_DIR=...)
#   MOEGEMM_GTEST_FILTER    GoogleTest filter for the GPU suite (default: everything)
#   MOEGEMM_TEST_MODES      the test stage's kernel modes, a subset of "heuristic 256 pingpong dynamic pairs
#                           pairs256 c11" (default: all), so that the stage can be split over several calls
#   MOEGEMM_PYTEST_PATHS    the pytest stage's test files or folders (default: tests/python), so that the stage
#                           can be split over several calls too (its run of every file took over 400 s on an H100)
#   MOEGEMM_BENCH_ARGS      arguments for bench/peers.py (default: --quick: every suite, small; the
#                           markdown tables go to $REPORT/tables.md)
set -uo pipefail
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX and torch share the GPU in one pytest process
cd "$(dirname "$0")/.."
BUILD=${MOEGEMM_BUILD_DIR:-build-gpu-check}
REPORT=${MOEGEMM_REPORT_DIR:-$BUILD/report}
mkdir -p "$REPORT"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build sass test sanitize pytest bench)
status=0
# Every op that has a ping-pong kernel (GLU, dGLU with a saved tile, linear epilogue, weight gradient) forced onto
# it, on three CTAs: every CTA runs many tiles, so both warpgroups take turns many times.
PINGPONG_ENV=(MOEGEMM_GLU_SCHEDULE=pingpong MOEGEMM_DGLU_SCHEDULE=pingpong MOEGEMM_LINEAR_SCHEDULE=pingpong
              MOEGEMM_WGRAD_SCHEDULE=pingpong MOEGEMM_MAX_CTAS=3)
# The dynamic tile order (tile_order.cuh) forced on every launch of the cooperative kernel, the weight
# gradient's with its longest-first expert order, on three CTAs: every CTA claims many tiles, and the
# claimed-tile ring wraps many times.
DYNAMIC_ENV=(MOEGEMM_TILE_ORDER=dynamic MOEGEMM_MAX_CTAS=3)
# The linear epilogue's cluster-pair kernel (B multicast; off by default), with the tile widths the heuristic
# picks on three CTAs (one pair: many tiles each), and with 256-column tiles on the full grid.
PAIRS_ENV=(MOEGEMM_PAIRS=1 MOEGEMM_MAX_CTAS=3)
PAIRS256_ENV=(MOEGEMM_PAIRS=1 MOEGEMM_BLOCK_N=256)
KERNEL_CHOICE_VARS=(MOEGEMM_BLOCK_N MOEGEMM_GLU_SCHEDULE MOEGEMM_DGLU_SCHEDULE MOEGEMM_LINEAR_SCHEDULE
                    MOEGEMM_WGRAD_SCHEDULE MOEGEMM_MAX_CTAS MOEGEMM_TILE_ORDER MOEGEMM_PAIRS)
note() { printf '\n=== %s\n' "$*" | tee -a "$REPORT/summary.txt"; }
# sanitize LOG LABEL TOOL FILTER [VAR=value ...]: compute-sanitizer TOOL over the GPU tests FILTER with the
# variables set, its log in $REPORT/LOG.log, its summary line in summary.txt. A non-zero exit (a sanitizer
# error, a failed test, a crash) fails the script.
sanitize() {
  local log=$1 label=$2 tool=$3 filter=$4 rc
  shift 4
  env "$@" compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD"/tests/cpp/moegemm_gpu_tests \
    --gtest_filter="$filter" > "$REPORT/$log.log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && status=1
  echo "$label exit $rc : $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$REPORT/$log.log" | tail -1)" | tee -a "$REPORT/summary.txt"
}

for stage in "${stages[@]}"; do
  case "$stage" in
    build)
      note "build ($BUILD)"
      cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEGEMM_BUILD_PYTHON=ON -DMOEGEMM_PTXAS_VERBOSE=ON \
        ${MOEGEMM_CMAKE_ARGS:-} > "$REPORT/configure.log" 2>&1 || { tail -30 "$REPORT/configure.log"; exit 1; }
      cmake --build "$BUILD" -j"$(nproc)" > "$REPORT/build.log" 2>&1 || { grep -E "error|FAILED" "$REPORT/build.log" | head -40; exit 1; }
      grep -E "C75[0-9][0-9]|spill stores" "$REPORT/build.log" | sort | uniq -c | tee -a "$REPORT/summary.txt"
      ;;
    sass)
      note "SASS of libmoegemm.so"
      lib=$(ls "$BUILD"/src/libmoegemm.so* | head -1)
      cuobjdump --dump-sass "$lib" > "$REPORT/sass.txt" 2>&1
      echo "HGMMA instructions: $(grep -c HGMMA "$REPORT/sass.txt")" | tee -a "$REPORT/summary.txt"
      echo "local memory (LDL/STL): $(grep -cE '\b(LDL|STL)\b' "$REPORT/sass.txt")" | tee -a "$REPORT/summary.txt"
      grep -oE 'HGMMA\.[0-9x]+\.[A-Z0-9.]+' "$REPORT/sass.txt" | sort | uniq -c | tee -a "$REPORT/summary.txt"
      ;;
    test)
      # In each mode of MOEGEMM_TEST_MODES: with the tile widths the heuristic picks (mostly BN = 128, the
      # cooperative kernels and the static tile order at test sizes), with every m-grouped op forced to BN = 256
      # (MOEGEMM_BLOCK_N), with PINGPONG_ENV, so that every kernel of every op runs, with DYNAMIC_ENV, on the
      # cluster-pair kernel (PAIRS_ENV, PAIRS256_ENV), and the 2^31-element case (c11).
      modes=" ${MOEGEMM_TEST_MODES:-heuristic 256 pingpong dynamic pairs pairs256 c11} "
      for width in heuristic 256 pingpong dynamic pairs pairs256; do
        [ "${modes/ $width /}" = "$modes" ] && continue
        note "GPU tests (ctest -L gpu), tile width: $width"
        unset "${KERNEL_CHOICE_VARS[@]}"
        [ "$width" = 256 ] && export MOEGEMM_BLOCK_N=256
        [ "$width" = pingpong ] && export "${PINGPONG_ENV[@]}"
        [ "$width" = dynamic ] && export "${DYNAMIC_ENV[@]}"
        [ "$width" = pairs ] && export "${PAIRS_ENV[@]}"
        [ "$width" = pairs256 ] && export "${PAIRS256_ENV[@]}"
        filter=${MOEGEMM_GTEST_FILTER:-*}
        # the tests at the 32-bit extents (tens of GiB each) with the heuristic's kernels only
        [ "$width" = 256 ] && filter=${MOEGEMM_GTEST_FILTER:-'*-LargeExtentsGpu.*'}
        # three CTAs: all but the 2^31-element cases, which they would take minutes over
        [ "$width" != heuristic ] && [ "$width" != 256 ] &&
          filter=${MOEGEMM_GTEST_FILTER:-'*-ForwardGpu.C11*:LargeExtentsGpu.*'}
        # the pair kernel serves the linear epilogue's forward ops only
        [ "${width#pairs}" != "$width" ] && filter=${MOEGEMM_GTEST_FILTER:-'ForwardGpu.*-ForwardGpu.C11*'}
        "$BUILD"/tests/cpp/moegemm_gpu_tests --gtest_filter="$filter" \
          --gtest_output=xml:"$REPORT/gpu_tests_$width.xml" > "$REPORT/gpu_tests_$width.log" 2>&1 || status=1
        grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|FAILED  \]" "$REPORT/gpu_tests_$width.log" | tee -a "$REPORT/summary.txt"
      done
      unset "${KERNEL_CHOICE_VARS[@]}"
      if [ -z "${MOEGEMM_GTEST_FILTER:-}" ] && [ "${modes/ c11 /}" != "$modes" ]; then
        # The 2^31-element case on the linear ping-pong kernel, on the full grid.
        note "GPU tests: the 2^31-element case on the linear ping-pong kernel"
        MOEGEMM_LINEAR_SCHEDULE=pingpong "$BUILD"/tests/cpp/moegemm_gpu_tests --gtest_filter='ForwardGpu.C11*' \
          > "$REPORT/gpu_tests_pingpong_c11.log" 2>&1 || status=1
        grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$REPORT/gpu_tests_pingpong_c11.log" | tee -a "$REPORT/summary.txt"
      fi
      ;;
    sanitize)
      note "compute-sanitizer"
      SAN_FWD='ForwardGpu.GarbageOffsets*:ForwardGpu.CasesC03C04C07:ForwardGpu.StridedWeightStacks:ForwardGpu.ColumnMajorA'
      SAN_SMALL='ForwardGpu.CasesC03C04C07:BackwardGpu.DgluReductionsAndWgradSmall'
      sanitize sanitize_memcheck memcheck memcheck \
        "$SAN_FWD:ForwardGpu.GroupSizeEdgeCases:BackwardGpu.GarbageOffsets*:BackwardGpu.GroupSizeEdgeCases:BackwardGpu.CasesC03C12EmptyExperts"
      sanitize sanitize_racecheck racecheck racecheck "$SAN_SMALL"
      # The 256-column tiles (dGLU: two saved-tile passes through one staging area) on the backward cases.
      sanitize sanitize_memcheck_256 "memcheck (BN = 256)" memcheck \
        'BackwardGpu.GarbageOffsets*:BackwardGpu.CasesC03C12EmptyExperts:BackwardGpu.DgluWholePassesWithoutReductions' \
        MOEGEMM_BLOCK_N=256
      sanitize sanitize_racecheck_256 "racecheck (BN = 256)" racecheck 'BackwardGpu.DgluReductionsAndWgradSmall' \
        MOEGEMM_BLOCK_N=256
      # The ping-pong kernels (per-warpgroup tiles, turn barriers, the dGLU's saved-tile loader per warpgroup,
      # the weight gradient's per-tile k-blocks, every option of the GLU).
      sanitize sanitize_memcheck_pingpong "memcheck (ping-pong)" memcheck \
        "$SAN_FWD:ForwardGpu.Glu:BackwardGpu.GarbageOffsets*:BackwardGpu.CasesC03C12EmptyExperts:BackwardGpu.DgluOptions:BackwardGpu.WgradCasesC01C02C09" \
        "${PINGPONG_ENV[@]}"
      sanitize sanitize_racecheck_pingpong "racecheck (ping-pong)" racecheck "$SAN_SMALL" "${PINGPONG_ENV[@]}"
      # The dynamic tile order (the claimed-tile ring in shared memory; the weight gradient's expert sort).
      sanitize sanitize_memcheck_dynamic "memcheck (dynamic order)" memcheck \
        "$SAN_FWD:ForwardGpu.Glu:BackwardGpu.GarbageOffsets*:BackwardGpu.DgluOptions:BackwardGpu.WgradSkewed*" \
        "${DYNAMIC_ENV[@]}"
      sanitize sanitize_racecheck_dynamic "racecheck (dynamic order)" racecheck "$SAN_SMALL" "${DYNAMIC_ENV[@]}"
      # The cluster-pair kernel (B multicast into both CTAs, remote stage releases).
      sanitize sanitize_memcheck_pairs "memcheck (cluster pairs)" memcheck "$SAN_FWD:ForwardGpu.GroupSizeEdgeCases" \
        "${PAIRS256_ENV[@]}"
      sanitize sanitize_racecheck_pairs "racecheck (cluster pairs)" racecheck 'ForwardGpu.CasesC03C04C07' "${PAIRS_ENV[@]}"
      ;;
    pytest)
      note "Python tests on the GPU"
      # shellcheck disable=SC2086  # a list of paths, split on spaces
      PYTHONPATH="$BUILD/python" python3 -m pytest -q ${MOEGEMM_PYTEST_PATHS:-tests/python} -p no:cacheprovider -rs \
        > "$REPORT/pytest.log" 2>&1 || status=1
      tail -5 "$REPORT/pytest.log" | tee -a "$REPORT/summary.txt"
      ;;
    bench)
      note "benchmarks against the peers"
      if [ -f bench/peers.py ]; then
        PYTHONPATH="$BUILD/python" MOEGEMM_BIN="$BUILD/tools/moegemm" python3 bench/peers.py \
          ${MOEGEMM_BENCH_ARGS:---quick} --out "$REPORT/peers.json" > "$REPORT/bench.log" 2>&1 || status=1
        tail -40 "$REPORT/bench.log" | tee -a "$REPORT/summary.txt"
        [ -f "$REPORT/peers.json" ] && python3 bench/tables.py "$REPORT/peers.json" > "$REPORT/tables.md" 2>&1
      else
        echo "bench/peers.py missing" | tee -a "$REPORT/summary.txt"
      fi
      ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
exit $status
