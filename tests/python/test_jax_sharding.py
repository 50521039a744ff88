"""moegemm.jax under jax.shard_map on four CPU devices, with check_vma=False (docs/jax.md: the custom calls'
outputs carry no varying-manual-axes type, so check_vma=True cannot type their gradients): data parallel (each
shard its own rows and group sizes) and expert parallel (each device one expert's weights), values and
gradients against jax.lax.ragged_dot in f32. The device count is fixed when JAX starts, so the check runs in
a subprocess of its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

_SCRIPT = r'''
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

import moegemm.jax as mj
from jax_helpers import assert_close

assert len(jax.devices()) == 4, jax.devices()
mesh = Mesh(np.array(jax.devices()), ("x",))
rng = np.random.default_rng(0)
m, k, n, g = 64, 16, 32, 4
lhs = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
rhs = jnp.asarray(rng.standard_normal((g, k, n)) * 0.3, jnp.bfloat16)
weights = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)
# Data parallel: shard i holds rows 16 i .. 16 i + 15 and routes them with sizes[i] (empty groups, a tail).
sizes = jnp.asarray([[4, 4, 4, 4], [16, 0, 0, 0], [0, 0, 0, 10], [1, 2, 3, 4]], jnp.int32)


def f32_ragged(a, b, s):
    return jax.lax.ragged_dot(a.astype(jnp.float32), b.astype(jnp.float32), s, precision=jax.lax.Precision.HIGHEST)


def smap(fn, in_specs, out_specs):
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def loss(fn):
    return lambda a, b: jnp.sum(fn(a, b).astype(jnp.float32) * weights)


dp = smap(lambda a, b, s: mj.ragged_dot(a, b, s[0]), (P("x", None), P(), P("x", None)), P("x", None))
dp_ref = lambda a, b: jnp.concatenate([f32_ragged(a[16 * i:16 * (i + 1)], b, sizes[i]) for i in range(4)])
assert_close(jax.jit(dp)(lhs, rhs, sizes), dp_ref(lhs, rhs), "data parallel")
got = jax.jit(jax.grad(loss(lambda a, b: dp(a, b, sizes)), argnums=(0, 1)))(lhs, rhs)
want = jax.grad(loss(dp_ref), argnums=(0, 1))(lhs, rhs)
assert_close(got[0], want[0], "data parallel dlhs")
assert_close(got[1], want[1], "data parallel drhs (summed over the shards)")

# Expert parallel: device i holds expert i's weights and its group size, and reads all rows.
group_sizes = jnp.asarray([10, 5, 20, 21], jnp.int32)
ep = smap(lambda a, b, s: mj.ragged_dot(a, b, s), (P(), P("x"), P("x")), P(None, "x"))
ep_ref = jnp.concatenate([f32_ragged(lhs, rhs[i:i + 1], group_sizes[i:i + 1]) for i in range(4)], axis=1)
assert_close(jax.jit(ep)(lhs, rhs, group_sizes), ep_ref, "expert parallel")
print("shard_map ok")
'''


def test_shard_map_data_and_expert_parallel_with_check_vma_off():
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([here, *sys.path]))
    result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "shard_map ok" in result.stdout
