"""Errors of the composite torch functions (grouped_mm, moe_mlp), named by the operands their callers pass,
and the checks they share.

The ops they call check everything before any launch, but name their own operands (a, b, offsets, x, dy).
"""

from __future__ import annotations

import torch

try:
    from torch.fx.experimental.symbolic_shapes import guard_or_false
except ImportError:  # an older torch: a condition is evaluated as it is (unbacked sizes then fail to trace)
    guard_or_false = bool


# The input dtypes of the ops, and those they know and refuse as not supported yet (NotImplementedError), not
# as invalid.
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
_UNSUPPORTED_IN_DTYPES = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2")
                               if hasattr(torch, name))


def check_input_dtype(op: str, name: str, dtype: torch.dtype) -> None:
    """``op: name: expected dtype torch.bfloat16 (...), got ...`` unless ``dtype`` is an input dtype of the ops:
    NotImplementedError for 8-bit and FP4 inputs, as the ops raise for them (docs/ops.md §8), ValueError
    otherwise."""
    if dtype in INPUT_DTYPES:
        return
    error = NotImplementedError if dtype in _UNSUPPORTED_IN_DTYPES else ValueError
    raise error(f"{op}: {name}: expected dtype torch.bfloat16 (torch.float16, torch.float32 or torch.float64 on "
                f"CPU), got {dtype}" + (" (8-bit and FP4 inputs are not supported yet)"
                                        if error is NotImplementedError else ""))


def known(condition) -> bool:
    """A shape condition as a bool: itself in eager; under torch.compile a condition on a size known only when
    the graph runs (an unbacked size: a token count from ``nonzero`` or ``x[mask]``) is False, where ``bool()``
    would fail the trace with "could not guard on data-dependent expression". For the Python checks that
    only name an operand: the op checks the same rule when the graph runs. Under torch.jit.trace, where sizes
    are 0-d tensors, the condition's value."""
    try:
        return guard_or_false(condition)  # a bool passes through; torch.compile traces this call as it is
    except AssertionError:  # torch.jit.trace: guard_or_false takes no tensor (a try costs the eager path nothing)
        return bool(condition)


def jit_tracing() -> bool:
    """Whether torch.jit.trace is recording this call. False under torch.compile without asking torch: the
    Dynamo of torch 2.11 cannot trace ``torch._C._is_tracing`` ("torch.* op returned non-Tensor": a graph
    break, an error with fullgraph=True), and a jit trace never runs inside a compiled graph."""
    return not torch.compiler.is_compiling() and torch._C._is_tracing()


def check_row_major(op: str, name: str, t: torch.Tensor, dims: str, hint: str = "") -> None:
    """ValueError ``"<op>: <name>: expected a row-major <dims> tensor (stride(1) == 1), ..."`` unless the 2-D
    ``t`` has a unit column stride (or a single row or column, where strides do not matter)."""
    if known(t.shape[0] > 1) and known(t.shape[1] > 1) and known(t.stride(1) != 1):
        raise ValueError(f"{op}: {name}: expected a row-major {dims} tensor (stride(1) == 1), got strides "
                         f"{tuple(t.stride())}{hint}")


def check_strided(op: str, **tensors) -> None:
    """ValueError ``"<op>: <name>: expected a strided (dense) tensor, got layout <layout>"`` (``"... got a nested
    tensor"``) for the first operand (None: not given) that is sparse, of another layout or nested, which fails
    inside torch or the ops with errors that do not name it (a nested tensor of the strided layout has no
    sizes to read: torch raises an "Internal error")."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            continue
        if t.layout != torch.strided:
            raise ValueError(f"{op}: {name}: expected a strided (dense) tensor, got layout {t.layout}")
        if t.is_nested:
            raise ValueError(f"{op}: {name}: expected a strided (dense) tensor, got a nested tensor")


def dtensor_placements(t):
    """``t.placements`` if ``t`` is a DTensor (torch.distributed.tensor), else None."""
    if not isinstance(t, torch.Tensor) or type(t) in (torch.Tensor, torch.nn.Parameter):
        return None
    if not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor  # here, not at import: it would slow `import moegemm.torch`
    return t.placements if isinstance(t, DTensor) else None


def check_local(op: str, **tensors) -> None:
    """NotImplementedError ``"<op>: <name>: expected a local torch.Tensor, got a DTensor ..."`` for the first
    operand that is a DTensor: the ops have no sharding rule, and torch's own error names the inner op."""
    for name, t in tensors.items():
        placements = dtensor_placements(t)
        if placements is not None:
            raise NotImplementedError(f"{op}: {name}: expected a local torch.Tensor, got a DTensor with placements "
                                      f"{placements} (the moegemm ops have no sharding rule): pass {name}.to_local()")


