"""moegemm.jax.ragged_dot and moe_mlp: value and gradient against jax.lax.ragged_dot / jax.grad of a plain
f32 implementation, the shapes of JAX's own ragged_dot tests, and cases C01 to C07, C09 and C12 (the grouped_gemm
and grouped_gemm_wgrad cases through the ops, ragged_dot and ragged_dot_general, against float64 NumPy oracles).

Value and gradient tests run, forward and backward (custom_vjp) alike, on each platform of
jax_helpers.PLATFORMS (bf16; f16 on the CPU backend only, the kernels take bf16) or on device_for(their ops
and dtype): the GPU when one is present, since every op of RAGGED_DOT_BACKWARD and MOE_MLP_BACKWARD has an
sm_90a kernel. The f32 oracles always run on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import MOE_MLP_BACKWARD, MOE_MLP_FORWARD, RAGGED_DOT_BACKWARD
from jax_helpers import (GPU_MARKS, PLATFORMS, SENTINEL, assert_close, device_for, f32, glu_pair,
                         grouped_matmul_ref, offsets_of, on_cpu, on_device_for, platform_device, rand,
                         run_into_sentinels, running_on, jax, jnp, mj)

_HIGHEST = jax.lax.Precision.HIGHEST


def _random_sizes(rng, m, g):
    """A random split of m rows into g groups (empty groups likely), as JAX's ragged_dot tests draw."""
    cuts = np.sort(rng.integers(0, m + 1, g - 1))
    return np.diff(np.concatenate([[0], cuts, [m]])).astype(np.int32)


def _oracle(lhs, rhs, sizes):
    with on_cpu():
        return np.asarray(jax.lax.ragged_dot(jnp.asarray(f32(lhs)), jnp.asarray(f32(rhs)), jnp.asarray(sizes),
                                             precision=_HIGHEST))


def _check_value_and_grad(lhs, rhs, sizes, preferred=None, device=None):
    """Value and both gradients of ragged_dot (forward and custom_vjp backward jitted on `device`, default
    device_for(the backward's ops, lhs's dtype)) against jax.lax.ragged_dot of f32 casts on the CPU."""
    device = device or device_for(*RAGGED_DOT_BACKWARD, dtypes=[lhs.dtype])
    with running_on(device):
        gs = jnp.asarray(sizes, jnp.int32)
        out = jax.jit(lambda l, r: mj.ragged_dot(l, r, gs, preferred_element_type=preferred))(
            *jax.device_put((lhs, rhs), device))
    assert out.dtype == (preferred or lhs.dtype)
    assert_close(out, _oracle(lhs, rhs, sizes), "value")
    with running_on(device):
        gs = jnp.asarray(sizes, jnp.int32)
        cot = rand(np.random.default_rng(99), out.shape, jnp.float32)
        loss = lambda l, r: (mj.ragged_dot(l, r, gs).astype(jnp.float32) * cot).sum()  # noqa: E731
        ref_loss = lambda l, r: (jax.lax.ragged_dot(l, r, gs, precision=_HIGHEST) * cot).sum()  # noqa: E731
        dl, dr = jax.jit(jax.grad(loss, (0, 1)))(*jax.device_put((lhs, rhs), device))
    for x in (out, dl, dr):
        assert next(iter(x.devices())).platform == device.platform
    with on_cpu():
        rl, rr = jax.grad(ref_loss, (0, 1))(jnp.asarray(f32(lhs)), jnp.asarray(f32(rhs)))
    assert_close(dl, rl, "d lhs")
    assert_close(dr, rr, "d rhs")
    for g, s in enumerate(sizes):
        if s == 0:
            assert (f32(dr[g]) == 0).all(), f"d rhs of empty group {g} not exactly 0"
    return out, dl, dr


def test_ragged_dot_f16_gradients_are_f16_rounded_once():
    """f16 operands (the CPU backend) get f16 gradients, each the f32 result rounded once to f16 (docs/ops.md
    section 0): within half an f16 unit (2^-11 relative) of the float64 product, plus the f32 accumulation's
    error, where a detour through bf16 would be up to 2^-9 away."""
    rng = np.random.default_rng(5)
    lhs, rhs = rand(rng, (96, 32), jnp.float16), rand(rng, (4, 32, 24), jnp.float16, scale=0.3)
    sizes = np.array([20, 0, 50, 11], np.int32)
    gs = jnp.asarray(sizes)

    def loss(l, r):  # the cotangent of out is out itself: f16 values, exact as the backward's f16 operand
        return (mj.ragged_dot(l, r, gs).astype(jnp.float32) ** 2).sum() / 2

    with on_cpu():
        out = mj.ragged_dot(lhs, rhs, gs)
        dl, dr = jax.grad(loss, (0, 1))(lhs, rhs)
    assert dl.dtype == lhs.dtype and dr.dtype == rhs.dtype, (dl.dtype, dr.dtype)
    l64, o64, r64 = (np.asarray(f32(t), np.float64) for t in (lhs, out, rhs))
    got_dl, got_dr = np.asarray(f32(dl), np.float64), np.asarray(f32(dr), np.float64)

    def within_one_rounding(got, ref, terms, what):
        err = np.abs(got - ref)
        assert (err <= 2.0**-11 * np.abs(ref) + 2.0**-20 * terms + 2.0**-24).all(), (what, float(err.max()))

    ends = np.cumsum(sizes)
    for g, (begin, end) in enumerate(zip(ends - sizes, ends)):
        rows = slice(begin, end)
        # d rhs[g] = lhs[rows]^T @ dout[rows], d lhs[rows] = dout[rows] @ rhs[g]^T
        within_one_rounding(got_dr[g], l64[rows].T @ o64[rows], np.abs(l64[rows]).T @ np.abs(o64[rows]), g)
        within_one_rounding(got_dl[rows], o64[rows] @ r64[g].T, np.abs(o64[rows]) @ np.abs(r64[g]).T, g)
    assert (got_dl[ends[-1]:] == 0).all()


# Shapes of jax's tests/lax_test.py ragged_dot tests: (m, k, n, num_groups). The first two have K or N
# that bf16 cannot serve (rows not 16-byte aligned): they must raise a clear error; the rest run.
UNALIGNED_JAX_CASES = [(64, 4, 3, 1), (64, 9, 8, 2)]
JAX_CASES = [(64, 8, 8, 1), (64, 16, 8, 2), (128, 64, 32, 4), (40, 24, 16, 7), (256, 128, 64, 16)]


# (platform, dtype): the kernels take bf16, so f16 runs on the CPU backend only.
PLATFORM_DTYPES = [pytest.param("cpu", jnp.bfloat16, id="cpu-bfloat16"),
                   pytest.param("cpu", jnp.float16, id="cpu-float16"),
                   pytest.param("gpu", jnp.bfloat16, id="gpu-bfloat16", marks=GPU_MARKS)]


@pytest.mark.parametrize("m,k,n,g", JAX_CASES)
@pytest.mark.parametrize("platform,dtype", PLATFORM_DTYPES)
def test_ragged_dot_jax_cases(m, k, n, g, platform, dtype):
    rng = np.random.default_rng(m * 7 + g)
    _check_value_and_grad(rand(rng, (m, k), dtype), rand(rng, (g, k, n), dtype), _random_sizes(rng, m, g),
                          device=platform_device(platform))


@pytest.mark.parametrize("m,k,n,g", UNALIGNED_JAX_CASES)
def test_ragged_dot_unaligned_jax_cases_raise(m, k, n, g):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="a multiple of 8 .*got"):
        mj.ragged_dot(rand(rng, (m, k)), rand(rng, (g, k, n)), jnp.asarray(_random_sizes(rng, m, g)))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_ragged_dot_preferred_f32_and_sizes_short_of_m(platform):
    rng = np.random.default_rng(1)
    sizes = np.array([10, 0, 20, 3], np.int32)  # sum 33 < M = 64: rows 33.. are zero
    out, dl, _ = _check_value_and_grad(rand(rng, (64, 32)), rand(rng, (4, 32, 16)), sizes, jnp.float32,
                                       platform_device(platform))
    assert (f32(out)[33:] == 0).all() and (f32(dl)[33:] == 0).all()


def test_ragged_dot_rejects_other_dtypes_and_group_offset():
    rng = np.random.default_rng(2)
    lhs, rhs, gs = rand(rng, (16, 8), jnp.float32), rand(rng, (2, 8, 8), jnp.float32), jnp.array([8, 8])
    with pytest.raises(TypeError, match=r"ragged_dot: lhs: expected dtype bfloat16, float16, got float32"):
        mj.ragged_dot(lhs, rhs, gs)
    with pytest.raises(NotImplementedError, match="group_offset"):
        mj.ragged_dot(lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16), gs, group_offset=jnp.array([0]))


