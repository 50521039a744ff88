"""moegemm.jax under jax.shard_map on four CPU devices, with check_vma on (the default: the custom calls' results
vary along every mesh axis their operands vary along, and the gradients of replicated operands are summed over
the shards) and off: data parallel (each shard its own rows and group sizes) and expert parallel (each device
one expert's weights), values and gradients of ragged_dot against jax.lax.ragged_dot in f32, and of moe_mlp
against moe_mlp run shard by shard. With check_vma on, an out_specs of P() over values that differ per shard
is refused by JAX, and a scan carry through a ragged_dot with no groups keeps its type. Explicit sharding (a mesh
with an Explicit axis): gradients of moe_mlp and ragged_dot against unsharded runs, dx sharded like x. The
device count is fixed when JAX starts, so the check runs in a subprocess of its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

_SCRIPT = r'''
import sys

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

import moegemm.jax as mj
from jax_helpers import assert_close

CHECK_VMA = sys.argv[1] == "1"
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
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=CHECK_VMA)


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
ep_weights = jnp.asarray(rng.standard_normal((m, 4 * n)), jnp.float32)
ep_loss = lambda fn: lambda a, b: jnp.sum(fn(a, b).astype(jnp.float32) * ep_weights)
got = jax.jit(jax.grad(ep_loss(lambda a, b: ep(a, b, group_sizes)), argnums=(0, 1)))(lhs, rhs)
want = jax.grad(ep_loss(lambda a, b: jnp.concatenate(
    [f32_ragged(a, b[i:i + 1], group_sizes[i:i + 1]) for i in range(4)], axis=1)), argnums=(0, 1))(lhs, rhs)
assert_close(got[0], want[0], "expert parallel dlhs (summed over the devices)")
assert_close(got[1], want[1], "expert parallel drhs")

# moe_mlp, data parallel: the replicated weights' gradients are the sums of the shards' gradients.
h, i2 = 16, 32
x = jnp.asarray(rng.standard_normal((m, h)), jnp.bfloat16)
w_up = jnp.asarray(rng.standard_normal((g, h, i2)) * 0.3, jnp.bfloat16)
w_down = jnp.asarray(rng.standard_normal((g, i2 // 2, h)) * 0.3, jnp.bfloat16)
prob = jnp.asarray(rng.uniform(0.1, 1.0, (m,)), jnp.float32)
cot = jnp.asarray(rng.standard_normal((m, h)), jnp.float32)


def mlp_loss(fn):
    return lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * cot)


mlp_dp = smap(lambda xs, wu, wd, ps, s: mj.moe_mlp(xs, wu, wd, s[0], prob=ps),
              (P("x", None), P(), P(), P("x"), P("x", None)), P("x", None))
mlp_ref = lambda xs, wu, wd, ps: jnp.concatenate(
    [mj.moe_mlp(xs[16 * i:16 * (i + 1)], wu, wd, sizes[i], prob=ps[16 * i:16 * (i + 1)]) for i in range(4)])
assert_close(jax.jit(mlp_dp)(x, w_up, w_down, prob, sizes), mlp_ref(x, w_up, w_down, prob), "moe_mlp data parallel")
got = jax.jit(jax.grad(mlp_loss(lambda *a: mlp_dp(*a, sizes)), argnums=(0, 1, 2, 3)))(x, w_up, w_down, prob)
want = jax.grad(mlp_loss(mlp_ref), argnums=(0, 1, 2, 3))(x, w_up, w_down, prob)
for name, a, b in zip(("dx", "dw_up (summed)", "dw_down (summed)", "dprob"), got, want):
    assert_close(a, b, "moe_mlp data parallel " + name)

# Explicit sharding: x sharded by rows on a mesh with an Explicit axis. The custom calls' results are typed
# replicated; the gradients come back with their operands' shardings.
from jax.sharding import AxisType, NamedSharding
explicit = jax.make_mesh((4,), ("e",), axis_types=(AxisType.Explicit,))
gs = jnp.asarray([10, 20, 4, 30], jnp.int32)
with jax.set_mesh(explicit):
    x_rows = jax.device_put(x, NamedSharding(explicit, P("e", None)))
    got = jax.jit(jax.grad(mlp_loss(lambda *a: mj.moe_mlp(*a[:3], gs, prob=a[3])), argnums=(0, 1, 2, 3)))(
        x_rows, w_up, w_down, prob)
    assert jax.typeof(got[0]).sharding.spec == P("e", None), jax.typeof(got[0])
    got = [np.asarray(jax.device_get(g)).astype(np.float32) for g in got]  # compared outside the mesh
want = jax.grad(mlp_loss(lambda *a: mj.moe_mlp(*a[:3], gs, prob=a[3])), argnums=(0, 1, 2, 3))(x, w_up, w_down, prob)
for name, a, b in zip(("dx", "dw_up", "dw_down", "dprob"), got, want):
    assert_close(a, b, "moe_mlp explicit sharding " + name)
with jax.set_mesh(explicit):
    got = jax.jit(jax.grad(loss(lambda a, b: mj.ragged_dot(a, b, jnp.asarray([16, 16, 16, 16], jnp.int32))),
                           argnums=(0, 1)))(jax.device_put(lhs, NamedSharding(explicit, P("e", None))), rhs)
    got = [np.asarray(jax.device_get(g)).astype(np.float32) for g in got]
want = jax.grad(loss(lambda a, b: f32_ragged(a, b, jnp.asarray([16, 16, 16, 16]))), argnums=(0, 1))(lhs, rhs)
assert_close(got[0], want[0], "explicit sharding dlhs")
assert_close(got[1], want[1], "explicit sharding drhs")

if CHECK_VMA:
    # Values that differ per shard cannot leave as replicated: the results carry the operands' varying axes.
    wrong = smap(lambda a, b, s: mj.ragged_dot(a, b, s[0]), (P("x", None), P(), P("x", None)), P())
    try:
        jax.jit(wrong)(lhs, rhs, sizes)
        raise AssertionError("out_specs P() over per-shard values was accepted")
    except ValueError as e:
        assert "replicat" in str(e), e
    # With no groups the result is zeros without a kernel, typed as varying like its operands: a scan carry
    # through it keeps its type, as with jax.lax.ragged_dot.
    no_groups = jnp.zeros((0, k, k), jnp.bfloat16)
    carry = smap(lambda a, s: jax.lax.scan(lambda c, _: (mj.ragged_dot(c, no_groups, s[0]), None), a, None,
                                           length=2)[0], (P("x", None), P("x", None)), P("x", None))
    out = jax.jit(carry)(lhs, jnp.zeros((4, 0), jnp.int32))
    assert out.shape == (m, k) and not np.asarray(out, np.float32).any()
print("shard_map ok")
'''


def _run_on_four_cpu_devices(script: str, *args: str) -> str:
    """Runs `script` in a Python of its own whose JAX has four CPU devices; its stdout, once it has exited 0."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([here, *sys.path]))
    result = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("check_vma", [True, False], ids=["check_vma", "no_check_vma"])
