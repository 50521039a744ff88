"""`import moegemm` needs no framework, and a front end whose framework is missing is an ImportError that says
what to install (docs/torch.md, docs/jax.md). Each case runs in a new process whose import system refuses the
blocked frameworks, as if they were not installed: a meta-path finder first on sys.meta_path raises
ModuleNotFoundError for them and every module under them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import moegemm

PACKAGE = pathlib.Path(moegemm.__file__).resolve().parent

_SCRIPT = textwrap.dedent("""
    import importlib.abc, json, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, Block())
    report = {}
    import moegemm
    report["version"] = moegemm.__version__
    for front_end in ("torch", "jax"):
        try:
            __import__("moegemm." + front_end)
        except ImportError as e:
            report[front_end] = {"error": type(e).__name__, "message": str(e),
                                 "cause": type(e.__cause__).__name__ if e.__cause__ else None}
        else:
            report[front_end] = "imported"
    report["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED | {"torch", "jax", "jaxlib"})
    print(json.dumps(report))
""")


def _run_blocking(*frameworks):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([str(PACKAGE.parent), *sys.path]))
    run = subprocess.run([sys.executable, "-c", _SCRIPT, ",".join(frameworks)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _installed(name):
    probe = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, timeout=300)
    return probe.returncode == 0 and (PACKAGE / f"libmoegemm_{name}.so").exists()


TORCH_ERROR = "moegemm.torch needs torch (pip install torch); `import moegemm` works without it"
JAX_ERROR = "moegemm.jax needs jax (pip install 'jax>=0.10'); `import moegemm` works without it"


def test_import_moegemm_without_torch_or_jax():
    report = _run_blocking("torch", "jax", "jaxlib")
    assert report["version"] == moegemm.__version__
    assert report["loaded"] == [], "a blocked framework was imported"
    assert report["torch"] == {"error": "ImportError", "message": TORCH_ERROR, "cause": "ModuleNotFoundError"}
    assert report["jax"] == {"error": "ImportError", "message": JAX_ERROR, "cause": "ModuleNotFoundError"}


def test_import_moegemm_without_torch():
    report = _run_blocking("torch")
    assert report["version"] == moegemm.__version__
    assert report["torch"] == {"error": "ImportError", "message": TORCH_ERROR, "cause": "ModuleNotFoundError"}
    if _installed("jax"):  # the JAX front end does not need torch
        assert report["jax"] == "imported"
    assert not any(m.split(".")[0] == "torch" for m in report["loaded"])


def test_import_moegemm_without_jax():
    report = _run_blocking("jax", "jaxlib")
    assert report["version"] == moegemm.__version__
    assert report["jax"] == {"error": "ImportError", "message": JAX_ERROR, "cause": "ModuleNotFoundError"}
    if _installed("torch"):  # the torch front end does not need jax
        assert report["torch"] == "imported"
    assert not any(m.split(".")[0] in ("jax", "jaxlib") for m in report["loaded"])


@pytest.mark.parametrize("front_end", ["torch", "jax"])
def test_a_front_end_imports_with_both_frameworks_present(front_end):
    """The blocker itself lets everything else through: with nothing blocked, a built front end imports."""
    if not _installed(front_end):
        pytest.skip(f"{front_end} or the moegemm {front_end} binding is not installed")
    assert _run_blocking("nothing-blocked")[front_end] == "imported"
