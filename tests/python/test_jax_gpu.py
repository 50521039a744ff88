"""GPU only: the sm_90a kernels through the JAX binding against the CPU reference through the same binding
(same inputs, both platforms' handlers of one target name), repeat runs, many calls in one executable (which
XLA may capture into a command buffer) against eager calls, and the error of every op without a GPU kernel.

The op lists come from gpu_support: GPU_KERNEL_OPS are run and compared, NO_GPU_KERNEL_OPS must raise the
"no sm_90a kernel" error (when one gets a kernel, that test fails until gpu_support is updated)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import GPU_KERNEL_OPS, MOE_MLP_BACKWARD, NO_GPU_KERNEL_OPS, has_gpu_kernel, no_kernel_pattern
from jax_helpers import (assert_close, dirty_allocator, gpu_ready, offsets_of, rand, running_on, jax, jnp, mj)
from test_jax_ops import _every_op

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_ready(), reason="needs a GPU that runs the sm_90a kernels (JAX)")]

JaxRuntimeError = getattr(jax.errors, "JaxRuntimeError", RuntimeError)

M, H, I, E = 1000, 256, 128, 8
SIZES = {"uniform": [93] * 8, "ragged": [0, 500, 0, 1, 243, 0, 0, 7], "empty": [0] * 8}


def _gpu():
    return jax.devices("gpu")[0]


def _cpu():
    return jax.devices("cpu")[0]


def _run(device, fn, args):
    """fn jitted on `device`, its operands committed there."""
    return jax.tree_util.tree_leaves(jax.jit(fn)(*jax.device_put(args, device)))


def _grouped_cases(sizes):
    """name -> (ops it calls, fn, operands); every output is defined on every row (zero_tail)."""
    rng = np.random.default_rng(sum(sizes) + len(set(sizes)))
    x = rand(rng, (M, H))
    off, gs = offsets_of(sizes), jnp.asarray(sizes, jnp.int32)
    w_nk, w_kn = rand(rng, (E, 384, H), scale=0.1), rand(rng, (E, H, 384), scale=0.1)
    w_up, w_down = rand(rng, (E, H, 2 * I), scale=0.1), rand(rng, (E, I, H), scale=0.1)
    alpha = jnp.asarray(rng.uniform(0.5, 2, E), jnp.float32)
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    bias = rand(rng, (E, 384), jnp.float32)
    zt = dict(zero_tail=True)

    def glu(layout, act):
        return (("grouped_gemm_glu",),
                lambda a, b, o, p: mj.grouped_gemm_glu(a, b, o, prob=p, b_layout="kn", glu_layout=layout,
                                                       activation=act, generate_c=True, **zt),
                (x, w_up, off, prob))

    return {
        "grouped_gemm-nk-alpha-prob-bias": (
            ("grouped_gemm",),
            lambda a, b, o, al, p, bi: mj.grouped_gemm(a, b, o, alpha=al, prob=p, bias=bi, generate_c=True, **zt),
            (x, w_nk, off, alpha, prob, bias)),
        "grouped_gemm-kn-f32": (
            ("grouped_gemm",),
            lambda a, b, o: mj.grouped_gemm(a, b, o, b_layout="kn", d_dtype=jnp.float32, **zt), (x, w_kn, off)),
        "grouped_gemm_glu-halves-swiglu": glu("halves", "swiglu"),
        "grouped_gemm_glu-interleaved32-geglu": glu("interleaved32", "geglu"),
        "grouped_gemm_glu-interleaved32_up_first-swiglu_clamped": glu("interleaved32_up_first", "swiglu_clamped"),
        "ragged_dot": (("grouped_gemm",), lambda a, b, g: mj.ragged_dot(a, b, g), (x, w_kn, gs)),
        "moe_mlp": (("grouped_gemm_glu", "grouped_gemm"),
                    lambda a, u, d, g, p: mj.moe_mlp(a, u, d, g, prob=p), (x, w_up, w_down, gs, prob)),
    }


def _dense_case(m, b_layout):
    rng = np.random.default_rng(m)
    a = rand(rng, (m, H))
    b = rand(rng, (512, H) if b_layout == "nk" else (H, 512), scale=0.1)
    return lambda a, b: mj.gemm_swiglu(a, b, b_layout=b_layout, alpha=0.5), (a, b)


CASE_NAMES = list(_grouped_cases(SIZES["ragged"]))


def test_the_cases_use_only_ops_with_a_gpu_kernel():
    for name, (ops, _, _) in _grouped_cases(SIZES["ragged"]).items():
        assert has_gpu_kernel(*ops, dtypes=["bfloat16"]), name
    assert has_gpu_kernel("gemm_swiglu")


@pytest.mark.parametrize("sizes", list(SIZES.values()), ids=list(SIZES))
@pytest.mark.parametrize("case", CASE_NAMES)
def test_gpu_matches_cpu_through_the_same_target(case, sizes):
    _, fn, args = _grouped_cases(sizes)[case]
    gpu, cpu = _run(_gpu(), fn, args), _run(_cpu(), fn, args)
    assert len(gpu) == len(cpu)
    end = sum(sizes)
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.shape == c.shape and g.dtype == c.dtype, (i, g.shape, c.shape, g.dtype, c.dtype)
        assert next(iter(g.devices())).platform == "gpu"
        assert_close(np.asarray(g, np.float32), np.asarray(c, np.float32), f"{case} output {i}: gpu vs cpu")
        if g.shape[0] == M:  # rows at or past offsets[-1] are exact zeros on the GPU too
            assert (np.asarray(g, np.float32)[end:] == 0).all(), f"{case} output {i}: tail rows not zero"


@pytest.mark.parametrize("m", [1, 77, 1000])
@pytest.mark.parametrize("b_layout", ["nk", "kn"])
def test_gemm_swiglu_gpu_matches_cpu(m, b_layout):
    fn, args = _dense_case(m, b_layout)
    gpu, cpu = _run(_gpu(), fn, args), _run(_cpu(), fn, args)
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.shape == c.shape and g.dtype == c.dtype
        assert_close(np.asarray(g, np.float32), np.asarray(c, np.float32), f"gemm_swiglu output {i}")


@pytest.mark.parametrize("case", CASE_NAMES + ["gemm_swiglu"])
def test_twenty_gpu_calls_are_bitwise_identical(case):
    if case == "gemm_swiglu":
        fn, args = _dense_case(1000, "nk")
    else:
        _, fn, args = _grouped_cases(SIZES["ragged"])[case]
    args = jax.device_put(args, _gpu())
    jitted = jax.jit(fn)
    first = [np.asarray(x) for x in jax.tree_util.tree_leaves(jitted(*args))]
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in first]
    for call in range(19):
        if call % 5 == 0:
            with running_on(_gpu()):
                dirty_allocator(specs, rounds=1)
        again = jax.tree_util.tree_leaves(jitted(*args))
        for x, y in zip(first, again):
            np.testing.assert_array_equal(x, np.asarray(y), err_msg=f"{case}: call {call + 2}")


@pytest.mark.parametrize("sizes", list(SIZES.values()), ids=list(SIZES))
def test_many_calls_in_one_executable_equal_eager(sizes):
    """Eleven moegemm custom calls in one jitted function (over XLA's command-buffer threshold), chained
    through each other's outputs, bitwise equal to the same calls made one by one, and to a second run."""
    rng = np.random.default_rng(11)
    x = rand(rng, (M, H))
    w_up, w_down = rand(rng, (E, H, 2 * I), scale=0.1), rand(rng, (E, I, H), scale=0.1)
    dense = rand(rng, (512, H), scale=0.1)
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    args = jax.device_put((x, w_up, w_down, dense, prob, offsets_of(sizes), jnp.asarray(sizes, jnp.int32)),
                          _gpu())

    def chain(x, w_up, w_down, dense, prob, off, gs):
        outs = []
        for layout, act in (("halves", "swiglu"), ("interleaved32", "geglu"),
                            ("interleaved32_up_first", "swiglu_clamped")):
            h, c = mj.grouped_gemm_glu(x, w_up, off, prob=prob, b_layout="kn", glu_layout=layout,
                                       activation=act, generate_c=True, zero_tail=True)
            y, g = mj.grouped_gemm(h, w_down, off, b_layout="kn", generate_c=True, zero_tail=True)
            outs += [h, c, y, g]
        outs.append(mj.ragged_dot(y, w_up, gs))
        outs.append(mj.moe_mlp(x, w_up, w_down, gs, prob=prob))
        outs += list(mj.gemm_swiglu(x, dense))
        outs += list(mj.gemm_swiglu(y, dense, b_layout="nk", alpha=0.25))
        return outs

    eager = chain(*args)
    jitted = jax.jit(chain)
    text = jitted.lower(*args).as_text()
    assert text.count("moegemm_") >= 11, "fewer custom calls in the executable than expected"
    for run in range(2):
        out = jitted(*args)
        assert len(out) == len(eager)
        for i, (e, j) in enumerate(zip(eager, out)):
            np.testing.assert_array_equal(np.asarray(e), np.asarray(j), err_msg=f"run {run} output {i}")


def test_every_op_is_either_run_or_refused_on_the_gpu():
    assert set(GPU_KERNEL_OPS) | set(NO_GPU_KERNEL_OPS) == set(_every_op(np.random.default_rng(0)))


@pytest.mark.parametrize("op", NO_GPU_KERNEL_OPS)
def test_op_without_a_gpu_kernel_says_so(op):
    """Device operands of an op outside gpu_support.GPU_KERNEL_OPS: the handler reports the missing kernel
    (UNIMPLEMENTED). When a kernel lands this fails: move the op to GPU_KERNEL_OPS."""
    with running_on(_gpu()):
        fn = _every_op(np.random.default_rng(12))[op]
        with pytest.raises(JaxRuntimeError, match=no_kernel_pattern(op)):
            jax.block_until_ready(fn())


def test_moe_mlp_backward_on_the_gpu_raises_until_its_kernels_land():
    missing = [op for op in MOE_MLP_BACKWARD if not has_gpu_kernel(op)]
    assert missing, "every backward op has a GPU kernel: compare moe_mlp gradients on the GPU with the CPU"
    rng = np.random.default_rng(13)
    with running_on(_gpu()):
        x, w_up, w_down = rand(rng, (64, H)), rand(rng, (2, H, 2 * I), scale=0.1), rand(rng, (2, I, H), scale=0.1)
        gs = jnp.asarray([40, 24], jnp.int32)
        y = mj.moe_mlp(x, w_up, w_down, gs)  # the forward runs on the GPU
        assert next(iter(y.devices())).platform == "gpu" and np.isfinite(np.asarray(y, np.float32)).all()
        with pytest.raises(JaxRuntimeError, match=no_kernel_pattern(*missing)):
            grads = jax.grad(lambda *a: mj.moe_mlp(*a, gs).astype(jnp.float32).sum(), (0, 1, 2))(x, w_up, w_down)
            jax.block_until_ready(grads)