def test_ragged_dot_out_sharding_of_one_device_and_its_errors():
    """out_sharding on one device: a replicated NamedSharding types and places the result as given (values
    unchanged); a PartitionSpec outside a mesh context and a value of another type are refused, naming it.
    (Sharded results: test_jax_sharding.py, four CPU devices.)"""
    rng = np.random.default_rng(3)
    lhs, rhs, gs = rand(rng, (16, 8), jnp.bfloat16), rand(rng, (2, 8, 8), jnp.bfloat16), jnp.array([5, 9])
    mesh = jax.make_mesh((1,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices()[:1])
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "d"))
    want = mj.ragged_dot(lhs, rhs, gs)
    for call in (mj.ragged_dot, jax.jit(mj.ragged_dot, static_argnames="out_sharding")):
        out = call(lhs, rhs, gs, out_sharding=sharding)
        assert out.sharding == sharding and jax.typeof(out).sharding.spec == sharding.spec
        assert np.array_equal(f32(out), f32(want))
    with pytest.raises(ValueError, match=r"^moegemm.jax.ragged_dot: out_sharding: a PartitionSpec needs a mesh "
                                         r"context \(jax.set_mesh\); pass a NamedSharding instead, got P\(None, 'd'\)"):
        mj.ragged_dot(lhs, rhs, gs, out_sharding=jax.sharding.PartitionSpec(None, "d"))
    with pytest.raises(TypeError, match=r"^moegemm.jax.ragged_dot: out_sharding: expected a "
                                        r"jax.sharding.NamedSharding, a PartitionSpec or None, got str"):
        mj.ragged_dot(lhs, rhs, gs, out_sharding="d")


@pytest.mark.parametrize("precision", ["highest", ("high", "default"), "bfloat16"])
def test_ragged_dot_takes_the_precisions_jax_takes(precision):
    rng = np.random.default_rng(3)
    lhs, rhs, gs = rand(rng, (16, 8)), rand(rng, (2, 8, 8)), jnp.array([8, 8], jnp.int32)
    want = mj.ragged_dot(lhs, rhs, gs)
    jax.lax.ragged_dot(lhs, rhs, gs, precision=precision)  # jax takes it too
    for _ in range(2):  # the second time from the checked values
        assert (f32(mj.ragged_dot(lhs, rhs, gs, precision=precision)) == f32(want)).all()
    assert (f32(mj.ragged_dot(lhs, rhs, gs, precision=jax.lax.Precision.HIGHEST)) == f32(want)).all()


@pytest.mark.parametrize("precision", ["nonsense", 3, ("high",)])
def test_ragged_dot_refuses_the_precisions_jax_refuses(precision):
    rng = np.random.default_rng(3)
    lhs, rhs, gs = rand(rng, (16, 8)), rand(rng, (2, 8, 8)), jnp.array([8, 8], jnp.int32)
    with pytest.raises(ValueError):
        jax.lax.ragged_dot(lhs, rhs, gs, precision=precision)
    with pytest.raises(ValueError, match=r"^moegemm\.jax\.ragged_dot: precision: Precision argument must be one of"):
        mj.ragged_dot(lhs, rhs, gs, precision=precision)


def test_64_bit_group_sizes_clamp_instead_of_wrapping():
    """int64 group sizes (jax_enable_x64) are summed in 64 bits and clamped at M, as jax.lax.ragged_dot
    treats them, rather than cut to int32 first (2**32 + 10 read as 10, 2**31 as a negative size)."""
    rng = np.random.default_rng(12)
    lhs, rhs = rand(rng, (32, 16)), rand(rng, (2, 16, 8))
    with on_cpu(), jax.enable_x64(True):
        for sizes in ([2**32 + 10, 22], [2**31, 5], [5, 2**40], [-3, 2**33]):
            gs = jnp.asarray(sizes, jnp.int64)
            ours = mj.ragged_dot(lhs, rhs, gs, preferred_element_type=jnp.float32)
            ref = jax.lax.ragged_dot(f32(lhs), f32(rhs), gs, precision=_HIGHEST)
            assert_close(ours, ref, f"group sizes {sizes}")


def test_group_sizes_whose_sum_leaves_the_type_saturate_at_m():
    """Sums past 2**31 (int32), 2**63 (int64) or 2**64 (uint64) clamp at M as the exact sum would;
    jax.lax.ragged_dot's own running sum wraps there, so the reference is the exact (Python int) sum, clamped."""
    rng = np.random.default_rng(16)
    lhs, rhs = rand(rng, (32, 16)), rand(rng, (3, 16, 8))
    with on_cpu(), jax.enable_x64(True):
        for sizes, dtype in (([2**62, 2**62, 5], np.int64), ([3, 2**63 - 1, 5], np.int64),
                             ([2**64 - 1, 1, 3], np.uint64), ([7, 2**64 - 2, 5], np.uint64),
                             ([1, 2**31 - 1, 1], np.int32), ([2**31 - 1, 2**31 - 1, 2], np.int32)):
            ours = np.asarray(mj.ragged_dot(lhs, rhs, jnp.asarray(np.array(sizes, dtype)),
                                            preferred_element_type=jnp.float32))
            ends = np.minimum(np.cumsum(np.array(sizes, dtype=object)), 32).astype(np.int64)
            ref = np.zeros((32, 8))
            for g, (s, e) in enumerate(zip(np.concatenate(([0], ends[:-1])), ends)):
                ref[s:e] = f32(lhs)[s:e] @ f32(rhs)[g]
            assert np.abs(ref).sum() > 0
            assert_close(ours, ref, f"group sizes {sizes} ({np.dtype(dtype).name})")


