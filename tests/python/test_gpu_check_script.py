"""scripts/gpu_check.sh's exit status: a stage that fails fails the script. The sanitize stage runs here with a
stand-in `compute-sanitizer` first on PATH (no GPU, no build needed: the stand-in never starts the test binary),
which exits as compute-sanitizer does with `--error-exitcode 9` when it finds an error, or 0. The pytest stage
runs here on a stand-in test file given by MOEGEMM_PYTEST_PATHS."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run_sanitize(tmp_path, exit_codes):
    """Runs the sanitize stage with a stand-in that answers its n-th call with exit_codes[n] (0 past the list)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "calls"
    counter.write_text("0")
    codes = " ".join(str(c) for c in exit_codes)
    stand_in = bin_dir / "compute-sanitizer"
    stand_in.write_text(f"""#!/usr/bin/env bash
n=$(cat "{counter}"); echo $((n + 1)) > "{counter}"
codes=({codes}); rc=${{codes[$n]:-0}}
echo "========= ERROR SUMMARY: $rc errors"
exit $rc
""")
    stand_in.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               MOEGEMM_BUILD_DIR=str(tmp_path / "build"), MOEGEMM_REPORT_DIR=str(tmp_path / "report"))
    run = subprocess.run(["bash", str(SCRIPT), "sanitize"], capture_output=True, text=True, env=env, timeout=120)
    return run, int(counter.read_text()), (tmp_path / "report" / "summary.txt").read_text()


def test_sanitize_stage_passes_when_every_sanitizer_run_exits_zero(tmp_path):
    run, calls, summary = _run_sanitize(tmp_path, [])
    assert calls >= 2, summary
    assert run.returncode == 0, run.stdout + run.stderr
    assert summary.count("exit 0 :") == calls


@pytest.mark.parametrize("failing", ["first", "last"])
def test_a_sanitizer_error_fails_the_script(tmp_path, failing):
    _, calls, _ = _run_sanitize(tmp_path, [])
    index = 0 if failing == "first" else calls - 1
    shutil.rmtree(tmp_path / "bin")
    shutil.rmtree(tmp_path / "report")
    run, calls_again, summary = _run_sanitize(tmp_path, [0] * index + [9])
    assert calls_again == calls, summary  # the other runs still happen
    assert run.returncode != 0, summary
    assert summary.count("exit 9 :") == 1 and summary.count("exit 0 :") == calls - 1


@pytest.mark.parametrize("outcome", ["passes", "fails"])
def test_pytest_stage_runs_the_given_paths_and_fails_with_them(tmp_path, outcome):
    """MOEGEMM_PYTEST_PATHS replaces tests/python: only the given file runs, and its failure fails the script."""
    test_file = tmp_path / f"test_stand_in_{outcome}.py"
    test_file.write_text(f"def test_stand_in():\n    assert {outcome == 'passes'}\n")
    env = dict(os.environ, MOEGEMM_BUILD_DIR=str(tmp_path / "build"), MOEGEMM_REPORT_DIR=str(tmp_path / "report"),
               MOEGEMM_PYTEST_PATHS=str(test_file))
    run = subprocess.run(["bash", str(SCRIPT), "pytest"], capture_output=True, text=True, env=env, timeout=120)
    log = (tmp_path / "report" / "pytest.log").read_text()
    assert ("1 passed" if outcome == "passes" else "1 failed") in log, log
    if outcome == "fails":
        assert "test_stand_in" in log, log
    assert (run.returncode == 0) == (outcome == "passes"), run.stdout + run.stderr
