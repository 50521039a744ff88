"""moegemm.jax.ragged_dot_general: values and gradients against jax.lax.ragged_dot_general (f32 casts, on the
CPU) in both modes it runs, every operand order, on each platform of jax_helpers.PLATFORMS; its zeros, its
agreement with ragged_dot and grouped_gemm_wgrad, and its refusals.

Mode 2 (ragged contraction) has no gradient in jax.lax (NotImplementedError "Unimplemented grad_x_dims" /
"grad_y_dims"): its gradients are checked against jax.grad of a plain f32 product over masked rows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jax_helpers import GPU_MARKS, assert_close, f32, on_cpu, platform_device, rand, running_on, jax, jnp, mj

_HIGHEST = jax.lax.Precision.HIGHEST
_DN = jax.lax.RaggedDotDimensionNumbers
# (platform, dtype): the kernels take bf16, so f16 runs on the CPU backend only.
PLATFORM_DTYPES = [pytest.param("cpu", jnp.bfloat16, id="cpu-bfloat16"),
                   pytest.param("cpu", jnp.float16, id="cpu-float16"),
                   pytest.param("gpu", jnp.bfloat16, id="gpu-bfloat16", marks=GPU_MARKS)]


def _rows_numbers(lhs_k, rhs_k, rhs_g):
    """Mode 1: lhs 2-D contracting along lhs_k, ragged along the other dim; rhs 3-D."""
    return _DN(dot_dimension_numbers=(([lhs_k], [rhs_k]), ([], [])), lhs_ragged_dimensions=[1 - lhs_k],
               rhs_group_dimensions=[rhs_g])


def _contracting_numbers(lhs_k, rhs_k):
    """Mode 2: lhs and rhs 2-D, contracting (and ragged) along lhs_k and rhs_k."""
    return _DN(dot_dimension_numbers=(([lhs_k], [rhs_k]), ([], [])), lhs_ragged_dimensions=[lhs_k],
               rhs_group_dimensions=[])


def _value_and_grads(device, fn, lhs, rhs, cot):
    """fn(lhs, rhs) and the gradient of sum(fn * cot) in lhs and rhs, jitted on `device`."""
    with running_on(device):
        lhs, rhs = jax.device_put((lhs, rhs), device)
        out = jax.jit(fn)(lhs, rhs)
        grads = jax.jit(jax.grad(lambda a, b: (fn(a, b).astype(jnp.float32) * cot).sum(), (0, 1)))(lhs, rhs)
    for x in (out, *grads):
        assert next(iter(x.devices())).platform == device.platform
    return out, grads


# Every order of rhs's (group, contracting, free) dims, and lhs as (M, K) or (K, M).
_RHS_ORDERS = list(itertools.permutations(("g", "k", "n")))


@pytest.mark.parametrize("order", _RHS_ORDERS, ids=lambda o: "".join(o))
@pytest.mark.parametrize("lhs_k", [1, 0], ids=["lhs-mk", "lhs-km"])
@pytest.mark.parametrize("platform,dtype", PLATFORM_DTYPES)
def test_ragged_rows_in_every_operand_order(order, lhs_k, platform, dtype):
    """Mode 1 against jax.lax.ragged_dot_general, value and both gradients; rows past sum(group_sizes) zero in
    the result and in d lhs; an empty group's d rhs exactly zero."""
    m, k, n = 72, 32, 24
    sizes = np.array([17, 0, 30, 9], np.int32)  # sum 56 < 72
    rng = np.random.default_rng(_RHS_ORDERS.index(order) * 2 + lhs_k)
    x = rand(rng, (m, k), dtype)
    w = rand(rng, (len(sizes), k, n), dtype)
    lhs = x if lhs_k == 1 else x.T
    perm = tuple("gkn".index(d) for d in order)
    rhs = jnp.transpose(w, perm)
    numbers = _rows_numbers(lhs_k, order.index("k"), order.index("g"))
    gs = jnp.asarray(sizes)
    cot = rand(np.random.default_rng(7), (m, n), jnp.float32)
    out, (dl, dr) = _value_and_grads(
        platform_device(platform), lambda a, b: mj.ragged_dot_general(a, b, gs, numbers), lhs, rhs, cot)
    assert out.shape == (m, n) and out.dtype == dtype and dl.dtype == dr.dtype == dtype
    with on_cpu():
        ref = lambda a, b: jax.lax.ragged_dot_general(a, b, gs, numbers, precision=_HIGHEST)  # noqa: E731
        want = ref(jnp.asarray(f32(lhs)), jnp.asarray(f32(rhs)))
        want_dl, want_dr = jax.grad(lambda a, b: (ref(a, b) * cot).sum(), (0, 1))(jnp.asarray(f32(lhs)),
                                                                                   jnp.asarray(f32(rhs)))
    assert_close(out, want, "value")
    assert_close(dl, want_dl, "d lhs")
    assert_close(dr, want_dr, "d rhs")
    end = int(sizes.sum())
    assert (f32(out)[end:] == 0).all()
    assert (f32(dl if lhs_k == 1 else dl.T)[end:] == 0).all()
    assert (np.take(f32(dr), 1, axis=order.index("g")) == 0).all(), "d rhs of the empty group 1 not exactly 0"


