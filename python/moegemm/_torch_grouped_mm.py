"""``grouped_mm``: a drop-in for ``torch._grouped_mm`` on the moegemm ops, with autograd."""

from __future__ import annotations

import torch

from . import _torch_ops  # noqa: F401  (the ops, also where this module is imported on its own)
from ._torch_errors import (call_named, check_input_dtype, check_same_device, dtensor_placements, jit_tracing, known,
                            misfit_operand)
from ._torch_first_order import first_order_only
from ._torch_layouts import check_aligned_base, column_major, is_column_major, row_major, rows_or_columns, stacked_rows
from ._torch_options import MAX_EXPERTS, MAX_OFFSET_ROWS, MAX_OPERAND_BYTES, check_flag
from ._torch_weights import dense_grad, flipped, weight_grad_like, weight_operand

_OP = "grouped_mm"
# The ops, bound once (_torch_ops has loaded the library): the lookup through torch.ops costs ~0.3 us per
# call, a tenth of this wrapper's own host time.
_GROUPED_GEMM = torch.ops.moegemm.grouped_gemm.default
_WGRAD = torch.ops.moegemm.grouped_gemm_wgrad.default
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# The types an operand's check skips the DTensor test for (one type test per operand on the eager path).
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_PLAIN_OR_NONE = _PLAIN + (type(None),)

# The inner ops' operands as grouped_mm's caller knows them.
_ROWS_NAMES = {("grouped_gemm", "a"): "a", ("grouped_gemm", "b"): "b", ("grouped_gemm", "offsets"): "offs",
               ("grouped_gemm", "bias"): "bias", ("grouped_gemm", "d"): "out"}
_RAGGED_K_NAMES = {("grouped_gemm_wgrad", "x"): "a (read as a.t(), the (T, H) tensor it views)",
                   ("grouped_gemm_wgrad", "dy"): "b", ("grouped_gemm_wgrad", "offsets"): "offs",
                   ("grouped_gemm_wgrad", "w"): "out"}
# The 3-D x 2-D mode runs the 2-D x 3-D product of the transposes: its (N, K) rows are b.t(), its weights a.mT.
_RAGGED_N_NAMES = {("grouped_gemm", "a"): "b (read as b.t())",
                   ("grouped_gemm", "b"): "a (read as a.transpose(-2, -1))", ("grouped_gemm", "offsets"): "offs",
                   ("grouped_gemm", "d"): "out (written as out.t())"}
# The offsets' entries, offsets[g] in the ops' messages (validate=True), are offs[g] in grouped_mm's, and the
# operand that sets E is offs.
_ROWS_TERMS = {"offsets[": "offs[", "E from offsets": "E from offs"}
# The ragged dimension, M in grouped_gemm_wgrad's messages (its rows), is T in the 2-D x 2-D mode's.
_RAGGED_K_TERMS = {"expert end rows in [0, M=": "group ends along T in [0, T=", "each <= M": "each <= T", **_ROWS_TERMS}
# The ragged dimension of the 3-D x 2-D mode is N, the columns of its output.
_RAGGED_N_TERMS = {"expert end rows in [0, M=": "group ends along N in [0, N=", "each <= M": "each <= N",
                   "stride(1) >= M=": "stride(1) >= N=", **_ROWS_TERMS}


