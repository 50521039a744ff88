"""Reading a logical (E, K, N) weight tensor as a moegemm B operand without copying it."""

from __future__ import annotations

import torch

_FLIP = {"kn": "nk", "nk": "kn"}


def weight_operand(w: torch.Tensor, op: str, name: str, shape: torch.Size | None = None) -> tuple[torch.Tensor, str]:
    """The moegemm (b, b_layout) that computes ``A @ w[g]`` for a logical (E, K, N) weight ``w``.

    ``w`` row-major in its last two dims (N contiguous) is passed as is with ``"kn"``; ``w`` that is a
    transposed view of a row-major (E, N, K) tensor (``w.stride(-2) == 1``, e.g. ``weight.mT`` of an
    ``nn.Linear``-style stack) is passed as that (E, N, K) tensor with ``"nk"``. Nothing is copied.
    Raises ValueError naming ``op: name`` for any other stride order (neither of the last two dims
    contiguous, or experts interleaved inside a matrix), for padding inside a matrix (``w[:, :, :N]`` of a
    wider tensor) and for experts that are not packed one after another (``w[::2]``), with the caller's
    shape and strides; the moegemm contract then checks the rest (16-byte alignment). ``shape`` is
    ``w.shape`` when the caller has read it already (each read is a call into torch on the eager path).
    """
    # One read of shape and strides: each accessor is a separate dispatcher-level call on the eager path.
    shape = w.shape if shape is None else shape
    if len(shape) != 3:
        raise ValueError(f"{op}: {name}: expected a 3-D (E, K, N) weight tensor, got shape {tuple(shape)}")
    e, rows, cols = shape
    expert_stride, row_stride, col_stride = w.stride()
    layout = padded = None
    # A matrix with no columns (N = 0) or no rows (K = 0) has no padding to find: torch gives its empty dim a
    # stride of 1, and the op then names the empty extent.
    if col_stride == 1 and (rows <= 1 or row_stride >= cols):
        layout, matrix = "kn", rows * row_stride if rows > 1 else cols
        padded = (-2, cols) if rows > 1 and cols > 0 and row_stride != cols else None
    elif row_stride == 1 and (cols <= 1 or col_stride >= rows):
        layout, matrix = "nk", cols * col_stride if cols > 1 else rows
        padded = (-1, rows) if cols > 1 and rows > 0 and col_stride != rows else None
    if padded is not None:
        # The ops read each expert's matrix as one packed block (a padded row pitch is not a tensor they take).
        dim, packed = padded
        raise ValueError(
            f"{op}: {name}: expected the experts' matrices packed one after another, without padding inside a "
            f"matrix (stride({dim}) == {packed} here), got shape {tuple(shape)} with strides {tuple(w.stride())}; "
            f"pass w.contiguous() to copy it")
    # An empty matrix has no expert stride to honour either (a sliced w[:, :0] keeps its parent's).
    if layout is not None and e > 1 and rows > 0 and cols > 0 and expert_stride != matrix:
        raise ValueError(
            f"{op}: {name}: expected the experts' matrices packed one after another (expert stride "
            f"{matrix}), got shape {tuple(shape)} with strides {tuple(w.stride())}; pass w.contiguous() to "
            f"copy it")
    if layout is not None:
        return operand_view(w, layout), layout
    raise ValueError(
        f"{op}: {name}: expected an (E, K, N) weight whose N dim is contiguous (stride(-1) == 1) or a "
        f"transposed view of an (E, N, K) tensor (stride(-2) == 1), got shape {tuple(shape)} with strides "
        f"{tuple(w.stride())}; pass w.contiguous() to copy it"
    )


def operand_view(w: torch.Tensor, layout: str) -> torch.Tensor:
    """The moegemm b of ``w`` read with ``layout`` (no checks): ``w`` itself for "kn", the (E, N, K) tensor it
    views for "nk". weight_operand returns it; an autograd Function saves the caller's ``w`` and takes it again
    in its backward, so that the saved tensor is the one that requires grad."""
    return w if layout == "kn" else w.mT


def dense_grad(g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An incoming gradient as a row-major operand of `dtype`. Autograd may hand over an empty gradient
    with all-zero strides, which ``contiguous()`` keeps (nothing to copy) and the ops' stride checks
    reject; an empty one is replaced by a fresh empty tensor of the same shape (no data, no fill)."""
    g = g.to(dtype)
    return g.contiguous() if g.numel() else g.new_empty(g.shape)


def flipped(layout: str) -> str:
    """The layout that reads the same storage as the transposed weight (E, N, K) -> used by dgrad."""
    return _FLIP[layout]


def weight_grad_like(layout: str):
    """For a weight read with `layout`, (transpose_output, fix) for grouped_gemm_wgrad such that
    ``fix(wgrad(x, dy, transpose_output=...))`` has the weight's logical (E, K, N) shape and the same
    stride order as the weight's storage."""
    if layout == "kn":
        return False, lambda g: g
    return True, lambda g: g.transpose(-2, -1)
