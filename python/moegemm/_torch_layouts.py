"""The 2-D operand layouts ``torch._grouped_mm`` takes that the kernels do not read in place, and their copies.

The kernels read the ragged-M product's activations row-major or column-major, but the ragged-K product's
two operands only token-major (the ragged dimension T is their rows in memory). ``torch._grouped_mm`` also
takes the other order of those (PyTorch's own tests run all four combinations): ``grouped_mm`` copies such
an operand to the order the kernels read (one read and one write of it, in its dtype) and says so in its
docstring.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from ._torch_errors import known


def misaligned_base(t: torch.Tensor) -> bool:
    """Whether a non-empty ``t`` starts off the 16-byte grid. Meta and fake tensors (FakeTensorMode's shape
    propagation), whose ``data_ptr()`` torch deprecates, tell by their storage offset, storages starting
    aligned as torch's allocators give them. While torch.compile traces (where Dynamo cannot read a storage
    offset) no tensor counts as misaligned: the op checks the address when the graph runs."""
    if torch.compiler.is_compiling():
        return False
    if t.device.type == "meta" or is_fake(t):
        return known(t.storage_offset() * t.element_size() % 16 != 0)
    return t.data_ptr() % 16 != 0


def check_aligned_base(op: str, name: str, t: torch.Tensor) -> None:
    """The 16-byte rule on the base address of an operand the ops read: ValueError naming ``op: name`` where it
    fails. Tensors without an address pass: empty, meta and fake ones (torch.compile's tracing, FakeTensorMode's
    shape propagation), whose ``data_ptr()`` torch deprecates."""
    if not t.numel() or t.device.type == "meta" or torch.compiler.is_compiling() or is_fake(t):
        return
    if t.data_ptr() % 16:
        raise ValueError(f"{op}: {name}: expected a 16-byte aligned base address (16-byte alignment rule), got "
                         f"{t.data_ptr():#x}; pass a copy of the operand, which starts aligned")


def _rows_readable(t: torch.Tensor) -> bool:
    """Whether a 2-D ``t`` is row-major as the ops read it: a unit column stride (or one column) and rows that
    do not overlap (or one row)."""
    rows, cols = t.shape
    return (cols <= 1 or t.stride(1) == 1) and (rows <= 1 or t.stride(0) >= cols)


def is_column_major(t: torch.Tensor) -> bool:
    """Whether a 2-D ``t`` with more than one row and column is column-major as the ops read it: its first dim
    contiguous and its columns not overlapping."""
    rows, cols = t.shape
    return rows > 1 and cols > 1 and t.stride(0) == 1 and t.stride(1) >= rows


def row_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself where the ops read it row-major, its row-major copy where it is column-major (its first
    dim contiguous, or one row at any column stride), else ``t`` as it is, for the ops to refuse by name."""
    if t.is_contiguous() or _rows_readable(t):  # one call into torch on the usual eager path
        return t
    return t.contiguous() if _rows_readable(t.t()) else t


def rows_or_columns(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself where the ragged-M kernels read it in place: row-major as ``row_major`` reads it, or
    column-major with a column stride and a start in its storage that are multiples of 16 bytes (M-major A
    tiles); else ``row_major(t)`` (a column-major ``t`` at another stride, or a slice of rows of one that
    starts off the 16 bytes, is copied; under torch.compile the start is left to the op, docs/torch.md)."""
    if t.is_contiguous():  # one call into torch on the usual eager path
        return t
    size = t.element_size()
    if is_column_major(t) and t.stride(1) * size % 16 == 0 and (
            torch.compiler.is_compiling() or t.storage_offset() * size % 16 == 0):
        return t  # compiled graphs are not specialised on the start: the op checks it when the graph runs
    return row_major(t)


def column_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself where its transpose is row-major as the ops read it, else a column-major copy of a
    row-major ``t`` (``t.t().contiguous().t()``); a layout that is neither is returned as it is."""
    return row_major(t.t()).t()


def stacked_rows(a: torch.Tensor) -> torch.Tensor | None:
    """An (E, M, K) ``a`` as one (E*M, K) matrix the ops read row-major: a view where its strides allow one,
    else a copy, when each group is row-major or column-major (a slice of a wider or longer stack, a
    transposed view); None for any other layout."""
    e, m, k = a.shape
    if not (m <= 1 or k <= 1 or a.stride(-1) == 1 or a.stride(-2) == 1):
        return None
    rows = a.reshape(e * m, k)  # a view where the strides allow one (decided from them: no failed view)
    return rows if _rows_readable(rows) else rows.contiguous()