def _contraction_oracle(x, y, sizes):
    """out[g] = x[rows_g]^T @ y[rows_g] in f32 with masks, differentiable (jax.lax has no mode-2 gradient)."""
    ends = np.cumsum(sizes)
    t = np.arange(x.shape[0])
    masks = jnp.asarray(np.stack([(t >= e - s) & (t < e) for s, e in zip(sizes, ends)]), jnp.float32)
    return jnp.einsum("gt,tm,tn->gmn", masks, x, y, precision=_HIGHEST)


@pytest.mark.parametrize("lhs_k,rhs_k", [(0, 0), (1, 0), (0, 1), (1, 1)],
                         ids=["lhs-tm-rhs-tn", "lhs-mt-rhs-tn", "lhs-tm-rhs-nt", "lhs-mt-rhs-nt"])
@pytest.mark.parametrize("preferred", [None, jnp.float32], ids=["out-input-dtype", "out-f32"])
@pytest.mark.parametrize("platform,dtype", PLATFORM_DTYPES)
def test_ragged_contraction_in_every_operand_order(lhs_k, rhs_k, preferred, platform, dtype):
    """Mode 2 (the weight gradient's form): the value against jax.lax.ragged_dot_general, the gradients against
    the masked f32 product; an empty group is exactly zero, and the entries of T past sum(group_sizes) get
    exactly zero gradients."""
    t, m, n = 90, 40, 24
    sizes = np.array([23, 0, 41, 4, 0], np.int32)  # sum 68 < 90; groups 1 and 4 empty
    rng = np.random.default_rng(lhs_k * 2 + rhs_k)
    x, y = rand(rng, (t, m), dtype), rand(rng, (t, n), dtype)
    lhs, rhs = (x if lhs_k == 0 else x.T), (y if rhs_k == 0 else y.T)
    numbers = _contracting_numbers(lhs_k, rhs_k)
    gs = jnp.asarray(sizes)
    cot = rand(np.random.default_rng(8), (len(sizes), m, n), jnp.float32)
    out, (dl, dr) = _value_and_grads(
        platform_device(platform),
        lambda a, b: mj.ragged_dot_general(a, b, gs, numbers, preferred_element_type=preferred), lhs, rhs, cot)
    assert out.shape == (len(sizes), m, n) and out.dtype == (preferred or dtype)
    assert dl.shape == lhs.shape and dr.shape == rhs.shape and dl.dtype == dr.dtype == dtype
    with on_cpu():
        want = jax.lax.ragged_dot_general(jnp.asarray(f32(lhs)), jnp.asarray(f32(rhs)), gs, numbers,
                                          precision=_HIGHEST)
        as_tm = lambda a, b: (a if lhs_k == 0 else a.T, b if rhs_k == 0 else b.T)  # noqa: E731
        oracle = lambda a, b: _contraction_oracle(*as_tm(a, b), sizes)  # noqa: E731
        assert np.allclose(oracle(jnp.asarray(f32(lhs)), jnp.asarray(f32(rhs))), want, atol=1e-3)
        want_dl, want_dr = jax.grad(lambda a, b: (oracle(a, b) * cot).sum(), (0, 1))(jnp.asarray(f32(lhs)),
                                                                                     jnp.asarray(f32(rhs)))
    assert_close(out, want, "value")
    assert_close(dl, want_dl, "d lhs")
    assert_close(dr, want_dr, "d rhs")
    for g in np.flatnonzero(sizes == 0):
        assert (f32(out[g]) == 0).all(), f"empty group {g} not exactly 0"
    end = int(sizes.sum())
    dx, dy = as_tm(f32(dl), f32(dr))
    assert (dx[end:] == 0).all() and (dy[end:] == 0).all(), "gradients past the last group not exactly 0"


