"""The torch ops' library: loads ``libmoegemm_torch.so`` (the C++ ops, registered with ``TORCH_LIBRARY`` for
the CPU and CUDA dispatch keys) and registers a fake kernel for every op, so that the ops trace under
``torch.compile(fullgraph=True)`` and pass ``torch.library.opcheck``.

Every module that calls ``torch.ops.moegemm`` imports this one first: a module imported on its own (as
unpickling a saved ``MoEMLP`` imports ``moegemm._torch_moe``) then finds the ops. The public module is
``moegemm.torch``.
"""

from __future__ import annotations

import torch

from ._native import library_path, load_failed
from ._torch_errors import check_same_device, check_strided
from ._torch_op_docs import OP_DOCS
from ._torch_options import ACTIVATIONS as _ACTIVATIONS
from ._torch_options import B_LAYOUTS as _B_LAYOUTS
from ._torch_options import b_layouts_text as _b_layouts_text
from ._torch_options import GLU_LAYOUTS as _GLU_LAYOUTS
from ._torch_options import check_choice as _check_choice

_LIBRARY = library_path("moegemm_torch")
try:
    torch.ops.load_library(str(_LIBRARY))
except OSError as error:
    raise load_failed(_LIBRARY, error) from error


def _dims(t: torch.Tensor) -> str:
    """A shape as the C++ ops print it: (4, 48), (64,) and ()."""
    return str(tuple(t.shape))


def _require(ok, message) -> None:
    """ValueError with message() unless ok; on symbolic shapes a runtime assertion of the compiled graph."""
    torch._check_value(ok, message)


def _offsets_rank(op: str, offsets: torch.Tensor) -> None:
    """The binding's check of a rank it can take at all (1 to 4), with its message for offsets."""
    _require(1 <= offsets.dim() <= 4, lambda: f"{op}: offsets: expected a 1-D (E,) tensor, got rank "
                                              f"{offsets.dim()} with shape {_dims(offsets)}")


def _rank(op: str, name: str, t: torch.Tensor, rank: int, what: str) -> None:
    _require(t.dim() == rank, lambda: f"{op}: {name}: expected a {rank}-D {what} tensor, got shape {_dims(t)}")


def _weights_n(op: str, a: torch.Tensor, b: torch.Tensor, b_layout: str, offsets=None) -> int:
    """N of the weights, after the checks of the ranks and of the dims shared with a (K) and offsets (E) that
    the C++ ops make, with their messages. The fake kernels read the output shapes from these dims; the
    other rules (dtypes, strides, alignment, optional operands) are checked when the op runs."""
    grouped = offsets is not None
    _check_choice(op, "b_layout", b_layout, _B_LAYOUTS, _b_layouts_text(grouped))
    nk = b_layout == "nk"
    _rank(op, "a", a, 2, "(M, K) activation" if grouped else "(M, K)")
    layout = "(N, K)" if nk else "(K, N)"
    _rank(op, "b", b, 3 if grouped else 2, f"(E, {layout[1:]} weight" if grouped else f"{layout} weight")
    k = a.shape[1]
    kn = f"N, K={k}" if nk else f"K={k}, N"
    if grouped:
        _offsets_rank(op, offsets)
        _require(offsets.dim() == 1, lambda: f"{op}: offsets: expected shape (E,), got {_dims(offsets)}")
        e = offsets.shape[0]
        shape = lambda: f"{op}: b: expected shape (E={e}, {kn}) with E from offsets, K from a, got {_dims(b)}"
        _require(b.shape[0] == e, shape)
        _require(b.shape[2 if nk else 1] == k, shape)
    else:
        _require(b.shape[1 if nk else 0] == k, lambda: f"{op}: b: expected shape ({kn}) with K from a, got {_dims(b)}")
    return b.shape[-2] if nk else b.shape[-1]


def _saved(op: str, a: torch.Tensor, c: torch.Tensor, n: int, columns: str) -> None:
    """The backward ops' saved pre-activation c: (M, n) with M from a; `columns` names n, e.g. "2I" or "N"."""
    _rank(op, "c", c, 2, "(M, N) saved pre-activation")
    m = a.shape[0]
    shape = lambda: (f"{op}: c: expected shape (M={m}, {columns}={n}) with M from a, {columns} from b, "
                     f"got {_dims(c)}")
    _require(c.shape[0] == m, shape)
    _require(c.shape[1] == n, shape)


