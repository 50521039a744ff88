"""Trace-time operand checks of ``moegemm.jax``: rank, dtype and extent, each raising an error that
names the op, the operand, what was expected and what was given. The C++ contract checks run after
these (through the workspace query) and cover the rest (alignment, strides, E <= 1024, ...)."""

from __future__ import annotations

import functools
from typing import Iterable

import jax
import jax.numpy as jnp
import numpy as np

from ._limits import MAX_EXPERTS, MAX_OFFSET_ROWS  # noqa: F401 (imported from here by the JAX modules)

SIXTEEN_BIT = (jnp.bfloat16, jnp.float16)
OUTPUT_FLOATS = (jnp.bfloat16, jnp.float16, jnp.float32)


def dtype_names(dtypes: Iterable) -> str:
    return ", ".join(np.dtype(d).name for d in dtypes)


_CHECKED_PRECISIONS: set = set()  # the hashable precisions that jax.lax took once (its check costs ~0.3 ms)
_PRECISION_PROBE = jax.ShapeDtypeStruct((1, 1), jnp.float32)


def check_precision(op: str, precision) -> None:
    """``precision`` as jax.lax's products take it (None, a lax.Precision or its name, a pair of them, a dot
    algorithm or its preset's name), checked by jax.lax itself on a 1 x 1 product traced abstractly;
    ValueError naming ``op: precision`` with lax's message otherwise. moegemm does not use the value."""
    if precision is None:
        return
    try:
        if precision in _CHECKED_PRECISIONS:
            return
        hashable = True
    except TypeError:
        hashable = False
    try:
        jax.eval_shape(lambda a, b: jax.lax.dot(a, b, precision=precision), _PRECISION_PROBE, _PRECISION_PROBE)
    except (ValueError, TypeError) as e:
        raise ValueError(f"moegemm.jax.{op}: precision: {e}") from e
    if hashable:
        _CHECKED_PRECISIONS.add(precision)


def check_rank(op: str, name: str, x, rank: int, layout: str) -> None:
    """Raise TypeError unless ``x`` is an array (check_array), ValueError unless it has ``rank`` dims
    (``layout`` names them, e.g. "(M, K)")."""
    check_array(op, name, x)
    if np.ndim(x) != rank:
        raise ValueError(f"moegemm.jax.{op}: {name}: expected rank {rank} {layout}, "
                         f"got shape {tuple(np.shape(x))}")


def static_float(op: str, name: str, value) -> float:
    """``float(value)`` for a scalar baked into the compiled call (alpha of the dense ops, the clamp
    parameters). A traced value (an argument of the jitted function) raises TypeError naming it, and so
    does anything that is not a real number (a string, None, a bool, a complex number): ``limit=True`` is a
    mistake, not a limit of 1.0."""
    if (isinstance(value, (str, bytes, bool, np.bool_)) or value is None or np.iscomplexobj(value)
            or getattr(value, "dtype", None) == np.bool_):
        raise TypeError(f"moegemm.jax.{op}: {name}: expected a real number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except jax.errors.ConcretizationTypeError as e:
        raise TypeError(f"moegemm.jax.{op}: {name}: expected a Python float (a constant of the compiled call), "
                        f"got a traced value; pass a constant, or mark the argument static in jax.jit") from e
    except (TypeError, ValueError) as e:  # an array of several elements, an object float() does not take
        text = repr(value)
        text = text if len(text) <= 80 else text[:77] + "..."
        raise TypeError(f"moegemm.jax.{op}: {name}: expected a real number, got {type(value).__name__} {text}") from e


def dense_alpha(op: str, alpha) -> float:
    """The dense ops' alpha as a static float; ValueError for a NaN. JAX keys the compiled calls it keeps for
    eager use by their attributes with ``==``, which a NaN never meets: each eager call would compile anew,
    and every output would be NaN. An infinite alpha is one key, and is passed."""
    value = static_float(op, "alpha", alpha)
    if np.isnan(value):
        raise ValueError(f"moegemm.jax.{op}: alpha: expected a number that is not NaN, got {value}")
    return value


# The smallest normal f32: a float attribute of an XLA custom call reaches the op with subnormals flushed to 0.
_F32_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)