def test_shard_map_data_and_expert_parallel(check_vma):
    assert "shard_map ok" in _run_on_four_cpu_devices(_SCRIPT, "1" if check_vma else "0")


_PLACEMENT_SCRIPT = r'''
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import moegemm.jax as mj

assert len(jax.devices()) == 4, jax.devices()
rng = np.random.default_rng(1)
bf16 = lambda shape: jnp.asarray(rng.standard_normal(shape), jnp.bfloat16)
# No groups, K = 0 and N = 0: calls that run no kernel. Their zeros lie where jax.lax.ragged_dot puts its
# result: on the operands' device (not the default one), committed, so that combining them with the
# operands' other results moves nothing, even under transfer_guard("disallow").
cases = {"no groups": ((16, 32), (0, 32, 16), [], 16), "K = 0": ((16, 0), (2, 0, 16), [3, 5], 16),
         "N = 0": ((16, 32), (2, 32, 0), [3, 5], 0)}
device = jax.devices()[2]
for name, (lhs_shape, rhs_shape, sizes, n) in cases.items():
    lhs, rhs = jax.device_put(bf16(lhs_shape), device), jax.device_put(bf16(rhs_shape), device)
    gs = jax.device_put(jnp.asarray(sizes, jnp.int32), device)
    ours, ref = mj.ragged_dot(lhs, rhs, gs), jax.lax.ragged_dot(lhs, rhs, gs)
    assert ours.devices() == ref.devices() == {device}, (name, ours.devices(), ref.devices())
    assert ours.committed and ref.committed, name
    assert ours.shape == (16, n) and not np.asarray(ours, np.float32).any(), name
    with jax.transfer_guard("disallow"):
        jax.jit(jnp.add)(ours, ref).block_until_ready()
# Sharded operands: the zeros come out sharded as jax.lax.ragged_dot's.
mesh = Mesh(np.array(jax.devices()), ("x",))
lhs = jax.device_put(bf16((16, 32)), NamedSharding(mesh, P("x", None)))
rhs, gs = bf16((0, 32, 16)), jnp.zeros((0,), jnp.int32)
ours, ref = mj.ragged_dot(lhs, rhs, gs), jax.lax.ragged_dot(lhs, rhs, gs)
assert ours.sharding.is_equivalent_to(ref.sharding, 2), (ours.sharding, ref.sharding)
print("placement ok")
'''


def test_ragged_dot_without_a_kernel_places_its_zeros_like_jax():
    assert "placement ok" in _run_on_four_cpu_devices(_PLACEMENT_SCRIPT)


_DEVICES_SCRIPT = r'''
import numpy as np
import jax
import jax.numpy as jnp

import moegemm.jax as mj

d0, d1 = jax.devices()[:2]
rng = np.random.default_rng(2)
bf16 = lambda shape, device: jax.device_put(jnp.asarray(rng.standard_normal(shape), jnp.bfloat16), device)
x, dy, b = bf16((32, 16), d0), bf16((32, 8), d0), bf16((2, 16, 8), d1)
offsets = jnp.asarray([10, 30], jnp.int32)  # uncommitted: goes wherever the others are
w = jax.device_put(jnp.zeros((2, 16, 8), jnp.float32), d1)
# Operands committed to different devices: refused, naming the operand and both placements.
for call, expected in [
        (lambda: mj.grouped_gemm_wgrad(x, dy, offsets, w=w), f"grouped_gemm_wgrad: w: expected an array on the "
         f"devices of x ({d0}), got one on {d1}"),
        (lambda: mj.grouped_gemm(x, b, offsets, b_layout="kn"), f"grouped_gemm: b: expected an array on the devices "
         f"of a ({d0}), got one on {d1}"),
        (lambda: mj.gemm_amax(x, b[0].T), f"gemm_amax: b: expected an array on the devices of a ({d0}), got one on "
         f"{d1}")]:
    try:
        call()
    except ValueError as error:
        assert expected in str(error), str(error)
    else:
        raise AssertionError(expected)
# One device for the committed operands, the uncommitted offsets moved there: runs, on that device.
got = mj.grouped_gemm_wgrad(x, dy, offsets, w=jax.device_put(w, d0))
assert got.devices() == {d0}, got.devices()
print("devices ok")
'''


