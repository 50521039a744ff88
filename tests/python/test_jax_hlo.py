"""No output is initialised by XLA: the lowered and compiled HLO of every op, forward and backward (and of
ragged_dot and moe_mlp, forward and backward), has no memset, no broadcast of zero and no aliasing into our
outputs, and every call carries a workspace of the size the trace-time query gave. Lowered and compiled
for each platform of jax_helpers.PLATFORMS: the CPU's HLO everywhere, the GPU's where JAX has a GPU that
runs the sm_90a kernels (every op has one)."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from jax_helpers import PLATFORMS, platform_device, rand, running_on, jax, jnp, mj
from moegemm import _jax_native as native
from test_jax_ops import _every_op

# A zero constant (scalar or splat) in stablehlo text or HLO text.
_ZERO_CONST = re.compile(
    r"(%[\w.#]+) = (?:stablehlo\.constant dense<(?:0\.0+e\+00|0\.0*|0|false)>|"
    r"\w+\[\] constant\((?:0|-?0\.0*|false)\))")


def _zero_names(text):
    return {m.group(1) for m in _ZERO_CONST.finditer(text)}


def _assert_no_fill(text, where):
    lowered = text.lower()
    assert "memset" not in lowered, f"{where}: memset"
    assert "input_output_alias" not in lowered and "output_operand_alias" not in lowered \
        and "output_to_operand_aliasing" not in lowered, f"{where}: aliasing"
    zeros = _zero_names(text)
    for line in text.splitlines():
        # a rank-0 "broadcast" of a scalar (e.g. the init value of cumsum's reduce_window) fills nothing
        scalar = re.search(r"-> tensor<[a-z]\w*>", line) or re.search(r"= \w+\[\] broadcast", line)
        if "broadcast" in line and not scalar:
            for name in zeros:
                assert not re.search(re.escape(name) + r"\b", line.split("=", 1)[-1]), \
                    f"{where}: broadcast of zero: {line.strip()}"
    assert "moegemm_" in text, f"{where}: no moegemm custom call"


def _check(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    _assert_no_fill(lowered.as_text(), "lowered")
    _assert_no_fill(lowered.compile().as_text(), "compiled")


@pytest.mark.parametrize("op", list(_every_op(np.random.default_rng(0))))
@pytest.mark.parametrize("platform", PLATFORMS)
def test_op_hlo_has_no_fill(op, platform):
    with running_on(platform_device(platform)):
        _check(_every_op(np.random.default_rng(0))[op])


@pytest.mark.parametrize("platform", PLATFORMS)
def test_ragged_dot_forward_and_backward_hlo_have_no_fill(platform):
    with running_on(platform_device(platform)):
        rng = np.random.default_rng(1)
        lhs, rhs, gs = rand(rng, (64, 32)), rand(rng, (4, 32, 16)), jnp.array([10, 0, 30, 4], jnp.int32)
        ct = rand(rng, (64, 16))
        _check(lambda l, r: mj.ragged_dot(l, r, gs), lhs, rhs)
        _check(lambda l, r, c: jax.vjp(lambda l, r: mj.ragged_dot(l, r, gs), l, r)[1](c), lhs, rhs, ct)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_moe_mlp_forward_and_backward_hlo_have_no_fill(platform):
    with running_on(platform_device(platform)):
        rng = np.random.default_rng(2)
        x, wu, wd = rand(rng, (64, 32)), rand(rng, (4, 32, 64)), rand(rng, (4, 32, 32))
        off = jnp.asarray(np.cumsum([10, 0, 30, 4]), jnp.int32)
        p, ct = jnp.ones((64,), jnp.float32) * 0.5, rand(rng, (64, 32))
        _check(lambda x, wu, wd, p: mj.moe_mlp(x, wu, wd, offsets=off, prob=p), x, wu, wd, p)
        _check(lambda x, wu, wd, p, c: jax.vjp(lambda *a: mj.moe_mlp(*a[:3], offsets=off, prob=a[3]),
                                               x, wu, wd, p)[1](c), x, wu, wd, p, ct)
        # the backward's own calls, checked above: grouped_gemm_dglu, grouped_gemm (dx), two grouped_gemm_wgrad
        text = jax.jit(lambda x, wu, wd, p, c: jax.vjp(
            lambda *a: mj.moe_mlp(*a[:3], offsets=off, prob=a[3]), x, wu, wd, p)[1](c)).lower(
            x, wu, wd, p, ct).as_text()
        targets = re.findall(r"@(moegemm_\w+)", text)
        assert targets.count("moegemm_grouped_gemm_dglu") == 1, targets
        assert targets.count("moegemm_grouped_gemm_wgrad") == 2, targets
        assert "moegemm_grouped_gemm" in targets, targets


def _workspace_results(text):
    """The size of the trailing u8 workspace result of every moegemm custom call in lowered text."""
    sizes = []
    for line in text.splitlines():
        if "stablehlo.custom_call @moegemm_" in line:
            found = re.search(r"tensor<(\d+)xui8>\)$", line.strip())
            assert found, f"a moegemm call without a trailing u8 workspace result: {line.strip()[:200]}"
            sizes.append(int(found.group(1)))
    return sizes


def _moe_mlp_backward():
    rng = np.random.default_rng(3)
    x, wu, wd = rand(rng, (64, 32)), rand(rng, (4, 32, 64)), rand(rng, (4, 32, 32))
    off = jnp.asarray(np.cumsum([10, 0, 30, 4]), jnp.int32)
    p, ct = jnp.ones((64,), jnp.float32) * 0.5, rand(rng, (64, 32))
    return jax.vjp(lambda *a: mj.moe_mlp(*a[:3], offsets=off, prob=a[3]), x, wu, wd, p)[1](ct)


@pytest.mark.parametrize("op", list(_every_op(np.random.default_rng(0))) + ["moe_mlp_backward"])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_call_carries_the_queried_workspace(op, platform, monkeypatch):
    """Each custom call's last result is a u8 buffer of exactly the bytes moegemm::X_workspace_bytes gave
    at trace time (device sizes: non-zero where a kernel needs scratch, e.g. the backward ops), which the
    handler passes to the op as its workspace."""
    queried = []

    def spy(*args, **kwargs):
        queried.append(real(*args, **kwargs))
        return queried[-1]

    real = native.workspace_bytes
    monkeypatch.setattr(native, "workspace_bytes", spy)
    jax.clear_caches()  # moe_mlp and ragged_dot run through jit: a trace cached by an earlier test queries nothing
    with running_on(platform_device(platform)):
        fn = _moe_mlp_backward if op == "moe_mlp_backward" else _every_op(np.random.default_rng(0))[op]
        text = jax.jit(fn).lower().as_text()
    found = _workspace_results(text)
    if op == "moe_mlp_backward":  # the forward's down projection (y) is traced, then dropped as unused
        assert len(found) >= 4 and not Counter(found) - Counter(queried), (found, queried)
    else:
        assert found == queried and len(found) == 1, (found, queried)


def test_the_checker_catches_a_zero_filled_aliased_output():
    """The same check on a deliberate jnp.zeros + input_output_aliases call must fail."""
    def filled(a):
        out = jnp.zeros((8, 8), jnp.float32)
        return jax.ffi.ffi_call("moegemm_gemm_amax", jax.ShapeDtypeStruct((8, 8), jnp.float32),
                                input_output_aliases={1: 0}, vmap_method="sequential")(a, out)
    with pytest.raises(AssertionError):
        _assert_no_fill(jax.jit(filled).lower(jnp.ones((8, 8), jnp.bfloat16)).as_text(), "lowered")