@pytest.mark.parametrize("x64", [False, True])
def test_offsets_from_group_sizes_of_every_integer_dtype(x64):
    """offsets = min(cumsum(sizes), M) exactly, for random non-negative sizes of every integer dtype, near each
    type's limits too; a negative size counts as 0 (group sizes are counts)."""
    from moegemm._jax_checks import offsets_from_sizes
    rng = np.random.default_rng(22)
    m = 1000
    with on_cpu(), jax.enable_x64(x64):
        for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
            top = int(np.iinfo(dtype).max)
            for _ in range(20):
                if not x64 and np.dtype(dtype).itemsize == 8:
                    break  # without x64, jnp.asarray narrows 64-bit sizes to 32 bits first
                choices = [v for v in (0, 1, 7, 300, 999, top // 2, top - 1, top) if v <= top]
                sizes = [choices[i] for i in rng.integers(0, len(choices), size=6)]
                got = np.asarray(offsets_from_sizes(jnp.asarray(np.array(sizes, dtype)), m))
                want = np.minimum(np.cumsum(np.array(sizes, dtype=object)), m).astype(np.int64)
                assert got.tolist() == want.tolist(), (np.dtype(dtype).name, sizes)
            if np.issubdtype(dtype, np.signedinteger) and (x64 or np.dtype(dtype).itemsize < 8):
                sizes = np.array([5, -3, 4, -100, 2], dtype)
                got = np.asarray(offsets_from_sizes(jnp.asarray(sizes), m))
                assert got.tolist() == [5, 5, 9, 9, 11]


def test_unsigned_group_sizes_past_2_31_clamp_instead_of_wrapping():
    """uint32 group sizes of 2**31 and more clamp at M, as in jax.lax.ragged_dot, rather than wrapping an int32
    running sum negative (every row would then fall in the tail); uint8 and uint16 sizes agree too. The sums
    stay inside each type's range: past it jax.lax.ragged_dot's own running sum wraps, where ours saturates."""
    rng = np.random.default_rng(14)
    lhs, rhs = rand(rng, (32, 16)), rand(rng, (4, 16, 8))
    with on_cpu():
        for sizes, dtype in (([3_000_000_000, 0, 0, 0], np.uint32), ([2**31, 7, 2**32 - 1, 1], np.uint32),
                             ([5, 2**31 - 1, 9, 0], np.uint32), ([10, 0, 200, 3], np.uint8),
                             ([7, 60000, 1, 0], np.uint16)):
            gs = jnp.asarray(np.array(sizes, dtype))
            ours = mj.ragged_dot(lhs, rhs, gs, preferred_element_type=jnp.float32)
            ref = jax.lax.ragged_dot(f32(lhs), f32(rhs), gs, precision=_HIGHEST)
            assert np.abs(np.asarray(ref)).sum() > 0
            assert_close(ours, ref, f"group sizes {sizes} ({np.dtype(dtype).name})")


def test_zero_groups_give_zeros_like_jax():
    """G = 0, which jax.lax.ragged_dot accepts: every row is past the groups, so the output is zero, and so
    are the gradients (rhs's has no element)."""
    rng = np.random.default_rng(15)
    lhs, rhs = rand(rng, (24, 16)), rand(rng, (0, 16, 8))
    gs = jnp.zeros((0,), jnp.int32)
    with on_cpu():
        ours = mj.ragged_dot(lhs, rhs, gs)
        ref = jax.lax.ragged_dot(lhs, rhs, gs)
        assert ours.shape == ref.shape == (24, 8) and ours.dtype == ref.dtype
        assert (np.asarray(ours, np.float32) == 0).all()
        dl, dr = jax.grad(lambda l, r: mj.ragged_dot(l, r, gs).astype(jnp.float32).sum(), (0, 1))(lhs, rhs)
        assert dl.shape == lhs.shape and (np.asarray(dl, np.float32) == 0).all() and dr.shape == (0, 16, 8)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_eager_calls_move_nothing_from_the_host(platform):
    """Eager ragged_dot (also with no groups, which runs no kernel) and moe_mlp transfer no host value to the
    device, as jax.lax.ragged_dot transfers none (jax.transfer_guard("disallow") refuses any such transfer), and
    give their jitted values."""
    rng = np.random.default_rng(16)
    device = platform_device(platform)
    x, w, w_up, w_down = (jax.device_put(rand(rng, shape, scale=0.3), device)
                          for shape in ((24, 16), (4, 16, 32), (4, 16, 32), (4, 16, 16)))
    gs, prob = jax.device_put(jnp.asarray([5, 0, 11, 6], jnp.int32), device), jax.device_put(
        jnp.asarray(rng.random(24), jnp.float32), device)
    no_groups = jax.device_put(jnp.zeros((0,), jnp.int32), device), jax.device_put(rand(rng, (0, 16, 8)), device)
    calls = [lambda: mj.ragged_dot(x, w, gs), lambda: mj.moe_mlp(x, w_up, w_down, gs, prob=prob),
             lambda: mj.ragged_dot(x, no_groups[1], no_groups[0])]
    jitted = [jax.jit(call)() for call in calls]
    with jax.transfer_guard("disallow"):
        eager = [call() for call in calls]
    for e, j in zip(eager, jitted):
        assert np.array_equal(np.asarray(e, np.float32), np.asarray(j, np.float32))


def test_operands_that_are_not_arrays_raise_type_error():
    rng = np.random.default_rng(13)
    lhs, rhs = rand(rng, (32, 16)), rand(rng, (2, 16, 8))
    with pytest.raises(TypeError, match=r"ragged_dot: group_sizes: expected an array \(jax.Array or "
                                        r"numpy.ndarray\), got list"):
        mj.ragged_dot(lhs, rhs, [10, 22])
    with pytest.raises(TypeError, match=r"grouped_gemm: offsets: expected an array .*got list"):
        mj.grouped_gemm(lhs, rhs, [10, 32], b_layout="kn")
    # Operands whose rank is checked first: a list or a string is still a TypeError, not a rank error.
    offs = jnp.asarray([10, 32], jnp.int32)
    with pytest.raises(TypeError, match=r"grouped_gemm: b: expected an array .*got list"):
        mj.grouped_gemm(lhs, [[1.0]], offs, b_layout="kn")
    with pytest.raises(TypeError, match=r"grouped_gemm: b: expected an array .*got str"):
        mj.grouped_gemm(lhs, "x", offs, b_layout="kn")
    with pytest.raises(TypeError, match=r"ragged_dot: rhs: expected an array .*got list"):
        mj.ragged_dot(lhs, [[1.0]], jnp.asarray([10, 22], jnp.int32))
    with pytest.raises(TypeError, match=r"moe_mlp: w_up: expected an array .*got list"):
        mj.moe_mlp(lhs, [[1.0]], rand(rng, (2, 8, 16)), offsets=offs)


def test_tensors_of_another_framework_raise_type_error_naming_the_operand():
    # A torch tensor has a shape and a dtype, but numpy cannot read its dtype: refused as not an array, by name.
    class Tensor:
        shape = (32, 16)
        dtype = "torch.bfloat16"

    rng = np.random.default_rng(14)
    lhs, rhs = rand(rng, (32, 16)), rand(rng, (2, 16, 8))
    offs = jnp.asarray([10, 32], jnp.int32)
    with pytest.raises(TypeError, match=r"grouped_gemm: a: expected an array \(jax.Array or numpy.ndarray\), "
                                        r"got Tensor"):
        mj.grouped_gemm(Tensor(), rhs, offs, b_layout="kn")
    with pytest.raises(TypeError, match=r"ragged_dot: lhs: expected an array .*got Tensor"):
        mj.ragged_dot(Tensor(), rhs, offs)
    try:
        import torch
    except ImportError:
        return
    with pytest.raises(TypeError, match=r"moe_mlp: x: expected an array .*got Tensor"):
        mj.moe_mlp(torch.zeros(32, 16, dtype=torch.bfloat16), rand(rng, (2, 16, 16)), rand(rng, (2, 8, 16)),
                   offsets=offs)
    with pytest.raises(TypeError, match=r"grouped_gemm: b: expected an array .*got Tensor"):
        mj.grouped_gemm(lhs, torch.zeros(2, 16, 8, dtype=torch.bfloat16), offs, b_layout="kn")


def test_symbolic_shapes_raise_not_implemented_naming_the_operand():
    from jax import export
    spec, sym = jax.ShapeDtypeStruct, export.symbolic_shape
    bf16, i32 = jnp.bfloat16, jnp.int32
    with pytest.raises(NotImplementedError, match=r"grouped_gemm: a: symbolic shapes \(jax.export shape "
                                                  r"polymorphism\) are not supported: expected concrete extents, "
                                                  r"got shape \(m, 16\)"):
        export.export(jax.jit(mj.grouped_gemm))(spec(sym("m, 16"), bf16), spec((2, 16, 16), bf16), spec((2,), i32))
    # N symbolic: refused as such, not as an N that is not a multiple of 8.
    with pytest.raises(NotImplementedError, match=r"grouped_gemm: b: symbolic shapes .*got shape \(2, n, 16\)"):
        export.export(jax.jit(mj.grouped_gemm))(spec((8, 16), bf16), spec(sym("2, n, 16"), bf16), spec((2,), i32))
    with pytest.raises(NotImplementedError, match=r"ragged_dot: lhs: symbolic shapes .*got shape \(m, 16\)"):
        export.export(jax.jit(mj.ragged_dot))(spec(sym("m, 16"), bf16), spec((2, 16, 8), bf16), spec((2,), i32))
    mlp = jax.jit(lambda x, w_up, w_down, sizes: mj.moe_mlp(x, w_up, w_down, group_sizes=sizes))
    with pytest.raises(NotImplementedError, match=r"moe_mlp: x: symbolic shapes .*got shape \(m, 16\)"):
        export.export(mlp)(spec(sym("m, 16"), bf16), spec((2, 16, 32), bf16), spec((2, 16, 16), bf16),
                           spec((2,), i32))
    # A 1-D shape as Python prints it.
    with pytest.raises(NotImplementedError, match=r"grouped_gemm: offsets: symbolic shapes .*got shape \(e,\)"):
        export.export(jax.jit(mj.grouped_gemm))(spec((8, 16), bf16), spec((2, 16, 16), bf16), spec(sym("e"), i32))


def test_c06_empty_groups_and_n43_error():
    rng = np.random.default_rng(3)
    _check_value_and_grad(rand(rng, (16, 64)), rand(rng, (4, 64, 32)), np.array([8, 0, 8, 0], np.int32))
    sizes = np.array([2] * 6 + [0] * 12 + [0], np.int32)[:18]
    sizes[0] += 32 - sizes.sum()
    with pytest.raises(ValueError, match=r"ragged_dot: rhs: expected N a multiple of 8 .*got N = 43"):
        jax.jit(mj.ragged_dot)(rand(rng, (32, 64)), rand(rng, (18, 64, 43)), jnp.asarray(sizes))


@pytest.mark.parametrize("sizes", [[5, 9, 0], [0, 0, 0]])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_c12_last_or_every_expert_empty(sizes, platform):
    rng = np.random.default_rng(4)
    sizes = np.array(sizes, np.int32)
    out, dl, dr = _check_value_and_grad(rand(rng, (16, 32)), rand(rng, (3, 32, 16)), sizes,
                                        device=platform_device(platform))
    assert out.shape == (16, 16) and dr.shape == (3, 32, 16)
    assert (f32(dr[2]) == 0).all()
    # gradients stay connected: a nonzero expert gets a nonzero gradient
    if sizes.sum():
        assert np.abs(f32(dr[0])).sum() > 0
    with running_on(platform_device(platform)):
        w = mj.grouped_gemm_wgrad(rand(rng, (16, 32)), rand(rng, (16, 16)), offsets_of(sizes))
    assert (f32(w[2]) == 0).all()


@on_device_for("grouped_gemm")
def test_c04_tail_rows_of_grouped_gemm():
    rng = np.random.default_rng(5)
    sizes = [93] * 8  # offsets[-1] = 744 of M = 1000
    a, b = rand(rng, (1000, 64)), rand(rng, (8, 32, 64))
    ref = grouped_matmul_ref(a, b, sizes)
    for zero_tail in (False, True):
        spec = [jax.ShapeDtypeStruct((1000, 32), jnp.bfloat16)]
        d, landed = run_into_sentinels(
            lambda a, b: mj.grouped_gemm(a, b, offsets_of(sizes), zero_tail=zero_tail), spec, a, b)
        assert landed, "XLA did not place the output in the donated sentinel buffer"
        assert_close(d[:744], ref[:744], "valid rows")
        tail = f32(d)[744:]
        assert (tail == 0).all() if zero_tail else (tail == SENTINEL).all()


def _f64(x):
    """x in float64: a float64 NumPy array as it is (an oracle's intermediate), anything else through f32."""
    return x if isinstance(x, np.ndarray) and x.dtype == np.float64 else np.asarray(f32(x), np.float64)


def _ranges(sizes):
    """(begin, end) rows of each group."""
    ends = np.cumsum(sizes)
    return list(zip((ends - sizes).tolist(), ends.tolist()))


def _wgrad_ref64(x, dy, sizes):
    """float64 oracle of the weight gradient: W[g] = x[rows_g]^T @ dy[rows_g] (exact zeros for empty groups)."""
    x, dy = _f64(x), _f64(dy)
    return np.stack([x[begin:end].T @ dy[begin:end] for begin, end in _ranges(sizes)])


def _expect_weight_gradient(w, ref, sizes, what):
    """Empty groups' W exactly 0, the others against `ref` (_wgrad_ref64) at the spec's tolerances, expert by
    expert (experts of few rows have smaller values: one scale for all would hide their errors)."""
    w = f32(w)  # on the host once: slicing a jax.Array compiles a slice per expert
    assert w.shape == ref.shape, (what, w.shape, ref.shape)
    for g, s in enumerate(sizes):
        if s == 0:
            assert (w[g] == 0).all(), f"{what}: W of empty expert {g} not exactly 0"
        else:
            assert_close(w[g], ref[g], f"{what}: expert {g}")


@on_device_for(*RAGGED_DOT_BACKWARD, *MOE_MLP_FORWARD, *MOE_MLP_BACKWARD)
def test_c05_two_iterations_of_forward_and_backward_with_dirty_allocator():
    """C05: M = 1000 rows, 8 experts of 93 rows (744 in groups), two jitted forward and backward steps with the
    allocator dirtied (freed SENTINEL buffers of the outputs' sizes) before each, through ragged_dot and through
    moe_mlp: both iterations bitwise equal, every result finite, tail rows of the output and of d x zero (and of
    d prob: the documented zero tails), and the valid rows of the output and of every gradient against an
    oracle (float64 NumPy for ragged_dot, jax.grad of the plain f32 MLP for moe_mlp) at the spec's tolerances,
    so that a step that reads stale or poisoned memory is caught even where it does so in both iterations."""
    from jax_helpers import dirty_allocator
    rng = np.random.default_rng(6)
    sizes, end = np.array([93] * 8, np.int32), 744
    gs = jnp.asarray(sizes)

    def twice(step, args, dirty_specs):
        """step(*args) twice, dirtying the allocator first; the results of both, on the host, bitwise equal."""
        results = []
        for _ in range(2):
            dirty_allocator(dirty_specs)
            results.append([np.asarray(r) for r in jax.tree_util.tree_leaves(step(*args))])
        for a, b in zip(*results):
            np.testing.assert_array_equal(a, b)
        for r in results[0]:
            assert np.isfinite(r.astype(np.float32)).all()
        return results[0]

    # ragged_dot, loss = sum(out^2): d out = 2 out.
    lhs, rhs = rand(rng, (1000, 64)), rand(rng, (8, 64, 32))

    def loss(l, r):
        out = mj.ragged_dot(l, r, gs)
        return (out.astype(jnp.float32) ** 2).sum(), out

    step = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))
    value, out, dl, dr = twice(step, (lhs, rhs), [jax.ShapeDtypeStruct((1000, 64), jnp.bfloat16),
                                                   jax.ShapeDtypeStruct((1000, 32), jnp.bfloat16)])
    assert (f32(out)[end:] == 0).all() and (f32(dl)[end:] == 0).all()
    out64 = grouped_matmul_ref(lhs, rhs, sizes, "kn", np.float64)
    dout64 = 2 * out64
    np.testing.assert_allclose(float(value), (out64**2).sum(), rtol=1e-2)
    assert_close(out[:end], out64[:end], "ragged_dot: out")
    assert_close(dl[:end], grouped_matmul_ref(dout64, rhs, sizes, "nk", np.float64)[:end], "ragged_dot: d lhs")
    assert_close(dr, _wgrad_ref64(lhs, dout64, sizes), "ragged_dot: d rhs")

    # moe_mlp (swiglu, prob), loss = sum(y^2), against jax.grad of the plain f32 MLP on f32 casts.
    h, i = 64, 32
    x = rand(rng, (1000, h))
    w_up, w_down = rand(rng, (8, h, 2 * i), scale=1.5 / np.sqrt(h)), rand(rng, (8, i, h), scale=1 / np.sqrt(i))
    prob = jnp.asarray(rng.uniform(0.2, 1, 1000), jnp.float32)

    def mlp_loss(x, wu, wd, p):
        y = mj.moe_mlp(x, wu, wd, gs, prob=p)
        return (y.astype(jnp.float32) ** 2).sum(), y

    def ref_loss(x, wu, wd, p):
        y = _moe_reference(x, wu, wd, sizes, p, "swiglu")
        return (y**2).sum(), y

    step = jax.jit(jax.value_and_grad(mlp_loss, (0, 1, 2, 3), has_aux=True))
    value, y, dx, dw_up, dw_down, dprob = twice(step, (x, w_up, w_down, prob), [
        jax.ShapeDtypeStruct((1000, 2 * i), jnp.bfloat16), jax.ShapeDtypeStruct((1000, i), jnp.bfloat16),
        jax.ShapeDtypeStruct((1000, h), jnp.bfloat16), jax.ShapeDtypeStruct((1000,), jnp.float32)])
    for name, tail in (("y", y), ("dx", dx), ("dprob", dprob)):
        assert (tail.astype(np.float32)[end:] == 0).all(), f"moe_mlp: {name}: rows past the last group not zero"
    with on_cpu():
        f32_args = tuple(jnp.asarray(f32(a)) for a in (x, w_up, w_down, prob))
        (ref_value, y_ref), ref_grads = jax.value_and_grad(ref_loss, (0, 1, 2, 3), has_aux=True)(*f32_args)
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-2)
    assert_close(y[:end], np.asarray(y_ref)[:end], "moe_mlp: y")
    for name, got, ref in zip(("dx", "dw_up", "dw_down", "dprob"), (dx, dw_up, dw_down, dprob), ref_grads):
        rows = slice(0, end) if name in ("dx", "dprob") else slice(None)
        assert_close(got[rows], np.asarray(ref)[rows], f"moe_mlp: {name}")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_c01_wgrad_empty_experts_exactly_zero_in_a_nan_filled_output(platform):
    """C01: grouped_gemm_wgrad over group sizes [162, 0, 2577, 446, 0, 83] (H = 2048, N = 768) written into a
    donated NaN-filled output (run_into_sentinels, fill NaN: an op that scaled the old contents by 0, or added
    to them, would leave NaN behind): experts 1 and 4 exactly 0, the others against the float64 oracle at the
    spec's tolerances; the same product through ragged_dot_general's ragged contraction (f32 result)."""
    sizes = np.array([162, 0, 2577, 446, 0, 83], np.int32)
    m, h, n = int(sizes.sum()), 2048, 768
    rng = np.random.default_rng(31)
    with running_on(platform_device(platform)):
        x, dy = rand(rng, (m, h)), rand(rng, (m, n))
        spec = [jax.ShapeDtypeStruct((len(sizes), h, n), jnp.float32)]
        w, landed = run_into_sentinels(lambda x, dy: mj.grouped_gemm_wgrad(x, dy, offsets_of(sizes)), spec, x, dy,
                                       fill=np.nan)
        dims = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([0], [0]), ([], [])),
                                                 lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
        general = jax.jit(lambda x, dy: mj.ragged_dot_general(x, dy, jnp.asarray(sizes), dims,
                                                              preferred_element_type=jnp.float32))(x, dy)
    assert landed, "XLA did not place the output in the donated NaN buffer"
    ref = _wgrad_ref64(x, dy, sizes)
    _expect_weight_gradient(w, ref, sizes, "wgrad")
    _expect_weight_gradient(general, ref, sizes, "ragged_dot_general")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_c02_second_wgrad_call_on_the_same_buffers_leaves_no_stale_values(platform):
    """C02: 32 rows split [0, 8, 8, 0, 16] over 5 experts (H = N = 16), by one jitted grouped_gemm_wgrad (the
    offsets a traced argument) that first ran with sizes [8, 8, 8, 8, 0] on the same x and dy (every expert's W
    then differs from the second call's) and whose second call is written into the first call's donated output:
    experts 0 and 3 exactly 0, the others the float64 oracle of the new sizes, nothing left of the first call.
    The same two calls through ragged_dot's rhs gradient (one jitted vjp, the group sizes a traced argument)."""
    first, second = np.array([8, 8, 8, 8, 0], np.int32), np.array([0, 8, 8, 0, 16], np.int32)
    rng = np.random.default_rng(32)
    with running_on(platform_device(platform)):
        x, dy = rand(rng, (32, 16)), rand(rng, (32, 16))
        call = jax.jit(lambda prev, x, dy, off: mj.grouped_gemm_wgrad(x, dy, off), donate_argnums=0,
                       keep_unused=True)
        prev = jnp.full((5, 16, 16), SENTINEL, jnp.float32)
        results = []
        for sizes in (first, second):
            pointer = prev.unsafe_buffer_pointer()
            w = call(prev, x, dy, offsets_of(sizes))
            assert w.unsafe_buffer_pointer() == pointer, "XLA did not place W in the donated buffer"
            results.append(np.array(w, copy=True))  # a copy: a NumPy view of w would keep XLA from reusing it
            prev = w
        rhs = rand(rng, (5, 16, 16))
        d_rhs = jax.jit(lambda l, r, gs, cot: jax.vjp(lambda r: mj.ragged_dot(l, r, gs), r)[1](cot)[0])
        grads = [d_rhs(x, rhs, jnp.asarray(sizes), dy) for sizes in (first, second)]
    refs = [_wgrad_ref64(x, dy, sizes) for sizes in (first, second)]
    _expect_weight_gradient(results[0], refs[0], first, "wgrad, first call")
    _expect_weight_gradient(results[1], refs[1], second, "wgrad, second call")
    _expect_weight_gradient(grads[0], refs[0], first, "ragged_dot d rhs, first call")
    _expect_weight_gradient(grads[1], refs[1], second, "ragged_dot d rhs, second call")


