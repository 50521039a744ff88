"""Where the front ends find their native libraries ($MOEGEMM_LIB_DIR, else the package), and the ImportError
each raises when a library is missing or does not load, so that `except ImportError` around an optional front
end catches either. Each case runs in a new process (a front end loads its library once, when imported)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import moegemm

PACKAGE = pathlib.Path(moegemm.__file__).resolve().parent
FRONT_ENDS = [pytest.param(name, marks=pytest.mark.skipif(not (PACKAGE / f"libmoegemm_{name}.so").exists(),
                                                          reason=f"the {name} binding is not built"))
              for name in ("jax", "torch")]


# After the import, a call that needs the library loaded (its symbols, for moegemm.jax).
_USE = {"jax": "moegemm.jax.device_kernels_available()", "torch": "moegemm.torch.ops.grouped_gemm.default"}


def _import(front_end: str, lib_dir: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """Imports moegemm.<front_end> with MOEGEMM_LIB_DIR=lib_dir in a new process run in `cwd`, then makes a
    call that needs its library; prints the ImportError's message, if any, else 'imported'."""
    script = (f"try:\n    import moegemm.{front_end}\nexcept ImportError as e:\n    print('ImportError:', e)\n"
              f"else:\n    {_USE[front_end]}\n    print('imported')\n")
    env = dict(os.environ, MOEGEMM_LIB_DIR=lib_dir, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(PACKAGE.parent), *sys.path]))
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_missing_or_broken_library_is_an_import_error_naming_its_folder(front_end, tmp_path):
    missing = _import(front_end, str(tmp_path), tmp_path)
    assert missing.returncode == 0, missing.stderr
    assert f"ImportError: moegemm: native library libmoegemm_{front_end}.so not found in {tmp_path}" in missing.stdout
    (tmp_path / f"libmoegemm_{front_end}.so").write_bytes(b"")  # a truncated build
    broken = _import(front_end, str(tmp_path), tmp_path)
    assert broken.returncode == 0, broken.stderr
    assert (f"ImportError: moegemm: native library libmoegemm_{front_end}.so in {tmp_path} does not load"
            in broken.stdout)


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_relative_library_folder_is_read_from_the_working_directory(front_end, tmp_path):
    """MOEGEMM_LIB_DIR=. names the working directory (the loader would search its own path for a bare name)."""
    for lib in PACKAGE.glob("lib*.so"):
        shutil.copy(lib, tmp_path)
    result = _import(front_end, ".", tmp_path)
    assert result.stdout.strip() == "imported", result.stdout + result.stderr


def test_the_native_libraries_call_no_python_c_api():
    """The wheel is tagged py3-none-<platform> (pyproject.toml), which holds only while no native library
    needs libpython or one of its symbols."""
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to list the libraries' undefined symbols"
    libraries = sorted(PACKAGE.glob("libmoegemm*.so"))
    assert libraries, f"no native library in {PACKAGE}"
    for lib in libraries:
        listed = subprocess.run([nm, "-D", "--undefined-only", str(lib)], capture_output=True, text=True,
                                check=True).stdout.split()
        python_symbols = [s for s in listed if s.startswith(("Py", "_Py"))]
        assert not python_symbols, f"{lib.name} calls the Python C API: {python_symbols[:5]}"
