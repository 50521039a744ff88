"""Shared pytest set-up: the `gpu` marker, and a folder of the run's own for torch.compile's on-disk caches."""

import atexit
import os
import shutil
import tempfile

import pytest

# Inductor's FX graph cache can hand back a graph compiled against another build of the ops, which calls an op
# with keywords it may no longer have (docs/torch.md, "Compiled graphs on disk after an upgrade"). Every run
# compiles afresh, unless the caller named a cache folder. Set before the test modules import torch.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="moegemm-tests-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an sm_90 GPU; skipped (and reported) elsewhere")