def _c03_sizes(rng):
    """256 experts, 240 empty; 16 of 1 to 40 rows (1 and 40 included), the first expert empty and the last not."""
    sizes = np.zeros(256, np.int32)
    rows = rng.integers(1, 41, 16)
    rows[:2] = 1, 40
    sizes[np.append(rng.choice(np.arange(1, 255), 15, replace=False), 255)] = rows
    return sizes


@pytest.mark.parametrize("groups", ["mostly_empty", "all_empty"])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_c03_256_experts_mostly_or_all_empty(groups, platform):
    """C03: 256 experts, 240 empty and 16 of 1..40 rows with 24 rows past the last group; then all 256 empty
    (offsets all 0, M = 128). grouped_gemm into poisoned outputs (run_into_sentinels) writes exactly the rows
    in groups, against the float64 oracle (none when all are empty: every row still holds SENTINEL), and
    grouped_gemm_wgrad into poisoned outputs gives exact zeros for every empty expert; ragged_dot's value (zero
    past the groups) and rhs gradient (exact zeros for empty groups) agree."""
    k, n = 64, 48
    rng = np.random.default_rng(33)
    sizes = _c03_sizes(rng) if groups == "mostly_empty" else np.zeros(256, np.int32)
    end = int(sizes.sum())
    m = end + 24 if end else 128
    assert (groups == "all_empty") == (end == 0) and (sizes > 0).sum() in (0, 16)
    with running_on(platform_device(platform)):
        a, b, dy = rand(rng, (m, k)), rand(rng, (256, k, n), scale=0.2), rand(rng, (m, n))
        off = offsets_of(sizes)
        d, landed_d = run_into_sentinels(lambda a, b: mj.grouped_gemm(a, b, off, b_layout="kn"),
                                         [jax.ShapeDtypeStruct((m, n), jnp.bfloat16)], a, b)
        w, landed_w = run_into_sentinels(lambda a, dy: mj.grouped_gemm_wgrad(a, dy, off),
                                         [jax.ShapeDtypeStruct((256, k, n), jnp.float32)], a, dy)
        out, vjp = jax.vjp(lambda r: mj.ragged_dot(a, r, jnp.asarray(sizes)), b)
        (d_rhs,) = vjp(dy)
    assert landed_d and landed_w, "XLA did not place the outputs in the donated sentinel buffers"
    ref = grouped_matmul_ref(a, b, sizes, "kn", np.float64)
    if end:
        assert_close(d[:end], ref[:end], "grouped_gemm: rows in groups")
        assert_close(out, ref, "ragged_dot")
    assert (f32(d)[end:] == SENTINEL).all(), "grouped_gemm wrote rows past the last group"
    assert (f32(out)[end:] == 0).all(), "ragged_dot: rows past the last group not zero"
    w_ref = _wgrad_ref64(a, dy, sizes)
    _expect_weight_gradient(w, w_ref, sizes, "wgrad")
    _expect_weight_gradient(d_rhs, w_ref, sizes, "ragged_dot d rhs")


