"""The options of the torch ops (layouts, activations) and their expert limit, checked by name before any op
runs."""

from __future__ import annotations

B_LAYOUTS = ("nk", "kn")
ACTIVATIONS = ("swiglu", "geglu", "swiglu_clamped")
GLU_LAYOUTS = ("halves", "interleaved32", "interleaved32_up_first")
MAX_EXPERTS = 1024  # the contract's kMaxExperts (docs/ops.md section 0)


def check_choice(op: str, name: str, value: str, choices: tuple[str, ...]) -> None:
    """ValueError naming ``op: name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{op}: {name}: expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
