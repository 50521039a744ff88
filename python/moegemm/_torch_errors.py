"""Errors of the composite torch functions (grouped_mm, moe_mlp), named by the operands their callers pass.

The ops they call check everything before any launch, but name their own operands (a, b, offsets, x, dy).
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def named_as(public_op: str, names: dict[tuple[str, str], str]):
    """Re-raises a ValueError or NotImplementedError of an inner op whose message starts with
    ``"<op>: <operand>: "`` as ``"<public_op>: <name>: ... (checked as <op>'s <operand>)"``, where ``names`` maps
    (op, operand) to the caller's name for it; other errors pass unchanged. Inactive while torch.compile
    traces (the fake kernels raise their own errors there)."""
    if torch.compiler.is_compiling():
        yield
        return
    try:
        yield
    except (ValueError, NotImplementedError) as e:
        message = str(e)
        for (op, operand), name in names.items():
            prefix = f"{op}: {operand}: "
            if message.startswith(prefix):
                raise type(e)(f"{public_op}: {name}: {message[len(prefix):]} (checked as {op}'s {operand})") from e
        raise