def _segment_column_sums(dout: torch.Tensor, offs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-expert column sums of the rows each expert owns (the bias gradient), (E, N) in `dtype`, summed in
    f32 (f64 for f64 tensors). Expert g owns the rows the forward gave it: the offsets clamped as the kernels
    clamp them (docs/ops.md §0), end_g = min(M, max(0, offs[0..g]))."""
    m = dout.shape[0]
    ends = torch.cummax(offs.long().clamp(0, m), 0).values
    # Expert g's rows are the contiguous segment [end_{g-1}, end_g); the rows past the last end form one more
    # segment, dropped below, so that the lengths add up to M without a host read of the last end.
    # segment_reduce sums each segment in order (deterministic, unlike index_add_'s atomics on CUDA);
    # an empty segment sums to 0.
    bounds = torch.cat([ends.new_zeros(1), ends, ends.new_full((1,), m)])
    acc = torch.float64 if torch.float64 in (dout.dtype, dtype) else torch.float32
    sums = torch.segment_reduce(dout.to(acc), "sum", lengths=bounds.diff(), axis=0, unsafe=True)
    return sums[:-1].to(dtype)


def _rows_options(layout: str, bias, out_dtype, zero_tail: bool, validate: bool) -> dict:
    """grouped_gemm's keyword arguments for a 2-D x 3-D call, leaving out those at their schema default
    (b_layout "nk", no bias, out_dtype None, zero_tail and validate False). The dispatcher parses every keyword
    it is given: leaving out the five defaults took 1.5-2.3 µs off the eager issue of a grouped_mm call on an
    H200's host (docs/benchmarks.md)."""
    options = {}
    if layout != "nk":
        options["b_layout"] = layout
    if bias is not None:
        options["bias"] = bias
    if out_dtype is not None:
        options["out_dtype"] = out_dtype
    if zero_tail:
        options["zero_tail"] = True
    if validate:
        options["validate"] = True
    return options


class _RaggedRowsMM(torch.autograd.Function):
    """out = a @ b[g] (+ bias[g]) over the row ranges of `offs`; gradients through the moegemm ops."""

    @staticmethod
    def forward(ctx, a, b, offs, bias, out_dtype, zero_tail, validate):
        b_op, layout = weight_operand(b, _OP, "b")
        out, _ = _GROUPED_GEMM(a, b_op, offs, **_rows_options(layout, bias, out_dtype, zero_tail, validate))
        ctx.save_for_backward(a, b, offs)  # the caller's b, which requires grad (first_order_only), not b_op
        ctx.layout = layout
        ctx.zero_tail = zero_tail
        ctx.b_dtype = b.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return out

    @staticmethod
    @first_order_only  # the backward runs moegemm ops, which have no derivative of their own
    def backward(ctx, saved, dout):
        a, b, offs = saved
        b_op, b_read = weight_operand(b, _OP, "b")  # b as it is now (a saved-tensor hook may copy it)
        if ctx.needs_input_grad[3]:  # from the incoming gradient as it is (f32 with out_dtype=f32)
            dbias = _segment_column_sums(dout, offs, ctx.bias_dtype)
        else:
            dbias = None
        dout = dense_grad(dout, a.dtype)  # the kernels read bf16 operands: dA and dB see dout rounded to it
        da = db = None
        if ctx.needs_input_grad[0]:
            da, _ = _GROUPED_GEMM(dout, b_op, offs, b_layout=flipped(b_read), zero_tail=ctx.zero_tail)
        if ctx.needs_input_grad[1]:
            transpose, fix = weight_grad_like(ctx.layout)
            x = row_major(a)  # the weight gradient reads x token-major: a column-major a is copied here
            db = fix(_WGRAD(x, dout, offs, transpose_output=transpose, out_dtype=ctx.b_dtype))
        return da, db, None, dbias, None, None, None


def _check_no_groups(a, b, k_a, k_b, where, n, out_dtype, offs=None, bias=None, ragged=None, out_rows=0):
    """What the ops would check of a call with no groups, which runs none of them: offs of shape (0,), then
    _check_without_op."""
    if offs is not None and (offs.dtype != torch.int32 or offs.shape != (0,)):
        raise ValueError(f"{_OP}: offs: expected a torch.int32 tensor of shape (0,) for 0 groups, got {offs.dtype} of "
                         f"shape {tuple(offs.shape)}")
    _check_without_op(a, b, k_a, k_b, where, n, out_dtype, offs, bias, ragged, out_rows)


def _check_without_op(a, b, k_a, k_b, where, n, out_dtype, offs=None, bias=None, ragged=None, out_rows=0):
    """What the ops would check of a call that runs none of them (no groups, or an empty output extent):
    devices, bias's dtype (a's and b's are checked before any mode), the contraction extent, the 16-byte rule
    on K and N (n: the output's columns, also in ``out_dtype``, None for a's), bias (E = 0, N) and the size of
    an output of ``out_rows`` rows (at most 2^62 bytes, the contract's rule on every operand: the 2-D x 3-D
    mode's (M, N) output is allocated all the same). ``ragged`` names the dimension the groups split, which, as
    with groups, may have any extent: "K" for the 2-D x 2-D mode (the contraction is its token dimension T; the
    rules on K do not apply), "N" for the 3-D x 2-D mode (the output's columns; the rules on N and on the
    output's rows do not apply)."""
    check_same_device(_OP, a=a, b=b, offs=offs, bias=bias)
    bias_dtypes = (torch.bfloat16, torch.float32) + ((torch.float64,) if a.device.type == "cpu" else ())
    if bias is not None and bias.dtype not in bias_dtypes:
        names = ", ".join(map(str, bias_dtypes[:-1])) + f" or {bias_dtypes[-1]}"
        raise ValueError(f"{_OP}: bias: expected dtype {names}, got {bias.dtype}")
    if k_a != k_b:
        raise ValueError(f"{_OP}: b: expected {where} = {k_a} (from a), got {k_b}")
    per_16_bytes = 16 // a.element_size()
    extents = [(name, symbol, value) for name, symbol, value in (("a", "K", k_a), ("b", "N", n))
               if symbol != ragged]
    for name, symbol, value in extents:
        if value == 0:
            raise ValueError(f"{_OP}: {name}: expected {symbol} > 0, got {symbol}=0")
        if value % per_16_bytes:
            raise ValueError(f"{_OP}: {name}: expected {symbol} a multiple of {per_16_bytes} for {a.dtype} "
                             f"(16-byte aligned rows), got {symbol}={value}")
    out_type = out_dtype or a.dtype
    if ragged != "N" and n * out_type.itemsize % 16:  # the ops' rule on their output (d, w), named as grouped_mm's out
        raise ValueError(f"{_OP}: out: expected N * sizeof({out_type}) a multiple of 16 bytes (16-byte alignment "
                         f"rule: N % {16 // out_type.itemsize} == 0 for {out_type}), got N={n} "
                         f"({n * out_type.itemsize} bytes)")
    if bias is not None and tuple(bias.shape) != (0, n):
        raise ValueError(f"{_OP}: bias: expected shape (E=0, N={n}), got {tuple(bias.shape)}")
    if out_rows * n * out_type.itemsize > MAX_OPERAND_BYTES:
        raise ValueError(f"{_OP}: out: expected at most 2^62 bytes (its sizes multiplied), got shape "
                         f"({out_rows}, {n}) of {out_type}")


def _check_offs_without_op(offs, symbol: str, extent: int, validate: bool) -> None:
    """What the ops check of ``offs`` in a call that runs none of them (an empty output extent, with groups
    along a ragged extent ``symbol`` = ``extent``), in the words their errors take in grouped_mm: at most
    MAX_EXPERTS groups, and with ``validate`` the values on the host (a copy and a sync), non-decreasing ends
    in [0, extent] (src/contract/offsets.cpp). A compiled graph has no values to check while it traces, and
    this path runs no op that would check them later: it checks the count only."""
    if offs.shape[0] > MAX_EXPERTS:
        raise ValueError(f"{_OP}: offs: expected 1 <= E <= {MAX_EXPERTS} experts, got E={offs.shape[0]}")
    if offs.shape[0] > 1 and offs.stride(0) != 1:
        raise ValueError(f"{_OP}: offs: expected a contiguous vector (stride(0) == 1), got stride(0)={offs.stride(0)}")
    if not validate or torch.compiler.is_compiling():
        return
    previous = 0
    for g, end in enumerate(offs.tolist()):
        broken = (">= 0" if end < 0 else ">= the one before it" if end < previous
                  else f"<= {symbol}" if end > extent else None)
        if broken is None:
            previous = end
            continue
        got = f"offs[{g}] = {end}" + (f" < offs[{g - 1}] = {previous}" if 0 <= end < previous else "")
        raise ValueError(f"{_OP}: offs: expected non-decreasing group ends along {symbol} in [0, {symbol}={extent}], "
                         f"each {broken}, got {got}")


def _check_aligned_rows(t, name="a", cols="K"):
    """The rules on the rows of a row-major (rows, cols) operand as the ops check them, named ``name`` with its
    columns ``cols``: rows that do not overlap (an expanded ``a`` would otherwise size an output of its rows),
    then the 16-byte rule on the row stride and the base address."""
    rows, ncols = t.shape
    if rows > 1 and t.stride(0) < ncols:
        raise ValueError(f"{_OP}: {name}: expected row stride stride(0) >= {cols}={ncols} (rows must not overlap), "
                         f"got stride(0)={t.stride(0)}")
    stride_bytes = t.stride(0) * t.element_size()
    if rows > 1 and stride_bytes % 16:
        raise ValueError(f"{_OP}: {name}: expected a row stride that is a multiple of 16 bytes (16-byte alignment "
                         f"rule), got stride(0)={t.stride(0)} elements ({stride_bytes} bytes)")
    check_aligned_base(_OP, name, t)


def _check_rows_operand(t, name, dims="(M, K)", cols="K"):
    """The ops' rules on the (rows, cols) operand the ragged-M product reads in place, row-major or
    column-major (``rows_or_columns`` passed it: a column-major one's column stride meets the 16-byte rule),
    for a call that runs no op."""
    if is_column_major(t):
        check_aligned_base(_OP, name, t)
        return
    if t.shape[0] > 1 and t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{_OP}: {name}: expected a row-major or column-major {dims} tensor (stride(1) == 1 or "
                         f"stride(0) == 1), got strides {tuple(t.stride())}")
    _check_aligned_rows(t, name, cols)


class _NoGroupsMM(torch.autograd.Function):
    """2-D x 3-D with no groups: every row is past the last offset, so nothing is computed (torch._grouped_mm
    returns an uninitialised tensor too); zero_tail writes zeros to all of them, and to dA in the backward."""

    @staticmethod
    def forward(ctx, a, b, bias, out_dtype, zero_tail):
        ctx.zero_tail = zero_tail
        ctx.shapes = (a.shape, b.shape, None if bias is None else bias.shape)
        make = a.new_zeros if zero_tail else a.new_empty
        return make((a.shape[0], b.shape[2]), dtype=out_dtype or a.dtype)

    @staticmethod
    @first_order_only  # the backward runs moegemm ops, which have no derivative of their own
    def backward(ctx, saved, dout):
        a_shape, b_shape, bias_shape = ctx.shapes
        make = dout.new_zeros if ctx.zero_tail else dout.new_empty
        da = make(a_shape) if ctx.needs_input_grad[0] else None
        db = dout.new_zeros(b_shape) if ctx.needs_input_grad[1] else None  # 0 elements: no fill
        dbias = dout.new_zeros(bias_shape) if ctx.needs_input_grad[2] else None
        return da, db, dbias, None, None


def _rows_mm(a, b, offs, bias, out_dtype, zero_tail, validate=False, names=_ROWS_NAMES, terms=_ROWS_TERMS):
    # Extents in the caller's terms (b may be a transposed view, which the op would report as (E, N, K)).
    a_shape, b_shape = a.shape, b.shape  # each read is a call into torch on the eager path
    if b_shape[1] != a_shape[1]:
        raise ValueError(f"{_OP}: b: expected shape (E, K={a_shape[1]}, N) with K from a.shape[1], got "
                         f"{tuple(b_shape)}")
    # offs is 1-D: grouped_mm checked it (the 3-D x 3-D mode makes it). Its length may be known only at run
    # time under compile (torch.bincount's), and then the op checks it.
    if known(offs.shape[0] != b_shape[0]):
        raise ValueError(f"{_OP}: offs: expected shape (E={b_shape[0]},) with E from b.shape[0], got "
                         f"{tuple(offs.shape)}")
    if b_shape[0] == 0:
        _check_no_groups(a, b, a.shape[1], b.shape[1], "b.shape[1]", b.shape[2], out_dtype, offs, bias,
                         out_rows=a_shape[0])
        _check_rows_operand(a, names[("grouped_gemm", "a")])
        weight_operand(b, _OP, "b")  # its stride order, as with groups
        return _NoGroupsMM.apply(a, b, bias, out_dtype, zero_tail)
    # torch.jit.trace records the ops themselves (forward only): its trace holds no Python autograd Function,
    # which torch.jit.save cannot export, and its check run, under no_grad, records the same.
    needs_grad = torch.is_grad_enabled() and (
        a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)) and not jit_tracing()
    if needs_grad:
        return call_named(_OP, names, _RaggedRowsMM.apply, a, b, offs, bias, out_dtype, zero_tail, validate,
                          terms=terms)
    b_op, layout = weight_operand(b, _OP, "b", b_shape)
    out, _ = call_named(_OP, names, _GROUPED_GEMM, a, b_op, offs, terms=terms,
                        **_rows_options(layout, bias, out_dtype, zero_tail, validate))
    return out