def _offsets_vector(op: str, offsets: torch.Tensor) -> None:
    """The rank check of offsets that the backward and weight-gradient ops make in the binding, before the
    contract's (they size outputs from E)."""
    _require(offsets.dim() == 1, lambda: f"{op}: offsets: expected a 1-D (E,) torch.int32 tensor, got shape "
                                         f"{_dims(offsets)}")


def _wgrad_hn(op: str, x: torch.Tensor, dy: torch.Tensor, offsets: torch.Tensor) -> tuple:
    """(E, H, N) of a weight gradient after the C++ op's checks of ranks and of M shared by x and dy."""
    _rank(op, "x", x, 2, "(M, H)")
    _rank(op, "dy", dy, 2, "(M, N)")
    _offsets_vector(op, offsets)
    m = x.shape[0]
    _require(dy.shape[0] == m, lambda: f"{op}: dy: expected shape (M={m}, N) with M from x, got {_dims(dy)}")
    return offsets.shape[0], x.shape[1], dy.shape[1]


def _absent(like: torch.Tensor) -> torch.Tensor:
    return like.new_empty((0,))


# ---- fake kernels: output metadata only, exactly as the C++ ops allocate it -----------------------


def _f32_default(x):
    """The default dtype of outputs that default to f32 (wgrad's W, gemm_swiglu's ab12): f64 for f64 inputs."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


_OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def _out_dtype_or(requested, fallback, op, arg):
    """The fake kernels' copy of the C++ ops' output-dtype rule (bindings/torch/options.cpp, out_dtype_or):
    ``requested`` if one of _OUTPUT_DTYPES, ``fallback`` if None; otherwise the same ValueError naming ``arg``."""
    if requested is None:
        return fallback
    if requested not in _OUTPUT_DTYPES:
        raise ValueError(f"{op}: {arg}: expected None, torch.bfloat16, torch.float16, torch.float32 or "
                         f"torch.float64, got {requested}")
    return requested


@torch.library.register_fake("moegemm::grouped_gemm")
def _grouped_gemm_fake(a, b, offsets, *, b_layout="nk", alpha=None, prob=None, bias=None, generate_c=False,
                       out_dtype=None, zero_tail=False, validate=False):
    check_same_device("grouped_gemm", a=a, b=b, offsets=offsets, alpha=alpha, prob=prob, bias=bias)
    n = _weights_n("grouped_gemm", a, b, b_layout, offsets)
    d = a.new_empty((a.shape[0], n), dtype=_out_dtype_or(out_dtype, a.dtype, "grouped_gemm", "out_dtype"))
    return d, (d.new_empty((a.shape[0], n)) if generate_c else _absent(d))


@torch.library.register_fake("moegemm::grouped_gemm_glu")
def _grouped_gemm_glu_fake(a, b, offsets, *, b_layout="nk", alpha=None, prob=None, bias=None,
                           activation="swiglu", glu_layout="halves", limit=7.0, act_alpha=1.702,
                           linear_offset=1.0, generate_c=False, out_dtype=None, zero_tail=False,
                           validate=False):
    check_same_device("grouped_gemm_glu", a=a, b=b, offsets=offsets, alpha=alpha, prob=prob, bias=bias)
    _check_choice("grouped_gemm_glu", "activation", activation, _ACTIVATIONS)
    _check_choice("grouped_gemm_glu", "glu_layout", glu_layout, _GLU_LAYOUTS)
    n = _weights_n("grouped_gemm_glu", a, b, b_layout, offsets)
    d = a.new_empty((a.shape[0], n // 2), dtype=_out_dtype_or(out_dtype, a.dtype, "grouped_gemm_glu", "out_dtype"))
    return d, (d.new_empty((a.shape[0], n)) if generate_c else _absent(d))


@torch.library.register_fake("moegemm::grouped_gemm_srelu")
def _grouped_gemm_srelu_fake(a, b, offsets, *, b_layout="nk", alpha=None, prob=None, bias=None,
                             generate_c=False, out_dtype=None, zero_tail=False, validate=False):
    check_same_device("grouped_gemm_srelu", a=a, b=b, offsets=offsets, alpha=alpha, prob=prob, bias=bias)
    n = _weights_n("grouped_gemm_srelu", a, b, b_layout, offsets)
    d = a.new_empty((a.shape[0], n), dtype=_out_dtype_or(out_dtype, a.dtype, "grouped_gemm_srelu", "out_dtype"))
    return d, (d.new_empty((a.shape[0], n)) if generate_c else _absent(d))


def _backward_outputs(op, a, c, offsets, columns, amax_len, compute_dprob, compute_dbias, compute_amax,
                      dc_dtype, dbias_dtype):
    """dc, dprob, dbias and amax of a backward op, absent ones as (0,) placeholders; dbias (E, columns), or
    (columns,) for a dense op (offsets None)."""
    m = a.shape[0]
    if compute_dbias and dbias_dtype not in (None, torch.float32, torch.bfloat16):
        raise ValueError(f"{op}: dbias_dtype: expected None, torch.float32 or torch.bfloat16, got {dbias_dtype}")
    dc = a.new_empty((m, columns), dtype=_out_dtype_or(dc_dtype, c.dtype, op, "dc_dtype"))
    dprob = a.new_empty((m,), dtype=torch.float32) if compute_dprob else _absent(dc)
    dbias_shape = (columns,) if offsets is None else (offsets.shape[0], columns)
    dbias = a.new_empty(dbias_shape, dtype=dbias_dtype or torch.float32) if compute_dbias else _absent(dc)
    amax = a.new_empty((amax_len,), dtype=torch.float32) if compute_amax else _absent(dc)
    return dc, dprob, dbias, amax


@torch.library.register_fake("moegemm::grouped_gemm_dglu")
def _grouped_gemm_dglu_fake(a, b, c, offsets, *, b_layout="nk", alpha=None, beta=None, prob=None,
                            activation="swiglu", glu_layout="halves", limit=7.0, act_alpha=1.702,
                            linear_offset=1.0, compute_dprob=False, compute_dbias=False, compute_amax=False,
                            dc_dtype=None, dbias_dtype=None, zero_tail=False, validate=False):
    check_same_device("grouped_gemm_dglu", a=a, b=b, c=c, offsets=offsets, alpha=alpha, beta=beta, prob=prob)
    _offsets_vector("grouped_gemm_dglu", offsets)
    _check_choice("grouped_gemm_dglu", "activation", activation, _ACTIVATIONS)
    _check_choice("grouped_gemm_dglu", "glu_layout", glu_layout, _GLU_LAYOUTS)
    n = _weights_n("grouped_gemm_dglu", a, b, b_layout, offsets)
    _saved("grouped_gemm_dglu", a, c, 2 * n, "2I")
    return _backward_outputs("grouped_gemm_dglu", a, c, offsets, 2 * n, 2, compute_dprob, compute_dbias,
                             compute_amax, dc_dtype, dbias_dtype)


@torch.library.register_fake("moegemm::grouped_gemm_dsrelu")
def _grouped_gemm_dsrelu_fake(a, b, c, offsets, *, b_layout="nk", alpha=None, prob=None, compute_dprob=False,
                              compute_dbias=False, compute_amax=False, dc_dtype=None, dbias_dtype=None,
                              zero_tail=False, validate=False):
    check_same_device("grouped_gemm_dsrelu", a=a, b=b, c=c, offsets=offsets, alpha=alpha, prob=prob)
    _offsets_vector("grouped_gemm_dsrelu", offsets)
    n = _weights_n("grouped_gemm_dsrelu", a, b, b_layout, offsets)
    _saved("grouped_gemm_dsrelu", a, c, n, "N")
    return _backward_outputs("grouped_gemm_dsrelu", a, c, offsets, n, 1, compute_dprob, compute_dbias,
                             compute_amax, dc_dtype, dbias_dtype)


@torch.library.register_fake("moegemm::grouped_gemm_wgrad")
def _grouped_gemm_wgrad_fake(x, dy, offsets, *, transpose_output=False, out_dtype=None, validate=False):
    check_same_device("grouped_gemm_wgrad", x=x, dy=dy, offsets=offsets)
    e, h, n = _wgrad_hn("grouped_gemm_wgrad", x, dy, offsets)
    dtype = _out_dtype_or(out_dtype, _f32_default(x), "grouped_gemm_wgrad", "out_dtype")
    return x.new_empty((e, n, h) if transpose_output else (e, h, n), dtype=dtype)


@torch.library.register_fake("moegemm::grouped_gemm_wgrad.accumulate")
def _grouped_gemm_wgrad_accumulate_fake(x, dy, offsets, w, *, transpose_output=False, validate=False):
    op = "grouped_gemm_wgrad.accumulate"
    check_same_device(op, x=x, dy=dy, offsets=offsets, w=w)
    e, h, n = _wgrad_hn(op, x, dy, offsets)
    _rank(op, "w", w, 3, "(E, N, H)" if transpose_output else "(E, H, N)")
    shape = lambda: (f"{op}: w: expected shape (E={e}, N={n}, H={h}) with E from offsets, N from dy, "
                     f"H from x, got {_dims(w)}" if transpose_output else
                     f"{op}: w: expected shape (E={e}, H={h}, N={n}) with E from offsets, H from x, "
                     f"N from dy, got {_dims(w)}")
    for dim, size in enumerate((e, n, h) if transpose_output else (e, h, n)):
        _require(w.shape[dim] == size, shape)
    return None


@torch.library.register_fake("moegemm::gemm_swiglu")
def _gemm_swiglu_fake(a, b, *, b_layout="nk", alpha=1.0, glu_layout="interleaved32_up_first", ab12_dtype=None,
                      out_dtype=None):
    check_same_device("gemm_swiglu", a=a, b=b)
    _check_choice("gemm_swiglu", "glu_layout", glu_layout, _GLU_LAYOUTS)
    n = _weights_n("gemm_swiglu", a, b, b_layout)
    return (a.new_empty((a.shape[0], n), dtype=_out_dtype_or(ab12_dtype, _f32_default(a), "gemm_swiglu", "ab12_dtype")),
            a.new_empty((a.shape[0], n // 2), dtype=_out_dtype_or(out_dtype, a.dtype, "gemm_swiglu", "out_dtype")))


@torch.library.register_fake("moegemm::gemm_amax")
def _gemm_amax_fake(a, b, *, b_layout="nk", out_dtype=None):
    check_same_device("gemm_amax", a=a, b=b)
    n = _weights_n("gemm_amax", a, b, b_layout)
    d = a.new_empty((a.shape[0], n), dtype=_out_dtype_or(out_dtype, a.dtype, "gemm_amax", "out_dtype"))
    return d, a.new_empty((1,), dtype=torch.float32)


@torch.library.register_fake("moegemm::gemm_srelu")
def _gemm_srelu_fake(a, b, *, b_layout="nk", alpha=1.0, prob=None, bias=None, generate_c=False, out_dtype=None):
    check_same_device("gemm_srelu", a=a, b=b, prob=prob, bias=bias)
    n = _weights_n("gemm_srelu", a, b, b_layout)
    d = a.new_empty((a.shape[0], n), dtype=_out_dtype_or(out_dtype, a.dtype, "gemm_srelu", "out_dtype"))
    return d, (d.new_empty((a.shape[0], n)) if generate_c else _absent(d))


@torch.library.register_fake("moegemm::gemm_dsrelu")
def _gemm_dsrelu_fake(a, b, c, *, b_layout="nk", alpha=1.0, prob=None, compute_dprob=False, compute_dbias=False,
                      compute_amax=False, dc_dtype=None, dbias_dtype=None):
    check_same_device("gemm_dsrelu", a=a, b=b, c=c, prob=prob)
    n = _weights_n("gemm_dsrelu", a, b, b_layout)
    _saved("gemm_dsrelu", a, c, n, "N")
    return _backward_outputs("gemm_dsrelu", a, c, None, n, 1, compute_dprob, compute_dbias, compute_amax,
                             dc_dtype, dbias_dtype)


def _refuse_jagged(_subclass, func, _types, args, kwargs):
    """A jagged nested tensor (``layout=torch.jagged``) is a Python subclass whose own dispatch would answer
    ``NotImplementedError: moegemm.grouped_gemm.default``: ValueError naming the first such operand instead, as
    the C++ library names a sparse or strided nested one (bindings/torch/layout_refusal.cpp)."""
    values = dict(zip((argument.name for argument in func._schema.arguments), args), **kwargs)
    op = func._opname + ("" if func._overloadname == "default" else f".{func._overloadname}")
    check_strided(op, **values)  # a jagged tensor's layout is torch.jagged
    raise NotImplementedError(f"{op}: no kernel for a jagged nested tensor")


try:  # where this torch has no jagged nested tensors, there is nothing to refuse
    from torch.nested._internal.nested_tensor import NestedTensor as _JaggedTensor
except ImportError:
    _JaggedTensor = None
if _JaggedTensor is not None:
    for _op in torch._C._dispatch_get_all_op_names():  # every op and overload the library registered
        if _op.startswith("moegemm::"):
            torch.library.register_torch_dispatch(_op, _JaggedTensor, _refuse_jagged)


def _attach_docs() -> None:
    """Each op's docstring (``_torch_op_docs``) on its overload packet and overloads, for ``help()``."""
    for name, doc in OP_DOCS.items():
        packet = getattr(torch.ops.moegemm, name)
        packet.__doc__ = doc
        for overload in packet.overloads():
            getattr(packet, overload).__doc__ = doc


_attach_docs()
