"""The string options of the torch ops (layouts, activations), checked by name before any op runs."""

from __future__ import annotations

B_LAYOUTS = ("nk", "kn")
ACTIVATIONS = ("swiglu", "geglu", "swiglu_clamped")
GLU_LAYOUTS = ("halves", "interleaved32", "interleaved32_up_first")


def check_choice(op: str, name: str, value: str, choices: tuple[str, ...]) -> None:
    """ValueError naming ``op: name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{op}: {name}: expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