class _RaggedKMM(torch.autograd.Function):
    """out[g] = a[:, cols_g] @ b[cols_g, :] (the weight gradient: X = a.t() (T, H), dY = b (T, N)); gradients
    through grouped_gemm over the same column ranges of T: dA^T[cols_g] = b[cols_g] @ dout[g]^T (dout (E, H, N)
    as (E, N, K) weights with N = H, K = N) and dB[cols_g] = a.t()[cols_g] @ dout[g] (dout as (E, K, N)
    weights). The columns of T at or past offs[-1] are in no group: their gradient is zero, written only with
    zero_tail (as the 2-D x 3-D mode's tail rows of dA)."""

    @staticmethod
    def forward(ctx, a, b, offs, out_dtype, zero_tail, validate):
        out = _ragged_k_op(a, b, offs, out_dtype, validate)
        ctx.save_for_backward(a, b, offs)
        ctx.zero_tail = zero_tail
        return out

    @staticmethod
    @first_order_only  # the backward runs moegemm ops, which have no derivative of their own
    def backward(ctx, saved, dout):
        a, b, offs = saved
        dout = dense_grad(dout, a.dtype)  # the kernels read bf16 operands
        da = db = None
        if ctx.needs_input_grad[0]:
            da_t, _ = _GROUPED_GEMM(b, dout, offs, b_layout="nk", zero_tail=ctx.zero_tail)
            da = da_t.t()  # (H, T) with stride(0) == 1, like a
        if ctx.needs_input_grad[1]:
            # a.t() as the kernels read it in place, or copied: a saved-tensor hook may hand a back
            # row-major, whose transpose is column-major at an unaligned column stride.
            db, _ = _GROUPED_GEMM(rows_or_columns(a.t()), dout, offs, b_layout="kn", zero_tail=ctx.zero_tail)
        return da, db, None, None, None, None