def check_untransformed(op: str, **tensors) -> None:
    """NotImplementedError ``"<op>: <name>: expected a tensor outside torch.func transforms, ..."`` for the first
    operand that a torch.func transform (grad, vmap, jacrev, ...) wraps: the entry points' autograd Functions
    have no setup_context and their checks read data pointers, and torch's own errors for that name no
    operand ("Cannot access data pointer of Tensor that doesn't have storage"). Skipped while torch.compile
    traces: Dynamo cannot trace the check, and would report a failed call's graph break in its place, without
    the error the call raised."""
    if torch.compiler.is_compiling():
        return
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(t):
            raise NotImplementedError(f"{op}: {name}: expected a tensor outside torch.func transforms (grad, vmap, "
                                      f"jacrev, ...), got one a transform wraps: call {op} outside the "
                                      f"transform (torch.autograd gives its gradients)")


def misfit_operand(op: str, **tensors) -> Exception | None:
    """The error check_local, check_untransformed, check_strided, then check_same_device, raise for these
    operands, or None. For a composite function to look for once a call has failed (``raise error from
    None``: the failure it replaces named no operand of the caller's, or another one), so that the eager path
    pays nothing for these checks."""
    try:
        check_local(op, **tensors)
        check_untransformed(op, **tensors)
        check_strided(op, **tensors)
        check_same_device(op, **tensors)
    except (ValueError, NotImplementedError) as error:
        return error
    return None


def check_same_device(op: str, **tensors) -> None:
    """The C++ ops' rule that every operand (None: not given) is on the device of the first, checked here
    too: a call with an operand on the meta device reaches the fake kernel instead of the C++ op, and would
    otherwise come back as an uninitialised result on the other operands' device. Raises ValueError
    ``"<op>: <name>: expected a tensor on <device> (the device of <first>), got one on <its device>"``."""
    anchor = next(iter(tensors))
    device = tensors[anchor].device
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.device != device:
            raise ValueError(f"{op}: {name}: expected a tensor on {device} (the device of {anchor}), got one on "
                             f"{t.device}")


def call_named(public_op: str, names: dict[tuple[str, str], str], fn, *args,
               terms: dict[str, str] | None = None, **kwargs):
    """``fn(*args, **kwargs)``; a ValueError or NotImplementedError of an inner op whose message starts with
    ``"<op>: <operand>: "`` is re-raised as ``"<public_op>: <name>: ... (checked as <op>'s <operand>)"``, where
    ``names`` maps (op, operand) to the caller's name for it, and each text of ``terms`` in the rest of the
    message is replaced by the caller's term for it (a dimension the inner op names otherwise); other errors
    pass unchanged. While torch.compile traces, ``fn`` is called as it is (the fake kernels raise their own
    errors there). Costs the eager path a call and a check (~0.3 µs; a context manager took ~1.8 µs)."""
    if torch.compiler.is_compiling():
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except (ValueError, NotImplementedError) as e:
        message = str(e)
        for (op, operand), name in names.items():
            prefix = f"{op}: {operand}: "
            if message.startswith(prefix):
                body = message[len(prefix):]
                for inner, outer in (terms or {}).items():
                    body = body.replace(inner, outer)
                raise type(e)(f"{public_op}: {name}: {body} (checked as {op}'s {operand})") from e
        raise