@pytest.mark.parametrize("platform", ["cpu", pytest.param("gpu", marks=GPU_MARKS)])
def test_native_orders_are_ragged_dot_and_the_weight_gradient_bitwise(platform):
    """In the orders the kernels read in place, mode 1 is ragged_dot ((G, K, N)) or the "nk" grouped GEMM
    ((G, N, K)), and mode 2 is grouped_gemm_wgrad, bit for bit."""
    rng = np.random.default_rng(11)
    sizes = np.array([30, 0, 18], np.int32)
    gs = jnp.asarray(sizes)
    x, w, dy = rand(rng, (64, 32)), rand(rng, (3, 32, 16)), rand(rng, (64, 16))
    with running_on(platform_device(platform)):
        rows = mj.ragged_dot_general(x, w, gs, _rows_numbers(1, 1, 0))
        rows_nk = mj.ragged_dot_general(x, jnp.swapaxes(w, 1, 2), gs, _rows_numbers(1, 2, 0))
        nk = mj.grouped_gemm(x, jnp.swapaxes(w, 1, 2), jnp.asarray(np.cumsum(sizes), jnp.int32), zero_tail=True)
        assert np.array_equal(f32(rows), f32(mj.ragged_dot(x, w, gs)))
        assert np.array_equal(f32(rows_nk), f32(nk))
        wgrad = mj.ragged_dot_general(x, dy, gs, _contracting_numbers(0, 0), preferred_element_type=jnp.float32)
        assert np.array_equal(f32(wgrad), f32(mj.grouped_gemm_wgrad(x, dy, jnp.asarray(np.cumsum(sizes),
                                                                                        jnp.int32))))


def test_empty_extents_give_what_jax_lax_gives():
    """No groups, no entries to contract and no columns: the shapes and dtypes of jax.lax.ragged_dot_general,
    all zeros, and no kernel to run."""
    bf = jnp.bfloat16
    cases = [  # (lhs shape, rhs shape, group_sizes, numbers)
        ((16, 8), (8, 16), [], _contracting_numbers(1, 0)),          # mode 2, G = 0
        ((0, 8), (0, 16), [0, 0], _contracting_numbers(0, 0)),       # mode 2, T = 0
        ((24, 0), (24, 16), [10, 14], _contracting_numbers(0, 0)),   # mode 2, M = 0
        ((24, 8), (24, 8), [30, 0], _contracting_numbers(0, 0)),     # mode 2, sizes past T
        ((16, 8), (0, 8, 16), [], _rows_numbers(1, 1, 0)),           # mode 1, G = 0
        ((16, 0), (2, 0, 16), [6, 10], _rows_numbers(1, 1, 0)),      # mode 1, K = 0
        ((16, 8), (2, 0, 8), [6, 10], _rows_numbers(1, 2, 0)),       # mode 1, N = 0 ("nk")
    ]
    rng = np.random.default_rng(4)
    for lhs_shape, rhs_shape, sizes, numbers in cases:
        lhs, rhs, gs = rand(rng, lhs_shape, bf), rand(rng, rhs_shape, bf), jnp.asarray(sizes, jnp.int32)
        got = mj.ragged_dot_general(lhs, rhs, gs, numbers)
        # On the CPU: on a GPU (jax 0.11.2, an H100, each shape in a process of its own) XLA stops the process
        # with SIGSEGV compiling mode 2 with no groups and fails to lower mode 1 with no groups; on an H200 this
        # test died with SIGSEGV (docs/benchmarks.md, 2026-12-07).
        with on_cpu():
            want = jax.lax.ragged_dot_general(f32(lhs), f32(rhs), np.asarray(gs), numbers, precision=_HIGHEST)
        assert got.shape == want.shape and got.dtype == bf, (lhs_shape, rhs_shape, got.shape, want.shape)
        if 0 in lhs_shape or 0 in rhs_shape or not sizes:
            assert (f32(got) == 0).all()
        else:
            assert_close(got, want, f"{lhs_shape} {rhs_shape} {sizes}")


