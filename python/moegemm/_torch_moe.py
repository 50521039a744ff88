"""A differentiable Mixture-of-Experts MLP on the fused GLU ops: ``moe_mlp`` and ``MoEMLP``."""

from __future__ import annotations

import math
import operator

import torch

from . import _torch_ops  # noqa: F401  (the ops, also where this module is imported on its own: unpickling)
from ._torch_errors import (INPUT_DTYPES, call_named, check_input_dtype, check_row_major, check_same_device,
                             check_strided, dtensor_placements, jit_tracing, known, misfit_operand)
from ._torch_first_order import first_order_only
from ._torch_layouts import check_aligned_base
from ._torch_options import ACTIVATIONS, GLU_LAYOUTS, MAX_EXPERTS, MAX_OPERAND_BYTES, check_choice, check_flag
from ._torch_weights import dense_grad, flipped, weight_grad_like, weight_operand

_OP = "moe_mlp"


def _as_f32(prob: torch.Tensor | None) -> torch.Tensor | None:
    # The ops take router probabilities as float32 on every backend.
    if prob is None or prob.dtype == torch.float32:
        return prob
    return prob.to(torch.float32)


def _autocast(x, w_up, w_down):
    """x, w_up and w_down as torch.autocast hands a matmul its operands: where autocast is on for x's device,
    in autocast's dtype, through a differentiable cast, so that f32 parameters get f32 gradients
    (torch/amp/autocast_mode.py: lower-precision ops such as linear). All three or none: with an f64 or
    non-float one among them nothing is cast, so that the dtype errors name the dtypes the caller passed."""
    operands = (x, w_up, w_down)
    if not torch._C._is_any_autocast_enabled():  # the usual case, in 0.1 µs where the checks below take 0.8
        return operands
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 for t in operands):
        return operands
    device = x.device.type
    # is_autocast_enabled raises for a device autocast does not know (meta: a model built for its shapes);
    # the Dynamo of torch 2.11 cannot trace is_autocast_available, and compiles no meta tensors.
    known_device = torch.compiler.is_compiling() or torch.amp.is_autocast_available(device)
    if not (known_device and torch.is_autocast_enabled(device)):
        return operands
    dtype = torch.get_autocast_dtype(device)
    return tuple(t if t.dtype == dtype else t.to(dtype) for t in operands)


def _forward(x, w_up, w_down, offsets, prob, glu, zero_tail, validate, op, keep_c):
    """y, h, C (an empty tensor unless ``keep_c``: only the backward reads it) and the weights' layouts."""
    up, up_layout = weight_operand(w_up, op, "w_up", dims=("H", "2I"))
    down, down_layout = weight_operand(w_down, op, "w_down", dims=("I", "H"))
    h, c = torch.ops.moegemm.grouped_gemm_glu(x, up, offsets, b_layout=up_layout, prob=_as_f32(prob),
                                              generate_c=keep_c, zero_tail=zero_tail, validate=validate, **glu)
    y, _ = torch.ops.moegemm.grouped_gemm(h, down, offsets, b_layout=down_layout, zero_tail=zero_tail)
    return y, h, c, (up_layout, down_layout)


def _inference(x, w_up, w_down, offsets, prob, activation, glu_layout, limit, act_alpha, linear_offset,
               zero_tail, validate, op):
    """The forward where nothing will be differentiated (no_grad, inference_mode, no input requiring grad):
    no C, which only the backward reads (M x 2I written for nothing)."""
    glu = dict(activation=activation, glu_layout=glu_layout, limit=limit, act_alpha=act_alpha,
               linear_offset=linear_offset)
    return _forward(x, w_up, w_down, offsets, prob, glu, zero_tail, validate, op, keep_c=False)[0]