@pytest.mark.parametrize("n", [128, 160, 200, 768])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_c07_n_tails_of_grouped_gemm_and_ragged_dot(n, platform):
    """C07: M = 512, K = 64, two experts of 256 rows, N in {128, 160, 200, 768} (tails of every common tile
    width): grouped_gemm with either weight layout into a poisoned output (run_into_sentinels: every element
    written, no SENTINEL left in a column tail) and ragged_dot, against the float64 oracle at the spec's
    tolerances."""
    sizes = np.array([256, 256], np.int32)
    rng = np.random.default_rng(34 + n)
    with running_on(platform_device(platform)):
        a, b_kn = rand(rng, (512, 64)), rand(rng, (2, 64, n), scale=0.2)
        b_nk = jnp.swapaxes(b_kn, 1, 2)
        spec = [jax.ShapeDtypeStruct((512, n), jnp.bfloat16)]
        outs = {layout: run_into_sentinels(lambda a, b: mj.grouped_gemm(a, b, offsets_of(sizes), b_layout=layout),
                                           spec, a, b)
                for layout, b in (("kn", b_kn), ("nk", b_nk))}
        outs["ragged_dot"] = jax.jit(mj.ragged_dot)(a, b_kn, jnp.asarray(sizes)), True
    ref = grouped_matmul_ref(a, b_kn, sizes, "kn", np.float64)
    for name, (d, landed) in outs.items():
        assert landed, f"{name}: XLA did not place the output in the donated sentinel buffer"
        assert not (f32(d) == SENTINEL).any(), f"{name}: elements left unwritten"
        assert_close(d, ref, f"{name}, N = {n}")


def _c09_ends(rng, e, m):
    """End rows of e non-empty experts over m rows: every offset before the last a multiple of 8 but not of 64."""
    candidates = np.array([v for v in range(8, m, 8) if v % 64])
    return np.append(np.sort(rng.choice(candidates, e - 1, replace=False)), m).astype(np.int32)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_c09_wgrad_offsets_aligned_to_8_only(platform):
    """C09: x (2560, 512), dy (2560, 1536) over 2, 7 and 12 experts whose offsets are multiples of 8 but not of 64
    (nor 128): the f32 W of grouped_gemm_wgrad (and, for 7 experts, ragged_dot_general's ragged contraction, f32)
    within 1e-3 relative error of the float64 oracle, expert by expert (Frobenius, and elementwise against the
    expert's largest value). The full size on both platforms: about 0.3 s a call on a 2-core CPU."""
    m, h, n = 2560, 512, 1536
    rng = np.random.default_rng(35)
    dims = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([0], [0]), ([], [])),
                                             lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
    with running_on(platform_device(platform)):
        x, dy = rand(rng, (m, h)), rand(rng, (m, n))
        wgrad = jax.jit(mj.grouped_gemm_wgrad)
        cases = []
        for e in (2, 7, 12):
            ends = _c09_ends(rng, e, m)
            sizes = np.diff(ends, prepend=0)
            results = {"wgrad": wgrad(x, dy, jnp.asarray(ends))}
            if e == 7:
                results["ragged_dot_general"] = jax.jit(lambda x, dy, gs: mj.ragged_dot_general(
                    x, dy, gs, dims, preferred_element_type=jnp.float32))(x, dy, jnp.asarray(sizes))
            cases.append((sizes, results))
    x64, dy64 = _f64(x), _f64(dy)
    for sizes, results in cases:
        assert (sizes > 0).all() and not (np.cumsum(sizes)[:-1] % 64 == 0).any()
        for name, w in results.items():
            assert w.shape == (len(sizes), h, n) and w.dtype == jnp.float32, (name, w.shape, w.dtype)
        results = {name: np.asarray(w) for name, w in results.items()}
        for g, (begin, end) in enumerate(_ranges(sizes)):
            ref = x64[begin:end].T @ dy64[begin:end]
            for name, w in results.items():
                got, what = w[g].astype(np.float64), f"{name}, {len(sizes)} experts, expert {g} ({begin}..{end})"
                assert np.linalg.norm(got - ref) < 1e-3 * np.linalg.norm(ref), what
                assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max(), what


def _gated(gate, up, activation, limit=7.0, act_alpha=1.702, linear_offset=1.0):
    """The gated activations of docs/ops.md section 2 in plain jnp."""
    if activation == "swiglu":
        return jax.nn.silu(gate) * up
    if activation == "geglu":
        return jax.nn.gelu(gate, approximate=True) * up
    g = jnp.minimum(gate, limit)
    u = jnp.clip(up, -limit, limit)
    return (u + linear_offset) * g * jax.nn.sigmoid(act_alpha * g)


def _moe_reference(x, w_up, w_down, sizes, prob, activation, glu_layout="halves"):
    """The expert MLP in plain f32 jnp (jax.lax.ragged_dot at HIGHEST precision): rows past sum(sizes)
    give zero."""
    gs = jnp.asarray(sizes)
    gate, up = glu_pair(jax.lax.ragged_dot(x, w_up, gs, precision=_HIGHEST), glu_layout)
    h = _gated(gate, up, activation)
    return jax.lax.ragged_dot(h * prob[:, None], w_down, gs, precision=_HIGHEST)


# name -> (M, H, I, group sizes): empty experts (first, middle, last), sizes that are no multiple of any tile,
# and rows past the last group (y, dx and dprob are zero there).
MOE_SHAPES = {
    "small": (100, 64, 32, [30, 0, 51, 11, 0]),
    "unaligned": (1000, 256, 128, [0, 500, 0, 1, 243, 0, 0, 7]),
}
MOE_CASES = [("small", "swiglu", "halves"), ("small", "geglu", "halves"),
             ("small", "swiglu_clamped", "interleaved32"), ("unaligned", "swiglu", "halves"),
             ("unaligned", "geglu", "interleaved32")]