def clamp_limit(op: str, activation: str, limit) -> float:
    """The clamp limit as a static float; ValueError unless positive where swiglu_clamped uses it. The kernels
    take it as f32, and the call passes it as an XLA attribute, which flushes f32 subnormals to 0: a limit
    that is 0 or subnormal in f32 is no limit either."""
    value = static_float(op, "limit", limit)
    with np.errstate(over="ignore"):  # a limit past the f32 range is an infinite limit (docs/ops.md §0)
        as_f32 = np.float32(value)
    if activation == "swiglu_clamped" and not as_f32 >= _F32_SMALLEST_NORMAL:
        raise ValueError(f"moegemm.jax.{op}: limit: expected a positive clamp limit for swiglu_clamped (in f32; "
                         f"subnormals are passed as 0, so at least {_F32_SMALLEST_NORMAL:.8g}), got {value}")
    return value


def static_bool(op: str, name: str, value) -> bool:
    """A flag that shapes the compiled call (which outputs it has, zero_tail): a Python or NumPy bool, or a
    concrete 0-d bool array. Anything else (a string, None, an int, an array of several values) raises
    TypeError naming it, and so does a traced value (an argument of the jitted function)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    shape = getattr(value, "shape", None)
    if shape == () and getattr(value, "dtype", None) == np.bool_:
        try:
            return bool(value)
        except jax.errors.ConcretizationTypeError as e:  # TracerBoolConversionError derives from it
            raise TypeError(f"moegemm.jax.{op}: {name}: expected a bool (it decides the compiled call's "
                            f"outputs), got a traced value; pass a constant, or mark the argument static in "
                            f"jax.jit") from e
    got = f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else repr(value)
    raise TypeError(f"moegemm.jax.{op}: {name}: expected a bool (Python, NumPy or a concrete 0-d bool array), "
                    f"got {got}")


# The smallest double that f32 rounds to infinity: halfway between the largest f32 and 2^128 (ties go to the
# even 2^128).
_F32_ROUNDS_TO_INF = 2.0 ** 128 - 2.0 ** 103


# swiglu_clamped's defaults (docs/ops.md §2), which the GLU ops also pass where the activation is another.
CLAMP_DEFAULTS = (7.0, 1.702, 1.0)


def clamp_parameters(op: str, activation: str, limit, act_alpha, linear_offset) -> tuple[float, float, float]:
    """limit, act_alpha and linear_offset as static floats, checked as clamp_limit and clamp_parameter check
    them. Where the activation does not use them (swiglu, geglu), the call gets the defaults instead: JAX keys
    its compiled calls by their attributes with ==, so a NaN there (never equal to itself) would compile the
    call anew every time."""
    values = (clamp_limit(op, activation, limit), clamp_parameter(op, activation, "act_alpha", act_alpha),
              clamp_parameter(op, activation, "linear_offset", linear_offset))
    return values if activation == "swiglu_clamped" else CLAMP_DEFAULTS


def clamp_parameter(op: str, activation: str, name: str, value) -> float:
    """act_alpha or linear_offset as a static float; ValueError where swiglu_clamped uses it and it is NaN or
    infinite as the kernels take it, in f32 (every output would be NaN), as the ops' contract checks it."""
    value = static_float(op, name, value)
    if activation == "swiglu_clamped" and not abs(value) < _F32_ROUNDS_TO_INF:  # `not <` also refuses NaN
        rounded = "-inf" if value < 0 else "inf"
        got = f"{value}" if not np.isfinite(value) else f"{value}, which f32 rounds to {rounded}"
        raise ValueError(f"moegemm.jax.{op}: {name}: expected a finite {name} for swiglu_clamped (in f32), "
                         f"got {got}")
    return value


