"""``moegemm.jax.ragged_dot`` and ``ragged_dot_general``: drop-ins for ``jax.lax.ragged_dot`` and
``jax.lax.ragged_dot_general`` on moegemm's grouped GEMMs."""

from __future__ import annotations

import contextlib
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np

from moegemm import _jax_checks as chk
from moegemm._jax_first_order import first_order_only
from moegemm import _jax_vma as vma
from moegemm.jax import grouped_gemm, grouped_gemm_wgrad

_OP = "ragged_dot"
_GENERAL = "ragged_dot_general"
# rhs read in the other layout: (G, K, N) as "nk" storage is (G, N', K') with N' = K, K' = N, and back.
_OTHER_LAYOUT = {"kn": "nk", "nk": "kn"}
# The zeros of a call with nothing to compute, jitted over the operands, unused but kept (jit would prune
# them, and place its result on the default device): an eager call then places them where
# jax.lax.ragged_dot places its result (the operands' device or sharding, committed), and moves no host
# scalar to the device.
_zeros = jax.jit(lambda lhs, rhs, group_sizes, shape, dtype: jnp.zeros(shape, dtype),
                 static_argnums=(3, 4), keep_unused=True)


def wgrad_as(lhs, dout, offsets, dtype, transpose_output=False):
    """grouped_gemm_wgrad's result in ``dtype``: computed in bf16 for bf16, else in f32 and cast."""
    if np.dtype(dtype) == np.dtype(jnp.bfloat16):
        return grouped_gemm_wgrad(lhs, dout, offsets, transpose_output=transpose_output, w_dtype=jnp.bfloat16)
    return grouped_gemm_wgrad(lhs, dout, offsets, transpose_output=transpose_output,
                              w_dtype=jnp.float32).astype(dtype)


def _ragged_rows(op):
    """The jitted custom_vjp function of a product with ragged rows, ``out[r] = lhs[r] @ rhs[g]``, for
    ``moegemm.jax.<op>``: rhs (G, K, N) ("kn") or (G, N, K) ("nk"); rows past the last group are zero."""

    @partial(jax.custom_vjp, nondiff_argnums=(3, 4))
    def _ragged_dot(lhs, rhs, group_sizes, out_dtype, b_layout):
        return grouped_gemm(lhs, rhs, chk.offsets_from_sizes(group_sizes, lhs.shape[0]), b_layout=b_layout,
                            d_dtype=out_dtype, zero_tail=True)

    @first_order_only(op, static_argnums=(3, 4))
    def _ragged_dot_fwd(lhs, rhs, group_sizes, out_dtype, b_layout):
        offsets = chk.offsets_from_sizes(group_sizes, lhs.shape[0])
        out = grouped_gemm(lhs, rhs, offsets, b_layout=b_layout, d_dtype=out_dtype, zero_tail=True)
        return out, (lhs, rhs, offsets)

    @first_order_only(op, static_argnums=(0, 1))
    def _ragged_dot_bwd(out_dtype, b_layout, residuals, dout):
        lhs, rhs, offsets = residuals
        dout = dout.astype(lhs.dtype)
        # d lhs[r] = dout[r] @ rhs[g]^T: rhs read in the other layout.
        dlhs = grouped_gemm(dout, rhs, offsets, b_layout=_OTHER_LAYOUT[b_layout], d_dtype=lhs.dtype,
                            zero_tail=True)
        # d rhs[g] = lhs[rows_g]^T @ dout[rows_g], (G, K, N), or its transpose for "nk"; groups without rows
        # are exactly 0.
        drhs = wgrad_as(lhs, dout, offsets, rhs.dtype, transpose_output=b_layout == "nk")
        return vma.cotangent_like(dlhs, lhs), vma.cotangent_like(drhs, rhs), None

    _ragged_dot.defvjp(_ragged_dot_fwd, _ragged_dot_bwd)
    # Called through jit: an eager custom_vjp call traces its function anew every time (~0.5 ms of host time
    # per call, where jit's dispatch of the traced call costs ~10 us). In a traced caller it is a nested jit
    # call, which XLA inlines when it compiles.
    return jax.jit(_ragged_dot, static_argnums=(3, 4))


_ragged_dot_jit = _ragged_rows(_OP)
_ragged_dot_general_jit = _ragged_rows(_GENERAL)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def _ragged_contracting(x, y, group_sizes, out_dtype):
    """out[g] = x[rows_g]^T @ y[rows_g], (G, M, N), for x (T, M) and y (T, N) split along T."""
    return wgrad_as(x, y, chk.offsets_from_sizes(group_sizes, x.shape[0]), out_dtype)


@first_order_only(_GENERAL, static_argnums=(3,))
def _ragged_contracting_fwd(x, y, group_sizes, out_dtype):
    offsets = chk.offsets_from_sizes(group_sizes, x.shape[0])
    return wgrad_as(x, y, offsets, out_dtype), (x, y, offsets)