def _expect_moe_mlp_matches_f32_autodiff(x, w_up, w_down, prob, cot, sizes, activation, glu_layout, platform):
    """moe_mlp forward and backward through moegemm's custom_vjp (grouped_gemm_dglu, grouped_gemm,
    grouped_gemm_wgrad) jitted on the platform, against jax.grad of the plain f32 implementation on f32 casts
    of the same inputs, to the spec's bf16 tolerances (docs/ops.md section 9)."""
    end = int(sizes.sum())
    args = (x, w_up, w_down, prob)
    device = platform_device(platform)
    kw = dict(activation=activation, glu_layout=glu_layout)

    def loss(x, wu, wd, p):
        return (mj.moe_mlp(x, wu, wd, jnp.asarray(sizes), prob=p, **kw).astype(jnp.float32) * cot).sum()

    def ref(x, wu, wd, p):
        return (_moe_reference(x, wu, wd, sizes, p, activation, glu_layout) * cot).sum()

    with running_on(device):
        on_device = jax.device_put(args, device)
        y = jax.jit(lambda *a: mj.moe_mlp(*a[:3], jnp.asarray(sizes), prob=a[3], **kw))(*on_device)
        grads = jax.jit(jax.grad(loss, (0, 1, 2, 3)))(*on_device)
    for out in (y, *grads):
        assert next(iter(out.devices())).platform == device.platform
    with on_cpu():
        f32_args = tuple(jnp.asarray(f32(a)) for a in args)
        y_ref = _moe_reference(*f32_args[:3], sizes, f32_args[3], activation, glu_layout)
        ref_grads = jax.grad(ref, (0, 1, 2, 3))(*f32_args)
    assert y.dtype == x.dtype
    assert_close(y[:end], y_ref[:end], "y")
    for name, g, r, a in zip(["dx", "dw_up", "dw_down", "dprob"], grads, ref_grads, args):
        assert g.shape == a.shape and g.dtype == a.dtype, (name, g.shape, g.dtype)
        assert_close(g, r, name)
    for expert, s in enumerate(sizes):
        if s == 0:  # experts without rows: exact zeros written by grouped_gemm_wgrad
            assert (f32(grads[1][expert]) == 0).all() and (f32(grads[2][expert]) == 0).all(), expert
    for name, out in (("y", y), ("dx", grads[0]), ("dprob", grads[3])):
        assert (f32(out)[end:] == 0).all(), f"{name}: rows past the last group not zero"


@pytest.mark.parametrize("shape,activation,glu_layout", MOE_CASES)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_moe_mlp_value_and_gradients_match_f32_autodiff(shape, activation, glu_layout, platform):
    """The whole MoE MLP (fused GLU up-projection, down grouped GEMM) on bf16 random inputs."""
    m, h, i, sizes = MOE_SHAPES[shape]
    sizes = np.array(sizes, np.int32)
    e = len(sizes)
    rng = np.random.default_rng(7 + m)
    x = rand(rng, (m, h))
    w_up, w_down = rand(rng, (e, h, 2 * i), scale=1.5 / np.sqrt(h)), rand(rng, (e, i, h), scale=1 / np.sqrt(i))
    prob = jnp.asarray(rng.uniform(0.2, 1, m), jnp.float32)
    cot = rand(rng, (m, h), jnp.float32)
    _expect_moe_mlp_matches_f32_autodiff(x, w_up, w_down, prob, cot, sizes, activation, glu_layout, platform)


def test_moe_mlp_f16_operands_and_a_bf16_prob_keep_their_dtypes():
    """f16 operands (the CPU backend) and a bf16 router probability, which moe_mlp casts to f32 for the ops (its
    docstring: "of a floating dtype (cast to f32)"): values as for bf16, every gradient in its primal's dtype,
    and f16 weight gradients rounded once from f32 (docs/ops.md section 0), not through bf16 (the kernels' own
    w_dtype), which would be up to 4x further from the float64 product."""
    m, h, i, sizes = MOE_SHAPES["small"]
    sizes = np.array(sizes, np.int32)
    e = len(sizes)
    rng = np.random.default_rng(23)
    x = rand(rng, (m, h), jnp.float16)
    w_up = rand(rng, (e, h, 2 * i), jnp.float16, scale=1.5 / np.sqrt(h))
    w_down = rand(rng, (e, i, h), jnp.float16, scale=1 / np.sqrt(i))
    prob = jnp.asarray(rng.uniform(0.2, 1, m), jnp.bfloat16)
    cot = rand(rng, (m, h), jnp.float32)
    _expect_moe_mlp_matches_f32_autodiff(x, w_up, w_down, prob, cot, sizes, "swiglu", "halves", "cpu")
    # dw_down[g] = h[rows]^T @ dy[rows]: h the GLU's output (its op again, the same bits), dy the cotangent
    # rounded to f16, as the backward takes it.
    with on_cpu():
        hidden = mj.grouped_gemm_glu(x, w_up, offsets_of(sizes), prob=prob.astype(jnp.float32), b_layout="kn")
        dw_down = jax.grad(lambda wd: (mj.moe_mlp(x, w_up, wd, jnp.asarray(sizes), prob=prob).astype(jnp.float32)
                                       * cot).sum())(w_down)
    h64, dy64 = np.asarray(f32(hidden), np.float64), np.asarray(f32(cot.astype(jnp.float16)), np.float64)
    got = np.asarray(f32(dw_down), np.float64)
    ends = np.cumsum(sizes)
    for g, (begin, end) in enumerate(zip(ends - sizes, ends)):
        ref = h64[begin:end].T @ dy64[begin:end]
        terms = np.abs(h64[begin:end]).T @ np.abs(dy64[begin:end])
        err = np.abs(got[g] - ref)
        assert (err <= 2.0**-11 * np.abs(ref) + 2.0**-20 * terms + 2.0**-24).all(), (g, float(err.max()))


def _clamp_edge_inputs(rng, m, h, i, e, glu_layout):
    """x (M, H) and w_up (E, H, 2I) in bf16 whose f32 products are exact and crowd around +-7: x[:, :2] = 1,
    w_up[:, 0] = 7 on gate columns and +-7 on up columns, w_up[:, 1] = +-2^-11 (so that no value is exactly
    +-7, where frameworks' clamp gradients differ); the rest of x in {-1, 0, 1} and of w_up multiples of
    2^-10 no larger than 2^-7 (H <= 64 keeps every sum exact). About 5% of the gate values then lie in
    (7, 7 + 2^-6], which bf16 rounds to 7: not clamped any more."""
    x = rng.integers(-1, 2, (m, h)).astype(np.float32)
    x[:, :2] = 1
    w_up = rng.integers(-8, 9, (e, h, 2 * i)).astype(np.float32) / 1024
    w_up[:, 1, :] = rng.choice([-1.0, 1.0], (e, 2 * i)) / 2048
    block = np.arange(2 * i) // 32 % 2
    gate = np.arange(2 * i) < i if glu_layout == "halves" else block == (0 if glu_layout == "interleaved32" else 1)
    w_up[:, 0, :] = np.where(gate, 7.0, 7.0 * rng.choice([-1.0, 1.0], (e, 2 * i)))
    return jnp.asarray(x, jnp.bfloat16), jnp.asarray(w_up, jnp.bfloat16)


@pytest.mark.parametrize("glu_layout", ["halves", "interleaved32"])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_clamped_moe_mlp_gradients_match_f32_autodiff_at_the_limit(glu_layout, platform):
    """swiglu_clamped with pre-activations that crowd around +-7: where rounding the saved pre-activation to
    bf16 would cross the limit, the backward still cuts off exactly the gradients the forward's clamps cut
    off (docs/ops.md section 2), as jax.grad of the f32 forward does."""
    m, h, i = 160, 16, 64
    sizes = np.array([50, 0, 70, 20], np.int32)
    rng = np.random.default_rng(41)
    x, w_up = _clamp_edge_inputs(rng, m, h, i, len(sizes), glu_layout)
    w_down = rand(rng, (len(sizes), i, h), scale=1 / np.sqrt(i))
    prob = jnp.asarray(rng.uniform(0.2, 1, m), jnp.float32)
    cot = rand(rng, (m, h), jnp.float32)
    _expect_moe_mlp_matches_f32_autodiff(x, w_up, w_down, prob, cot, sizes, "swiglu_clamped", glu_layout, platform)