class _MoEMLPFunction(torch.autograd.Function):
    """y = (prob * act(x @ w_up[g])) @ w_down[g] per expert row range, with a fused backward.

    Forward: grouped_gemm_glu (keeps the pre-activation C) then grouped_gemm.
    Backward: grouped_gemm_dglu(dy, w_down transposed, C) -> dC (+ dprob);
    dx = grouped_gemm(dC, w_up transposed); dw_up = wgrad(x, dC); dw_down = wgrad(h, dy).
    """

    @staticmethod
    def forward(ctx, x, w_up, w_down, offsets, prob, activation, glu_layout, limit, act_alpha, linear_offset,
                zero_tail, validate, op):
        # `op` names the caller's entry point (moe_mlp or MoEMLP) in the errors raised here.
        glu = dict(activation=activation, glu_layout=glu_layout, limit=limit, act_alpha=act_alpha,
                   linear_offset=linear_offset)
        y, h, c, layouts = _forward(x, w_up, w_down, offsets, prob, glu, zero_tail, validate, op, keep_c=True)
        # The caller's tensors, not the views and the f32 copy made here without grad: first_order_only
        # connects a second derivative to the saved tensors that require grad.
        ctx.save_for_backward(x, w_up, w_down, offsets, prob, h, c)
        ctx.layouts = layouts
        ctx.op = op
        ctx.config = (glu, zero_tail)
        ctx.dtypes = (w_up.dtype, w_down.dtype, None if prob is None else prob.dtype)
        return y

    @staticmethod
    @first_order_only  # the backward runs moegemm ops, which have no derivative of their own
    def backward(ctx, saved, dy):
        x, w_up, w_down, offsets, prob, h, c = saved
        # The weight gradients take the forward's layouts (the stride order of the caller's weights); the
        # dgrad GEMMs read the saved weights as they are now (a saved-tensor hook may have copied them).
        up_layout, down_layout = ctx.layouts
        up, up_read = weight_operand(w_up, ctx.op, "w_up", dims=("H", "2I"))
        down, down_read = weight_operand(w_down, ctx.op, "w_down", dims=("I", "H"))
        prob32 = _as_f32(prob)
        glu, zero_tail = ctx.config
        w_up_dtype, w_down_dtype, prob_dtype = ctx.dtypes
        need_x, need_up, need_down, _, need_prob = ctx.needs_input_grad[:5]
        dy = dense_grad(dy, h.dtype)
        dx = dw_up = dw_down = dprob = None
        if need_x or need_up or need_prob:
            # prob's gradient is written on every row: zeros past offsets[-1] (rows that no expert owns)
            # whatever zero_tail, since it feeds the router.
            dc, dprob32, _, _ = torch.ops.moegemm.grouped_gemm_dglu(
                dy, down, c, offsets, b_layout=flipped(down_read), prob=prob32, compute_dprob=bool(need_prob),
                zero_tail=zero_tail or bool(need_prob), **glu)
            if need_prob:
                dprob = dprob32.to(prob_dtype)
            if need_x:
                dx, _ = torch.ops.moegemm.grouped_gemm(dc, up, offsets, b_layout=flipped(up_read),
                                                       zero_tail=zero_tail)
            if need_up:
                transpose, fix = weight_grad_like(up_layout)
                dw_up = fix(torch.ops.moegemm.grouped_gemm_wgrad(x, dc, offsets, transpose_output=transpose,
                                                                 out_dtype=w_up_dtype))
        if need_down:
            transpose, fix = weight_grad_like(down_layout)
            dw_down = fix(torch.ops.moegemm.grouped_gemm_wgrad(h, dy, offsets, transpose_output=transpose,
                                                               out_dtype=w_down_dtype))
        return dx, dw_up, dw_down, None, dprob, None, None, None, None, None, None, None, None


# The inner ops' operands as moe_mlp's caller knows them (for what _check_operands leaves to the ops, such
# as E <= 1024).
_INNER_NAMES = {("grouped_gemm_glu", "a"): "x", ("grouped_gemm_glu", "b"): "w_up",
                ("grouped_gemm_glu", "offsets"): "offsets", ("grouped_gemm_glu", "prob"): "prob",
                ("grouped_gemm_glu", "limit"): "limit",
                ("grouped_gemm", "b"): "w_down", ("grouped_gemm", "offsets"): "offsets"}


def _check_config(op, activation, glu_layout) -> None:
    check_choice(op, "activation", activation, ACTIVATIONS)
    check_choice(op, "glu_layout", glu_layout, GLU_LAYOUTS)


