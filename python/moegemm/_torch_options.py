"""The options of the torch ops (layouts, activations) and their expert limit, checked by name before any op
runs."""

from __future__ import annotations

import sys

# Imported from here by the torch modules.
from ._limits import MAX_EXPERTS, MAX_OFFSET_ROWS, MAX_OPERAND_BYTES  # noqa: F401

B_LAYOUTS = ("nk", "kn")
ACTIVATIONS = ("swiglu", "geglu", "swiglu_clamped")
GLU_LAYOUTS = ("halves", "interleaved32", "interleaved32_up_first")


def _quoted_or(choices: tuple[str, ...]) -> str:
    quoted = [f'"{c}"' for c in choices]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def b_layouts_text(grouped: bool) -> str:
    """The b_layout choices as the C++ ops name them: with the (E, ...) weights of grouped ops or the 2-D
    weights of dense ones."""
    e = "E, " if grouped else ""
    return f'"nk" (weights ({e}N, K)) or "kn" (weights ({e}K, N))'


def check_choice(op: str, name: str, value: str, choices: tuple[str, ...], described: str | None = None) -> None:
    """ValueError naming ``op: name`` unless ``value`` is one of ``choices``, worded as the C++ ops word it
    (bindings/torch/options.cpp), so that a fake kernel and its op raise the same text. ``described``
    replaces the quoted list of choices."""
    # A str first: a NumPy string array compares element-wise and would pass `in` (np.array("nk") in ("nk",)).
    if not isinstance(value, str) or value not in choices:
        got = f'"{value}"' if isinstance(value, str) else repr(value)
        raise ValueError(f"{op}: {name}: expected {described or _quoted_or(choices)}, got {got}")


def check_flag(op: str, name: str, value) -> bool:
    """A flag (zero_tail, validate) as a bool: a Python bool or a NumPy bool; TypeError naming ``op: name``
    for anything else (None, an int, a string), whose truth value would otherwise pass silently for one
    (``validate="no"`` would validate). The JAX front end refuses the same (moegemm.jax static_bool)."""
    if isinstance(value, bool):  # first: the calls on the eager path pass Python bools
        return value
    np = sys.modules.get("numpy")  # a NumPy bool exists only where NumPy is imported
    if np is not None and isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{op}: {name}: expected a bool, got {type(value).__name__} {value!r}")