@on_device_for(*MOE_MLP_FORWARD)
def test_moe_mlp_offsets_argument_and_errors():
    rng = np.random.default_rng(8)
    x, w_up, w_down = rand(rng, (32, 16)), rand(rng, (2, 16, 32)), rand(rng, (2, 16, 16))
    y1 = mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]))
    y2 = mj.moe_mlp(x, w_up, w_down, offsets=offsets_of([10, 22]))
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2))
    with pytest.raises(ValueError, match="offsets: expected exactly one of group_sizes and offsets, got neither"):
        mj.moe_mlp(x, w_up, w_down)
    with pytest.raises(ValueError, match="offsets: expected exactly one of group_sizes and offsets, got both"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), offsets=offsets_of([10, 22]))
    with pytest.raises(ValueError, match=r"moe_mlp: w_up: expected an even last dim \(2I\), got shape \(2, 16, 31\)"):
        mj.moe_mlp(x, rand(rng, (2, 16, 31)), w_down, group_sizes=jnp.array([10, 22]))
    with pytest.raises(ValueError, match=r"moe_mlp: w_down: expected dim 1 = 16 \(I from w_up\)"):
        mj.moe_mlp(x, w_up, rand(rng, (2, 8, 16)), group_sizes=jnp.array([10, 22]))
    # Errors name moe_mlp's own operands, not the a, b, d of the ops it calls.
    with pytest.raises(ValueError, match=r"moe_mlp: offsets: expected dim 0 = 2 \(E from w_up\)"):
        mj.moe_mlp(x, w_up, w_down, offsets=offsets_of([10, 12, 10]))
    # w_up alone off on E: the groups and w_down agree, so w_up is named.
    with pytest.raises(ValueError, match=r"moe_mlp: w_up: expected dim 0 = E=2 \(the experts of group_sizes and "
                                         r"w_down\), got shape \(3, 16, 32\)"):
        mj.moe_mlp(x, rand(rng, (3, 16, 32)), w_down, group_sizes=jnp.array([10, 22]))
    with pytest.raises(ValueError, match=r"moe_mlp: w_up: expected dim 0 = E=2 \(the experts of offsets and w_down\)"):
        mj.moe_mlp(x, rand(rng, (3, 16, 32)), w_down, offsets=offsets_of([10, 22]))
    with pytest.raises(TypeError, match=r"moe_mlp: offsets: expected dtype int32, got"):
        mj.moe_mlp(x, w_up, w_down, offsets=np.array([10, 32], np.uint32))
    with pytest.raises(ValueError, match=r"moe_mlp: x: expected H a multiple of 8 .*got H = 12"):
        mj.moe_mlp(rand(rng, (32, 12)), rand(rng, (2, 12, 32)), rand(rng, (2, 16, 12)),
                   group_sizes=jnp.array([10, 22]))
    with pytest.raises(ValueError, match=r"moe_mlp: w_up: expected I \(half of its last dim\) a multiple "
                                         r"of 8, .*got I = 12 \(shape \(2, 16, 24\)\)$"):
        mj.moe_mlp(x, rand(rng, (2, 16, 24)), rand(rng, (2, 12, 16)), group_sizes=jnp.array([10, 22]))
    with pytest.raises(TypeError, match=r"moe_mlp: prob: expected an array \(jax.Array or numpy.ndarray\), got list"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), prob=[1.0] * 32)
    for prob in (jnp.ones(32, jnp.complex64), jnp.ones(32, jnp.int32)):
        with pytest.raises(TypeError, match=r"moe_mlp: prob: expected a floating dtype, got"):
            mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), prob=prob)
    with pytest.raises(ValueError, match=r"moe_mlp: activation: expected one of .*got 'relu'"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), activation="relu")
    with pytest.raises(ValueError, match=r"moe_mlp: glu_layout: expected one of .*got 'bogus'"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), glu_layout="bogus")
    with pytest.raises(ValueError, match=r"moe_mlp: w_up: expected 2I \(its last dim\) a multiple of 64, "
                                         r".*got 2I = 32$"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), glu_layout="interleaved32")
    with pytest.raises(ValueError, match=r"moe_mlp: limit: expected a positive clamp limit"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), activation="swiglu_clamped", limit=-1.0)
    with pytest.raises(ValueError, match=r"moe_mlp: act_alpha: expected a finite act_alpha for swiglu_clamped"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), activation="swiglu_clamped",
                   act_alpha=float("nan"))
    with pytest.raises(ValueError, match=r"moe_mlp: linear_offset: expected a finite linear_offset"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), activation="swiglu_clamped",
                   linear_offset=float("inf"))
    with pytest.raises(ValueError, match=r"moe_mlp: act_alpha: .*got 1e\+300, which f32 rounds to inf$"):
        mj.moe_mlp(x, w_up, w_down, group_sizes=jnp.array([10, 22]), activation="swiglu_clamped", act_alpha=1e300)
    # H = 0 or I = 0 is refused by moe_mlp's own names, not by the inner ops'.
    with pytest.raises(ValueError, match=r"moe_mlp: x: expected H > 0 \(its last dim\), got shape \(32, 0\)"):
        mj.moe_mlp(x[:, :0], w_up[:, :0], w_down[:, :, :0], group_sizes=jnp.array([10, 22]))
    with pytest.raises(ValueError, match=r"moe_mlp: w_up: expected 2I > 0 \(its last dim\), got shape"):
        mj.moe_mlp(x, w_up[:, :, :0], w_down[:, :0], group_sizes=jnp.array([10, 22]))
    with pytest.raises(ValueError, match=r"moe_mlp: w_up: expected 1 to 1024 experts \(dim 0\)"):
        mj.moe_mlp(x[:, :8], jnp.ones((1025, 8, 16), jnp.bfloat16), jnp.ones((1025, 8, 8), jnp.bfloat16),
                   group_sizes=jnp.zeros(1025, jnp.int32))


def test_ragged_dot_group_limit_and_empty_contraction():
    """G > 1024 is refused naming rhs (not the inner op's offsets); K = 0 gives zeros and N = 0 an (M, 0)
    result, as jax.lax.ragged_dot does; preferred_element_type that is no dtype is refused by name."""
    x = jnp.ones((16, 8), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"^moegemm\.jax\.ragged_dot: rhs: expected at most 1024 groups"):
        mj.ragged_dot(x, jnp.ones((1025, 8, 8), jnp.bfloat16), jnp.zeros(1025, jnp.int32))
    empty_k = mj.ragged_dot(jnp.ones((16, 0), jnp.bfloat16), jnp.ones((2, 0, 8), jnp.bfloat16), jnp.array([6, 10]))
    ref = jax.lax.ragged_dot(jnp.ones((16, 0), jnp.bfloat16), jnp.ones((2, 0, 8), jnp.bfloat16), jnp.array([6, 10]))
    assert empty_k.shape == ref.shape == (16, 8) and empty_k.dtype == ref.dtype
    assert (f32(empty_k) == 0).all()
    no_columns = mj.ragged_dot(x, jnp.ones((2, 8, 0), jnp.bfloat16), jnp.array([6, 10]))
    ref = jax.lax.ragged_dot(x, jnp.ones((2, 8, 0), jnp.bfloat16), jnp.array([6, 10]))
    assert no_columns.shape == ref.shape == (16, 0) and no_columns.dtype == ref.dtype
    with pytest.raises(TypeError, match=r"ragged_dot: preferred_element_type: expected one of .*got 'bogus'"):
        mj.ragged_dot(x, jnp.ones((2, 8, 8), jnp.bfloat16), jnp.array([6, 10]), preferred_element_type="bogus")


