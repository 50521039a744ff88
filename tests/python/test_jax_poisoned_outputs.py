"""Poisoned outputs (docs/ops.md §9.2) for every output of every op: the allocator is dirtied with
SENTINEL buffers and each output is written into a donated SENTINEL buffer. Every addressed element
must be overwritten (equal to the clean result); rows at or past offsets[-1] must still hold SENTINEL,
or be zero with zero_tail. Each case runs on every platform of jax_helpers.PLATFORMS: the CPU backend
everywhere and, where JAX has a GPU that runs the sm_90a kernels, the kernels writing into buffers of XLA's
GPU allocator (every op, forward and backward: e.g. dglu's dc and dprob keep the sentinel in their tail
rows, or are zero there with zero_tail)."""

from __future__ import annotations

import numpy as np
import pytest

from jax_helpers import (PLATFORMS, SENTINEL, offsets_of, platform_device, rand, run_into_sentinels, running_on,
                         jax, jnp, mj)

SIZES = [37, 0, 80, 5, 0, 61]
M, K, E = 200, 64, len(SIZES)
VALID = sum(SIZES)


def _cases(rng, zero_tail):
    a, off = rand(rng, (M, K)), offsets_of(SIZES)
    b48, b128, b64 = rand(rng, (E, 48, K), scale=0.2), rand(rng, (E, 128, K), scale=0.2), rand(rng, (E, 64, K))
    dy, c128, c48 = rand(rng, (M, K)), rand(rng, (M, 128)), rand(rng, (M, 48))
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    dense = rand(rng, (128, K), scale=0.2)
    zt = dict(zero_tail=zero_tail)
    grouped = {
        "grouped_gemm": (lambda a, b: mj.grouped_gemm(a, b, off, prob=prob, generate_c=True, **zt), (a, b48)),
        "grouped_gemm_glu": (lambda a, b: mj.grouped_gemm_glu(a, b, off, generate_c=True, **zt), (a, b128)),
        "grouped_gemm_srelu": (lambda a, b: mj.grouped_gemm_srelu(a, b, off, generate_c=True, **zt), (a, b48)),
        "grouped_gemm_dglu": (lambda d, b, c: mj.grouped_gemm_dglu(
            d, b, c, off, prob=prob, compute_dprob=True, compute_dbias=True, compute_amax=True, **zt),
            (dy, b64, c128)),
        "grouped_gemm_dsrelu": (lambda d, b, c: mj.grouped_gemm_dsrelu(
            d, b, c, off, prob=prob, compute_dprob=True, compute_dbias=True, compute_amax=True, **zt),
            (dy, b48, c48)),
    }
    whole = {  # outputs without row tails: every element is addressed
        "grouped_gemm_wgrad": (lambda x, d: mj.grouped_gemm_wgrad(x, d, off), (a, c48)),
        "gemm_swiglu": (lambda a, b: mj.gemm_swiglu(a, b), (a, dense)),
        "gemm_amax": (lambda a, b: mj.gemm_amax(a, b, c_dtype=jnp.float32), (a, dense)),
        "gemm_srelu": (lambda a, b: mj.gemm_srelu(a, b, prob=prob, generate_c=True), (a, dense)),
        "gemm_dsrelu": (lambda d, b, c: mj.gemm_dsrelu(d, b, c, prob=prob, compute_dprob=True, compute_dbias=True,
                                                       compute_amax=True),
                        (dy, dense, c128)),
    }
    return grouped, whole


# (op, group, zero_tail): zero_tail only for the grouped row-indexed ops (group 0).
ALL_CASES = [(op, g, zt) for g, ops in enumerate(_cases(np.random.default_rng(0), False)) for op in ops
             for zt in ((False, True) if g == 0 else (False,))]


@pytest.mark.parametrize("op,group,zero_tail", ALL_CASES)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_output_written_and_tail_untouched(op, group, zero_tail, platform):
    with running_on(platform_device(platform)):
        fn, args = _cases(np.random.default_rng(1), zero_tail)[group][op]
        clean = jax.tree_util.tree_leaves(fn(*args))
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in clean]
        out, landed = run_into_sentinels(fn, specs, *args)
    assert landed, "XLA did not place every output in its donated sentinel buffer"
    for i, (got, ref) in enumerate(zip(jax.tree_util.tree_leaves(out), clean)):
        got, ref = np.atleast_1d(np.asarray(got, np.float32)), np.atleast_1d(np.asarray(ref, np.float32))
        row_indexed = group == 0 and got.ndim >= 1 and got.shape[0] == M
        valid = slice(0, VALID) if row_indexed else slice(None)
        assert not (got[valid] == SENTINEL).any(), f"{op} output {i}: addressed element not written"
        np.testing.assert_array_equal(got[valid], ref[valid], err_msg=f"{op} output {i}")
        if row_indexed:
            tail = got[VALID:]
            expected = 0.0 if zero_tail else SENTINEL
            assert (tail == expected).all(), f"{op} output {i}: tail rows {'not zero' if zero_tail else 'written'}"