def test_operands_on_different_devices_are_named():
    """jit's own error names the arguments of moegemm's internal function (inputs[3] of _call_jit); the op's
    names the operand, the first committed one it differs from, and both devices."""
    assert "devices ok" in _run_on_four_cpu_devices(_DEVICES_SCRIPT)


_AUTO_SCRIPT = r"""
import re

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import moegemm.jax as mj
from jax_helpers import assert_close

assert len(jax.devices()) == 4, jax.devices()
mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("d", "f"))
rows4, rows2 = NamedSharding(mesh, P(("d", "f"), None)), NamedSharding(mesh, P("d", None))
vec4 = NamedSharding(mesh, P(("d", "f")))
rng = np.random.default_rng(5)
bf16 = lambda shape, scale=1.0: jnp.asarray(rng.standard_normal(shape) * scale, jnp.bfloat16)
m, k, n, g = 64, 32, 48, 4
lhs, rhs = bf16((m, k)), bf16((g, k, n), 0.3)
sizes = jnp.asarray([10, 0, 30, 15], jnp.int32)  # groups across shard edges, an empty one, a 9-row tail
cot = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)


def same(got, want, what):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape and np.array_equal(got, want), what


def compiled(fn, *args):
    return jax.jit(fn).lower(*args).compile().as_text()


def check_local(text, op, result, operand, what):
    # Each device runs the call on its own rows (its first result and an operand have the shard's rows), and
    # nothing is gathered.
    assert "all-gather" not in text, what + ": an operand was gathered"
    calls = [line for line in text.splitlines() if 'custom_call_target="moegemm_' + op + '"' in line]
    assert calls, what
    for line in calls:
        assert re.search(r"= \(" + re.escape(result) + r"\{", line), (what, line[:300])
        assert re.search(r"operand_layout_constraints=\{" + re.escape(operand) + r"\{", line), (what, line[:300])


# ragged_dot on rows sharded four ways over a 2-D mesh: values, sharding, gradients.
fn = lambda a, b: mj.ragged_dot(a, b, sizes)
lhs4 = jax.device_put(lhs, rows4)
out = jax.jit(fn)(lhs4, rhs)
assert out.sharding.is_equivalent_to(rows4, 2), out.sharding
same(out, fn(lhs, rhs), "ragged_dot rows sharded")
text = compiled(fn, lhs4, rhs)
check_local(text, "grouped_gemm", "bf16[16,48]", "bf16[16,32]", "ragged_dot")
f32_ref = lambda a, b: jax.lax.ragged_dot(a.astype(jnp.float32), b.astype(jnp.float32), sizes,
                                          precision=jax.lax.Precision.HIGHEST)
loss = lambda f: (lambda a, b, t: jnp.sum(f(a, b).astype(jnp.float32) * t))
cot4 = jax.device_put(cot, rows4)  # the cotangent sharded like the output, as a loss over sharded rows gives it
got = jax.jit(jax.grad(loss(fn), argnums=(0, 1)))(lhs4, rhs, cot4)
assert got[0].sharding.is_equivalent_to(rows4, 2), got[0].sharding
plain = jax.grad(loss(fn), argnums=(0, 1))(lhs, rhs, cot)
same(got[0], plain[0], "ragged_dot dlhs")
assert_close(got[1], plain[1], "ragged_dot drhs")
want = jax.grad(loss(f32_ref), argnums=(0, 1))(lhs, rhs, cot)
assert_close(got[0], want[0], "ragged_dot dlhs against jax.lax")
assert_close(got[1], want[1], "ragged_dot drhs against jax.lax")
text = compiled(jax.grad(loss(fn), argnums=(0, 1)), lhs4, rhs, cot4)
assert "all-gather" not in text and "all-reduce" in text, "drhs: expected one sum over the shards"
check_local(text, "grouped_gemm_wgrad", "f32[4,32,48]", "bf16[16,32]", "ragged_dot drhs")

# ragged_dot_general's ragged contraction (the weight gradient's form) over T sharded four ways, with lhs as
# (T, K) and as (K, T): each device contracts its own entries, one sum over the shards, nothing gathered.
dy = bf16((m, n))
dy4 = jax.device_put(dy, rows4)
for lhs_k, lhs_t in ((0, lhs4), (1, jax.device_put(lhs.T, NamedSharding(mesh, P(None, ("d", "f")))))):
    numbers = jax.lax.RaggedDotDimensionNumbers((([lhs_k], [0]), ([], [])), [lhs_k], [])
    f = lambda a, d: mj.ragged_dot_general(a, d, sizes, numbers, preferred_element_type=jnp.float32)
    got = jax.jit(f)(lhs_t, dy4)
    assert got.shape == (g, k, n) and got.sharding.is_fully_replicated, (got.shape, got.sharding)
    assert_close(got, f(lhs if lhs_k == 0 else lhs.T, dy), "ragged_dot_general mode 2")
    assert_close(got, jax.lax.ragged_dot_general(np.asarray(lhs_t, np.float32), np.asarray(dy, np.float32), sizes,
                                                 numbers, precision=jax.lax.Precision.HIGHEST),
                 "ragged_dot_general mode 2 against jax.lax")
    text = compiled(f, lhs_t, dy4)
    assert "all-gather" not in text and "all-reduce" in text, "mode 2: expected one sum over the shards"
    check_local(text, "grouped_gemm_wgrad", "f32[4,32,48]", "bf16[16,32]", "ragged_dot_general mode 2")

# The raw ops with garbage offsets (decreasing, negative, past M): each shard addresses exactly its global rows.
garbage = jnp.asarray([20, 5, -3, 70], jnp.int32)
w_nk = bf16((g, n, k), 0.3)
for offs, what in ((garbage, "garbage offsets"), (jnp.cumsum(sizes).astype(jnp.int32), "offsets")):
    for zero_tail in (True, False):
        f = lambda a, b: mj.grouped_gemm(a, b, offs, zero_tail=zero_tail)
        got, want = np.asarray(jax.jit(f)(lhs4, w_nk), np.float32), np.asarray(f(lhs, w_nk), np.float32)
        end = int(min(max(0, int(np.max(np.asarray(offs)))), m))
        same(got[:end], want[:end], f"grouped_gemm {what}")
        if zero_tail:
            same(got, want, f"grouped_gemm {what} zero_tail")
    dy = bf16((m, n))
    for w_dtype in (jnp.float32, jnp.bfloat16):
        f = lambda x, d: mj.grouped_gemm_wgrad(x, d, offs, w_dtype=w_dtype)
        got, want = jax.jit(f)(lhs4, jax.device_put(dy, rows4)), f(lhs, dy)
        assert got.dtype == w_dtype and got.sharding.is_fully_replicated
        assert_close(got, want, f"wgrad {what}")
        empty = np.diff(np.concatenate([[0], np.minimum(np.maximum.accumulate(np.maximum(np.asarray(offs), 0)), m)])) == 0
        assert not np.asarray(got, np.float32)[empty].any() and np.asarray(got, np.float32)[~empty].any(), what
        # Adding into w: the shards' partial sums are summed and w is added once, after the sum; experts
        # without rows keep w's bits (-0.0 and subnormals included).
        w_np = np.random.default_rng(5).uniform(-4, 4, (g, k, n)).astype(np.float32)
        w_np[:, 0, :3] = [-0.0, 1e-40, -1e-39]
        w0 = jnp.asarray(w_np, w_dtype)
        f = lambda x, d, w: mj.grouped_gemm_wgrad(x, d, offs, w=w)
        got, want = jax.jit(f)(lhs4, jax.device_put(dy, rows4), w0), f(lhs, dy, w0)
        assert got.dtype == w_dtype and got.sharding.is_fully_replicated
        assert_close(got, want, f"wgrad into w {what}")
        check_local(compiled(f, lhs4, jax.device_put(dy, rows4), w0), "grouped_gemm_wgrad", "f32[4,32,48]",
                    "bf16[16,32]", f"wgrad into w {what}")
        bits = np.uint32 if w_dtype == jnp.float32 else np.uint16
        assert empty.any() and np.array_equal(np.asarray(got)[empty].view(bits), np.asarray(w0)[empty].view(bits)), what
        assert np.array_equal(np.asarray(want)[empty].view(bits), np.asarray(w0)[empty].view(bits)), what

# dGLU with prob, dprob, dbias (f32 and bf16) and amax, rows sharded two ways.
i = 32
w_up = bf16((g, k, 2 * i), 0.3)
h, c = mj.grouped_gemm_glu(lhs, w_up, jnp.cumsum(sizes).astype(jnp.int32), b_layout="kn", generate_c=True,
                           zero_tail=True)
dy, w_down = bf16((m, n)), bf16((g, i, n), 0.3)
prob = jnp.asarray(rng.uniform(0.1, 1.0, (m,)), jnp.float32)
for dbias_dtype in (jnp.float32, jnp.bfloat16):
    f = lambda d, cc, p: mj.grouped_gemm_dglu(d, w_down, cc, jnp.cumsum(sizes).astype(jnp.int32), prob=p,
                                               b_layout="nk", compute_dprob=True, compute_dbias=True,
                                               compute_amax=True, dbias_dtype=dbias_dtype, zero_tail=True)
    args2 = (jax.device_put(dy, rows2), jax.device_put(c, rows2), jax.device_put(prob, NamedSharding(mesh, P("d"))))
    got, want = jax.jit(f)(*args2), f(dy, c, prob)
    same(got.dc, want.dc, "dglu dc")
    same(got.dprob, want.dprob, "dglu dprob")
    same(got.amax, want.amax, "dglu amax")
    assert got.dbias.dtype == dbias_dtype
    assert_close(got.dbias, want.dbias, "dglu dbias")
    assert got.dc.sharding.is_equivalent_to(rows2, 2), got.dc.sharding
    check_local(compiled(f, *args2), "grouped_gemm_dglu", "bf16[32,64]", "bf16[32,48]", "dglu")

# moe_mlp with prob: the layer and its gradients.
w_d = bf16((g, i, k), 0.3)
cot_k = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
layer = lambda x, wu, wd, p: mj.moe_mlp(x, wu, wd, sizes, prob=p)
mlp_loss = lambda x, wu, wd, p, t: jnp.sum(layer(x, wu, wd, p).astype(jnp.float32) * t)
args4 = (lhs4, w_up, w_d, jax.device_put(prob, vec4), jax.device_put(cot_k, rows4))
same(jax.jit(layer)(*args4[:4]), layer(lhs, w_up, w_d, prob), "moe_mlp")
text = compiled(jax.grad(mlp_loss, argnums=(0, 1, 2, 3)), *args4)
assert "all-gather" not in text, "moe_mlp gradient: an operand was gathered"
got = jax.jit(jax.grad(mlp_loss, argnums=(0, 1, 2, 3)))(*args4)
want = jax.grad(mlp_loss, argnums=(0, 1, 2, 3))(lhs, w_up, w_d, prob, cot_k)
for name, a, b in zip(("dx", "dw_up", "dw_down", "dprob"), got, want):
    assert_close(a, b, "moe_mlp " + name)
same(got[0], want[0], "moe_mlp dx")
same(got[3], want[3], "moe_mlp dprob")

# The dense ops: amax is the maximum over the shards, and NaN where one shard's is NaN (pmax alone drops it).
w_dense = bf16((n, k), 0.3)
f = lambda a: mj.gemm_amax(a, w_dense)
got, want = jax.jit(f)(lhs4), f(lhs)
same(got[0], want[0], "gemm_amax c")
same(got[1], want[1], "gemm_amax amax")
with_nan = lhs.at[37, 5].set(jnp.nan)
got = jax.jit(f)(jax.device_put(with_nan, rows4))[1]
assert np.isnan(float(got)) and np.isnan(float(f(with_nan)[1])), float(got)
# gemm_dsrelu's dbias (the column sums) is summed over the shards, its amax the maximum of theirs.
c_dense = bf16((m, n))
for dbias_dtype in (jnp.float32, jnp.bfloat16):
    f = lambda d, cc: mj.gemm_dsrelu(d, w_dense.T, cc, b_layout="kn", compute_dprob=True, compute_dbias=True,
                                     compute_amax=True, dbias_dtype=dbias_dtype)
    got, want = jax.jit(f)(lhs4, jax.device_put(c_dense, rows4)), f(lhs, c_dense)
    same(got.dc, want.dc, "gemm_dsrelu dc")
    same(got.dprob, want.dprob, "gemm_dsrelu dprob")
    same(got.amax, want.amax, "gemm_dsrelu amax")
    assert got.dbias.dtype == dbias_dtype and got.dbias.shape == (n,)
    assert_close(got.dbias, want.dbias, "gemm_dsrelu dbias")

# What the rule does not shard is gathered, as without it: M not divisible by the shards, weights sharded
# by expert, K sharded, and vmap.
odd = bf16((66, k))
odd_sizes = jnp.asarray([10, 0, 40, 16], jnp.int32)
odd_fn = lambda a: mj.ragged_dot(a, rhs, jax.lax.with_sharding_constraint(odd_sizes, NamedSharding(mesh, P())))
odd_rows = lambda a: odd_fn(jax.lax.with_sharding_constraint(a, rows4))  # 66 rows over 4 shards
same(jax.jit(odd_rows)(odd), odd_fn(odd), "M not divisible")
same(jax.jit(fn)(lhs4, jax.device_put(rhs, NamedSharding(mesh, P(("d", "f"), None, None)))), fn(lhs, rhs),
     "weights sharded by expert")
same(jax.jit(fn)(jax.device_put(lhs, NamedSharding(mesh, P(None, "d"))), rhs), fn(lhs, rhs), "K sharded")
batch = jnp.stack([lhs, bf16((m, k))])
vm = lambda a: jax.vmap(lambda x: mj.ragged_dot(x, rhs, sizes))(a)
same(jax.jit(vm)(jax.device_put(batch, NamedSharding(mesh, P(None, ("d", "f"), None)))), vm(batch), "vmap")
print("auto ok")
"""