def test_group_sizes_over_more_rows_than_int32_offsets_end_at_are_refused():
    """group_sizes become int32 offsets: M = 2^31 rows is refused by name at trace time (shapes only, nothing
    allocated), where the cumulative sum used to fail inside JAX with an OverflowError."""
    spec = jax.ShapeDtypeStruct
    big = spec((2**31, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"^moegemm\.jax\.ragged_dot: lhs: expected at most 2147483647 rows with "
                                         r"group_sizes .*got shape \(2147483648, 64\)"):
        jax.eval_shape(mj.ragged_dot, big, spec((8, 64, 64), jnp.bfloat16), spec((8,), jnp.int32))
    with pytest.raises(ValueError, match=r"^moegemm\.jax\.moe_mlp: x: expected at most 2147483647 rows with "
                                         r"group_sizes"):
        jax.eval_shape(lambda x, u, d, g: mj.moe_mlp(x, u, d, group_sizes=g), big,
                       spec((8, 64, 128), jnp.bfloat16), spec((8, 64, 64), jnp.bfloat16), spec((8,), jnp.int32))
    # One row fewer traces.
    out = jax.eval_shape(mj.ragged_dot, spec((2**31 - 1, 64), jnp.bfloat16), spec((8, 64, 64), jnp.bfloat16),
                         spec((8,), jnp.int32))
    assert out.shape == (2**31 - 1, 64)


def test_second_derivatives_raise():
    """The backward passes call moegemm's FFI ops, which have no derivative: a second derivative raises (as torch's
    moe_mlp does), also for a loss linear in the output, never returning a gradient that lacks terms."""
    rng = np.random.default_rng(21)
    x, w_up, w_down = rand(rng, (8, 16)), rand(rng, (2, 16, 32), scale=0.2), rand(rng, (2, 16, 16), scale=0.2)
    sizes = jnp.array([3, 5], jnp.int32)

    def dx_of(w_down_):
        return jax.grad(lambda x_: mj.moe_mlp(x_, w_up, w_down_, group_sizes=sizes).astype(jnp.float32).sum())(x)

    with on_cpu():
        assert dx_of(w_down).shape == x.shape
        with pytest.raises(NotImplementedError, match="moegemm.jax.moe_mlp: second derivatives are not supported"):
            jax.grad(lambda w: jnp.sum(dx_of(w).astype(jnp.float32) ** 2))(w_down)
        with pytest.raises(NotImplementedError, match="moegemm.jax.ragged_dot: second derivatives are not supported"):
            jax.grad(lambda l: jnp.sum(jax.grad(lambda r: mj.ragged_dot(l, r, sizes).astype(jnp.float32).sum())(
                w_down).astype(jnp.float32) ** 2))(x)
        with pytest.raises(NotImplementedError, match="moegemm.jax.ragged_dot: second derivatives"):
            jax.hessian(lambda l: mj.ragged_dot(l, w_down, sizes).astype(jnp.float32).sum())(x)


def test_forward_mode_and_transpose_raise_as_documented():
    """Reverse mode only (docs/jax.md): jax.jvp, jax.jacfwd and the function jax.linearize returns raise JAX's
    TypeError for a custom_vjp function, jax.linear_transpose its NotImplementedError; jax.vjp gives the
    transpose in lhs, equal to jax.lax.ragged_dot's."""
    rng = np.random.default_rng(22)
    x, w = rand(rng, (8, 16)), rand(rng, (2, 16, 32), scale=0.2)
    sizes = jnp.array([3, 5], jnp.int32)
    cotangent = rand(rng, (8, 32))

    def f(lhs):
        return mj.ragged_dot(lhs, w, sizes)

    with on_cpu():
        forward_mode = r"custom_vjp"  # JAX's words: "can't apply forward-mode autodiff (jvp) to a custom_vjp ..."
        with pytest.raises(TypeError, match=forward_mode):
            jax.jvp(f, (x,), (x,))
        with pytest.raises(TypeError, match=forward_mode):
            jax.jacfwd(lambda lhs: f(lhs).astype(jnp.float32))(x)
        _, linear = jax.linearize(f, x)
        with pytest.raises(TypeError, match=forward_mode):
            linear(x)
        with pytest.raises(NotImplementedError, match=r"custom_vjp"):  # "Transpose rule ... for 'custom_vjp_call' ..."
            jax.linear_transpose(f, x)(cotangent)
        (dx,) = jax.vjp(f, x)[1](cotangent)
        (want,) = jax.linear_transpose(lambda lhs: jax.lax.ragged_dot(lhs, w, sizes), x)(cotangent)
        np.testing.assert_allclose(np.asarray(dx, np.float32), np.asarray(want, np.float32), rtol=2e-2, atol=4e-2)
        assert np.abs(np.asarray(dx, np.float32)).sum() > 0


def test_eager_calls_reuse_their_trace(monkeypatch):
    """ragged_dot and moe_mlp run their custom_vjp function through jit: an eager call with the shapes and
    options of an earlier one traces nothing (each traced call queries its ops' workspaces), where an eager
    custom_vjp call traced its function, and queried, every time. New shapes trace again; values are those of
    the first call, bitwise."""
    from moegemm import _jax_native as native

    queried = []
    real = native.workspace_bytes

    def spy(op, *args, **kwargs):
        queried.append(op)
        return real(op, *args, **kwargs)

    monkeypatch.setattr(native, "workspace_bytes", spy)
    rng = np.random.default_rng(24)
    x, w_up, w_down = rand(rng, (24, 16)), rand(rng, (2, 16, 32), scale=0.2), rand(rng, (2, 16, 16), scale=0.2)
    sizes = jnp.array([9, 11], jnp.int32)
    calls = {"ragged_dot": lambda lhs: mj.ragged_dot(lhs, w_down, sizes),
             "moe_mlp": lambda lhs: mj.moe_mlp(lhs, w_up, w_down, sizes)}
    with on_cpu():
        jax.clear_caches()
        for name, call in calls.items():
            del queried[:]
            first = call(x)
            assert queried, name  # traced once
            del queried[:]
            again = call(rand(rng, (24, 16)))
            assert not queried, (name, queried)
            assert np.asarray(call(x)).tobytes() == np.asarray(first).tobytes() and again.shape == first.shape
            call(rand(rng, (40, 16)))  # more rows: a new trace
            assert queried, name


def _glu_calls(jaxpr):
    """Every grouped_gemm_glu call (its equation) in a jaxpr, nested jaxprs included, in order."""
    calls = []
    for eqn in jaxpr.eqns:
        if "grouped_gemm_glu" in str(eqn.params.get("target_name", "")):
            calls.append(eqn)
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    calls += _glu_calls(inner)
    return calls


def _glu_output_shapes(jaxpr):
    """The output shapes of every grouped_gemm_glu call in a jaxpr, nested jaxprs included."""
    return [[tuple(v.aval.shape) for v in eqn.outvars] for eqn in _glu_calls(jaxpr)]


@pytest.mark.parametrize("act", ["swiglu", "swiglu_clamped"])
def test_moe_mlp_not_differentiated_keeps_no_pre_activation(act):
    """moe_mlp evaluated without a derivative (inference) runs the GLU without C, which only the backward
    reads, and gives the value of the differentiated call (bitwise: the default clamp limit is a 16-bit
    value, docs/ops.md §2)."""
    rng = np.random.default_rng(21)
    x, w_up, w_down = rand(rng, (40, 32)), rand(rng, (4, 32, 32), scale=0.2), rand(rng, (4, 16, 32), scale=0.2)
    gs = jnp.asarray([9, 0, 20, 11], jnp.int32)

    def layer(x):
        return mj.moe_mlp(x, w_up, w_down, gs, activation=act)

    with on_cpu():
        assert _glu_output_shapes(jax.make_jaxpr(layer)(x).jaxpr)[0][:2] == [(40, 16), (0,)]  # D and workspace
        grad_shapes = _glu_output_shapes(jax.make_jaxpr(jax.grad(lambda x: layer(x).astype(jnp.float32).sum()))(x).jaxpr)
        assert (40, 32) in grad_shapes[0]  # C, for the backward
        inference, trained = jax.jit(layer)(x), jax.vjp(layer, x)[0]  # the latter through the forward rule
        assert np.array_equal(np.asarray(inference, np.float32), np.asarray(trained, np.float32))


def _glu_zero_tail_flags(jaxpr):
    """The zero_tail attribute of every grouped_gemm_glu call in a jaxpr, nested jaxprs included."""
    return [dict(eqn.params["attributes"])["zero_tail"] for eqn in _glu_calls(jaxpr)]


@pytest.mark.parametrize("check", ["nans", "infs"])
def test_moe_mlp_under_debug_checks_has_no_false_alarm_from_its_tails(check):
    """jax_debug_nans / jax_debug_infs read every output of every call, h's and C's tail rows included, which
    the GLU leaves unwritten: under them (only), moe_mlp's GLU zeroes its tails, so that eager calls and
    gradients raise nothing for a finite layer, and a NaN made elsewhere in a jitted step is blamed on the op
    that made it. The allocator is dirtied with freed NaN/inf buffers of the tails' sizes before each call."""
    rng = np.random.default_rng(23)
    x, w_up, w_down = rand(rng, (48, 64)), rand(rng, (4, 64, 128), scale=0.2), rand(rng, (4, 64, 64), scale=0.2)
    gs = jnp.asarray([5, 0, 17, 10], jnp.int32)  # 32 of 48 rows
    bad = jnp.nan if check == "nans" else jnp.inf
    context = jax.debug_nans if check == "nans" else jax.debug_infs

    def layer(x):
        return mj.moe_mlp(x, w_up, w_down, gs)

    def loss(x):
        return layer(x).astype(jnp.float32).sum()

    def dirty():
        for shape in ((48, 64), (48, 128)):
            jnp.full(shape, bad, jnp.bfloat16).block_until_ready()

    with on_cpu():
        # Decided where the layer is traced: each trace below is of a new function, as jit caches a trace
        # whatever these checks' settings (they are not part of its key).
        assert _glu_zero_tail_flags(jax.make_jaxpr(lambda x: layer(x))(x).jaxpr) == [False]  # no cost without them
        with context(True):
            assert _glu_zero_tail_flags(jax.make_jaxpr(lambda x: layer(x))(x).jaxpr) == [True]
            grad_flags = _glu_zero_tail_flags(jax.make_jaxpr(jax.grad(lambda x: loss(x)))(x).jaxpr)
        assert grad_flags and all(grad_flags)
        step = jax.jit(lambda x: jnp.log(layer(x).astype(jnp.float32) - 100.0))  # log of negatives: NaN
        for _ in range(8):
            dirty()  # outside the checks, which would flag these buffers themselves
            with context(True):
                y = layer(x)
            dirty()
            with context(True):
                g = jax.grad(loss)(x)
            assert np.isfinite(np.asarray(y, np.float32)).all() and np.isfinite(np.asarray(g, np.float32)).all()
            if check == "nans":
                dirty()
                with context(True), pytest.raises(FloatingPointError, match=r"\blog\b"):
                    step(x)


@pytest.mark.parametrize("combine", ["linear", "router_weight"])
def test_moe_mlp_residuals_are_named_for_remat_policies(combine):
    """Under jax.checkpoint, save_only_these_names(*MOE_MLP_CHECKPOINT_NAMES) keeps the up-projection's outputs
    and y, so that the backward does not run grouped_gemm_glu again (it does with nothing_saveable), also where
    the loss is not linear in y (each row scaled by a router weight that gets a gradient: its backward reads
    y); the gradients are those without remat, bitwise."""
    rng = np.random.default_rng(17)
    x, w_up, w_down = rand(rng, (32, 16)), rand(rng, (4, 16, 32), scale=0.2), rand(rng, (4, 16, 16), scale=0.2)
    gs, cot = jnp.asarray([8, 0, 16, 6], jnp.int32), jnp.asarray(rng.standard_normal((32, 16)), jnp.float32)
    weight = jnp.asarray(rng.uniform(size=(32, 1)), jnp.float32)
    assert mj.MOE_MLP_CHECKPOINT_NAMES == ("moe_mlp_h", "moe_mlp_c", "moe_mlp_y")

    def loss(x, w_up, w_down, weight):
        y = mj.moe_mlp(x, w_up, w_down, gs).astype(jnp.float32)
        return jnp.sum((y * weight if combine == "router_weight" else y) * cot)

    args = (x, w_up, w_down, weight)
    with on_cpu():
        plain = jax.jit(jax.grad(loss, (0, 1, 2, 3)))(*args)
        policies = jax.checkpoint_policies
        for policy, glu_calls in ((policies.save_only_these_names(*mj.MOE_MLP_CHECKPOINT_NAMES), 1),
                                  (policies.nothing_saveable, 2)):
            for differentiate in (jax.grad, jax.value_and_grad):
                grad = differentiate(jax.checkpoint(loss, policy=policy), (0, 1, 2, 3))
                assert len(_glu_calls(jax.make_jaxpr(grad)(*args).jaxpr)) == glu_calls
            got = jax.jit(jax.grad(jax.checkpoint(loss, policy=policy), (0, 1, 2, 3)))(*args)
            for want, have in zip(plain[:3], got[:3]):  # the moegemm ops' gradients
                assert np.array_equal(np.asarray(want, np.float32), np.asarray(have, np.float32))
            # the router weight's, a reduction XLA fuses as it likes in either graph
            np.testing.assert_allclose(np.asarray(got[3]), np.asarray(plain[3]), rtol=1e-6, atol=1e-6)
