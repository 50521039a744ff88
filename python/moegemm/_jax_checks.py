"""Trace-time operand checks of ``moegemm.jax``: rank, dtype and extent, each raising an error that
names the op, the operand, what was expected and what was given. The C++ contract checks run after
these (through the workspace query) and cover the rest (alignment, strides, E <= 1024, ...)."""

from __future__ import annotations

from typing import Iterable

import jax.numpy as jnp
import numpy as np

SIXTEEN_BIT = (jnp.bfloat16, jnp.float16)
OUTPUT_FLOATS = (jnp.bfloat16, jnp.float16, jnp.float32)


def dtype_names(dtypes: Iterable) -> str:
    return ", ".join(np.dtype(d).name for d in dtypes)


def check_rank(op: str, name: str, x, rank: int, layout: str) -> None:
    """Raise ValueError unless ``x`` has ``rank`` dims (``layout`` names them, e.g. "(M, K)")."""
    if np.ndim(x) != rank:
        raise ValueError(f"moegemm.jax.{op}: {name}: expected rank {rank} {layout}, "
                         f"got shape {tuple(np.shape(x))}")


def check_dtype(op: str, name: str, x, allowed: Iterable) -> None:
    """Raise TypeError unless ``x``'s dtype is one of ``allowed``."""
    allowed = tuple(np.dtype(d) for d in allowed)
    if np.dtype(x.dtype) not in allowed:
        raise TypeError(f"moegemm.jax.{op}: {name}: expected dtype {dtype_names(allowed)}, "
                        f"got {np.dtype(x.dtype).name}")


def check_output_dtype(op: str, name: str, dtype, allowed: Iterable = OUTPUT_FLOATS):
    """The numpy dtype of an output-dtype option; TypeError when it is not allowed."""
    allowed = tuple(np.dtype(d) for d in allowed)
    dt = np.dtype(dtype)
    if dt not in allowed:
        raise TypeError(f"moegemm.jax.{op}: {name}: expected one of {dtype_names(allowed)}, got {dt.name}")
    return dt


def check_extent(op: str, name: str, x, axis: int, expected: int, what: str) -> None:
    """Raise ValueError unless dim ``axis`` of ``x`` equals ``expected`` (``what`` says where it comes from)."""
    got = np.shape(x)[axis]
    if got != expected:
        raise ValueError(f"moegemm.jax.{op}: {name}: expected dim {axis} = {expected} ({what}), "
                         f"got shape {tuple(np.shape(x))}")


def check_aligned(op: str, name: str, x, axis: int, what: str) -> None:
    """Raise ValueError unless dim ``axis`` (a contiguous 16-bit dim) is a multiple of 8: every row of a
    bf16/f16 operand must start 16-byte aligned (TMA rule of the sm_90a kernels, kept on every backend)."""
    got = np.shape(x)[axis]
    if got % 8 != 0:
        raise ValueError(
            f"moegemm.jax.{op}: {name}: {what} = {got} is not a multiple of 8; 16-bit operands need "
            f"16-byte aligned rows (shape {tuple(np.shape(x))}, dtype {np.dtype(x.dtype).name})")


def check_choice(op: str, name: str, value: str, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"moegemm.jax.{op}: {name}: expected one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return value
