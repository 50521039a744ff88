"""GPU only: the sm_90a kernels through the JAX binding against the CPU reference through the same
binding (same inputs, both platforms' handlers of one target name), under jit with many calls in one
executable (so that XLA may capture them into a command buffer)."""

from __future__ import annotations

import numpy as np
import pytest

from jax_helpers import assert_close, gpu_ready, rand, jax, jnp, mj

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_ready(), reason="needs an sm_90 GPU as JAX's default device")]


def _on(device, fn, *args):
    args = [jax.device_put(a, device) for a in args]
    return jax.jit(fn)(*args)


@pytest.mark.parametrize("sizes", [[93] * 8, [0, 500, 0, 1, 243, 0, 0, 7], [0] * 8])
def test_gpu_matches_cpu_reference_through_the_binding(sizes):
    rng = np.random.default_rng(0)
    m, h, i = 1000, 256, 128
    x, wu, wd = rand(rng, (m, h)), rand(rng, (8, h, 2 * i), scale=0.1), rand(rng, (8, i, h), scale=0.1)
    prob = jnp.asarray(rng.uniform(0, 1, m), jnp.float32)
    gs = jnp.asarray(sizes, jnp.int32)

    def step(x, wu, wd, p):  # forward and backward: 7 custom calls in one executable
        return jax.value_and_grad(lambda *a: (mj.moe_mlp(*a[:3], gs, prob=a[3]).astype(jnp.float32) ** 2)
                                  .sum(), (0, 1, 2, 3))(x, wu, wd, p)

    gpu = _on(jax.devices("gpu")[0], step, x, wu, wd, prob)
    cpu = _on(jax.devices("cpu")[0], step, x, wu, wd, prob)
    for g, c in zip(jax.tree_util.tree_leaves(gpu), jax.tree_util.tree_leaves(cpu)):
        assert_close(np.asarray(g, np.float32), np.asarray(c, np.float32), "gpu vs cpu")
    again = _on(jax.devices("gpu")[0], step, x, wu, wd, prob)
    for g, a in zip(jax.tree_util.tree_leaves(gpu), jax.tree_util.tree_leaves(again)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(a))
