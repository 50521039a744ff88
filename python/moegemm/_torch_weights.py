"""Reading a logical (E, K, N) weight tensor as a moegemm B operand without copying it."""

from __future__ import annotations

import torch

from ._torch_errors import known
from ._torch_layouts import misaligned_base

_FLIP = {"kn": "nk", "nk": "kn"}


def weight_operand(w: torch.Tensor, op: str, name: str, shape: torch.Size | None = None,
                   dims: tuple[str, str] = ("K", "N"), n_padded: bool = False) -> tuple[torch.Tensor, str]:
    """The moegemm (b, b_layout) that computes ``A @ w[g]`` for a logical (E, K, N) weight ``w``.

    ``w`` whose N dim is contiguous (``w.stride(-1) == 1``) is passed as is with ``"kn"``; ``w`` that is a
    transposed view of an (E, N, K) tensor with K contiguous (``w.stride(-2) == 1``, e.g. ``weight.mT`` of an
    ``nn.Linear``-style stack) is passed as that (E, N, K) tensor with ``"nk"``. Nothing is copied: padded
    rows (a slice ``w[:, :, :N]`` of a wider stack) and any positive expert stride (``w[::2]``) are read in
    place, as ``torch._grouped_mm`` reads them (docs/ops.md §0.2, rules 5 and 6). Raises ValueError naming
    ``op: name`` with the caller's shape and strides for a stride order with neither of the last two dims
    contiguous (experts innermost, case C13), a row stride below its row or off the 16-byte rule, and an
    expert stride of 0 or off the rule. ``shape`` is ``w.shape`` when the caller has read it already (each
    read is a call into torch on the eager path); ``dims`` are the caller's names for K and N in messages
    (``("H", "2I")`` for moe_mlp's w_up). The stride rules apply where a row spans a multiple of 16 bytes (the
    ops name a row length off it by its extent), and with ``n_padded`` (a caller that pads N to the rule
    before the ops see it) at any N.
    """
    # One read of shape and strides: each accessor is a separate dispatcher-level call on the eager path.
    k_name, n_name = dims
    shape = w.shape if shape is None else shape
    if len(shape) != 3:
        raise ValueError(f"{op}: {name}: expected a 3-D (E, {k_name}, {n_name}) weight tensor, got shape "
                         f"{tuple(shape)}")
    e, rows, cols = shape
    strides = w.stride()
    # A dim of one element takes any stride (torch gives it 1 or its parent's): it never decides the layout.
    # With N padded a weight of one column is read as "nk" where its K dim is contiguous, so that no
    # one-element row is held to the 16-byte rule.
    one_column_nk = n_padded and cols <= 1 and strides[1] == 1
    if (strides[2] == 1 or cols <= 1) and not one_column_nk:
        layout, row_dim, row_len, n_rows = "kn", 1, (n_name, cols), rows
    elif strides[1] == 1 or rows <= 1:
        layout, row_dim, row_len, n_rows = "nk", 2, (k_name, rows), cols
    else:
        raise ValueError(
            f"{op}: {name}: expected an (E, {k_name}, {n_name}) weight whose {n_name} dim is contiguous "
            f"(stride(-1) == 1) or a transposed view of an (E, {n_name}, {k_name}) tensor (stride(-2) == 1), got "
            f"shape {tuple(shape)} with strides {tuple(strides)}; pass {name.split()[0]}.contiguous() to copy it")
    # The ops' stride rules (docs/ops.md §0.2, rules 5 and 6) in the caller's dims: for "nk" the ops see the
    # (E, N, K) view and would name its dims. Strides no index steps are free, as there. A row length off the
    # 16-byte rule (N or K not a multiple of 8 in bf16) is left to the ops, which name that extent.
    # The messages are formatted only when raised: formatting a symbolic size under torch.compile would pin
    # it to its current value (a guard N == 32 per call site), and every new size would recompile.
    size = w.element_size()
    if e and rows and cols and ((n_padded and layout == "kn") or row_len[1] * size % 16 == 0):
        for dim, what, ok in ((row_dim, lambda: f"a row stride stride({row_dim}) >= {row_len[0]}={row_len[1]}",
                               n_rows <= 1 or strides[row_dim] >= row_len[1]),
                              (0, lambda: "a positive expert stride", e <= 1 or strides[0] > 0)):
            if not ok or (strides[dim] * size % 16 and (n_rows if dim else e) > 1):
                raise ValueError(
                    f"{op}: {name}: expected {what()} that is a multiple of 16 bytes (16-byte alignment rule), got "
                    f"stride({dim})={strides[dim]} elements ({strides[dim] * size} bytes), shape {tuple(shape)} "
                    f"with strides {tuple(strides)}")
    return operand_view(w, layout), layout


def operand_view(w: torch.Tensor, layout: str) -> torch.Tensor:
    """The moegemm b of ``w`` read with ``layout`` (no checks): ``w`` itself for "kn", the (E, N, K) tensor it
    views for "nk". weight_operand returns it. An autograd Function saves the caller's ``w``, so that the saved
    tensor is the one that requires grad, and reads it again in its backward with weight_operand: a
    saved-tensor hook may hand back another tensor (``torch.autograd.graph.save_on_cpu`` packs a contiguous
    copy, so that a ``w.mT`` read as "nk" comes back N-contiguous)."""
    return w if layout == "kn" else w.mT


def dense_grad(g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An incoming gradient as a row-major operand of `dtype` at a 16-byte aligned address. Autograd may hand
    over an empty gradient with all-zero strides, which ``contiguous()`` keeps (nothing to copy) and the ops'
    stride checks reject; an empty one is replaced by a fresh empty tensor of the same shape (no data, no
    fill). It may also hand over a contiguous view that starts off the 16-byte grid (the gradient of an
    output that was flattened and sliced, e.g. ``torch.cat([z, y.flatten()])``), which ``contiguous()`` keeps
    too and the ops' alignment check refuses: that one is copied (``clone``: a fresh, aligned storage)."""
    g = g.to(dtype)
    if known(g.numel() == 0):
        return g.new_empty(g.shape)
    g = g.contiguous()
    return g.clone() if misaligned_base(g) else g


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
