"""GPU only: the sm_90a kernels through the JAX binding against the CPU reference through the same binding
(same inputs, both platforms' handlers of one target name), for every op, forward and backward, and for the
gradients of ragged_dot and moe_mlp (their custom_vjp runs grouped_gemm_dglu, grouped_gemm and
grouped_gemm_wgrad on the GPU); repeat runs; many calls in one executable (which XLA may capture into a
command buffer) against eager calls; and the inputs that stay off the GPU (f16: the kernels take bf16).

Every op has a GPU kernel for bf16 inputs (gpu_support.GPU_KERNEL_OPS, GPU_INPUT_DTYPES). The checks against
f32 oracles, of the HLO and of poisoned outputs run on both platforms in the other test_jax_*.py files
(parametrised over jax_helpers.PLATFORMS)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import ALL_OPS, GPU_INPUT_DTYPES, GPU_KERNEL_OPS, has_gpu_kernel, refused_dtype_pattern
from jax_helpers import (GPU_MARKS, assert_close, dirty_allocator, offsets_of, rand, running_on, jax, jnp, mj)
from test_jax_ops import _every_op

pytestmark = GPU_MARKS

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

    dy, c_glu, c_n = rand(rng, (M, H)), rand(rng, (M, 2 * I), scale=2.0), rand(rng, (M, 384), scale=2.0)
    beta = jnp.asarray(rng.uniform(0.5, 2, E), jnp.float32)
    w_down_kn = rand(rng, (E, H, I), scale=0.1)
    cot, cot_n = rand(rng, (M, H), jnp.float32), rand(rng, (M, 384), jnp.float32)
    dense_outputs = dict(compute_dprob=True, compute_dbias=True, compute_amax=True)

    def dglu(layout, act, b_layout, **extra):
        w = w_down if b_layout == "nk" else w_down_kn
        return (("grouped_gemm_dglu",),
                lambda d, b, c, o, p: mj.grouped_gemm_dglu(d, b, c, o, prob=p, b_layout=b_layout, glu_layout=layout,
                                                           activation=act, **dense_outputs, **extra, **zt),
                (dy, w, c_glu, off, prob))

    def ragged_dot_grad(l, r, g):
        loss = lambda l, r: (mj.ragged_dot(l, r, g).astype(jnp.float32) * cot_n).sum()  # noqa: E731
        return jax.grad(loss, (0, 1))(l, r)

    def moe_mlp_grad(a, u, d, g, p):
        loss = lambda a, u, d, p: (mj.moe_mlp(a, u, d, g, prob=p).astype(jnp.float32) * cot).sum()  # noqa: E731
        return jax.grad(loss, (0, 1, 2, 3))(a, u, d, p)

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
        "grouped_gemm_srelu-kn-alpha-prob-bias": (
            ("grouped_gemm_srelu",),
            lambda a, b, o, al, p, bi: mj.grouped_gemm_srelu(a, b, o, alpha=al, prob=p, bias=bi, b_layout="kn",
                                                             generate_c=True, **zt),
            (x, w_kn, off, alpha, prob, bias)),
        "grouped_gemm_dglu-halves-swiglu": dglu("halves", "swiglu", "nk"),
        "grouped_gemm_dglu-interleaved32-geglu-kn-alpha-beta-f32": dglu(
            "interleaved32", "geglu", "kn", alpha=alpha, beta=beta, dc_dtype=jnp.float32),
        "grouped_gemm_dglu-interleaved32_up_first-swiglu_clamped-bf16dbias": dglu(
            "interleaved32_up_first", "swiglu_clamped", "nk", dbias_dtype=jnp.bfloat16),
        "grouped_gemm_dsrelu-nk-alpha-prob": (
            ("grouped_gemm_dsrelu",),
            lambda d, b, c, o, al, p: mj.grouped_gemm_dsrelu(d, b, c, o, alpha=al, prob=p, **dense_outputs, **zt),
            (dy, w_nk, c_n, off, alpha, prob)),
        "grouped_gemm_wgrad-f32": (("grouped_gemm_wgrad",), lambda a, d, o: mj.grouped_gemm_wgrad(a, d, o),
                                   (x, c_n, off)),
        "grouped_gemm_wgrad-transposed-bf16": (
            ("grouped_gemm_wgrad",),
            lambda a, d, o: mj.grouped_gemm_wgrad(a, d, o, transpose_output=True, w_dtype=jnp.bfloat16),
            (x, dy, off)),
        "grouped_gemm_wgrad-into-w-f32": (
            ("grouped_gemm_wgrad",), lambda a, d, o, w: mj.grouped_gemm_wgrad(a, d, o, w=w),
            (x, c_n, off, rand(rng, (E, H, 384), jnp.float32, scale=4.0))),
        "grouped_gemm_wgrad-into-w-transposed-bf16": (
            ("grouped_gemm_wgrad",), lambda a, d, o, w: mj.grouped_gemm_wgrad(a, d, o, transpose_output=True, w=w),
            (x, dy, off, rand(rng, (E, H, H), scale=4.0))),
        "ragged_dot": (("grouped_gemm",), lambda a, b, g: mj.ragged_dot(a, b, g), (x, w_kn, gs)),
        "ragged_dot-grad": (("grouped_gemm", "grouped_gemm_wgrad"), ragged_dot_grad, (x, w_kn, gs)),
        "moe_mlp": (("grouped_gemm_glu", "grouped_gemm"),
                    lambda a, u, d, g, p: mj.moe_mlp(a, u, d, g, prob=p), (x, w_up, w_down, gs, prob)),
        "moe_mlp-grad": (("grouped_gemm_glu", "grouped_gemm", "grouped_gemm_dglu", "grouped_gemm_wgrad"),
                         moe_mlp_grad, (x, w_up, w_down, gs, prob)),
    }


def _dense_cases(m, b_layout):
    """name -> (fn, operands) of the dense ops; every output element is addressed."""
    rng = np.random.default_rng(m)
    a, dy = rand(rng, (m, H)), rand(rng, (m, H))
    b = rand(rng, (512, H) if b_layout == "nk" else (H, 512), scale=0.1)
    c = rand(rng, (m, 512), scale=2.0)
    prob = jnp.asarray(rng.uniform(0, 1, m), jnp.float32)
    bias = jnp.asarray(rng.uniform(-1, 1, 512), jnp.float32)
    return {
        "gemm_swiglu": (lambda a, b: mj.gemm_swiglu(a, b, b_layout=b_layout, alpha=0.5), (a, b)),
        "gemm_amax": (lambda a, b: mj.gemm_amax(a, b, b_layout=b_layout, c_dtype=jnp.float32), (a, b)),
        "gemm_srelu": (lambda a, b, p, bias: mj.gemm_srelu(a, b, b_layout=b_layout, alpha=2.0, prob=p, bias=bias,
                                                           generate_c=True),
                       (a, b, prob, bias)),
        "gemm_dsrelu": (lambda d, b, c, p: mj.gemm_dsrelu(d, b, c, b_layout=b_layout, alpha=0.5, prob=p,
                                                          compute_dprob=True, compute_dbias=True,
                                                          compute_amax=True, dc_dtype=jnp.float32),
                        (dy, b, c, prob)),
    }


DENSE_OPS = list(_dense_cases(1, "nk"))
CASE_NAMES = list(_grouped_cases(SIZES["ragged"]))


def test_the_cases_use_only_ops_with_a_gpu_kernel():
    for name, (ops, _, _) in _grouped_cases(SIZES["ragged"]).items():
        assert has_gpu_kernel(*ops, dtypes=["bfloat16"]), name
    assert has_gpu_kernel(*DENSE_OPS, dtypes=["bfloat16"])
    assert set(GPU_KERNEL_OPS) == set(ALL_OPS) == set(_every_op(np.random.default_rng(0)))


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
        if g.ndim and g.shape[0] == M:  # rows at or past offsets[-1] are exact zeros on the GPU too
            assert (np.asarray(g, np.float32)[end:] == 0).all(), f"{case} output {i}: tail rows not zero"


@pytest.mark.parametrize("m", [1, 77, 1000])
@pytest.mark.parametrize("b_layout", ["nk", "kn"])
@pytest.mark.parametrize("op", DENSE_OPS)
def test_dense_op_gpu_matches_cpu(op, m, b_layout):
    fn, args = _dense_cases(m, b_layout)[op]
    gpu, cpu = _run(_gpu(), fn, args), _run(_cpu(), fn, args)
    assert len(gpu) == len(cpu)
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.shape == c.shape and g.dtype == c.dtype
        assert next(iter(g.devices())).platform == "gpu"
        assert_close(np.asarray(g, np.float32), np.asarray(c, np.float32), f"{op} output {i}")


@pytest.mark.parametrize("case", CASE_NAMES + DENSE_OPS)
def test_twenty_gpu_calls_are_bitwise_identical(case):
    if case in DENSE_OPS:
        fn, args = _dense_cases(1000, "nk")[case]
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


@pytest.mark.parametrize("case", CASE_NAMES + DENSE_OPS)
def test_every_gpu_in_turn_gives_the_first_gpus_bits(case):
    """Every op on each sm_90 GPU of the process in turn, bitwise equal to the first GPU's outputs where the
    GPUs are of one kind (close to the CPU backend's otherwise): XLA runs each device's calls with that device
    current, and each GPU's first launch of a kernel comes after the first GPU's (a kernel's launch set-up is
    per device). Needs two sm_90 GPUs."""
    gpus = [d for d in jax.devices("gpu") if getattr(d, "compute_capability", "9.0") == "9.0"]
    if len(gpus) < 2:
        pytest.skip("fewer than two sm_90 GPUs: no op on a second device was run")
    if case in DENSE_OPS:
        fn, args = _dense_cases(1000, "nk")[case]
    else:
        _, fn, args = _grouped_cases(SIZES["ragged"])[case]
    first = _run(gpus[0], fn, args)
    cpu = _run(_cpu(), fn, args)
    for gpu in gpus[1:]:
        again = _run(gpu, fn, args)
        for i, (x, y, c) in enumerate(zip(first, again, cpu)):
            assert next(iter(y.devices())) == gpu, (case, i)
            if gpu.device_kind == gpus[0].device_kind:
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{case} output {i} on {gpu}")
            else:
                assert_close(np.asarray(y, np.float32), np.asarray(c, np.float32), f"{case} output {i} on {gpu}")


def test_rows_sharded_over_gpus_run_on_their_shards():
    """Under jit's automatic partitioning over two sm_90 GPUs, ragged_dot, moe_mlp and their gradients on
    row-sharded tokens (groups across the shard edge, an empty group, a tail) run each GPU's kernels on its own
    rows: nothing is gathered, the outputs and dx keep the row sharding, and the values match the same calls on
    one GPU (the weight gradients are summed over the GPUs). Needs two sm_90 GPUs."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    gpus = [d for d in jax.devices("gpu") if getattr(d, "compute_capability", "9.0") == "9.0"]
    if len(gpus) < 2:
        pytest.skip("fewer than two sm_90 GPUs: no call was partitioned over GPUs")
    mesh = Mesh(np.array(gpus[:2]), ("x",))
    rows = NamedSharding(mesh, P("x", None))
    rng = np.random.default_rng(13)
    x, w_up, w_down = rand(rng, (M, H)), rand(rng, (E, H, 2 * I), scale=0.1), rand(rng, (E, I, H), scale=0.1)
    prob = jnp.asarray(rng.uniform(0.1, 1, M), jnp.float32)
    cot = jnp.asarray(rng.standard_normal((M, H)), jnp.float32)
    gs = jnp.asarray([0, 380, 0, 250, 200, 0, 90, 31], jnp.int32)  # 951 of 1000 rows; shard edge at 500

    def loss(x, w_up, w_down, prob, cot):
        y = mj.moe_mlp(x, w_up, w_down, gs, prob=prob).astype(jnp.float32)
        z = mj.ragged_dot(x, w_up, gs).astype(jnp.float32)
        return jnp.sum(y * cot) + jnp.sum(z[:, :H] * cot)

    def step(*args):
        return (mj.moe_mlp(*args[:3], gs, prob=args[3]),) + jax.grad(loss, (0, 1, 2, 3))(*args)

    args = (x, w_up, w_down, prob, cot)
    want = _run(gpus[0], step, args)
    sharded = jax.device_put(args, (rows, None, None, NamedSharding(mesh, P("x")), rows))
    text = jax.jit(step).lower(*sharded).compile().as_text()
    assert "all-gather" not in text, "an operand was gathered"
    got = jax.jit(step)(*sharded)
    assert got[0].sharding.is_equivalent_to(rows, 2) and got[1].sharding.is_equivalent_to(rows, 2)
    for name, a, b in zip(("y", "dx", "dw_up", "dw_down", "dprob"), got, want):
        assert_close(np.asarray(a, np.float32), np.asarray(b, np.float32), name)


@pytest.mark.parametrize("sizes", list(SIZES.values()), ids=list(SIZES))
def test_many_calls_in_one_executable_equal_eager(sizes):
    """Many moegemm custom calls in one jitted function (over XLA's command-buffer threshold), forward and
    backward ops chained through each other's outputs, bitwise equal to the same calls made one by one
    (eager, jax.grad op by op), and to a second run."""
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
        back = mj.grouped_gemm_dglu(y, w_down, c, off, prob=prob, glu_layout="interleaved32_up_first",
                                    activation="swiglu_clamped", compute_dprob=True, compute_dbias=True,
                                    compute_amax=True, zero_tail=True)
        outs += list(back)
        outs.append(mj.grouped_gemm_wgrad(x, back.dc, off))
        outs += list(jax.grad(lambda l, r: (mj.ragged_dot(l, r, gs).astype(jnp.float32) ** 2).sum(), (0, 1))(
            y, w_up))
        outs += list(jax.grad(lambda a, u, d, p: (mj.moe_mlp(a, u, d, gs, prob=p).astype(jnp.float32) ** 2).sum(),
                              (0, 1, 2, 3))(x, w_up, w_down, prob))
        return outs

    eager = chain(*args)
    jitted = jax.jit(chain)
    # The compiled module, where the nested jits of the calls are inlined (the lowered one holds one function
    # per call configuration, however often it is called).
    text = jitted.lower(*args).compile().as_text()
    assert text.count('custom_call_target="moegemm_') >= 20, "fewer custom calls in the executable than expected"
    for target in ("grouped_gemm_dglu", "grouped_gemm_wgrad"):
        assert f"moegemm_{target}" in text, target
    for run in range(2):
        out = jitted(*args)
        assert len(out) == len(eager)
        for i, (e, j) in enumerate(zip(eager, out)):
            np.testing.assert_array_equal(np.asarray(e), np.asarray(j), err_msg=f"run {run} output {i}")


@pytest.mark.parametrize("op", ALL_OPS)
def test_every_op_runs_on_the_gpu(op):
    """Each op called eagerly on device operands (no jit): outputs on the GPU, equal to the CPU reference."""
    with running_on(_gpu()):
        gpu = jax.tree_util.tree_leaves(_every_op(np.random.default_rng(12))[op]())
    with running_on(_cpu()):
        cpu = jax.tree_util.tree_leaves(_every_op(np.random.default_rng(12))[op]())
    assert len(gpu) == len(cpu)
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        assert next(iter(g.devices())).platform == "gpu"
        assert g.shape == c.shape and g.dtype == c.dtype
        assert_close(np.asarray(g, np.float32), np.asarray(c, np.float32), f"{op} output {i}")


@pytest.mark.parametrize("op", ALL_OPS)
def test_f16_inputs_stay_on_the_cpu(op):
    """The kernels take bf16 inputs only (gpu_support.GPU_INPUT_DTYPES): f16 operands run on the CPU backend
    and, on the GPU, the handler reports the unsupported dtype (UNIMPLEMENTED) naming the op."""
    assert "float16" not in GPU_INPUT_DTYPES and not has_gpu_kernel(op, dtypes=["float16"])
    with running_on(_cpu()):
        out = jax.tree_util.tree_leaves(_every_op(np.random.default_rng(13), jnp.float16)[op]())
        assert all(np.isfinite(np.asarray(x, np.float32)).all() for x in out)
    with running_on(_gpu()):
        fn = _every_op(np.random.default_rng(13), jnp.float16)[op]
        with pytest.raises(JaxRuntimeError, match=refused_dtype_pattern(op)):
            jax.block_until_ready(fn())