class _NoGroupsRaggedKMM(torch.autograd.Function):
    """2-D x 2-D with no groups: an empty (0, H, N) output; every column of T is in no group, so the gradients
    are zero, allocated as zeros (they have elements while the output has none)."""

    @staticmethod
    def forward(ctx, a, b, out_dtype):
        ctx.shapes = (a.shape, b.shape)
        return a.new_empty((0, a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype)

    @staticmethod
    @first_order_only  # the backward runs moegemm ops, which have no derivative of their own
    def backward(ctx, saved, dout):
        a_shape, b_shape = ctx.shapes
        da = dout.new_zeros(a_shape) if ctx.needs_input_grad[0] else None
        db = dout.new_zeros(b_shape) if ctx.needs_input_grad[1] else None
        return da, db, None


def _ragged_k_mm(a, b, offs, out_dtype, zero_tail=False, validate=False):
    # out[g] = a[:, rows_g] @ b[rows_g, :] = X[rows_g]^T @ dY[rows_g] with X = a.T (T, H), dY = b (T, N). The
    # kernels read both token-major (T the rows in memory); a row-major a or column-major b is copied to it.
    a, b = column_major(a), row_major(b)
    if known(a.stride(0) != 1) and known(a.shape[0] > 1) and known(a.shape[1] > 0):  # T = 0: any strides
        raise ValueError(
            f"{_OP}: a: expected a row-major or column-major (H, T) tensor (stride(1) == 1 or stride(0) == 1, "
            f"without overlapping rows or columns), got shape {tuple(a.shape)} with strides {tuple(a.stride())}")
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"{_OP}: b: expected shape (T={a.shape[1]}, N) with T (the ragged dimension) from "
                         f"a.shape[1], got {tuple(b.shape)}")
    if known(b.shape[0] > 1) and known(b.shape[1] > 1) and known(b.stride(1) != 1):
        raise ValueError(f"{_OP}: b: expected a row-major or column-major (T, N) tensor (stride(1) == 1 or "
                         f"stride(0) == 1, without overlapping rows or columns), got strides {tuple(b.stride())}")
    if a.shape[0] == 0 and offs.dim() == 1 and offs.dtype == torch.int32:  # H = 0: the empty (E, 0, N) product
        _check_without_op(a, b, a.shape[1], b.shape[0], "b.shape[0]", b.shape[1], out_dtype, offs, ragged="K")
        _check_aligned_rows(b, "b", "N")
        _check_offs_without_op(offs, "T", a.shape[1], validate)
        return (a @ b).unsqueeze(0).expand(offs.shape[0], 0, b.shape[1]).to(out_dtype or a.dtype)
    if offs.dim() == 1 and offs.shape[0] == 0:  # no groups, no output (as torch._grouped_mm)
        _check_no_groups(a, b, a.shape[1], b.shape[0], "b.shape[0]", b.shape[1], out_dtype, offs, ragged="K")
        if a.shape[0] % (16 // a.element_size()):
            raise ValueError(f"{_OP}: a: expected H = a.shape[0] a multiple of {16 // a.element_size()} for "
                             f"{a.dtype} (16-byte aligned rows of a.t()), got H={a.shape[0]}")
        _check_aligned_rows(a.t(), _RAGGED_K_NAMES[("grouped_gemm_wgrad", "x")], "H")
        _check_aligned_rows(b, "b", "N")
        return _NoGroupsRaggedKMM.apply(a, b, out_dtype)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad) and not jit_tracing():  # as above
        return _RaggedKMM.apply(a, b, offs, out_dtype, zero_tail, validate)
    return _ragged_k_op(a, b, offs, out_dtype, validate)