@first_order_only(_GENERAL, static_argnums=(0,))
def _ragged_contracting_bwd(out_dtype, residuals, dout):
    x, y, offsets = residuals
    dout = dout.astype(x.dtype)
    # d x[rows_g] = y[rows_g] @ dout[g]^T (dout (G, M, N) as "nk" storage); d y[rows_g] = x[rows_g] @ dout[g]
    # ("kn"). Entries of T past the last group belong to none: their gradients are zero (zero_tail).
    dx = grouped_gemm(y, dout, offsets, b_layout="nk", d_dtype=x.dtype, zero_tail=True)
    dy = grouped_gemm(x, dout, offsets, b_layout="kn", d_dtype=y.dtype, zero_tail=True)
    return vma.cotangent_like(dx, x), vma.cotangent_like(dy, y), None


_ragged_contracting.defvjp(_ragged_contracting_fwd, _ragged_contracting_bwd)
_ragged_contracting_jit = jax.jit(_ragged_contracting, static_argnums=(3,))


def _zeros_of(operands, shape, dtype):
    """The result of a call with nothing to compute (no kernel runs): zeros placed like its three operands and,
    inside shard_map, typed as varying along their axes."""
    return vma.cast_all([_zeros(*operands, shape, dtype)], vma.union(operands))[0]


def _rows_result(call, lhs, rhs, group_sizes, out_dtype, b_layout, n, sharding):
    """``call``'s result, or the zeros of a call with no groups, nothing to contract or no columns (every row
    is then zero, as jax.lax gives; no kernel runs; inside shard_map typed as varying like the operands),
    resharded to ``sharding`` where one is asked for."""
    if rhs.shape[0] == 0 or lhs.shape[1] == 0 or n == 0:
        out = _zeros_of((lhs, rhs, group_sizes), (lhs.shape[0], n), out_dtype)
    else:
        out = call(lhs, rhs, group_sizes, out_dtype, b_layout)
    return out if sharding is None else jax.sharding.reshard(out, sharding)


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
    chk.check_input_dtype(_OP, "lhs", lhs)
    chk.check_input_dtype(_OP, "rhs", rhs, (lhs.dtype,))
    chk.check_extent(_OP, "rhs", rhs, 1, lhs.shape[1], "K from lhs")
    chk.check_group_sizes(_OP, group_sizes, rhs.shape[0], "G from rhs", "lhs", lhs)
    if rhs.shape[0] > chk.MAX_EXPERTS:
        raise ValueError(f"moegemm.jax.ragged_dot: rhs: expected at most {chk.MAX_EXPERTS} groups (dim 0), got "
                         f"shape {tuple(rhs.shape)}")
    chk.check_aligned(_OP, "lhs", lhs, 1, "K")
    chk.check_aligned(_OP, "rhs", rhs, 2, "N")
    out_dtype = chk.output_dtype(_OP, "preferred_element_type", preferred_element_type, lhs.dtype)
    sharding = vma.requested_sharding(_OP, out_sharding, 2)
    return _rows_result(_ragged_dot_jit, lhs, rhs, group_sizes, out_dtype, "kn", rhs.shape[2], sharding)


def _no_mesh():
    """A context without a mesh: the shape probe below must not meet the caller's (on an Explicit mesh,
    jax.lax.ragged_dot_general without out_sharding refuses to infer the result's sharding)."""
    use = getattr(jax.sharding, "use_abstract_mesh", None)
    return use(jax.sharding.AbstractMesh((), ())) if use is not None else contextlib.nullcontext()


@lru_cache(maxsize=256)
def _lax_refusal(lhs_shape, rhs_shape, sizes_shape, sizes_dtype, dimension_numbers):
    """jax.lax.ragged_dot_general's own TypeError for these shapes and dimension numbers (its shape rule, traced
    abstractly on unsharded f32 operands outside any mesh: moegemm checks dtypes and shardings itself), or None
    where it takes them."""
    try:
        with _no_mesh():
            jax.eval_shape(partial(jax.lax.ragged_dot_general, ragged_dot_dimension_numbers=dimension_numbers),
                           jax.ShapeDtypeStruct(lhs_shape, jnp.float32),
                           jax.ShapeDtypeStruct(rhs_shape, jnp.float32),
                           jax.ShapeDtypeStruct(sizes_shape, sizes_dtype))
    except TypeError as e:
        return str(e)
    return None


