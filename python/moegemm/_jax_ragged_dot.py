"""``moegemm.jax.ragged_dot``: a drop-in for ``jax.lax.ragged_dot`` on moegemm's grouped GEMMs."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from moegemm import _jax_checks as chk
from moegemm._jax_first_order import first_order_only
from moegemm import _jax_vma as vma
from moegemm.jax import grouped_gemm, grouped_gemm_wgrad

_OP = "ragged_dot"
# The zeros of a call with nothing to contract, jitted over the operands, unused but kept (jit would prune
# them, and place its result on the default device): an eager call then places them where
# jax.lax.ragged_dot places its result (the operands' device or sharding, committed), and moves no host
# scalar to the device.
_zeros = jax.jit(lambda lhs, rhs, group_sizes, dtype: jnp.zeros((lhs.shape[0], rhs.shape[2]), dtype),
                 static_argnums=(3,), keep_unused=True)


def _wgrad_as(lhs, dout, offsets, dtype):
    if np.dtype(dtype) == np.dtype(jnp.bfloat16):
        return grouped_gemm_wgrad(lhs, dout, offsets, w_dtype=jnp.bfloat16)
    return grouped_gemm_wgrad(lhs, dout, offsets, w_dtype=jnp.float32).astype(dtype)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def _ragged_dot(lhs, rhs, group_sizes, out_dtype):
    return grouped_gemm(lhs, rhs, chk.offsets_from_sizes(group_sizes, lhs.shape[0]), b_layout="kn", d_dtype=out_dtype,
                        zero_tail=True)


@first_order_only(_OP, static_argnums=(3,))
def _ragged_dot_fwd(lhs, rhs, group_sizes, out_dtype):
    offsets = chk.offsets_from_sizes(group_sizes, lhs.shape[0])
    out = grouped_gemm(lhs, rhs, offsets, b_layout="kn", d_dtype=out_dtype, zero_tail=True)
    return out, (lhs, rhs, offsets)


@first_order_only(_OP, static_argnums=(0,))
def _ragged_dot_bwd(out_dtype, residuals, dout):
    lhs, rhs, offsets = residuals
    dout = dout.astype(lhs.dtype)
    # d lhs[r] = dout[r] @ rhs[g]^T: rhs (G, K, N) read as "nk" storage with N' = K, K' = N.
    dlhs = grouped_gemm(dout, rhs, offsets, b_layout="nk", d_dtype=lhs.dtype, zero_tail=True)
    # d rhs[g] = lhs[rows_g]^T @ dout[rows_g]; groups without rows are exactly 0.
    drhs = _wgrad_as(lhs, dout, offsets, rhs.dtype)
    return vma.cotangent_like(dlhs, lhs), vma.cotangent_like(drhs, rhs), None


_ragged_dot.defvjp(_ragged_dot_fwd, _ragged_dot_bwd)
# Called through jit: an eager custom_vjp call traces its function anew every time (~0.5 ms of host time per
# call, where jit's dispatch of the traced call costs ~10 us). In a traced caller it is a nested jit call, which
# XLA inlines when it compiles.
_ragged_dot_jit = jax.jit(_ragged_dot, static_argnums=(3,))


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None, group_offset=None,
               out_sharding=None):
    """Drop-in for ``jax.lax.ragged_dot(lhs, rhs, group_sizes)``: ``out[r] = lhs[r] @ rhs[g]`` for the
    rows r of group g (groups are consecutive row blocks of sizes ``group_sizes``); rows at or past
    ``sum(group_sizes)`` are zero (written by the op: ``zero_tail``, never a fill).

    Args:
      lhs: (M, K) bf16 or f16 (f16 on the CPU backend only: the GPU kernels take bf16).
      rhs: (G, K, N), lhs's dtype. K and N multiples of 8 (16-byte aligned rows).
      group_sizes: (G,) integer array of any integer dtype; offsets = cumsum(group_sizes) clamped to [0, M],
        as int32, inside the computation (no host sync). The sum saturates at M and never wraps (a negative
        size counts as 0): sizes summing past M are clamped at M, as in jax.lax.ragged_dot.
      precision: checked as jax.lax.ragged_dot checks it (ValueError for a value it refuses), otherwise
        ignored: products accumulate in f32 always.
      preferred_element_type: output dtype, bf16/f16/f32 (default lhs.dtype).
      group_offset: not supported (raises NotImplementedError; jax.lax.ragged_dot refuses an array there
        too, with a TypeError).
      out_sharding: None, a NamedSharding, or a PartitionSpec of the mesh context (jax.set_mesh), naming
        Explicit mesh axes only, as jax.lax.ragged_dot takes it (which needs it on an Explicit mesh). The
        result is resharded to it (jax.sharding.reshard) and typed with it; the gradient of lhs comes back
        with lhs's sharding. None: typed as docs/jax.md says (lhs's row sharding, or replicated).
    G = 0, K = 0 and N = 0 are accepted, as by jax.lax.ragged_dot: the result is then zero (or has no
    columns); G <= 1024.
    Returns:
      (M, N) array. Differentiable (reverse mode only, jax.custom_vjp: jax.jvp, jax.jacfwd and the function
      jax.linearize returns raise JAX's TypeError for a custom_vjp function, and jax.linear_transpose its
      NotImplementedError; jax.vjp gives the transpose) in lhs and rhs:
      d lhs = grouped_gemm(dout, rhs as nk, zero_tail=True), d rhs = grouped_gemm_wgrad(lhs, dout)
      (empty groups get exact zeros). A f32 cotangent is rounded to lhs's dtype first.
    Raises:
      TypeError for dtypes other than bf16/f16 (use jax.lax.ragged_dot for those), a non-integer
      group_sizes or an operand that is not an array (a list); ValueError for shapes, at trace time,
      including M > 2^31 - 1 (the offsets are int32), and for a precision that jax.lax refuses.
    """
    chk.check_precision(_OP, precision)
    if group_offset is not None:
        raise NotImplementedError("moegemm.jax.ragged_dot: group_offset is not supported")
    chk.check_rank(_OP, "lhs", lhs, 2, "(M, K)")
    chk.check_rank(_OP, "rhs", rhs, 3, "(G, K, N)")
    chk.check_dtype(_OP, "lhs", lhs, chk.SIXTEEN_BIT)
    chk.check_dtype(_OP, "rhs", rhs, (lhs.dtype,))
    chk.check_extent(_OP, "rhs", rhs, 1, lhs.shape[1], "K from lhs")
    chk.check_group_sizes(_OP, group_sizes, rhs.shape[0], "G from rhs", "lhs", lhs)
    if rhs.shape[0] > chk.MAX_EXPERTS:
        raise ValueError(f"moegemm.jax.ragged_dot: rhs: expected at most {chk.MAX_EXPERTS} groups (dim 0), got "
                         f"shape {tuple(rhs.shape)}")
    chk.check_aligned(_OP, "lhs", lhs, 1, "K")
    chk.check_aligned(_OP, "rhs", rhs, 2, "N")
    out_dtype = chk.output_dtype(_OP, "preferred_element_type", preferred_element_type, lhs.dtype)
    sharding = vma.requested_sharding(_OP, out_sharding, 2)
    if rhs.shape[0] == 0 or lhs.shape[1] == 0 or rhs.shape[2] == 0:
        # No groups (every row is past the last one), nothing to contract or no columns: zero (or empty), as
        # jax.lax.ragged_dot gives; no kernel to run. Inside shard_map typed as varying like the operands.
        out = vma.cast_all([_zeros(lhs, rhs, group_sizes, out_dtype)], vma.union([lhs, rhs, group_sizes]))[0]
    else:
        out = _ragged_dot_jit(lhs, rhs, group_sizes, out_dtype)
    return out if sharding is None else jax.sharding.reshard(out, sharding)