def _ragged_k_op(a, b, offs, out_dtype, validate):
    """The 2-D x 2-D forward: grouped_gemm_wgrad of x = a.t() and dy = b, its errors in grouped_mm's names."""
    options = {"validate": True} if validate else {}  # as _rows_options: no keyword at its default
    return call_named(_OP, _RAGGED_K_NAMES, _WGRAD, a.t(), b, offs, terms=_RAGGED_K_TERMS,
                      out_dtype=out_dtype or a.dtype, **options)


def _ragged_n_mm(a, b, offs, out_dtype, zero_tail, validate):
    """3-D x 2-D: out[:, cols_g] = a[g] @ b[:, cols_g], run as the 2-D x 3-D product of the transposes,
    out.t()[cols_g] = b.t()[cols_g] @ a.mT[g]: the (N, M) row-major result, returned as its (M, N) view
    (strides (1, M); (1, M') where M is padded to M', below). Checks what the inner product would name in its
    own terms first, in the caller's."""
    g, m, k = a.shape
    a_name = _RAGGED_N_NAMES[("grouped_gemm", "b")]  # a as the op's weights, as their errors name it
    if tuple(b.shape)[:1] != (k,):
        raise ValueError(f"{_OP}: b: expected shape (K={k}, N) with K from a.shape[2], got {tuple(b.shape)}")
    if known(offs.shape[0] != g):
        raise ValueError(f"{_OP}: offs: expected shape (G={g},) with G from a.shape[0], got {tuple(offs.shape)}")
    if m == 0 and offs.dtype == torch.int32:  # no output rows, as torch._grouped_mm: the empty product
        _check_without_op(a, b, k, b.shape[0], "b.shape[0]", b.shape[1], out_dtype, offs, ragged="N")
        _check_rows_operand(rows_or_columns(b.t()), _RAGGED_N_NAMES[("grouped_gemm", "a")], "(N, K)")
        weight_operand(a.transpose(-2, -1), _OP, a_name, dims=("K", "M"))
        _check_offs_without_op(offs, "N", b.shape[1], validate)
        return (a.reshape(0, k) @ b).to(out_dtype or a.dtype)
    # The product's N is M: its rows (a.mT's and out.t()'s) must span a multiple of 16 bytes in the input and
    # the output dtype (docs/ops.md §0.2, rule 6). torch._grouped_mm takes any M, so a is copied with zero rows
    # appended up to the next such multiple and the result is the (M, N) view of the padded product.
    # a is held to the layout rules of an unpadded call (its strides, base address) either way, so that
    # whether a layout is taken does not depend on M; the padded copy then meets them.
    step = max(16 // a.dtype.itemsize, 16 // (out_dtype or a.dtype).itemsize)
    m_pad = -(-m // step) * step
    weight_operand(a.transpose(-2, -1), _OP, a_name, dims=("K", "M"), n_padded=m_pad != m)
    if m_pad != m:
        check_aligned_base(_OP, a_name, a)  # the op would refuse it unpadded; the copy would hide it
        a = torch.nn.functional.pad(a, (0, 0, 0, m_pad - m))  # differentiable: a's gradient is its slice
    weights = a.transpose(-2, -1)
    rows = rows_or_columns(b.t())  # b.t() is read in place either way (b column-major: M-major A tiles)
    out_t = _rows_mm(rows, weights, offs, None, out_dtype, zero_tail, validate, names=_RAGGED_N_NAMES,
                     terms=_RAGGED_N_TERMS)
    return out_t[:, :m].t() if m_pad != m else out_t.t()


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None, *, zero_tail: bool = False,
               validate: bool = False) -> torch.Tensor:
    """Grouped matrix multiply with ``torch._grouped_mm`` semantics, on the moegemm kernels.

    Modes (E <= 1024 groups, ``offs`` (E,) int32 on the operands' device: cumulative end of each group along
    the ragged dimension, non-decreasing, any alignment, empty groups allowed):

    - 2-D x 3-D (ragged M): ``a`` (M, K), ``b`` (E, K, N) -> (M, N); rows [offs[g-1], offs[g]) of the
      output are ``a[rows] @ b[g] (+ bias[g])``. ``b`` may be row-major (N contiguous) or a transposed view
      of an (E, N, K) tensor (``w.mT``), with padded rows and any positive expert stride; the layout is read
      from the strides and ``b`` is not copied. Any other stride order raises ValueError. ``a`` is read in
      place row-major or column-major (``x.t()``, with a column stride and a start that are multiples of 16
      bytes: M-major A tiles, each expert's first tile starting at a row that is a multiple of 8; a
      column-major ``a`` off those is copied). Differentiable in ``a``, ``b`` and ``bias`` (dA via
      grouped_gemm with the transposed weight, dB via grouped_gemm_wgrad, which reads a column-major ``a``
      through a row-major copy: empty groups get exact zeros). dA and dB read the incoming gradient rounded
      to ``a``'s dtype (the kernels take bf16 operands), so an f32 gradient of an ``out_dtype=torch.float32``
      call loses its low bits there; dbias sums it as it comes.
    - 2-D x 2-D (ragged K): ``a`` (H, T), ``b`` (T, N) -> (E, H, N) with ``out[g] = a[:, cols_g] @
      b[cols_g, :]``; groups without columns give exact zeros. Read in place when the token dimension T is
      the rows of both in memory: ``a`` the transposed view of a row-major (T, H) tensor, ``b`` row-major; a
      row-major ``a`` or a column-major ``b`` is copied to that order first (see Layouts). Differentiable in
      ``a`` and ``b``, through grouped_gemm over the same
      ranges of T (dA = (b @ dout[g]^T)^T, dB = a.t() @ dout[g]); their columns (dA) and rows (dB) at or past
      ``offs[-1]`` are in no group, not written, content unspecified, zeros with ``zero_tail=True``.
    - 3-D x 3-D (batched): ``a`` (E, M, K), ``b`` (E, K, N), ``offs=None`` -> (E, M, N), with E*M <= 2^31 - 1
      (the groups' ends are int32 offsets). ``a`` is read in place when it is one row-major (E*M, K) matrix;
      one whose groups are each row-major or column-major (a slice of a wider stack, ``x.mT``) is copied.
    - 3-D x 2-D (ragged N): ``a`` (G, M, K), ``b`` (K, N) -> (M, N) with ``out[:, cols_g] = a[g] @ b[:,
      cols_g]`` over the column ranges of ``offs``; run as the 2-D x 3-D product of the transposes,
      ``out.t()[cols_g] = b.t()[cols_g] @ a.mT[g]``, so the result is the (M, N) view of an (N, M) row-major
      tensor (strides (1, M); ``torch._grouped_mm`` returns it row-major). Any M: where M is not a multiple
      of 8 for 16-bit types, 4 for f32 and 2 for f64 (in the input dtype and in ``out_dtype``; 16-byte rows
      of ``out.t()`` and of ``a.mT``), ``a`` is copied with zero rows up to the next multiple M' and the
      result is the (M, N) view of the (N, M') product (strides (1, M')); ``a`` is held to the same layout
      rules at any M. Otherwise ``a`` is read in place at any strides the
      2-D x 3-D mode's ``b`` takes (as ``a.mT``), ``b`` in place either way (as ``b.t()``, as the 2-D x 3-D
      mode reads ``a``; the backward's ``a`` gradient copies a row-major ``b`` first). No ``bias``.
      Differentiable in ``a`` and ``b``; columns of ``out`` at or past ``offs[-1]`` are the tail
      (``zero_tail``).

    Layouts: ``torch._grouped_mm`` takes each 2-D operand row-major or column-major, and so does this
    function. The ragged-M kernels read both orders of ``a`` (2-D x 3-D; ``b`` of 3-D x 2-D); the ragged-K
    (weight gradient) kernels read their two operands token-major only, so the 2-D x 2-D mode copies a
    row-major ``a`` or column-major ``b`` to that order first, and the backward of the ragged-M modes
    copies a column-major operand before its weight gradient (one read and one write of that operand, in
    its dtype; its gradient comes back through the copy). 3-D weights are never copied.

    E = 0 (no groups: ``offs`` of shape (0,), or ``a`` and ``b`` of no groups in 3-D x 3-D) is accepted in every
    mode, as by ``torch._grouped_mm``: 2-D x 3-D gives (M, N) rows that are all past the last offset, 3-D x 2-D
    (M, N) columns that are; the other modes give (0, ., .). An empty
    output extent (M = 0, or H = 0 in 2-D x 2-D) gives the empty output, after the checks a call with rows
    makes (``validate`` included: the ragged extent, T or N, is not empty).

    Rows at or past ``offs[-1]`` (2-D x 3-D; columns for 3-D x 2-D): not written, content unspecified, as
    ``torch._grouped_mm`` (whose output is an uninitialised ``empty`` there, on CPU and CUDA);
    ``zero_tail=True`` (an extension) writes zeros to exactly those rows, and to the same rows of dA in the
    backward (2-D x 2-D: to the gradients' entries of T at or past ``offs[-1]``). Slicing the output to its
    addressed rows before the backward (``out[:offs[-1]]``) does not change that: dA's tail rows are still
    unspecified, so pass ``zero_tail=True`` where dA is used whole (summed, or the tokens' gradient).

    ``validate=True`` (an extension; docs/ops.md §0) checks ``offs`` on the host first (a copy and a sync) and
    raises ValueError naming offs at the first offset that is negative, decreasing or past the ragged
    extent. Without it, bad offsets are clamped on the device and nothing is read out of bounds.

    dtypes: bf16 inputs (f16, f32, f64 on CPU only); ``out_dtype`` bf16, f16 or f32, or f64 with f64 inputs
    (default ``a.dtype``), unlike torch which only allows ``a.dtype``. ``bias`` (E, N) bf16 or f32 (f64 on CPU)
    is supported in the 2-D x 3-D and 3-D x 3-D modes (torch rejects any bias; the other two modes raise
    ValueError). Errors: ValueError naming the operand for shapes, dtypes, devices,
    layouts (sparse), strides, alignment (N and K multiples of 8 for 16-bit types), also with no groups;
    TypeError for an operand that is not a tensor and for a ``zero_tail`` or ``validate`` that is not a bool
    (Python or NumPy); NotImplementedError for f16, f32 or f64 inputs on CUDA, for 8-bit and FP4 inputs and for
    an operand inside a torch.func transform that needs its gradient (``grad``, ``jacrev``; without grad,
    ``vmap`` runs through torch's per-sample fallback, one call per sample).
    DTensor operands (torch.distributed.tensor; every tensor operand one, on one mesh) run on each rank's
    shards with the strategies of ``torch._grouped_mm``'s DTensor sharding rule, the result a DTensor
    (python/moegemm/_torch_dtensor.py, docs/torch.md); a plain tensor among them raises ValueError naming it.
    Formula source: docs/ops.md §1 and §5; ``torch._grouped_mm`` (torch/_meta_registrations.py).
    """
    if type(a) not in _PLAIN or type(b) not in _PLAIN or type(offs) not in _PLAIN_OR_NONE \
            or type(bias) not in _PLAIN_OR_NONE:
        if any(dtensor_placements(t) is not None for t in (a, b, offs, bias)):
            from ._torch_dtensor import sharded_grouped_mm  # here: torch.distributed.tensor is slow to import
            return sharded_grouped_mm(grouped_mm, a, b, offs, bias, out_dtype, zero_tail, validate)
    try:
        tensor = torch.Tensor
        if not (isinstance(a, tensor) and isinstance(b, tensor) and (offs is None or isinstance(offs, tensor))
                and (bias is None or isinstance(bias, tensor))):
            for name, t in (("a", a), ("b", b), ("offs", offs), ("bias", bias)):
                if not isinstance(t, tensor) and (t is not None or name in ("a", "b")):
                    raise TypeError(f"{_OP}: {name}: expected a torch.Tensor, got {type(t).__name__}")
        zero_tail, validate = check_flag(_OP, "zero_tail", zero_tail), check_flag(_OP, "validate", validate)
        if offs is not None and offs.dim() != 1:
            raise ValueError(f"{_OP}: offs: expected a 1-D (E,) torch.int32 tensor, got shape {tuple(offs.shape)}")
        if out_dtype is not None and out_dtype not in _OUT_DTYPES and not (out_dtype == a.dtype == torch.float64):
            raise ValueError(f"{_OP}: out_dtype: expected None, torch.bfloat16, torch.float16 or torch.float32 (or "
                             f"torch.float64 with float64 inputs), got {out_dtype!r}")
        check_input_dtype(_OP, "a", a.dtype)  # in every mode, before an inner op would name its own operands
        # Before a layout copy of a (a row-major a in the 2-D x 2-D mode, a column-major one at an unaligned
        # stride): a call refused for b's or offs' dtype copies nothing.
        if b.dtype != a.dtype:
            raise ValueError(f"{_OP}: b: expected a's dtype {a.dtype}, got {b.dtype}")
        if offs is not None and offs.dtype != torch.int32 and known(offs.shape[0] != 0):  # no groups: below
            raise ValueError(f"{_OP}: offs: expected dtype torch.int32, got {offs.dtype}")
        a_rank, b_rank = a.dim(), b.dim()
        if a_rank == 2 and b_rank == 3:
            if offs is None:
                raise ValueError(f"{_OP}: offs: required for 2-D x 3-D inputs (an (E,) torch.int32 tensor), got None")
            a = rows_or_columns(a)  # read in place row-major or column-major (M-major A tiles)
            return _rows_mm(a, b, offs, bias, out_dtype, zero_tail, validate)
        if a_rank == 2 and b_rank == 2:
            if offs is None:
                raise ValueError(f"{_OP}: offs: required for 2-D x 2-D inputs (an (E,) torch.int32 tensor), got None")
            if bias is not None:
                raise ValueError(f"{_OP}: bias: not supported in the 2-D x 2-D mode, got a tensor")
            return _ragged_k_mm(a, b, offs, out_dtype, zero_tail, validate)
        if a_rank == 3 and b_rank == 3:
            if offs is not None:
                raise ValueError(f"{_OP}: offs: must be None for 3-D x 3-D inputs, got a tensor")
            e, m, k = a.shape
            if b.shape[0] != e or b.shape[1] != k:
                raise ValueError(f"{_OP}: b: expected shape (E={e}, K={k}, N) with E and K from a, got shape "
                                 f"{tuple(b.shape)}")
            if e > MAX_EXPERTS:
                raise ValueError(f"{_OP}: a: expected at most {MAX_EXPERTS} groups (dim 0), got shape {tuple(a.shape)}")
            if e * m > MAX_OFFSET_ROWS:  # the groups' ends are int32 offsets
                raise ValueError(f"{_OP}: a: expected E * M <= {MAX_OFFSET_ROWS} rows in all (the groups' ends are "
                                 f"int32 offsets), got shape {tuple(a.shape)}")
            if bias is not None and tuple(bias.shape) != (e, b.shape[2]):
                raise ValueError(f"{_OP}: bias: expected shape (E={e}, N={b.shape[2]}) with E and N from b, got "
                                 f"{tuple(bias.shape)}")
            rows = stacked_rows(a)
            if rows is None:
                raise ValueError(f"{_OP}: a: expected an (E, M, K) tensor whose K dim (stride(-1) == 1) or M dim "
                                 f"(stride(-2) == 1) is contiguous, got strides {tuple(a.stride())}")
            if e == 0:  # no groups, no output (as torch._grouped_mm); the empty product keeps the autograd graph
                _check_no_groups(a, b, k, b.shape[1], "b.shape[1]", b.shape[2], out_dtype, bias=bias)
                out = torch.matmul(a, b).to(out_dtype or a.dtype)
                return out if bias is None else out + bias.unsqueeze(1).to(out.dtype)
            ends = torch.arange(1, e + 1, device=a.device, dtype=torch.int32) * m
            out = _rows_mm(rows, b, ends, bias, out_dtype, zero_tail)
            return out.view(e, m, out.shape[-1])  # not -1: M = 0 gives 0 elements, which -1 cannot size
        if a_rank == 3 and b_rank == 2:
            if offs is None:
                raise ValueError(f"{_OP}: offs: required for 3-D x 2-D inputs (a (G,) torch.int32 tensor), got None")
            if bias is not None:
                raise ValueError(f"{_OP}: bias: not supported in the 3-D x 2-D mode, got a tensor")
            return _ragged_n_mm(a, b, offs, out_dtype, zero_tail, validate)
        raise ValueError(f"{_OP}: expected 2-D or 3-D operands, got a of rank {a_rank} and b of rank {b_rank}")
    except (ValueError, RuntimeError, NotImplementedError):
        # A sparse operand fails with errors that do not name it, and the inner ops of the 2-D x 2-D and
        # 3-D x 2-D modes name a device mix by their own operands (x = a.t(), b.t(), ...).
        error = misfit_operand(_OP, a=a, b=b, offs=offs, bias=bias)
        if error is None:
            raise
        raise error from None