def _not_real(value) -> bool:
    """Whether ``value`` is None, a string, a bool or a complex number: of Python, NumPy (a scalar or array) or
    torch (a tensor), as moegemm.jax refuses them; or an array or tensor of one or more dims, which is not one
    number (``float()`` of a one-element 1-D NumPy array is deprecated or refused, by NumPy version)."""
    if value is None or isinstance(value, (str, bytes, bool, complex)):
        return True
    if isinstance(value, (int, float, torch.SymInt, torch.SymFloat)):  # and no getattr, which Dynamo refuses
        return False
    if getattr(value, "ndim", 0):
        return True
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype == torch.bool or dtype.is_complex
    return getattr(dtype, "kind", "") in ("b", "c")  # NumPy's kinds of bool and complex


def _clamp_parameter(name: str, value, op: str = _OP) -> float:
    """A real number for limit, act_alpha or linear_offset; TypeError naming it otherwise (a traced value is
    fine: torch.compile passes it on)."""
    if not _not_real(value):
        try:
            return float(value)
        except (TypeError, ValueError):  # a list, a tuple, any other object
            pass
    raise TypeError(f"{op}: {name}: expected a real number, got {type(value).__name__} {value!r}")


# The smallest double that f32 rounds to infinity: halfway between the largest f32 and 2^128 (ties go to the
# even 2^128).
_F32_ROUNDS_TO_INF = 2.0 ** 128 - 2.0 ** 103


def _clamp_finite(op: str, activation: str, name: str, value) -> float:
    """act_alpha or linear_offset as a float; ValueError naming it where swiglu_clamped uses it and it is NaN
    or infinite as the kernels take it, in f32 (every output would be NaN), as the ops' contract checks it."""
    value = _clamp_parameter(name, value, op)
    if activation == "swiglu_clamped" and not abs(value) < _F32_ROUNDS_TO_INF:  # `not <` also refuses NaN
        rounded = "-inf" if value < 0 else "inf"
        got = f"{value!r}" if not math.isfinite(value) else f"{value!r}, which f32 rounds to {rounded}"
        raise ValueError(f"{op}: {name}: expected a finite {name} for swiglu_clamped (in f32), got {got}")
    return value


# The smallest double that f32 does not round to 0 is just above 2^-150 (half the smallest f32 subnormal).
_F32_ROUNDS_TO_ZERO = 2.0 ** -150


def _clamp_limit(op: str, activation: str, limit) -> float:
    """swiglu_clamped's limit as a float; ValueError naming the caller's ``limit`` unless it is positive as the
    kernels take it (in f32), as moegemm.jax checks it. MoEMLP checks it when built."""
    value = _clamp_parameter("limit", limit, op)
    if activation == "swiglu_clamped" and not value > _F32_ROUNDS_TO_ZERO:
        rounded = ", which f32 rounds to 0" if value > 0 else ""  # as the ops say it (docs/torch.md)
        raise ValueError(f"{op}: limit: expected a positive clamp limit for swiglu_clamped (in f32), got "
                         f"{limit!r}{rounded}")
    return value