def test_out_sharding_and_jit():
    """out_sharding types and places the 3-D result of mode 2 (one device) and the call traces under jit with
    the dimension numbers static."""
    rng = np.random.default_rng(5)
    x, y, gs = rand(rng, (32, 16)), rand(rng, (32, 8)), jnp.array([12, 20])
    numbers = _contracting_numbers(0, 0)
    mesh = jax.make_mesh((1,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices()[:1])
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
    want = mj.ragged_dot_general(x, y, gs, numbers)
    out = jax.jit(mj.ragged_dot_general, static_argnames=("ragged_dot_dimension_numbers", "out_sharding"))(
        x, y, gs, ragged_dot_dimension_numbers=numbers, out_sharding=sharding)
    assert out.sharding.is_equivalent_to(sharding, 3) and np.array_equal(f32(out), f32(want))
    with pytest.raises(ValueError, match=r"^moegemm.jax.ragged_dot_general: out_sharding: expected at most 3 "
                                         r"entries"):
        mj.ragged_dot_general(x, y, gs, numbers,
                              out_sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
                                  None, None, None, "d")))


def test_refusals_name_what_was_expected_and_given():
    rng = np.random.default_rng(6)
    x, y, w = rand(rng, (32, 16)), rand(rng, (32, 8)), rand(rng, (2, 16, 8))
    gs = jnp.array([12, 20])
    call = mj.ragged_dot_general
    where = r"^moegemm\.jax\.ragged_dot_general: "
    dn = where + "ragged_dot_dimension_numbers: "
    with pytest.raises(TypeError, match=dn + "expected a jax.lax.RaggedDotDimensionNumbers, got tuple"):
        call(x, w, gs, ((([1], [1]), ([], [])), [0], [0]))
    # What jax.lax refuses is a TypeError with its reason, before anything moegemm does not run is named.
    refused = [  # (lhs, rhs, group_sizes, numbers, jax.lax's reason)
        (x, w, gs, _DN((([1], [1]), ([], [])), [2], [0]), "lhs ragged dimension numbers to be nonnegative"),
        (x, w, gs, _DN((([1], [1]), ([], [])), [0, 1], [0]), "exactly one lhs ragged dimension"),
        (x, w, gs, _DN((([1], [1]), ([], [])), [0], []), "exactly one rhs group dimension"),
        (x, y, gs, _DN((([0], [0]), ([], [])), [0], [1]), "zero group dimensions in the rhs"),
        (x, w, gs, _DN((([1], [0]), ([], [])), [0], [0]), "distinct from contracting and batch"),
        (x, w, gs, _DN((([1], []), ([], [])), [0], [0]), "contracting"),
        (x, w, gs, _DN((([1, 1], [1, 1]), ([], [])), [0], [0]), "contracting"),
        (x, w, gs, _DN((([], []), ([], [])), [0], []), "exactly one rhs group dimension"),
        (x, y, gs, _DN((([0], [0]), ([1], [])), [0], []), "batch"),
        (x, w, gs, _DN((([1], [1]), ([0], [0])), [1], [0]), "zero group dimensions in the rhs"),
        (x, rand(rng, (2, 24, 8)), gs, _rows_numbers(1, 1, 0), "contracting dimensions to have the same shape"),
        (x, rand(rng, (16, 8, 3)), gs, _rows_numbers(1, 0, 2), "rhs group dimension size to be 2, got 3"),
        (x, y, jnp.array(3), _contracting_numbers(0, 0), "rank of group_sizes"),
        (x, y, jnp.array([[12, 20]]), _contracting_numbers(0, 0), "group_sizes to have shape"),
    ]
    for lhs, rhs, sizes, numbers, reason in refused:
        with pytest.raises(TypeError) as lax_error:
            jax.lax.ragged_dot_general(lhs, rhs, sizes, numbers)
        assert reason in str(lax_error.value), (reason, str(lax_error.value))
        with pytest.raises(TypeError, match=where + r"jax.lax.ragged_dot_general refuses these shapes and "
                                             r"dimension numbers, lhs \(") as ours:
            call(lhs, rhs, sizes, numbers)
        assert str(lax_error.value) in str(ours.value), (str(lax_error.value), str(ours.value))
    # jax.lax takes these; moegemm does not run them.
    batched = rand(rng, (2, 16, 8))
    taken = [  # (lhs, rhs, group_sizes, numbers, moegemm's reason)
        (batched, rand(rng, (2, 8, 16)), jnp.array([1, 1]), _DN((([2], [1]), ([0], [0])), [0], []),
         r"batch dimensions are not supported \(mode 3: the ragged dimension is a batch dimension\), got lhs \(0,\)"),
        (batched, rand(rng, (2, 2, 8, 8)), jnp.array([8, 8]), _DN((([2], [2]), ([0], [1])), [1], [0]),
         r"batch dimensions are not supported, got lhs \(0,\), rhs \(1,\)"),
        (rand(rng, (4, 8, 16)), w, gs, _DN((([2], [1]), ([], [])), [1], [0]), r"expected a 2-D lhs, got shape"),
        (x, rand(rng, (2, 16)), gs, _DN((([1], [1]), ([], [])), [0], [0]), r"expected a 3-D rhs"),
        (x, rand(rng, (2, 16, 8, 8)), gs, _DN((([1], [1]), ([], [])), [0], [0]), r"expected a 3-D rhs"),
        (x, x, gs, _DN((([0, 1], [0, 1]), ([], [])), [0], []), r"expected one contracting dimension, got lhs "
                                                               r"\(0, 1\)"),
    ]
    for lhs, rhs, sizes, numbers, reason in taken:
        jax.eval_shape(lambda a, b, s: jax.lax.ragged_dot_general(a, b, s, numbers), lhs, rhs, sizes)  # jax runs it
        with pytest.raises(NotImplementedError, match=dn + reason):
            call(lhs, rhs, sizes, numbers)
    with pytest.raises(NotImplementedError, match=where + "group_offset is not supported"):
        call(x, w, gs, _rows_numbers(1, 1, 0), group_offset=jnp.array([0]))
    # Dtypes, alignment and moegemm's limits.
    with pytest.raises(ValueError, match=where + r"lhs: expected M a multiple of 8 .*got M = 12"):
        call(rand(rng, (32, 12)), y, gs, _contracting_numbers(0, 0))
    with pytest.raises(ValueError, match=where + r"rhs: expected N a multiple of 8 .*got N = 12"):
        call(x, rand(rng, (2, 16, 12)), gs, _rows_numbers(1, 1, 0))
    with pytest.raises(ValueError, match=where + r"group_sizes: expected at most 1024 groups, got 1025"):
        call(x, y, jnp.zeros(1025, jnp.int32), _contracting_numbers(0, 0))
    with pytest.raises(TypeError, match=where + r"rhs: expected dtype bfloat16, got float16"):
        call(x, y.astype(jnp.float16), gs, _contracting_numbers(0, 0))
    with pytest.raises(TypeError, match=where + r"lhs: expected dtype bfloat16, float16, got float32"):
        call(x.astype(jnp.float32), y.astype(jnp.float32), gs, _contracting_numbers(0, 0))
    with pytest.raises(TypeError, match=where + r"group_sizes: expected an integer dtype, got float32"):
        call(x, y, gs.astype(jnp.float32), _contracting_numbers(0, 0))
    with pytest.raises(NotImplementedError, match=r"moegemm.jax.ragged_dot_general: second derivatives"):
        jax.grad(lambda a: jax.grad(lambda b: call(b, y, gs, _contracting_numbers(0, 0)).astype(
            jnp.float32).sum())(a).astype(jnp.float32).sum())(x)