def check_array(op: str, name: str, x) -> None:
    """Raise TypeError unless ``x`` is an array whose dtype numpy knows (a Python list or scalar has no dtype
    to check; a torch tensor's dtype is torch's), NotImplementedError where its shape is symbolic
    (``jax.export`` shape polymorphism: the workspace size and the contract checks need concrete extents)."""
    is_array = hasattr(x, "dtype") and hasattr(x, "shape")
    if is_array:
        try:
            np.dtype(x.dtype)
        except TypeError:
            is_array = False
    if not is_array:
        raise TypeError(f"moegemm.jax.{op}: {name}: expected an array (jax.Array or numpy.ndarray), "
                        f"got {type(x).__name__}")
    if not all(isinstance(d, (int, np.integer)) for d in x.shape):
        raise NotImplementedError(f"moegemm.jax.{op}: {name}: symbolic shapes (jax.export shape polymorphism) "
                                  f"are not supported: expected concrete extents, got shape "
                                  f"({', '.join(str(d) for d in x.shape)}{',' if len(x.shape) == 1 else ''})")


def check_float_array(op: str, name: str, x) -> None:
    """Raise TypeError unless ``x`` is an array of a real floating dtype."""
    check_array(op, name, x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"moegemm.jax.{op}: {name}: expected a floating dtype, got {np.dtype(x.dtype).name}")


def check_dtype(op: str, name: str, x, allowed: Iterable) -> None:
    """Raise TypeError unless ``x`` is an array whose dtype is one of ``allowed``."""
    check_array(op, name, x)
    allowed = tuple(np.dtype(d) for d in allowed)
    if np.dtype(x.dtype) not in allowed:
        raise TypeError(f"moegemm.jax.{op}: {name}: expected dtype {dtype_names(allowed)}, "
                        f"got {np.dtype(x.dtype).name}")


# Why the contract refuses 8-bit and FP4 inputs (docs/ops.md §0.2 rule 2, §8), in the C++ API's words
# (src/contract/rules.cpp), which the torch ops pass on.
EIGHT_BIT_REASON = "8-bit inputs are not supported yet: the FP8 path with per-block scales is a later milestone"
FP4_REASON = "FP4 has no tensor-core path on sm_90: Hopper has no block-scaled or 4-bit MMA"


def unsupported_input_reason(dtype) -> str | None:
    """The contract's reason for refusing ``dtype`` as a GEMM input: 8-bit floats (float8_*) and FP4
    (float4_*); None for any other dtype."""
    name = np.dtype(dtype).name
    if name.startswith("float8"):
        return EIGHT_BIT_REASON
    if name.startswith("float4"):
        return FP4_REASON
    return None


def check_input_dtype(op: str, name: str, x, allowed: Iterable = SIXTEEN_BIT) -> None:
    """check_dtype for an input of the GEMM (a, b, dy, x, lhs, rhs): an 8-bit or FP4 dtype is refused with
    the reason the C++ API and the torch ops give, after the dtypes taken."""
    check_array(op, name, x)
    allowed = tuple(np.dtype(d) for d in allowed)
    got = np.dtype(x.dtype)
    if got not in allowed:
        reason = unsupported_input_reason(got)
        raise TypeError(f"moegemm.jax.{op}: {name}: expected dtype {dtype_names(allowed)}, got {got.name}"
                        + (f" ({reason})" if reason else ""))


def check_output_dtype(op: str, name: str, dtype, allowed: Iterable = OUTPUT_FLOATS):
    """The numpy dtype of an output-dtype option; TypeError when it is not allowed."""
    allowed = tuple(np.dtype(d) for d in allowed)
    if dtype is None:  # np.dtype(None) would be float64
        raise TypeError(f"moegemm.jax.{op}: {name}: expected one of {dtype_names(allowed)}, got None")
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"moegemm.jax.{op}: {name}: expected one of {dtype_names(allowed)}, got {dtype!r}") from e
    if dt not in allowed:
        raise TypeError(f"moegemm.jax.{op}: {name}: expected one of {dtype_names(allowed)}, got {dt.name}")
    return dt