def _check_operands(op, x, w_up, w_down, offsets, prob, activation, glu_layout) -> None:
    """Checks the types, shapes, dtypes, strides and alignment of moe_mlp's own operands, so that an error
    names x, w_up, w_down, offsets or prob (the ops it calls would name their internal operands a, b, d) after
    ``op``, the entry point the caller used (moe_mlp or MoEMLP)."""
    for name, t in (("x", x), ("w_up", w_up), ("w_down", w_down), ("offsets", offsets), ("prob", prob)):
        if not isinstance(t, torch.Tensor) and (t is not None or name != "prob"):
            raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    _check_config(op, activation, glu_layout)
    if x.dim() != 2:  # before anything reads M from x
        raise ValueError(f"{op}: x: expected a 2-D (M, H) tensor, got shape {tuple(x.shape)}")
    if prob is not None and not prob.is_floating_point():
        raise ValueError(f"{op}: prob: expected a floating dtype, got {prob.dtype}")
    if prob is not None and (prob.dim() != 1 or known(prob.shape[0] != x.shape[0])):
        raise ValueError(f"{op}: prob: expected shape (M={x.shape[0]},) with M from x, got {tuple(prob.shape)}")
    check_same_device(op, x=x, w_up=w_up, w_down=w_down, offsets=offsets, prob=prob)
    check_row_major(op, "x", x, "(M, H)", "; pass x.contiguous()")
    h = x.shape[1]
    if w_up.dim() != 3:
        raise ValueError(f"{op}: w_up: expected a 3-D (E, H, 2I) tensor, got shape {tuple(w_up.shape)}")
    if w_down.dim() != 3:
        raise ValueError(f"{op}: w_down: expected a 3-D (E, I, H) tensor, got shape {tuple(w_down.shape)}")
    check_input_dtype(op, "x", x.dtype)  # before the weights are asked for x's dtype
    if w_up.dtype == w_down.dtype != x.dtype and w_up.dtype in INPUT_DTYPES:  # x is the odd one out
        raise ValueError(f"{op}: x: expected dtype {w_up.dtype} (the dtype of w_up and w_down), got {x.dtype}")
    for name, w in (("w_up", w_up), ("w_down", w_down)):
        if w.dtype != x.dtype:
            raise ValueError(f"{op}: {name}: expected dtype {x.dtype} (the dtype of x), got {w.dtype}")
    e, two_i = w_up.shape[0], w_up.shape[2]
    if h == 0:
        raise ValueError(f"{op}: x: expected H > 0 (its last dim), got shape {tuple(x.shape)}")
    if w_up.shape[1] != h or two_i % 2:
        raise ValueError(f"{op}: w_up: expected shape (E, H={h}, 2I) with H from x and 2I even, got "
                         f"{tuple(w_up.shape)}")
    if two_i == 0:
        raise ValueError(f"{op}: w_up: expected 2I > 0 (its last dim), got shape {tuple(w_up.shape)}")
    if w_down.shape[0] != e and offsets.dim() == 1 and known(offsets.shape[0] == w_down.shape[0]):
        # offsets and w_down agree on E: the odd one out is w_up
        raise ValueError(f"{op}: w_up: expected dim 0 = E={w_down.shape[0]} (the experts of offsets and w_down), "
                         f"got shape {tuple(w_up.shape)}")
    if tuple(w_down.shape) != (e, two_i // 2, h):
        raise ValueError(f"{op}: w_down: expected shape (E={e}, I={two_i // 2}, H={h}) with E and I from "
                         f"w_up, H from x, got {tuple(w_down.shape)}")
    if x.element_size() == 2:  # 16-bit rows must start 16-byte aligned (the kernels' TMA rule, on every backend)
        # Under torch.autocast the operands are autocast's casts, not the tensors the caller passed.
        cast = (f", the dtype torch.autocast casts the operands to; {op} takes H and I multiples of 4 in f32 "
                f"outside autocast") if torch._C._is_any_autocast_enabled() else ""
        if h % 8:
            raise ValueError(f"{op}: x: expected H a multiple of 8 (16-bit operands need 16-byte aligned "
                             f"rows), got H = {h} (shape {tuple(x.shape)}, dtype {x.dtype}{cast})")
        if (two_i // 2) % 8:
            raise ValueError(f"{op}: w_up: expected I (half of its last dim) a multiple of 8 (the GLU output's "
                             f"16-bit rows must be 16-byte aligned), got I = {two_i // 2} (shape {tuple(w_up.shape)}, "
                             f"dtype {w_up.dtype}{cast})")
    if offsets.dim() != 1 or known(offsets.shape[0] != e) or offsets.dtype != torch.int32:
        raise ValueError(f"{op}: offsets: expected an (E={e},) torch.int32 tensor with E from w_up, got shape "
                         f"{tuple(offsets.shape)} and dtype {offsets.dtype}")
    # Base addresses and x's row pitch (the 16-byte rule), so that a bad w_down is refused before the
    # up-projection runs, not by the second op.
    if torch.compiler.is_compiling():
        return  # traced tensors have no addresses
    for name, t in (("x", x), ("w_up", w_up), ("w_down", w_down)):
        check_aligned_base(op, name, t)
    if x.shape[0] > 1 and x.stride(0) < h:  # overlapping rows (an expanded x, say)
        raise ValueError(f"{op}: x: expected a row stride stride(0) >= H={h}, got stride(0)={x.stride(0)}")
    if x.shape[0] > 1 and x.stride(0) * x.element_size() % 16:
        per_row = 16 // x.element_size()
        raise ValueError(f"{op}: x: expected a row stride that is a multiple of 16 bytes ({per_row} {x.dtype} "
                         f"elements: with a contiguous x, H % {per_row} == 0), got stride(0)={x.stride(0)} with "
                         f"H={x.shape[1]}")


def moe_mlp(x: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, offsets: torch.Tensor,
            prob: torch.Tensor | None = None, activation: str = "swiglu", glu_layout: str = "halves", *,
            zero_tail: bool = True, limit: float = 7.0, act_alpha: float = 1.702,
            linear_offset: float = 1.0, validate: bool = False) -> torch.Tensor:
    """The expert MLP of a Mixture-of-Experts layer, differentiable in x, w_up, w_down and prob.

    For expert g and each row r it owns (rows [offsets[g-1], offsets[g])):
    ``y[r] = (prob[r] * act(gate, up)) @ w_down[g]`` with ``[gate | up] = x[r] @ w_up[g]`` paired by
    ``glu_layout`` ("halves": gate = columns [0, I), up = [I, 2I); "interleaved32": alternating 32-column
    gate/up blocks; "interleaved32_up_first": up/gate blocks) and ``act`` = "swiglu" (silu(gate) * up),
    "geglu" (gelu_tanh(gate) * up) or "swiglu_clamped" (gpt-oss: ``limit``, ``act_alpha``,
    ``linear_offset``, by default 7.0, 1.702 and 1.0; the other activations ignore them); formulas:
    docs/ops.md §2-§3.

    Args:
        x: (M, H) tokens sorted by expert, row-major; bf16 (also f16, and f32/f64 for gradient checks, on
            CPU only: the sm_90a kernels take bf16). H a multiple of 8 for 16-bit dtypes (4 for f32, 2 for f64).
        w_up: (E, H, 2I), same dtype; N-contiguous, or a transposed view of an (E, 2I, H) tensor; 1 <= E <= 1024,
            I a multiple of 8 for 16-bit dtypes (4 for f32, 2 for f64), 2I of 64 for the interleaved layouts.
        w_down: (E, I, H), same dtype and stride rules.
        offsets: (E,) int32, cumulative end row of each expert, on x's device (read on the host only with
            ``validate=True``).
        prob: optional (M,) router probability per row (any floating dtype and stride; used as a contiguous
            float32 vector, a copy where it is not one).
        zero_tail: the ops write zeros to rows at or past offsets[-1] of y (and of dx in the backward), as
            moegemm.jax.moe_mlp does, so that no unspecified value reaches the layers around it (e.g. through a
            padded dispatch's backward). False leaves those rows unwritten and their content unspecified.
            prob's gradient is zero on those rows either way (written by the dGLU op).
        limit, act_alpha, linear_offset: swiglu_clamped's parameters (docs/ops.md §2), real numbers, as
            moegemm.jax.moe_mlp takes them; limit > 0.
        validate: an opt-in host check of offsets (docs/ops.md §0): copies them to the host (a sync) and raises
            ValueError naming offsets at the first one that is negative, decreasing or past M. Without it,
            bad offsets are clamped on the device and nothing is read out of bounds.

    Autocast: inside ``torch.autocast`` for x's device, x, w_up and w_down (f32 or 16-bit, all three; with an
    f64 one none is cast) are cast to autocast's dtype first, as torch casts the operands of ``linear``,
    through a differentiable cast: f32 weights get f32 gradients. The 16-bit rules then apply (H and I
    multiples of 8). On CUDA that dtype must be bf16 (``torch.autocast("cuda", dtype=torch.bfloat16)``;
    autocast's default f16 raises NotImplementedError).

    Returns:
        y: (M, H) in x's dtype (autocast's dtype where autocast cast the operands).

    Backward: grouped_gemm_dglu gives dC (and dprob) from the saved pre-activation; dx = grouped_gemm(dC,
    w_up^T); dw_up = grouped_gemm_wgrad(x, dC); dw_down = grouped_gemm_wgrad(h, dy), exact zeros for experts
    without rows. Weight gradients have the weights' dtype and stride order.

    Raises:
        ValueError naming the operand (shape, dtype, device, stride, alignment, activation, glu_layout);
        TypeError for an operand that is not a tensor, a zero_tail or validate that is not a bool (Python or
        NumPy), and a limit, act_alpha or linear_offset that is not a real number (a bool included);
        NotImplementedError for requests the backend cannot serve (f16, f32 or f64 inputs on CUDA; 8-bit and
        FP4 inputs) and for an operand inside a torch.func transform.
    """
    x, w_up, w_down = _autocast(x, w_up, w_down)
    return _moe_mlp(_OP, x, w_up, w_down, offsets, prob, activation, glu_layout, zero_tail=zero_tail, limit=limit,
                    act_alpha=act_alpha, linear_offset=linear_offset, validate=validate)


def _moe_mlp(op: str, x, w_up, w_down, offsets, prob, activation, glu_layout, *, zero_tail, limit, act_alpha,
             linear_offset, validate) -> torch.Tensor:
    """moe_mlp, its errors named after ``op`` (moe_mlp, or MoEMLP from the module's forward)."""
    try:
        _check_operands(op, x, w_up, w_down, offsets, prob, activation, glu_layout)
        if prob is not None:  # the ops read a contiguous vector: a strided one (a column of top-k weights) is copied
            prob = prob.contiguous()
        zero_tail, validate = check_flag(op, "zero_tail", zero_tail), check_flag(op, "validate", validate)
        clamp = [_clamp_limit(op, activation, limit), _clamp_finite(op, activation, "act_alpha", act_alpha),
                 _clamp_finite(op, activation, "linear_offset", linear_offset)]
        # torch.jit.trace records the ops themselves, as in grouped_mm (_rows_mm).
        differentiated = torch.is_grad_enabled() and (
            x.requires_grad or w_up.requires_grad or w_down.requires_grad or (prob is not None and prob.requires_grad)
        ) and not jit_tracing()
        return call_named(op, _INNER_NAMES, _MoEMLPFunction.apply if differentiated else _inference, x, w_up, w_down,
                          offsets, prob, activation, glu_layout, *clamp, zero_tail, validate, op)
    except (ValueError, RuntimeError, NotImplementedError):  # a sparse operand or a DTensor: as in grouped_mm
        error = misfit_operand(op, x=x, w_up=w_up, w_down=w_down, offsets=offsets, prob=prob)
        if error is None:
            raise
        raise error from None


def _positive_int(name: str, value) -> int:
    """An int-like size (not a bool) that is at least 1; ValueError naming MoEMLP's argument otherwise."""
    try:
        size = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        size = None
    if size is None or size < 1:
        raise ValueError(f"MoEMLP: {name}: expected a positive int, got {value!r}")
    return size


def _local_weight(name: str, w: torch.Tensor) -> torch.Tensor:
    """MoEMLP's parameter as the ops take it: itself, or a DTensor's local shard where the experts are split
    over the mesh (``Shard(0)``: expert parallelism, the caller passing this rank's tokens and offsets) or
    replicated. The shard's gradient comes back as a DTensor sharded as the parameter along its Shard(0)
    dims and Partial (summed over the ranks where read) along its replicated ones, whose ranks each had their
    own tokens. Other placements would split an expert's weights, or its gate/up pairs: ValueError naming
    them, as for a rank left without an expert."""
    placements = dtensor_placements(w)
    if placements is None:
        return w
    if not all(p.is_replicate() or p.is_shard(0) for p in placements):
        raise ValueError(f"MoEMLP: {name}: expected a DTensor sharded over experts (Shard(0)) or replicated, got "
                         f"placements {placements}")
    from torch.distributed.tensor import Partial  # dtensor_placements found torch.distributed.tensor
    local = w.to_local(grad_placements=[Partial() if p.is_replicate() else p for p in placements])
    if local.shape[0] == 0:
        raise ValueError(f"MoEMLP: {name}: expected at least one expert on this rank, got none of the "
                         f"{w.shape[0]} experts of a DTensor with placements {placements} (more ranks than "
                         f"experts along Shard(0))")
    return local


class MoEMLP(torch.nn.Module):
    """Expert MLP weights and :func:`moe_mlp`: ``forward(x, offsets, prob=None) -> y``.

    Parameters: ``w_up`` (E, H, 2I) and ``w_down`` (E, I, H), initialised uniform in
    [-1/sqrt(fan_in), 1/sqrt(fan_in)] (fan_in H for w_up, I for w_down), as nn.Linear does. ``zero_tail``
    (default True) and swiglu_clamped's ``limit``, ``act_alpha``, ``linear_offset`` as in :func:`moe_mlp`.
    ``num_experts`` (E, 1 to 1024), ``hidden`` (H) and ``intermediate`` (I): positive ints, H and I multiples
    of 16 bytes of ``dtype`` (8 for 16-bit, 4 for f32, 2 for f64), I a multiple of 32 for the interleaved
    ``glu_layout``s; ``activation`` and ``glu_layout`` as in :func:`moe_mlp`; ``device`` as torch's factories.
    ``dtype``: None (torch's default), bf16 (the CUDA kernels' dtype), f16, f32 or f64 (CPU); anything else
    raises ValueError naming ``dtype``, as does any size, activation, layout or (with swiglu_clamped) clamp
    parameter above that does not fit; a ``zero_tail`` that is not a bool, or a clamp parameter that is not a
    real number, raises TypeError naming it.
    Inside ``torch.autocast`` x and the parameters are cast to autocast's dtype, as in :func:`moe_mlp`.
    Parameters that are DTensors split over experts (``Shard(0)``) or replicated run on their local shards,
    with this rank's tokens and offsets, their gradients Partial along replicated mesh dims (docs/torch.md);
    other placements, and a rank without an expert, raise ValueError naming them.
    """

    def __init__(self, num_experts: int, hidden: int, intermediate: int, *, activation: str = "swiglu",
                 glu_layout: str = "halves", zero_tail: bool = True, limit: float = 7.0, act_alpha: float = 1.702,
                 linear_offset: float = 1.0, device=None, dtype=None):
        """E = ``num_experts`` experts of ``hidden`` (H) inputs and ``intermediate`` (I) gated columns:
        parameters ``w_up`` (E, H, 2I) and ``w_down`` (E, I, H) of ``dtype`` on ``device``. The arguments, their
        rules and the errors they raise are those of the class docstring (:class:`MoEMLP`)."""
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        _check_config("MoEMLP", activation, glu_layout)
        num_experts = _positive_int("num_experts", num_experts)
        hidden = _positive_int("hidden", hidden)
        intermediate = _positive_int("intermediate", intermediate)
        if num_experts > MAX_EXPERTS:
            raise ValueError(f"MoEMLP: num_experts: expected at most {MAX_EXPERTS} (the kernels' expert limit), "
                             f"got {num_experts}")
        if glu_layout != "halves" and (2 * intermediate) % 64:
            raise ValueError(f"MoEMLP: intermediate: expected a multiple of 32 for glu_layout {glu_layout!r} "
                             f"(2I in whole 64-column gate/up block pairs), got {intermediate}")
        weight_dtypes = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
        if dtype is not None and dtype not in weight_dtypes:
            raise ValueError(f"MoEMLP: dtype: expected None, torch.bfloat16, torch.float16, torch.float32 or "
                             f"torch.float64 (torch.bfloat16 on CUDA), got {dtype!r}")
        # Rows of x, h and the weights in whole 16 bytes (the 16-byte rule of every op), for any dtype.
        itemsize = (dtype or torch.get_default_dtype()).itemsize
        per_row = max(1, 16 // itemsize)
        for name, value in (("hidden", hidden), ("intermediate", intermediate)):
            if value % per_row:
                raise ValueError(f"MoEMLP: {name}: expected a multiple of {per_row} for {8 * itemsize}-bit "
                                 f"weights (16-byte aligned rows), got {value}")
        # The contract's bound on an operand's bytes (docs/ops.md rule 4), before torch.empty would overflow its
        # sizes without naming MoEMLP's argument.
        if num_experts * hidden * 2 * intermediate * itemsize > MAX_OPERAND_BYTES:
            raise ValueError(f"MoEMLP: hidden, intermediate: expected w_up's (E, H, 2I) of {8 * itemsize}-bit "
                             f"elements within {MAX_OPERAND_BYTES} bytes, got E={num_experts}, H={hidden}, "
                             f"I={intermediate}")
        self.activation = activation
        self.glu_layout = glu_layout
        self.zero_tail = check_flag("MoEMLP", "zero_tail", zero_tail)
        self.clamp = dict(limit=_clamp_limit("MoEMLP", activation, limit),
                          act_alpha=_clamp_finite("MoEMLP", activation, "act_alpha", act_alpha),
                          linear_offset=_clamp_finite("MoEMLP", activation, "linear_offset", linear_offset))
        self.w_up = torch.nn.Parameter(torch.empty(num_experts, hidden, 2 * intermediate, **factory))
        self.w_down = torch.nn.Parameter(torch.empty(num_experts, intermediate, hidden, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draws w_up and w_down anew, uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] (fan_in H for w_up, I for
        w_down), as nn.Linear.reset_parameters does."""
        for w, fan_in in ((self.w_up, self.w_up.shape[1]), (self.w_down, self.w_down.shape[1])):
            bound = 1.0 / math.sqrt(fan_in)
            torch.nn.init.uniform_(w, -bound, bound)

    def forward(self, x: torch.Tensor, offsets: torch.Tensor, prob: torch.Tensor | None = None, *,
                validate: bool = False) -> torch.Tensor:
        """x (M, H), offsets (E,) int32, prob optional (M,) -> y (M, H); see :func:`moe_mlp` (also for
        ``validate`` and the errors). ValueError for an x whose H, dtype or device is not the module's."""
        w_up, w_down = _local_weight("w_up", self.w_up), _local_weight("w_down", self.w_down)
        x, w_up, w_down = _autocast(x, w_up, w_down)
        hidden = w_up.shape[1]
        if isinstance(x, torch.Tensor) and (x.is_nested or x.dim() != 2 or x.shape[1] != hidden):
            check_strided("MoEMLP", x=x)  # a nested x has no shape to name
            raise ValueError(f"MoEMLP: x: expected an (M, H={hidden}) tensor with H the module's hidden size, got "
                             f"shape {tuple(x.shape)}")
        if isinstance(x, torch.Tensor) and x.dtype != w_up.dtype:  # x is the caller's; the weights are ours
            raise ValueError(f"MoEMLP: x: expected dtype {w_up.dtype} (the module's parameters' dtype), got "
                             f"{x.dtype}")
        try:
            return _moe_mlp("MoEMLP", x, w_up, w_down, offsets, prob, self.activation, self.glu_layout,
                            zero_tail=self.zero_tail, validate=validate, **self.clamp)
        except ValueError:  # a device mix, which moe_mlp reports against x, is the caller's x here
            if isinstance(x, torch.Tensor) and x.device != w_up.device:
                raise ValueError(f"MoEMLP: x: expected a tensor on {w_up.device} (the module's parameters' "
                                 f"device), got one on {x.device}") from None
            raise

    def extra_repr(self) -> str:
        """The constructor's arguments, as nn.Linear's repr gives its own; the clamp's with swiglu_clamped."""
        e, h, n2 = self.w_up.shape
        text = (f"num_experts={e}, hidden={h}, intermediate={n2 // 2}, activation={self.activation!r}, "
                f"glu_layout={self.glu_layout!r}, zero_tail={self.zero_tail}")
        if self.activation == "swiglu_clamped":  # float('inf') where repr would give inf, which eval cannot read
            text += "".join(f", {name}={value!r}" if math.isfinite(value) else f", {name}=float('{value}')"
                            for name, value in self.clamp.items())
        return text
