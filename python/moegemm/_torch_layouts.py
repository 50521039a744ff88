"""The 2-D operand layouts ``torch._grouped_mm`` takes that the kernels do not read in place, and their copies.

The kernels read the ragged-M product's activations row-major (K contiguous) and the ragged-K product's two
operands token-major (the ragged dimension T is their rows in memory). ``torch._grouped_mm`` also takes the
other order of each (PyTorch's own tests run all four combinations): ``grouped_mm`` copies such an operand
to the order the kernels read (one read and one write of it, in its dtype) and says so in its docstring.
"""

from __future__ import annotations

import torch


def _unit_stride_dim(t: torch.Tensor) -> int | None:
    """0 or 1: the dim of a 2-D ``t`` along which its elements are contiguous with the other dim's stride
    at least that dim's extent (its rows or columns do not overlap); None for any other layout. A tensor with
    one row or one column is row-major (1) whatever its strides."""
    rows, cols = t.shape
    if rows <= 1 or cols <= 1:
        return 1
    s0, s1 = t.stride()
    if s1 == 1 and s0 >= cols:
        return 1
    if s0 == 1 and s1 >= rows:
        return 0
    return None


def row_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself unless it is column-major (its first dim contiguous), else its row-major copy. A layout
    that is neither is returned as it is, for the ops to refuse by name."""
    return t.contiguous() if _unit_stride_dim(t) == 0 else t


def column_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself unless it is row-major (its last dim contiguous, more than one row and column), else a
    column-major copy (``t.t().contiguous().t()``)."""
    rows, cols = t.shape
    return t.t().contiguous().t() if rows > 1 and cols > 1 and _unit_stride_dim(t) == 1 else t


def stacked_rows(a: torch.Tensor) -> torch.Tensor | None:
    """An (E, M, K) ``a`` as one (E*M, K) row-major matrix: a view where its strides allow one, else a copy
    when each group is row-major or column-major (a slice of a wider or longer stack, a transposed view);
    None for any other layout."""
    e, m, k = a.shape
    # Decided from the strides (a failed view raises another error type while torch.compile traces).
    stacked = e <= 1 or m <= 1 or a.stride(0) == m * a.stride(1)
    if stacked or k <= 1 or a.stride(-1) == 1 or a.stride(-2) == 1:
        return a.reshape(e * m, k)  # a view where the strides allow one
    return None
