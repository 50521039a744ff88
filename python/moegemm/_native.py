"""Locating the native libraries of the package (no framework imported here)."""

from __future__ import annotations

import os
from pathlib import Path


def library_dir() -> Path:
    """Folder holding libmoegemm.so and the binding libraries: $MOEGEMM_LIB_DIR, else this package. Absolute
    either way: the loader searches its own path for a file name without a slash ("lib.so" from "." alone)."""
    override = os.environ.get("MOEGEMM_LIB_DIR")
    return Path(override).absolute() if override else Path(__file__).resolve().parent


def library_path(stem: str) -> Path:
    """Path of lib<stem>.so in library_dir(); raises ImportError naming the folder when it is absent."""
    path = library_dir() / f"lib{stem}.so"
    if not path.exists():
        raise ImportError(
            f"moegemm: native library {path.name} not found in {path.parent}; build the package "
            "(pip install --no-build-isolation .) in an environment where its framework imports (a binding is "
            "built only where its framework imports at build time) or set MOEGEMM_LIB_DIR"
        )
    return path


def load_failed(path: Path, error: Exception) -> ImportError:
    """The ImportError for a native library that is there but does not load (the loader's OSError for an empty
    or foreign file, or an AttributeError for a symbol a stale build lacks), so that ``except ImportError``
    around an optional front end catches it as it catches a missing library. A file cut off inside its code
    can crash the loader before any error is raised."""
    return ImportError(f"moegemm: native library {path.name} in {path.parent} does not load ({error}); rebuild "
                       "the package (pip install --no-build-isolation .) or set MOEGEMM_LIB_DIR")