def output_dtype(op: str, name: str, dtype, default, allowed: Iterable = OUTPUT_FLOATS):
    """The numpy dtype of an output-dtype option: ``default`` where it is None, else ``dtype`` as
    check_output_dtype takes it (TypeError for anything else, a falsy non-dtype such as 0 or "" included).
    Called for every output-dtype option of a call, also for an output the call does not ask for."""
    return check_output_dtype(op, name, default if dtype is None else dtype, allowed)


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
            f"moegemm.jax.{op}: {name}: expected {what} a multiple of 8 (16-bit operands need 16-byte aligned "
            f"rows), got {what} = {got} (shape {tuple(np.shape(x))}, dtype {np.dtype(x.dtype).name})")


def offsets_count(op: str, offsets) -> int:
    """E, the length of ``offsets``, after raising unless it is a 1-D int32 array."""
    check_rank(op, "offsets", offsets, 1, "(E,)")
    check_dtype(op, "offsets", offsets, (jnp.int32,))
    return offsets.shape[0]


def check_offsets(op: str, offsets, groups: int, what: str) -> None:
    """Raise unless ``offsets`` is a (groups,) int32 array (``what`` says where the count comes from)."""
    offsets_count(op, offsets)
    check_extent(op, "offsets", offsets, 0, groups, what)


def check_group_sizes(op: str, group_sizes, groups: int, what: str, rows_name: str, rows_of) -> None:
    """Raise unless ``group_sizes`` is a (groups,) integer array: TypeError for a non-array or a non-integer
    dtype, ValueError for the shape; also ValueError where the array the sizes split, ``rows_of`` (named
    ``rows_name``), has more rows than int32 offsets can end at (offsets_from_sizes)."""
    check_rank(op, "group_sizes", group_sizes, 1, "(G,)")
    if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
        raise TypeError(f"moegemm.jax.{op}: group_sizes: expected an integer dtype, "
                        f"got {np.dtype(group_sizes.dtype).name}")
    check_extent(op, "group_sizes", group_sizes, 0, groups, what)
    if rows_of.shape[0] > MAX_OFFSET_ROWS:
        raise ValueError(f"moegemm.jax.{op}: {rows_name}: expected at most {MAX_OFFSET_ROWS} rows with group_sizes "
                         f"(their sums become int32 offsets), got shape {tuple(rows_of.shape)}")


@functools.partial(jax.jit, static_argnums=1)
def offsets_from_sizes(group_sizes, m: int):
    """(G,) int32 offsets = cumsum(group_sizes) clamped to [0, M], computed in the traced function (it stays
    on the device). No sum wraps, whatever the dtype: each size is clipped to [0, M] in its own dtype (a
    negative size counts as 0), then the sizes are summed in uint32 with saturation at M (each step adds two
    values <= M < 2^31). For sizes >= 0 that is exactly min(cumsum, M): a size of M or more fills every row
    that is left either way. Jitted, so that an eager call moves no Python scalar to the device (as
    ``jax.lax.ragged_dot`` moves none; ``jax.transfer_guard("disallow")`` refuses such a transfer)."""
    dtype = jax.dtypes.canonicalize_dtype(group_sizes.dtype)  # int64 is int32 unless jax_enable_x64
    if dtype.itemsize < 4:  # widen first, so that M is representable in the clip
        group_sizes = group_sizes.astype(jnp.uint32 if jnp.issubdtype(dtype, jnp.unsignedinteger) else jnp.int32)
    capped = jnp.clip(group_sizes, 0, m).astype(jnp.uint32)
    ends = jax.lax.associative_scan(lambda a, b: jnp.minimum(a + b, jnp.uint32(m)), capped)
    return ends.astype(jnp.int32)


def check_choice(op: str, name: str, value: str, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    # A str first: a NumPy string array compares element-wise and would pass `in` (np.array("nk") in ("nk",)).
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"moegemm.jax.{op}: {name}: expected one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return value