def test_row_sharded_operands_under_jit_run_on_their_shards():
    """Under jit's automatic partitioning, every op runs on each device's rows of a row-sharded activation:
    no operand is gathered, row outputs keep the sharding (bitwise the unsharded values), per-expert sums are
    summed over the shards and amax is their maximum; garbage offsets address exactly the global rows; what
    the rule does not shard (M not divisible, sharded weights, K sharded, vmap) is gathered and stays right."""
    assert "auto ok" in _run_on_four_cpu_devices(_AUTO_SCRIPT)


_EXPORT_SCRIPT = r"""
import os
import sys

import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import serialize_executable
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import moegemm.jax as mj

RULE = os.environ.get("MOEGEMM_JAX_ROW_SHARDING", "1") != "0"
mesh = Mesh(np.array(jax.devices()), ("x",))
rows = NamedSharding(mesh, P("x", None))
rng = np.random.default_rng(8)
a = jnp.asarray(rng.standard_normal((64, 32)), jnp.bfloat16)
b = jnp.asarray(rng.standard_normal((4, 32, 16)), jnp.bfloat16)
gs = jnp.asarray([10, 0, 30, 15], jnp.int32)
f = jax.jit(lambda a, b, g: mj.ragged_dot(a, b, g), in_shardings=(rows, None, None))
want = np.asarray(mj.ragged_dot(a, b, gs), np.float32)
checks = [jax.export.DisabledSafetyCheck.custom_call(t) for t in mj.FFI_TARGETS]
try:
    exported = jax.export.export(f, disabled_checks=checks)(a, b, gs)
    assert not RULE, "exported with the rule on"
    assert np.array_equal(np.asarray(exported.call(jax.device_put(a, rows), b, gs), np.float32), want)
except NotImplementedError as e:  # custom_partitioning's callback cannot be serialized
    assert RULE and "host_callbacks" in str(e), e
try:
    payload = serialize_executable.serialize(f.lower(a, b, gs).compile())
    assert not RULE, "serialized with the rule on"
    loaded = serialize_executable.deserialize_and_load(*payload)
    assert np.array_equal(np.asarray(loaded(jax.device_put(a, rows), b, gs), np.float32), want)
except (AttributeError, TypeError, ValueError) as e:  # a local function of custom_partitioning's lowering
    assert RULE and "pickle" in str(e), e
text = f.lower(a, b, gs).compile().as_text()
assert ("all-gather" in text) != RULE, "gathered where the rule is on, or not gathered where it is off"
print("export ok")
"""


