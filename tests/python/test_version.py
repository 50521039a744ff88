"""The version is written in four places (CMake project, C++ header, Python package metadata and module); they
must agree, so that `moegemm --version`, `find_package(moegemm 0.1)`, pip and `moegemm.__version__` name the
same release."""

from __future__ import annotations

import pathlib
import re
import tomllib

import moegemm

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_version_string_agrees():
    cmake = re.search(r"project\(moegemm VERSION (\d+\.\d+\.\d+)", (ROOT / "CMakeLists.txt").read_text())
    header = (ROOT / "include/moegemm/version.hpp").read_text()
    k_version = re.search(r'kVersion = "([^"]+)"', header)
    parts = [re.search(rf"#define MOEGEMM_VERSION_{p} (\d+)", header) for p in ("MAJOR", "MINOR", "PATCH")]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert cmake and k_version and all(parts)
    versions = {
        "CMakeLists.txt project()": cmake.group(1),
        "version.hpp kVersion": k_version.group(1),
        "version.hpp MOEGEMM_VERSION_*": ".".join(p.group(1) for p in parts),
        "pyproject.toml": pyproject,
        "moegemm.__version__": moegemm.__version__,
    }
    assert len(set(versions.values())) == 1, versions