def _general_dims(lhs, rhs, group_sizes, dimension_numbers):
    """(ragged_contracting, lhs_k, rhs_k, rhs_g) of a call that moegemm runs: lhs 2-D with one contracting
    dim lhs_k; either the ragged dim is lhs's other dim and rhs (3-D) has a group dim rhs_g (mode 1, rows), or
    the ragged dim is lhs_k and rhs is 2-D (mode 2, rhs_g None). TypeError, with jax.lax's reason, for
    dimension numbers and shapes that jax.lax.ragged_dot_general refuses; NotImplementedError for ones it
    takes that moegemm does not run."""
    where = f"moegemm.jax.{_GENERAL}: ragged_dot_dimension_numbers"
    if not isinstance(dimension_numbers, jax.lax.RaggedDotDimensionNumbers):
        raise TypeError(f"{where}: expected a jax.lax.RaggedDotDimensionNumbers, got "
                        f"{type(dimension_numbers).__name__}")
    if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
        raise TypeError(f"moegemm.jax.{_GENERAL}: group_sizes: expected an integer dtype, "
                        f"got {np.dtype(group_sizes.dtype).name}")
    refusal = _lax_refusal(tuple(lhs.shape), tuple(rhs.shape), tuple(group_sizes.shape),
                           np.dtype(group_sizes.dtype), dimension_numbers)
    if refusal is not None:
        raise TypeError(f"moegemm.jax.{_GENERAL}: jax.lax.ragged_dot_general refuses these shapes and dimension "
                        f"numbers, lhs {tuple(lhs.shape)}, rhs {tuple(rhs.shape)}, group_sizes "
                        f"{tuple(group_sizes.shape)}, {dimension_numbers}: {refusal}")
    (lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch) = dimension_numbers.dot_dimension_numbers
    ragged, groups = dimension_numbers.lhs_ragged_dimensions[0], dimension_numbers.rhs_group_dimensions
    # jax.lax takes everything below; moegemm runs none of it.
    if lhs_batch:
        mode = " (mode 3: the ragged dimension is a batch dimension)" if ragged in lhs_batch else ""
        raise NotImplementedError(f"{where}: batch dimensions are not supported{mode}, got lhs {tuple(lhs_batch)}, "
                                  f"rhs {tuple(rhs_batch)}; use jax.lax.ragged_dot_general, or fold the batch "
                                  f"into the rows")
    if lhs.ndim != 2:
        raise NotImplementedError(f"{where}: expected a 2-D lhs, got shape {tuple(lhs.shape)}; reshape it to "
                                  f"(rows, contracting) first")
    if len(lhs_contracting) != 1:
        raise NotImplementedError(f"{where}: expected one contracting dimension, got lhs {tuple(lhs_contracting)}, "
                                  f"rhs {tuple(rhs_contracting)}")
    lhs_k, rhs_k = lhs_contracting[0], rhs_contracting[0]
    if ragged == lhs_k:  # mode 2: the weight gradient's form (jax.lax: no rhs group dim)
        if rhs.ndim != 2:
            raise NotImplementedError(f"{where}: expected a 2-D rhs where the lhs ragged dimension is "
                                      f"contracting, got shape {tuple(rhs.shape)}")
        return True, lhs_k, rhs_k, None
    if rhs.ndim != 3:  # jax.lax: one rhs group dim, apart from the contracting one
        raise NotImplementedError(f"{where}: expected a 3-D rhs (a group, a contracting and one free dim), got "
                                  f"shape {tuple(rhs.shape)}")
    return False, lhs_k, rhs_k, groups[0]


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=None,
                       preferred_element_type=None, group_offset=None, out_sharding=None):
    """Drop-in for ``jax.lax.ragged_dot_general`` in its two modes without batch dimensions, 2-D lhs:

    1. Ragged rows: the lhs ragged dim is its non-contracting one, M; rhs is 3-D with a group dim G, the
       contracting dim K and a free dim N, in any order. ``out[r] = lhs[r] @ rhs[g]`` for the rows r of
       group g, (M, N); rows at or past ``sum(group_sizes)`` are zero. This is ``ragged_dot`` with rhs in any
       layout: (G, K, N) and (G, N, K) are read in place (the kernels' "kn" and "nk"), and so is lhs as (M, K);
       lhs as (K, M) and the other rhs orders are transposed first (a copy, by XLA).
    2. Ragged contraction (the weight gradient's form): the lhs ragged dim is its contracting one, T; rhs is
       2-D with the same T. With x = lhs as (T, M) and y = rhs as (T, N): ``out[g] = x[rows_g]^T @ y[rows_g]``,
       (G, M, N), for the entries rows_g of T in group g. Every group is written: one with no entries is
       exactly zero; entries at or past ``sum(group_sizes)`` belong to none. x and y are read in place
       (grouped_gemm_wgrad) where lhs is (T, M) and rhs (T, N); the other orders are transposed first.

    Args:
      lhs, rhs: bf16 or f16 (f16 on the CPU backend only), the same dtype. K and N multiples of 8 in mode 1,
        M and N in mode 2 (16-byte aligned rows); M (mode 1) and T (mode 2) take any extent.
      group_sizes: (G,) integer array, summed into int32 offsets inside the computation (no host sync), as
        ``ragged_dot`` does: each size clipped to [0, the ragged dim], sums saturating there. In mode 1, G is
        rhs's group dim; G <= 1024.
      ragged_dot_dimension_numbers: a ``jax.lax.RaggedDotDimensionNumbers``.
      precision, preferred_element_type, group_offset, out_sharding: as ``ragged_dot`` takes them (the result
        is 2-D in mode 1, 3-D in mode 2; preferred_element_type bf16/f16/f32, default lhs's dtype).
    Returns:
      (M, N) in mode 1, (G, M, N) in mode 2. Differentiable in lhs and rhs (reverse mode, first order, as
      ``ragged_dot``). Mode 1: ``ragged_dot``'s backward with rhs read in its layout. Mode 2, which
      ``jax.lax.ragged_dot_general`` does not differentiate: ``dx[rows_g] = y[rows_g] @ dout[g]^T`` and
      ``dy[rows_g] = x[rows_g] @ dout[g]`` (grouped_gemm), zero at the entries past the last group. A f32
      cotangent is rounded to lhs's dtype first.
    Raises (at trace time):
      TypeError, with jax.lax's reason, for dimension numbers and shapes that jax.lax.ragged_dot_general
      refuses (its own shape rule decides: contracting extents that differ, a group count other than rhs's
      group dim, a group_sizes that is not (G,), ...); TypeError for dtypes other than bf16/f16 or a non-integer
      group_sizes. NotImplementedError for what jax.lax takes and moegemm does not run: batch dimensions
      (mode 3 included), a lhs that is not 2-D, other than one contracting dim, a rhs without exactly one
      free dim, and group_offset.
      ValueError for G > 1024, extents that are not multiples of 8 and a ragged dim past 2^31 - 1.
    """
    op = _GENERAL
    chk.check_precision(op, precision)
    if group_offset is not None:
        raise NotImplementedError(f"moegemm.jax.{op}: group_offset is not supported")
    for name, x in (("lhs", lhs), ("rhs", rhs), ("group_sizes", group_sizes)):
        chk.check_array(op, name, x)
    contracting, lhs_k, rhs_k, rhs_g = _general_dims(lhs, rhs, group_sizes, ragged_dot_dimension_numbers)
    chk.check_input_dtype(op, "lhs", lhs)
    chk.check_input_dtype(op, "rhs", rhs, (lhs.dtype,))
    lhs_free, rhs_free = 1 - lhs_k, (1 - rhs_k if contracting else 3 - rhs_g - rhs_k)
    out_dtype = chk.output_dtype(op, "preferred_element_type", preferred_element_type, lhs.dtype)
    # group_sizes is (G,), rhs's group dim in mode 1: jax.lax's shape rule has checked both.
    groups, ragged = group_sizes.shape[0], (lhs_k if contracting else lhs_free)
    if groups > chk.MAX_EXPERTS:
        raise ValueError(f"moegemm.jax.{op}: {'group_sizes' if contracting else 'rhs'}: expected at most "
                         f"{chk.MAX_EXPERTS} groups, got {groups}")
    if lhs.shape[ragged] > chk.MAX_OFFSET_ROWS:
        raise ValueError(f"moegemm.jax.{op}: lhs: expected at most {chk.MAX_OFFSET_ROWS} entries along its ragged "
                         f"dim {ragged} (their sums become int32 offsets), got shape {tuple(lhs.shape)}")
    chk.check_aligned(op, "lhs", lhs, lhs_free if contracting else lhs_k, "M" if contracting else "K")
    chk.check_aligned(op, "rhs", rhs, rhs_free, "N")
    sharding = vma.requested_sharding(op, out_sharding, 3 if contracting else 2)
    if not contracting:
        x = lhs if lhs_k == 1 else lhs.T
        if rhs_g == 0:
            w, layout = rhs, ("kn" if rhs_k == 1 else "nk")
        else:
            w, layout = jnp.transpose(rhs, (rhs_g, rhs_k, rhs_free)), "kn"
        return _rows_result(_ragged_dot_general_jit, x, w, group_sizes, out_dtype, layout, rhs.shape[rhs_free],
                            sharding)
    x = lhs if lhs_k == 0 else lhs.T  # (T, M)
    y = rhs if rhs_k == 0 else rhs.T  # (T, N)
    shape = (groups, x.shape[1], y.shape[1])
    if 0 in shape or x.shape[0] == 0:
        # No groups, no columns, or nothing to contract: every group's product is zero; no kernel runs.
        out = _zeros_of((x, y, group_sizes), shape, out_dtype)
    else:
        out = _ragged_contracting_jit(x, y, group_sizes, out_dtype)
    return out if sharding is None else jax.sharding.reshard(out, sharding)