@pytest.mark.parametrize("rule", ["1", "0"], ids=["rule_on", "rule_off"])
def test_multi_device_export_needs_the_rule_off(rule, monkeypatch):
    """jax.export and serialize_executable of a jit over four devices: refused while the row rule is on (JAX
    cannot serialize custom_partitioning's callback), and with MOEGEMM_JAX_ROW_SHARDING=0 exported, loaded and
    run with the unsharded call's values, the operands then gathered as without the rule."""
    monkeypatch.setenv("MOEGEMM_JAX_ROW_SHARDING", rule)
    assert "export ok" in _run_on_four_cpu_devices(_EXPORT_SCRIPT)


_EXPLICIT_SCRIPT = r"""
import re

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import moegemm.jax as mj
from jax_helpers import assert_close

mesh = jax.make_mesh((2, 2), ("d", "f"), axis_types=(AxisType.Explicit, AxisType.Explicit))
rng = np.random.default_rng(9)
bf16 = lambda shape, scale=1.0: jnp.asarray(rng.standard_normal(shape) * scale, jnp.bfloat16)
m, k, n, g = 64, 32, 48, 4
lhs, rhs, w_up, w_down = bf16((m, k)), bf16((g, k, n), 0.3), bf16((g, k, 64), 0.3), bf16((g, 32, k), 0.3)
sizes = jnp.asarray([10, 0, 30, 15], jnp.int32)
prob = jnp.asarray(rng.uniform(0.1, 1.0, (m,)), jnp.float32)
cot, cot_k = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((m, n), (m, k)))


def loss(a, b, t):
    return jnp.sum(mj.ragged_dot(a, b, sizes).astype(jnp.float32) * t)


def mlp_loss(x, u, d, p, t):
    return jnp.sum(mj.moe_mlp(x, u, d, sizes, prob=p).astype(jnp.float32) * t)


want = [mj.ragged_dot(lhs, rhs, sizes)] + list(jax.grad(loss, (0, 1))(lhs, rhs, cot))
want_mlp = jax.grad(mlp_loss, (0, 1, 2, 3))(lhs, w_up, w_down, prob, cot_k)
for rows in (P(("d", "f"), None), P("d", None)):
    with jax.set_mesh(mesh):
        put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
        a, t, t_k, p = put(lhs, rows), put(cot, rows), put(cot_k, rows), put(prob, P(rows[0]))
        fwd = jax.jit(lambda a, b: mj.ragged_dot(a, b, sizes))
        grad = jax.jit(jax.grad(loss, (0, 1)))
        mlp = jax.jit(jax.grad(mlp_loss, (0, 1, 2, 3)))
        got = [fwd(a, rhs)] + list(grad(a, rhs, t))
        got_mlp = mlp(a, w_up, w_down, p, t_k)
        for x in (got[0], got[1], got_mlp[0]):
            assert jax.typeof(x).sharding.spec == rows, (rows, jax.typeof(x))
        texts = [f.lower(*args).compile().as_text() for f, args in
                 ((fwd, (a, rhs)), (grad, (a, rhs, t)), (mlp, (a, w_up, w_down, p, t_k)))]
        local = 64 // (4 if len(rows[0]) == 2 and isinstance(rows[0], tuple) else 2)
        assert re.search(r"= \(bf16\[%d,48\]\{[^\n]*moegemm_grouped_gemm\"" % local, texts[0]), texts[0][-2000:]
        # Exported as it runs: the rule is a shard_map here, with no callback to serialize.
        checks = [jax.export.DisabledSafetyCheck.custom_call(x) for x in mj.FFI_TARGETS]
        exported = jax.export.export(grad, disabled_checks=checks)(a, rhs, t)
        again = exported.call(a, rhs, t)
    for text in texts:
        assert "all-gather" not in text, "an operand was gathered"
    got = [np.asarray(jax.device_get(x), np.float32) for x in got]
    assert np.array_equal(got[0], np.asarray(want[0], np.float32)), "forward"
    assert np.array_equal(got[1], np.asarray(want[1], np.float32)), "dlhs"
    assert_close(got[2], want[2], "drhs")
    for a_, b_ in zip(again, got[1:]):
        assert np.array_equal(np.asarray(jax.device_get(a_), np.float32), b_), "exported"
    for name, a_, b_ in zip(("dx", "dw_up", "dw_down", "dprob"), got_mlp, want_mlp):
        assert_close(np.asarray(jax.device_get(a_), np.float32), b_, "moe_mlp " + name)

# Without jax.set_mesh: the operands' types carry the mesh, and the gradient needs no mesh context.
mesh1 = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Explicit,))
a1 = jax.device_put(lhs, NamedSharding(mesh1, P("d", None)))
t1 = jax.device_put(cot, NamedSharding(mesh1, P("d", None)))
out = jax.jit(lambda a, b: mj.ragged_dot(a, b, sizes))(a1, rhs)
assert jax.typeof(out).sharding.spec == P("d", None), jax.typeof(out)
assert np.array_equal(np.asarray(out, np.float32), np.asarray(want[0], np.float32)), "no mesh context"
got = jax.jit(jax.grad(loss, (0, 1)))(a1, rhs, t1)
assert jax.typeof(got[0]).sharding.spec == P("d", None), jax.typeof(got[0])
assert np.array_equal(np.asarray(got[0], np.float32), np.asarray(want[1], np.float32)), "no mesh context dlhs"

# Weights sharded by expert (or along N) on an Explicit axis: gathered, the rows stay sharded, so that the
# result's type does not depend on the weights' sharding (a scan carry through the layer keeps its type).
mesh2 = jax.make_mesh((2, 2), ("dp", "ep"), axis_types=(AxisType.Explicit, AxisType.Explicit))
with jax.set_mesh(mesh2):
    a2 = jax.device_put(lhs, NamedSharding(mesh2, P("dp", None)))
    for w_spec in (P("ep", None, None), P(None, None, "ep")):
        w2 = jax.device_put(rhs, NamedSharding(mesh2, w_spec))
        out = jax.jit(lambda a, b: mj.ragged_dot(a, b, sizes))(a2, w2)
        assert jax.typeof(out).sharding.spec == P("dp", None), (w_spec, jax.typeof(out))
        assert np.array_equal(np.asarray(jax.device_get(out), np.float32), np.asarray(want[0], np.float32)), w_spec
    w_sq = jax.device_put(bf16((g, k, k), 0.3), NamedSharding(mesh2, P("ep", None, None)))
    carry = jax.jit(lambda a, w: jax.lax.scan(lambda c, _: (mj.ragged_dot(c, w, sizes), None), a, None, length=2)[0])
    assert jax.typeof(carry(a2, w_sq)).sharding.spec == P("dp", None)

# A mesh of an Explicit and an Auto axis, rows along the Auto one: the call is made whole (gathered), and the
# values are the unsharded ones.
mesh3 = jax.make_mesh((2, 2), ("dp", "tp"), axis_types=(AxisType.Explicit, AxisType.Auto))
with jax.set_mesh(mesh3):
    a3, t3 = (jax.device_put(x, NamedSharding(mesh3, P("tp", None))) for x in (lhs, cot))
    got = grad(a3, rhs, t3)
assert np.array_equal(np.asarray(jax.device_get(got[0]), np.float32), np.asarray(want[1], np.float32)), "mixed"

# out_sharding, as jax.lax.ragged_dot takes it: the result resharded to it and typed with it, under jit and
# eagerly, with a PartitionSpec of the mesh context or a NamedSharding; the gradient of lhs keeps lhs's type.
with jax.set_mesh(mesh1):
    for spec in (P(None, "d"), P("d", None), P()):
        for out_sharding in (spec, NamedSharding(mesh1, spec)):
            out = jax.jit(lambda a, b: mj.ragged_dot(a, b, sizes, out_sharding=out_sharding))(a1, rhs)
            assert jax.typeof(out).sharding.spec == P(*spec, *[None] * (2 - len(spec))), (spec, jax.typeof(out))
            assert np.array_equal(np.asarray(jax.device_get(out), np.float32), np.asarray(want[0], np.float32)), spec
        sharded_loss = lambda a, b, t: jnp.sum(mj.ragged_dot(a, b, sizes, out_sharding=spec).astype(jnp.float32) * t)
        got = jax.jit(jax.grad(sharded_loss, (0, 1)))(a1, rhs, jax.device_put(cot, NamedSharding(mesh1, spec)))
        assert jax.typeof(got[0]).sharding.spec == P("d", None), (spec, jax.typeof(got[0]))
        assert np.array_equal(np.asarray(jax.device_get(got[0]), np.float32), np.asarray(want[1], np.float32)), spec
        assert_close(np.asarray(jax.device_get(got[1]), np.float32), want[2], f"drhs, out_sharding={spec}")
columns = NamedSharding(mesh1, P(None, "d"))
out = mj.ragged_dot(a1, rhs, sizes, out_sharding=columns)  # eager, without a mesh context
assert jax.typeof(out).sharding.spec == P(None, "d") and out.sharding == columns, jax.typeof(out)
assert np.array_equal(np.asarray(jax.device_get(out), np.float32), np.asarray(want[0], np.float32)), "eager"
# jax.lax.ragged_dot gives the same type with the same out_sharding.
lax_out = jax.jit(lambda a, b: jax.lax.ragged_dot(a, b, sizes, out_sharding=columns))(a1, rhs)
assert jax.typeof(lax_out) == jax.typeof(out), (jax.typeof(lax_out), jax.typeof(out))
# Entries past the result's rank that are None are dropped, as jax.lax drops them.
with jax.set_mesh(mesh1):
    out = jax.jit(lambda a, b: mj.ragged_dot(a, b, sizes, out_sharding=P("d", None, None)))(a1, rhs)
assert jax.typeof(out).sharding.spec == P("d", None), jax.typeof(out)
# Refused, naming out_sharding (jax.lax refuses each too, with errors of its own): an Auto axis (also through a
# NamedSharding), an axis the mesh lacks, an axis past the result's rank, a NamedSharding of a mesh other than
# the context's, unreduced axes.
auto = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Auto,))
for bad, message, context in (
        (NamedSharding(auto, P(None, "d")), "axis 'd' of P(None, 'd') is AxisType.Auto", None),
        (P("e"), "axis 'e' of P('e',) is not an axis of the mesh {'d': 4}", mesh1),
        (NamedSharding(mesh1, P(None, None, "d")), "expected at most 2 entries", None),
        (NamedSharding(mesh, P("d", None)), "expected a sharding of the context's mesh", mesh1)):
    try:
        if context is None:
            mj.ragged_dot(lhs, rhs, sizes, out_sharding=bad)
        else:
            with jax.set_mesh(context):
                mj.ragged_dot(lhs, rhs, sizes, out_sharding=bad)
    except ValueError as e:
        assert str(e).startswith("moegemm.jax.ragged_dot: out_sharding: ") and message in str(e), str(e)
    else:
        raise AssertionError(f"out_sharding={bad} accepted")
try:
    with jax.set_mesh(mesh1):
        mj.ragged_dot(lhs, rhs, sizes, out_sharding=P(None, None, unreduced={"d"}))
except NotImplementedError as e:
    assert str(e).startswith("moegemm.jax.ragged_dot: out_sharding: unreduced or reduced axes"), str(e)
else:
    raise AssertionError("unreduced axes accepted")
with jax.set_mesh(auto):
    try:
        jax.jit(lambda a, b: mj.ragged_dot(a, b, sizes, out_sharding=P("d", None)))(lhs, rhs)
    except ValueError as e:
        assert "axis 'd' of P('d', None) is AxisType.Auto" in str(e), str(e)
    else:
        raise AssertionError("an Auto axis accepted")

# ragged_dot_general in a mesh context with an Explicit axis: its ragged rows with and without out_sharding
# (a PartitionSpec of the context), as ragged_dot; its ragged contraction over T sharded four ways.
rows_dims = jax.lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])
contraction = jax.lax.RaggedDotDimensionNumbers((([0], [0]), ([], [])), [0], [])
dy = bf16((m, n))
want_w = mj.ragged_dot_general(lhs, dy, sizes, contraction, preferred_element_type=jnp.float32)
with jax.set_mesh(mesh1):
    for spec in (None, P("d", None), P(None, "d")):
        out = jax.jit(lambda a, b: mj.ragged_dot_general(a, b, sizes, rows_dims, out_sharding=spec))(a1, rhs)
        assert jax.typeof(out).sharding.spec == (spec or P("d", None)), (spec, jax.typeof(out))
        assert np.array_equal(np.asarray(jax.device_get(out), np.float32), np.asarray(want[0], np.float32)), spec
    dy1 = jax.device_put(dy, NamedSharding(mesh1, P("d", None)))
    w = jax.jit(lambda a, d: mj.ragged_dot_general(a, d, sizes, contraction,
                                                   preferred_element_type=jnp.float32))(a1, dy1)
    assert_close(np.asarray(jax.device_get(w), np.float32), want_w, "ragged_dot_general mode 2, explicit")
print("explicit ok")
"""


def test_row_sharded_operands_on_an_explicit_mesh_run_on_their_shards():
    """On a mesh with Explicit axes, operands typed as sharded along M run each device's rows (the rule as a
    shard_map): results and dx typed with the rows' sharding, nothing gathered, the shard's shapes in the
    compiled module, values as unsharded, and the gradient exported and run again with the same values;
    ragged_dot's out_sharding (types, values, gradients, jax.lax.ragged_dot's type, the axes it refuses);
    ragged_dot_general in a mesh context, with and without out_sharding."""
    assert "explicit ok" in _run_on_four_cpu_devices(_EXPLICIT_SCRIPT)
