"""No output is initialised by XLA: the lowered and compiled HLO of every op (and of ragged_dot and
moe_mlp, forward and backward) has no memset, no broadcast of zero and no aliasing into our outputs.
Lowered for device_for(the ops of the call): the GPU's HLO when one is present and they all have sm_90a
kernels, the CPU's otherwise."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpu_support import MOE_MLP_BACKWARD, MOE_MLP_FORWARD, RAGGED_DOT_BACKWARD, RAGGED_DOT_FORWARD
from jax_helpers import on_device_for, rand, jax, jnp, mj
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
def test_op_hlo_has_no_fill(op):
    with on_device_for(op):
        _check(_every_op(np.random.default_rng(0))[op])


def test_ragged_dot_forward_and_backward_hlo_have_no_fill():
    rng = np.random.default_rng(1)
    lhs, rhs, gs = rand(rng, (64, 32)), rand(rng, (4, 32, 16)), jnp.array([10, 0, 30, 4], jnp.int32)
    ct = rand(rng, (64, 16))
    with on_device_for(*RAGGED_DOT_FORWARD):
        _check(lambda l, r: mj.ragged_dot(l, r, gs), lhs, rhs)
    with on_device_for(*RAGGED_DOT_BACKWARD):
        _check(lambda l, r, c: jax.vjp(lambda l, r: mj.ragged_dot(l, r, gs), l, r)[1](c), lhs, rhs, ct)


def test_moe_mlp_forward_and_backward_hlo_have_no_fill():
    rng = np.random.default_rng(2)
    x, wu, wd = rand(rng, (64, 32)), rand(rng, (4, 32, 64)), rand(rng, (4, 32, 32))
    off = jnp.asarray(np.cumsum([10, 0, 30, 4]), jnp.int32)
    p, ct = jnp.ones((64,), jnp.float32) * 0.5, rand(rng, (64, 32))
    with on_device_for(*MOE_MLP_FORWARD):
        _check(lambda x, wu, wd, p: mj.moe_mlp(x, wu, wd, offsets=off, prob=p), x, wu, wd, p)
    with on_device_for(*MOE_MLP_BACKWARD):
        _check(lambda x, wu, wd, p, c: jax.vjp(lambda *a: mj.moe_mlp(*a[:3], offsets=off, prob=a[3]),
                                               x, wu, wd, p)[1](c), x, wu, wd, p, ct)


def test_the_checker_catches_a_zero_filled_aliased_output():
    """The same check on a deliberate jnp.zeros + input_output_aliases call must fail."""
    def filled(a):
        out = jnp.zeros((8, 8), jnp.float32)
        return jax.ffi.ffi_call("moegemm_gemm_amax", jax.ShapeDtypeStruct((8, 8), jnp.float32),
                                input_output_aliases={1: 0}, vmap_method="sequential")(a, out)
    with pytest.raises(AssertionError):
        _assert_no_fill(jax.jit(filled).lower(jnp.ones((8, 8), jnp.bfloat16)).as_text(), "lowered")
