"""Shared helpers of the JAX front-end tests: random operands, f32 oracles, the spec tolerances and
the poisoned-output harness."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import moegemm.jax as mj  # noqa: E402

from gpu_support import has_gpu_kernel, jax_gpu_absence, jax_gpu_present  # noqa: E402

SENTINEL = np.float32(-7168.0)  # exactly representable in bf16/f16/f32, far from any result here


def gpu_ready() -> bool:
    """JAX sees a GPU and the moegemm kernels can run on it (gpu_support.jax_gpu_present)."""
    return jax_gpu_present()


GPU_SKIP_REASON = f"needs a GPU that runs the sm_90a kernels (JAX): {jax_gpu_absence()}"

# The platforms of a test that checks both backends (gpu_support's policy): "cpu" everywhere, "gpu" marked
# gpu and skipped, with GPU_SKIP_REASON, where JAX has no GPU that runs the kernels.
GPU_MARKS = [pytest.mark.gpu, pytest.mark.skipif(not jax_gpu_present(), reason=GPU_SKIP_REASON)]
PLATFORMS = ["cpu", pytest.param("gpu", marks=GPU_MARKS)]


def cpu_device():
    return jax.devices("cpu")[0]


def platform_device(platform):
    """The first device of `platform` ("cpu" or "gpu")."""
    return jax.devices(platform)[0]


def device_for(*ops, dtypes=()):
    """The device a test of `ops` (with inputs of `dtypes`) runs on: the GPU when one is present and every
    op has an sm_90a kernel for those dtypes (gpu_support.GPU_KERNEL_OPS), else the CPU backend."""
    if gpu_ready() and has_gpu_kernel(*ops, dtypes=dtypes):
        return jax.devices("gpu")[0]
    return cpu_device()


@contextlib.contextmanager
def running_on(device):
    """Make `device` the default device: arrays created inside land there and jitted computations of
    uncommitted arrays (and their lowering) target its platform."""
    with jax.default_device(device):
        yield device


def on_device_for(*ops, dtypes=()):
    """Context manager: run the body on device_for(*ops, dtypes=dtypes)."""
    return running_on(device_for(*ops, dtypes=dtypes))


def on_cpu():
    """Context manager: run the body on the CPU backend, whatever the machine (references, gradients)."""
    return running_on(cpu_device())


def rand(rng, shape, dtype=jnp.bfloat16, scale=1.0):
    return jnp.asarray(rng.standard_normal(shape) * scale, dtype)


def offsets_of(sizes):
    return jnp.asarray(np.cumsum(sizes), jnp.int32)


def f32(x):
    return np.asarray(jnp.asarray(x, jnp.float32))


def assert_close(got, ref, what="", f32_tolerance=False):
    """docs/ops.md §9.1: rel. Frobenius error < 1e-2 and elementwise rtol 2e-2 / atol 4e-2 after
    scaling by max|ref| (tight enough that a wrong row, column pairing or expert fails). With
    ``f32_tolerance`` (for a float32 output, which it must be, of an f32 computation on the inputs ref is
    computed from): rtol / atol 1e-5 after scaling, as torch_helpers.assert_close checks f32 results, so
    that an output rounded through 16 bits fails (the bf16 tolerance would pass it)."""
    if f32_tolerance:
        assert got.dtype == np.float32, f"{what}: the f32 tolerance checks a float32 output, got {got.dtype}"
    got, ref = f32(got), np.asarray(ref, np.float32)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    scale = max(float(np.abs(ref).max()), 1e-6)
    if f32_tolerance:
        np.testing.assert_allclose(got / scale, ref / scale, rtol=1e-5, atol=1e-5, err_msg=what)
        return
    fro = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-6)
    assert fro < 1e-2 or np.linalg.norm(ref) == 0, f"{what}: rel. Frobenius error {fro}"
    np.testing.assert_allclose(got / scale, ref / scale, rtol=2e-2, atol=4e-2, err_msg=what)


def expert_of_rows(sizes, m):
    """Expert index of each row (-1 for rows at or past sum(sizes))."""
    owner = np.full(m, -1)
    start = 0
    for g, s in enumerate(sizes):
        owner[start:min(start + s, m)] = g
        start += s
    return owner


def grouped_matmul_ref(a, b, sizes, b_layout="nk", dtype=np.float32):
    """Oracle in ``dtype`` (f32, or f64 where a test asks more) of G = a @ B_g^T (nk) / a @ B_g (kn) with zero
    rows past the groups; a NumPy array already in ``dtype`` (another oracle's result) is taken as it is."""
    a, b = (x if isinstance(x, np.ndarray) and x.dtype == dtype else np.asarray(f32(x), dtype) for x in (a, b))
    if b_layout == "nk":
        b = np.swapaxes(b, 1, 2)
    out = np.zeros((a.shape[0], b.shape[2]), dtype)
    owner = expert_of_rows(sizes, a.shape[0])
    for g in range(b.shape[0]):
        rows = owner == g
        out[rows] = a[rows] @ b[g]
    return out


def glu_pair(g, layout):
    """(gate, up) of pre-activation columns g (M, 2I) in a moegemm GLU layout (docs/ops.md §2)."""
    i = g.shape[1] // 2
    if layout == "halves":
        return g[:, :i], g[:, i:]
    blocks = g.reshape(g.shape[0], -1, 2, 32)
    first, second = blocks[:, :, 0].reshape(g.shape[0], i), blocks[:, :, 1].reshape(g.shape[0], i)
    return (first, second) if layout == "interleaved32" else (second, first)


def glu_join(gate, up, layout):
    """Inverse of glu_pair: the (M, 2I) columns of a moegemm GLU layout from (gate, up)."""
    if layout == "halves":
        return np.concatenate([gate, up], axis=1)
    first, second = (gate, up) if layout == "interleaved32" else (up, gate)
    m, i = gate.shape
    return np.stack([first.reshape(m, i // 32, 32), second.reshape(m, i // 32, 32)], axis=2).reshape(m, 2 * i)


def silu(x):
    return x / (1 + np.exp(-x))


def dirty_allocator(specs, rounds=4, fill=SENTINEL):
    """Allocate buffers of the output sizes filled with `fill` (SENTINEL) and free them, several times, so
    that a later allocation of the same size is likely to reuse dirty memory."""
    for _ in range(rounds):
        bufs = [jnp.full(s.shape, fill, s.dtype) for s in specs]
        jax.block_until_ready(bufs)
        del bufs


def run_into_sentinels(fn, out_specs, *args, fill=SENTINEL):
    """Run ``fn(*args)`` under jit so that its outputs are written into buffers that hold SENTINEL (or
    `fill`, e.g. NaN, which also catches an output scaled by 0 and added to instead of overwritten):
    the allocator is dirtied first, then one such buffer per output is donated to the jitted call
    (keep_unused: XLA places each output in the donated buffer of its shape). Returns the outputs and
    whether every output really landed in its donated buffer (then untouched elements must still read
    `fill`)."""
    dirty_allocator(out_specs, fill=fill)
    sentinels = [jnp.full(s.shape, fill, s.dtype) for s in out_specs]
    jax.block_until_ready(sentinels)
    pointers = [s.unsafe_buffer_pointer() for s in sentinels]
    jitted = jax.jit(lambda sent, *a: fn(*a), donate_argnums=0, keep_unused=True)
    out = jitted(sentinels, *args)
    leaves = jax.tree_util.tree_leaves(out)
    landed = [leaf.unsafe_buffer_pointer() for leaf in leaves] == pointers
    return out, landed
