"""moegemm.jax in code that outlives its trace: jax.export (with the custom-call checks that FFI_TARGETS
disables) and serialized executables, run in a process that imported moegemm.jax and traced no op (the FFI
targets are registered at import). Values are compared bitwise with the same calls made directly."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import moegemm.jax as mj  # noqa: E402

from jax_helpers import on_cpu  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# ragged_dot_general's ragged contraction: (T, H) x (T, N) -> (G, H, N).
_CONTRACTION = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([0], [0]), ([], [])),
                                                 lhs_ragged_dimensions=[0], rhs_group_dimensions=[])


def _layer(x, w_up, w_down, group_sizes):
    """An MoE MLP, a ragged_dot and a ragged_dot_general's ragged contraction, with the gradients of the MLP in
    x and w_up and of the contraction in x."""
    y = mj.moe_mlp(x, w_up, w_down, group_sizes)
    loss = lambda x, w: jnp.sum(mj.moe_mlp(x, w, w_down, group_sizes).astype(jnp.float32) ** 2)
    dx, dw_up = jax.grad(loss, argnums=(0, 1))(x, w_up)
    contraction = lambda x: mj.ragged_dot_general(x, y, group_sizes, _CONTRACTION,  # noqa: E731
                                                  preferred_element_type=jnp.float32)
    d_contraction = jax.grad(lambda x: jnp.sum(contraction(x) ** 2))(x)
    return (y, mj.ragged_dot(x, w_down.swapaxes(1, 2), group_sizes), dx, dw_up, contraction(x),
            d_contraction)


def _inputs():
    rng = np.random.default_rng(3)
    m, h, i = 40, 32, 16
    x = jnp.asarray(rng.standard_normal((m, h)), jnp.bfloat16)
    w_up = jnp.asarray(rng.standard_normal((4, h, 2 * i)) * 0.2, jnp.bfloat16)
    w_down = jnp.asarray(rng.standard_normal((4, i, h)) * 0.2, jnp.bfloat16)
    return x, w_up, w_down, jnp.asarray([7, 0, 20, 9], jnp.int32)  # 4 rows past the last expert


def _run_fresh(script: str, *args: str) -> str:
    """Runs `script` in a new Python process on the CPU platform; returns its stdout."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([HERE, *sys.path]))
    result = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_ffi_targets_name_every_op():
    assert mj.FFI_TARGETS == tuple(f"moegemm_{op}" for op in mj.__all__ if op.startswith(("grouped_", "gemm_")))


def _exported(args):
    """jax.export of the jitted layer with the custom-call checks of FFI_TARGETS disabled."""
    checks = [jax.export.DisabledSafetyCheck.custom_call(t) for t in mj.FFI_TARGETS]
    return jax.export.export(jax.jit(_layer), disabled_checks=checks)(*args)


def _assert_bitwise(want, got):
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(np.asarray(w, np.float32), np.asarray(g, np.float32))


def test_export_with_the_targets_checks_disabled_gives_the_direct_calls_values():
    args = _inputs()
    with pytest.raises(ValueError, match="custom calls whose targets have no compatibility guarantees"):
        jax.export.export(jax.jit(_layer))(*args)
    _assert_bitwise(jax.jit(_layer)(*args), _exported(args).call(*args))


def test_exported_layer_serialized_and_deserialized_gives_the_direct_calls_values():
    pytest.importorskip("flatbuffers")  # Exported.serialize needs it; jax does not depend on it
    args = _inputs()
    _assert_bitwise(jax.jit(_layer)(*args), jax.export.deserialize(_exported(args).serialize()).call(*args))


_LOAD = r'''
import pickle, sys
import numpy as np
import jax
from jax.experimental import serialize_executable
import moegemm.jax  # registers the FFI targets; no op is traced in this process

with open(sys.argv[1], "rb") as f:
    payload, in_tree, out_tree, args, want = pickle.load(f)
compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
for w, g in zip(want, compiled(*args)):
    assert np.array_equal(w, np.asarray(g, np.float32))
print("deserialized ok")
'''


def test_a_serialized_executable_runs_in_a_process_that_traced_no_op(tmp_path):
    """The executable of a jitted layer, serialized here, runs in a new process after `import moegemm.jax`
    alone: the ops' handlers exist before any op is traced."""
    import pickle

    from jax.experimental import serialize_executable

    with on_cpu():  # the new process runs on the CPU platform
        args = _inputs()
        compiled = jax.jit(_layer).lower(*args).compile()
        want = [np.asarray(o, np.float32) for o in compiled(*args)]
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    path = tmp_path / "layer.pkl"
    path.write_bytes(pickle.dumps((payload, in_tree, out_tree, [np.asarray(a) for a in args], want)))
    assert "deserialized ok" in _run_fresh(_LOAD, str(path))


_UNPICKLE = r'''
import pickle, sys
import numpy as np

with open(sys.argv[1], "rb") as f:
    calls, want = pickle.load(f)
for (fn, args), w in zip(calls, want):
    assert np.array_equal(w, np.asarray(fn(*args), np.float32))
print("unpickled ok")
'''


def test_pickled_entry_points_run_in_a_new_process(tmp_path):
    """ragged_dot, ragged_dot_general and moe_mlp pickle by reference as moegemm.jax's (also inside
    functools.partial, with the dimension numbers): unpickling them in a new process imports moegemm.jax, which
    defines what their own modules import from it."""
    import functools
    import pickle

    x, w_up, w_down, sizes = (np.asarray(a) for a in _inputs())
    calls = [(mj.ragged_dot, (x, w_up, sizes)),
             (functools.partial(mj.moe_mlp, activation="geglu"), (x, w_up, w_down, sizes)),
             (functools.partial(mj.ragged_dot_general, ragged_dot_dimension_numbers=_CONTRACTION), (x, x, sizes))]
    with on_cpu():  # the new process runs on the CPU platform
        want = [np.asarray(fn(*args), np.float32) for fn, args in calls]
    path = tmp_path / "calls.pkl"
    path.write_bytes(pickle.dumps((calls, want)))
    assert "unpickled ok" in _run_fresh(_UNPICKLE, str(path))
