"""The benchmark scripts run end to end on the CPU (bench/peers.py --device cpu --tiny: tiny shapes, host clock,
GPU-only systems skipped with a note) and their JSON renders as tables (bench/tables.py): CI has no GPU, so this
is what keeps a change to the suites, their timing or their tables from first failing on a GPU machine. The
numbers of such a run are not measurements and are not checked."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
import moegemm.torch  # noqa: E402,F401  (the suites need it)

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
SUITES = ("peers", "glu", "wgrad", "dglu", "mlp")


def test_every_default_suite_runs_on_the_cpu_and_renders(tmp_path):
    out = tmp_path / "smoke.json"
    run = subprocess.run([sys.executable, str(BENCH / "peers.py"), "--device", "cpu", "--tiny", "--suite", *SUITES,
                          "--out", str(out)], capture_output=True, text=True, env=os.environ.copy(), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert sorted(doc["suites"]) == sorted(SUITES)
    assert doc["rows"] and all("tflops" in row["systems"]["moegemm_torch"] for row in doc["rows"])
    assert all(row["dense_rotating_copies"] >= 1 for row in doc["rows"])
    # A CPU run's rates lie far below 1 TFLOP/s: the progress lines print them to two significant digits.
    rates = [float(cell.split("=", 1)[1]) for line in run.stdout.splitlines() if "TFLOP/s" in line
             for cell in line.split() if cell.startswith("moegemm_torch=")]
    assert len(rates) == len(doc["rows"]) and all(r > 0 for r in rates), run.stdout[-2000:]
    assert doc["glu"] and all(doc["backward"][suite] for suite in ("wgrad", "dglu", "mlp"))
    compiled = {"torch_compiled_unfused": doc["glu"] + doc["backward"]["dglu"],
                "torch_compiled_autograd": doc["backward"]["mlp"]}
    for system, rows in compiled.items():  # recorded, as skipped on the CPU
        assert all(row["systems"][system]["status"].startswith("skipped") for row in rows), system
    tables = subprocess.run([sys.executable, str(BENCH / "tables.py"), str(out)], capture_output=True, text=True,
                            timeout=120)
    assert tables.returncode == 0, tables.stderr[-3000:]
    for heading in ("Grouped GEMM against the peers", "GLU forward", "Weight gradient, ragged K", "dGLU backward",
                    "MoE MLP forward + backward"):
        assert f"### {heading}" in tables.stdout
    assert "moegemm torch front end / torch._grouped_mm >= 1.2: met on" in tables.stdout
    peers_rows = [line.split(" | ") for line in tables.stdout.splitlines() if line.startswith("| seed-")]
    assert peers_rows and all(float(cells[6]) > 0 for cells in peers_rows), tables.stdout[:3000]
    assert "torch compiled / fused" in tables.stdout and "torch compiled / moegemm" in tables.stdout


def _planned_seconds(*args: str) -> float:
    run = subprocess.run([sys.executable, str(BENCH / "peers.py"), "--plan", *args], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    total = [line for line in run.stdout.splitlines() if line.split()[:1] == ["total"]]
    return float(total[0].split()[1])


def test_no_compile_leaves_the_compilations_out_of_the_plan():
    sys.path.insert(0, str(BENCH))
    import suites

    # glu, dglu and mlp each compile one baseline; --no-compile skips all three, and their calls.
    with_compile = _planned_seconds("--quick", "--suite", "glu", "dglu", "mlp")
    without = _planned_seconds("--quick", "--suite", "glu", "dglu", "mlp", "--no-compile")
    assert with_compile - without >= 3 * suites.COMPILE_S - 1


@pytest.mark.parametrize("mode", ["rows", "contraction"])
def test_jax_ragged_dot_script_runs_both_modes_on_the_cpu(tmp_path, mode):
    """bench/jax_ragged_dot.py on one tiny workload of two (--only): both implementations timed for both
    routings; an unknown name is refused before any run."""
    pytest.importorskip("jax")
    workloads = tmp_path / "tiny.json"
    workloads.write_text(json.dumps({"gemms": [{"name": "seed-tiny", "M": 256, "N": 64, "K": 128, "E": 8},
                                               {"name": "other", "M": 256, "N": 64, "K": 128, "E": 4}]}))
    out = tmp_path / "jax.json"
    command = [sys.executable, str(BENCH / "jax_ragged_dot.py"), str(workloads), "--mode", mode, "--calls", "2",
               "--repeats", "1", "--json", str(out), "--only"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    run = subprocess.run(command + ["seed-tiny"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["mode"] == mode and doc["complete"] is True
    assert [(row["name"], row["routing"]) for row in doc["rows"]] == [("seed-tiny", "uniform"), ("seed-tiny", "zipf")]
    assert all(row[name]["us"] > 0 for row in doc["rows"] for name in ("moegemm", "jax.lax")), doc["rows"]
    bad = subprocess.run(command + ["seed-tiny", "nope"], capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "--only: no workload named nope" in bad.stderr, bad.stderr[-3000:]
