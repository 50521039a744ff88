"""The native side of ``moegemm.jax``: loading libmoegemm_jax.so, registering its XLA FFI targets, the
trace-time workspace query, and the one function that emits a custom call.

Every op is the FFI target ``moegemm_<op>``, registered twice under that name: for platform ``CUDA``
(the sm_90a kernels on XLA's stream, command-buffer compatible) and for platform ``cpu`` (the CPU
reference). XLA picks the handler by the platform the computation is compiled for. Loading and
registration happen once per process, when moegemm.jax is imported.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from moegemm import _jax_partition as partition
from moegemm import _jax_vma as vma
from moegemm import _native

OPS = (  # the ops, each the FFI target target_name(op)
    "grouped_gemm",
    "grouped_gemm_glu",
    "grouped_gemm_dglu",
    "grouped_gemm_srelu",
    "grouped_gemm_dsrelu",
    "grouped_gemm_wgrad",
    "gemm_swiglu",
    "gemm_amax",
    "gemm_srelu",
    "gemm_dsrelu",
)

# How ffi_call batches under jax.vmap: the handlers take fixed-rank operands (no batch dimension), so a
# vmapped call becomes a loop of unbatched calls (one custom call per batch element).
VMAP_METHOD = "sequential"

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def target_name(op: str) -> str:
    """The FFI target name of op ``op`` (e.g. ``moegemm_grouped_gemm``)."""
    return f"moegemm_{op}"


def library() -> ctypes.CDLL:
    """libmoegemm_jax.so, loaded and its targets registered on the first call (thread-safe; moegemm.jax
    makes that call when imported).

    Raises ImportError when the library is not built (see moegemm._native.library_path) or does not load
    (moegemm._native.load_failed: an empty or foreign file, a stale build without one of the symbols).
    """
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _native.library_path("moegemm_jax")
            try:
                lib = ctypes.CDLL(str(path))
                lib.moegemm_jax_workspace_bytes.restype = ctypes.c_int
                lib.moegemm_jax_workspace_bytes.argtypes = [
                    ctypes.c_char_p, ctypes.c_char_p,
                    ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int32),
                    ctypes.POINTER(ctypes.c_int64),
                    ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int32),
                    ctypes.POINTER(ctypes.c_int64),
                    ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p, ctypes.c_size_t,
                ]
                lib.moegemm_jax_device_kernels_available.restype = ctypes.c_int
                lib.moegemm_jax_validate_offsets.restype = ctypes.c_int
                lib.moegemm_jax_validate_offsets.argtypes = [
                    ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int64, ctypes.c_int64,
                    ctypes.c_char_p, ctypes.c_size_t,
                ]
                handlers = {(op, platform): getattr(lib, f"moegemm_jax_{op}_{suffix}")
                            for op in OPS for platform, suffix in (("cpu", "cpu"), ("CUDA", "cuda"))}
            except (OSError, AttributeError) as error:
                raise _native.load_failed(path, error) from error
            for (op, platform), handler in handlers.items():
                jax.ffi.register_ffi_target(target_name(op), jax.ffi.pycapsule(handler), platform=platform)
            _lib = lib
    return _lib


def device_kernels_available() -> bool:
    """Whether the sm_90a kernels can run in this process (a build with kernels, and the current CUDA device
    an sm_90 GPU)."""
    return bool(library().moegemm_jax_device_kernels_available())


def _library_error(op: str, rc: int, err) -> Exception:
    """The C ABI's error ``rc`` (1: invalid argument, else another error) with its message, prefixed
    "moegemm.jax."."""
    message = err.value.decode(errors="replace")
    # The library's messages start with the op's name already: "moegemm.jax." completes it.
    message = f"moegemm.jax.{message}" if message.startswith(f"{op}: ") else f"moegemm.jax.{op}: {message}"
    return ValueError(message) if rc == 1 else RuntimeError(message)


def validate_offsets(op: str, offsets, rows: int) -> None:
    """An op's ``validate=True``: reads ``offsets`` to the host (a device-to-host copy and a sync) and checks
    them as the C++ ops' validate does (moegemm::validate_offsets): each in [0, rows], non-decreasing.

    Raises ValueError with the C++ message ("<op>: offsets: expected ..., got offsets[i] = v"), and TypeError
    naming ``validate`` for traced offsets (an argument of a function under jax.jit or vmap: no value to read;
    offsets closed over by such a function are concrete and checked when it is traced)."""
    try:
        host = np.ascontiguousarray(np.asarray(offsets), dtype=np.int32)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError) as error:
        raise TypeError(
            f"moegemm.jax.{op}: validate: reads offsets on the host, so it needs concrete offsets (an eager "
            "call); got a traced value (under jax.jit, jax.vmap or another transformation). Check them before "
            "the transformation, or leave validate off: garbage offsets are clamped, never read out of bounds "
            "(docs/ops.md §0)") from error
    err = ctypes.create_string_buffer(1024)
    rc = library().moegemm_jax_validate_offsets(op.encode(), host.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                                host.shape[0], int(rows), err, len(err))
    if rc != 0:
        raise _library_error(op, rc, err)


def _attr_text(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(value)


def _describe(specs: Sequence[jax.ShapeDtypeStruct]):
    n = len(specs)
    dtypes = (ctypes.c_char_p * max(n, 1))(*[np.dtype(s.dtype).name.encode() for s in specs])
    ranks = (ctypes.c_int32 * max(n, 1))(*[len(s.shape) for s in specs])
    dims = (ctypes.c_int64 * max(4 * n, 1))()
    for i, s in enumerate(specs):
        for d, extent in enumerate(s.shape[:4]):
            dims[4 * i + d] = int(extent)
    return n, dtypes, ranks, dims


def workspace_bytes(op: str, inputs: Sequence, outputs: Sequence[jax.ShapeDtypeStruct],
                    attrs: Mapping[str, object]) -> int:
    """Workspace bytes of ``op`` for these operand shapes/dtypes and attributes (moegemm::X_workspace_bytes).

    Runs the op's C++ contract checks at trace time: raises ValueError with the library's message
    (naming the operand, what was expected and what was given) when an operand does not fit.
    """
    lib = library()
    ins = [jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x in inputs]
    n_in, in_dt, in_rk, in_dims = _describe(ins)
    n_out, out_dt, out_rk, out_dims = _describe(list(outputs))
    text = ";".join(f"{k}={_attr_text(v)}" for k, v in attrs.items()).encode()
    result = ctypes.c_uint64(0)
    err = ctypes.create_string_buffer(1024)
    rc = lib.moegemm_jax_workspace_bytes(
        op.encode(), text, n_in, in_dt, in_rk, in_dims, n_out, out_dt, out_rk, out_dims,
        ctypes.byref(result), err, len(err))
    if rc != 0:
        raise _library_error(op, rc, err)
    return int(result.value)


def _ffi_attr(value):
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        # Past the f32 range a value becomes +-inf: an infinite clamp limit (docs/ops.md §0), or a dense op's
        # alpha that the caller asked for (torch's front end rounds it the same way).
        # + 0 takes -0.0 to +0.0: JAX keys its compiled calls by their attributes with ==, under which the two
        # are one key, so that an eager call with one would reuse the call compiled for the other (and differ
        # from the same call under jit in the sign of zeros); docs/jax.md.
        with np.errstate(over="ignore"):
            return np.float32(value) + np.float32(0.0)
    return value


class _Emit(NamedTuple):
    """Emits op's custom call with these attributes and aliases (hashable: it keys the partitioned calls'
    cache)."""
    op: str
    attrs: tuple
    aliases: tuple = ()

    def __call__(self, inputs, outputs):
        return _emit(self.op, inputs, outputs, dict(self.attrs), self.aliases)

    def unaccumulated(self) -> "_Emit":
        """The same call without its accumulator inputs (the aliased ones, which come last): the op's
        ``accumulate`` attribute off, nothing aliased."""
        return _Emit(self.op, tuple((k, False if k == "accumulate" else v) for k, v in self.attrs))


def _emit(op, inputs, outputs, attrs, aliases=()):
    ws = workspace_bytes(op, inputs, outputs, attrs)
    results = list(outputs) + [jax.ShapeDtypeStruct((ws,), jnp.uint8)]
    fn = jax.ffi.ffi_call(target_name(op), results, vmap_method=VMAP_METHOD, input_output_aliases=dict(aliases))
    axes = vma.union(inputs)  # inside shard_map: the call's operands and results vary along these mesh axes
    out = fn(*vma.cast_all(inputs, axes), **{k: _ffi_attr(v) for k, v in attrs.items()})
    return vma.cast_all(out[:-1], axes)


class _Call(NamedTuple):
    """One call's static configuration (hashable: the key of its jit's cache)."""
    op: str
    attrs: tuple
    outputs: tuple  # (shape, dtype name) of each result
    roles: tuple | None
    output_roles: tuple | None
    aliases: tuple


def call(op: str, inputs: Sequence, outputs: Sequence[jax.ShapeDtypeStruct],
         attrs: Mapping[str, object], roles: Sequence[str], output_roles: Sequence[str],
         aliases: Sequence[tuple[int, int]] = (), names: Sequence[str] = ()) -> list:
    """Emit the custom call of ``op``: its outputs come from XLA uninitialised, plus one u8 workspace
    output sized by ``workspace_bytes`` (dropped here). The one exception is ``aliases``, pairs (input
    index, output index) passed as ``input_output_aliases``: that output is the input's buffer, which the op
    reads and adds into (grouped_gemm_wgrad's ``w``; its role is ACCUMULATOR, it comes after every other
    input and the op takes an ``accumulate`` attribute). XLA copies the input into the output's buffer
    unless the input is dead after the call (a donated argument of the enclosing jit, say).

    ``attrs`` values: bool, float (passed as float32) or str. ``roles`` and ``output_roles`` (the
    moegemm._jax_partition roles of each input and output) shard the call along the activation rows under
    jit's automatic partitioning and on Explicit meshes (moegemm._jax_partition), unless
    MOEGEMM_JAX_ROW_SHARDING=0. The call runs through jit, so that an eager call is traced once per
    configuration. Returns the list of outputs. ``names`` (the operands' names, in the order of ``inputs``)
    name the operand when jit refuses operands committed to different devices.
    """
    if len(roles) != len(inputs) or len(output_roles) != len(outputs):
        raise AssertionError(f"{op}: roles of {len(inputs)} inputs and {len(outputs)} outputs expected")
    if not partition.enabled():
        roles = output_roles = None
    config = _Call(op, tuple(attrs.items()), tuple((tuple(s.shape), np.dtype(s.dtype).name) for s in outputs),
                   None if roles is None else tuple(roles), None if output_roles is None else tuple(output_roles),
                   tuple(tuple(pair) for pair in aliases))
    try:
        return list(_call_jit(config, *inputs))
    except ValueError as error:
        mismatch = _device_mismatch(op, names, inputs)
        if mismatch is None:
            raise
        raise mismatch from error


def _device_mismatch(op: str, names: Sequence[str], inputs: Sequence) -> ValueError | None:
    """After jit refused a call: the error naming the first operand committed to other devices than the first
    committed operand (jit's own names the arguments of an internal function), or None if there is none.
    Only on this path, so that a call that runs pays nothing for it."""
    first = None
    for name, x in zip(names, inputs):
        try:
            committed = isinstance(x, jax.Array) and x.committed
        except jax.errors.ConcretizationTypeError:  # a tracer: no devices of its own
            continue
        if not committed:
            continue  # an uncommitted array goes wherever the others are
        devices = x.sharding.device_set
        if first is None:
            first = (name, devices)
        elif devices != first[1]:
            return ValueError(f"moegemm.jax.{op}: {name}: expected an array on the devices of {first[0]} "
                              f"({_listed(first[1])}), got one on {_listed(devices)}")
    return None


def _listed(devices) -> str:
    """A device set in id order, as "cpu:0, cpu:1"."""
    return ", ".join(str(d) for d in sorted(devices, key=lambda d: d.id))


@functools.partial(jax.jit, static_argnums=(0,))
def _call_jit(config: _Call, *inputs):
    return _no_derivative(config, *inputs)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _no_derivative(config: _Call, *inputs):
    return _call_traced(config, *inputs)


@_no_derivative.defjvp
def _no_derivative_jvp(config, primals, tangents):
    raise ValueError(
        f"moegemm.jax.{config.op}: the FFI call to `{target_name(config.op)}` cannot be differentiated; take "
        "gradients through moegemm.jax.ragged_dot or moe_mlp, or write a jax.custom_vjp over the ops "
        "(docs/jax.md)")


def _call_traced(config: _Call, *inputs):
    outputs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in config.outputs]
    attrs = dict(config.attrs)
    if config.roles is None:
        return tuple(_emit(config.op, inputs, outputs, attrs, config.aliases))
    described = [partition.Output(role, shape[1:] if role == partition.ROWS else shape, dtype)
                 for role, (shape, dtype) in zip(config.output_roles, config.outputs)]
    return tuple(partition.call(_Emit(config.op, config.attrs, config.aliases), inputs, config.roles, described))
