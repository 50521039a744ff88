"""Errors of the composite torch functions (grouped_mm, moe_mlp), named by the operands their callers pass.

The ops they call check everything before any launch, but name their own operands (a, b, offsets, x, dy).
"""

from __future__ import annotations

import torch


def call_named(public_op: str, names: dict[tuple[str, str], str], fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a ValueError or NotImplementedError of an inner op whose message starts with
    ``"<op>: <operand>: "`` is re-raised as ``"<public_op>: <name>: ... (checked as <op>'s <operand>)"``, where
    ``names`` maps (op, operand) to the caller's name for it; other errors pass unchanged. While torch.compile
    traces, ``fn`` is called as it is (the fake kernels raise their own errors there). Costs the eager path a
    call and a check (~0.3 µs; a context manager took ~1.8 µs)."""
    if torch.compiler.is_compiling():
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except (ValueError, NotImplementedError) as e:
        message = str(e)
        for (op, operand), name in names.items():
            prefix = f"{op}: {operand}: "
            if message.startswith(prefix):
                raise type(e)(f"{public_op}: {name}: {message[len(prefix):]} (checked as {op}'s {operand})") from e
        raise
