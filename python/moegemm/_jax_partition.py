"""Row sharding of moegemm's custom calls under ``jax.jit``'s automatic partitioning (Shardy or GSPMD) and on
meshes with Explicit axes.

Without a rule of its own, a custom call is run whole: the partitioner gathers every operand to every device
and each device computes the whole op (the result typed replicated). Every moegemm op is row-wise in the
activation rows M (the tokens), so each call is wrapped in ``jax.experimental.custom_partitioning`` with this
rule: where the activation operand is sharded along M (over one or more mesh axes, M divisible by their size),
every operand with an M dimension is sharded the same way and every other operand is replicated; each device
runs the op on its own rows, with the offsets (cumulative expert ends over all M rows) moved to its rows; and

- outputs with an M dimension stay sharded the same way (``D``, ``C``, ``dC``, ``dprob``, dense ops' outputs);
- per-expert sums over rows (the weight gradient, ``dbias``) are each device's partial sum, summed over the
  row axes (``psum``), in f32 (a 16-bit output is rounded once, after the sum); a weight gradient that adds
  into an accumulator (``grouped_gemm_wgrad``'s ``w``) adds it once, after the sum;
- ``amax`` is the maximum over the row axes (``pmax``), NaN where a shard's is NaN.

Anything else (K or N sharded, sharded weights, M not divisible) is gathered, as without the rule. On one
device, inside ``shard_map`` (where the calls already see their shard), under ``jax.vmap`` and with
``MOEGEMM_JAX_ROW_SHARDING=0`` (see ``enabled``), the call is emitted directly. On a mesh with Explicit axes
the operands' types show their sharding at trace time, and the same rule runs as a ``jax.shard_map``
(``call``).

Moving the offsets: the kernels read expert g's rows as ``[end_{g-1}, end_g)`` with
``end_g = clamp(offsets[g], end_{g-1}, M)`` (docs/ops.md §0), a running maximum clamped to ``[0, M]``. Clamping
each offset to the shard's rows ``[s, s + m)`` and subtracting ``s`` commutes with that (clamping is monotone),
so the shard's kernel addresses exactly the global rows of the shard, garbage offsets included, and never
forms an offset outside ``[0, m]`` (no int32 overflow).
"""

from __future__ import annotations

import functools
import os
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P

from moegemm import _jax_vma as vma

# Operand roles.
ROWS = "rows"        # dim 0 is M
OFFSETS = "offsets"  # (E,) cumulative expert ends over M
WHOLE = "whole"      # replicated (weights, per-expert vectors)
ACCUMULATOR = "accumulator"  # replicated, aliased into a SUM output that the op adds into (last inputs only)
# Output roles: ROWS, or
SUM = "sum"          # a sum over the M rows (per expert or per column): psum over the row axes
MAX = "max"          # a maximum over the M rows: pmax over the row axes


class Output(NamedTuple):
    """One result of a call: its role, its shape (for ROWS, the dims after M), its dtype name."""
    role: str
    shape: tuple
    dtype: str


def _split_axes(sharding, mesh, m: int) -> tuple:
    """The mesh axes that ``sharding`` splits dim 0 (M rows) along, where they split it into equal shards of two
    or more; else ()."""
    spec = tuple(getattr(sharding, "spec", ()))
    axes = spec[0] if spec else None
    if axes is None:
        return ()
    axes = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    size = int(np.prod([mesh.shape[a] for a in axes]))
    return axes if size > 1 and m % size == 0 else ()


def _row_axes(mesh, arg_shapes, roles) -> tuple:
    """The mesh axes dim 0 of the first ROWS operand is sharded along, or () where the rule does not shard."""
    first = arg_shapes[roles.index(ROWS)]
    return _split_axes(first.sharding, mesh, first.shape[0])


def _spec(role: str, rank: int, axes: tuple) -> P:
    if role == ROWS and axes:
        return P(axes if len(axes) > 1 else axes[0], *([None] * (rank - 1)))
    return P()


def _rule(ranks: Sequence[int], roles: Sequence[str], outputs: Sequence[Output]) -> tuple[str, tuple]:
    """The Shardy rule: M is one factor shared by every ROWS operand and output, every other dim a factor of
    its own that must stay replicated."""
    fresh = []

    def dims(role, rank):
        names = []
        for d in range(rank):
            if role == ROWS and d == 0:
                names.append("m")
            else:
                fresh.append(f"f{len(fresh)}")
                names.append(fresh[-1])
        return " ".join(names) if names else "()"

    lhs = ", ".join(dims(role, rank) for role, rank in zip(roles, ranks))
    rhs = ", ".join(dims(o.role, len(o.shape) + (o.role == ROWS)) for o in outputs)
    return f"{lhs} -> {rhs}", tuple(fresh)


class _Rule(NamedTuple):
    """One call configuration and its partitioning callbacks; hashable, so that a call traced again reuses its
    primitive (the cache below). ``emit(inputs, specs)`` emits the custom call for these operands and result
    specs."""
    emit: Callable
    ranks: tuple
    roles: tuple
    outputs: tuple

    def specs(self, m, f32_sums=False):
        out = []
        for o in self.outputs:
            shape = (m,) + tuple(o.shape) if o.role == ROWS else tuple(o.shape)
            dtype = np.float32 if (f32_sums and o.role == SUM) else np.dtype(o.dtype)
            out.append(jax.ShapeDtypeStruct(shape, dtype))
        return out

    def whole(self, *inputs):
        """The call on whatever rows it is given, unpartitioned."""
        m = inputs[self.roles.index(ROWS)].shape[0]
        return tuple(self.emit(inputs, self.specs(m)))

    def shardings(self, mesh, arg_shapes):
        axes = _row_axes(mesh, arg_shapes, self.roles)
        args = tuple(NamedSharding(mesh, _spec(role, rank, axes)) for role, rank in zip(self.roles, self.ranks))
        results = tuple(NamedSharding(mesh, _spec(o.role, len(o.shape) + 1, axes)) for o in self.outputs)
        return axes, args, results

    def infer(self, mesh, arg_shapes, result_shape):
        return self.shardings(mesh, arg_shapes)[2]

    def partition(self, mesh, arg_shapes, result_shape):
        axes, args, results = self.shardings(mesh, arg_shapes)
        lower = _Shard(self, axes).run if axes else self.whole
        return mesh, lower, results, args


class _Shard(NamedTuple):
    """The call on one shard of rows along ``axes``."""
    rule: _Rule
    axes: tuple

    def run(self, *inputs):
        rule, axes = self.rule, self.axes
        m = inputs[rule.roles.index(ROWS)].shape[0]
        start = jax.lax.axis_index(axes) * m
        local = []
        for role, x in zip(rule.roles, inputs):
            if role == ACCUMULATOR:  # added once, after the sum over the shards
                continue
            if role == OFFSETS:
                x = (jnp.clip(x, start.astype(x.dtype), (start + m).astype(x.dtype)) - start).astype(x.dtype)
            local.append(x)
        emit = rule.emit.unaccumulated() if ACCUMULATOR in rule.roles else rule.emit
        out = list(emit(local, rule.specs(m, f32_sums=True)))
        into = {o: inputs[i] for i, o in rule.emit.aliases}
        for i, o in enumerate(rule.outputs):
            if o.role == SUM:
                total = jax.lax.psum(out[i], axes)
                if i in into:  # an op that adds into an accumulator splits rows by offsets
                    offsets = inputs[rule.roles.index(OFFSETS)]
                    out[i] = _added_into(into[i], total, offsets, m * jax.lax.axis_size(axes))
                else:
                    out[i] = total.astype(np.dtype(o.dtype))
            elif o.role == MAX:
                # pmax drops NaN (an all-reduce max is not NaN-propagating); amax keeps it (docs/ops.md §0).
                nan = jax.lax.pmax(jnp.isnan(out[i]).astype(jnp.int32), axes) > 0
                out[i] = jnp.where(nan, jnp.asarray(jnp.nan, out[i].dtype), jax.lax.pmax(out[i], axes))
        return tuple(out)


def _added_into(acc, total, offsets, rows: int):
    """``acc + total`` per expert (dim 0), rounded once to acc's dtype; experts without rows among the ``rows``
    rows keep acc's bits, as the op leaves them (adding total's +0.0 would turn a -0.0 into +0.0 and flush a
    subnormal). Expert g's rows end at the running maximum of offsets clamped to [0, rows] (docs/ops.md §0)."""
    ends = jnp.clip(jax.lax.cummax(offsets, axis=0), 0, rows)
    empty = jnp.diff(ends, prepend=jnp.zeros((1,), ends.dtype)) == 0
    summed = (total + acc.astype(np.float32)).astype(acc.dtype)
    return jnp.where(empty.reshape((-1,) + (1,) * (acc.ndim - 1)), acc, summed)


@functools.lru_cache(maxsize=None)
def _partitioned(rule: _Rule) -> Callable:
    """The custom_partitioning function of one call configuration (cached: one primitive per configuration)."""
    fn = custom_partitioning(rule.whole)
    sharding_rule, replicated = _rule(rule.ranks, rule.roles, rule.outputs)
    fn.def_partition(partition=rule.partition, infer_sharding_from_operands=rule.infer, sharding_rule=sharding_rule,
                     need_replication_factors=replicated)

    # custom_partitioning has no batching rule: under jax.vmap the call is emitted directly, and ffi_call's own
    # rule loops over the batch (each batch element one whole call, as without this rule).
    @jax.custom_batching.custom_vmap
    def batchable(*inputs):
        return fn(*inputs)

    @batchable.def_vmap
    def _batched(axis_size, in_batched, *inputs):
        axes = [0 if b else None for b in in_batched]
        out = jax.vmap(rule.whole, in_axes=axes, axis_size=axis_size)(*inputs)
        return out, (True,) * len(out)

    return batchable


def enabled() -> bool:
    """Whether calls traced now carry the rule: unless ``MOEGEMM_JAX_ROW_SHARDING=0``. custom_partitioning's
    lowering registers a Python callback that ``jax.export`` cannot serialize, and it keys the callback by
    object identity in the module, which the persistent compilation cache then never finds again in another
    process: with the variable at 0, calls traced after it is set are emitted directly (gathered under
    automatic sharding), so that multi-device jits export and hit that cache."""
    return os.environ.get("MOEGEMM_JAX_ROW_SHARDING", "1") != "0"


def _trimmed(spec) -> tuple:
    """A PartitionSpec (None: replicated) as a tuple without its trailing unsharded dims."""
    dims = list(spec or ())
    while dims and dims[-1] is None:
        dims.pop()
    return tuple(dims)


def _explicit_row_axes(rule: _Rule, inputs: Sequence):
    """Where the first ROWS operand's type shows M sharded along Explicit axes of its mesh, with M divisible by
    their size: (its mesh, those axes); else (None, ())."""
    first = inputs[rule.roles.index(ROWS)]
    sharding = vma.explicit_sharding(first)
    if sharding is None:
        return None, ()
    mesh = sharding.mesh
    axes = _split_axes(sharding, mesh, np.shape(first)[0])
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    if not axes or any(types.get(a) != jax.sharding.AxisType.Explicit for a in axes):
        return None, ()
    return mesh, axes


def call(emit: Callable, inputs: Sequence, roles: Sequence[str], outputs: Sequence[Output]) -> list:
    """``emit(inputs, specs)`` under the row rule above. ``roles`` gives each input's role (at least one ROWS),
    ``outputs`` each result's. Returns the results as a list.

    Inside ``shard_map`` the call is emitted directly. On a mesh with Explicit axes, where the activation
    operand's type shows M sharded along Explicit axes (``_explicit_row_axes``), the rule runs as a
    ``shard_map`` over those axes, every operand resharded to the rule's sharding first (as the automatic
    partitioner would: sharded weights are gathered, the rows stay sharded); there a call is emitted directly
    otherwise. Elsewhere it is a custom_partitioning call."""
    rule = _Rule(emit, tuple(len(np.shape(x)) for x in inputs), tuple(roles), tuple(outputs))
    context = tuple(getattr(jax.sharding.get_abstract_mesh(), "axis_types", ()))
    if jax.sharding.AxisType.Manual in context or vma.union(inputs):
        return list(rule.whole(*inputs))
    if jax.sharding.AxisType.Explicit in context or any(vma.explicit_spec(x) is not None for x in inputs):
        mesh, axes = _explicit_row_axes(rule, inputs)
        if not axes:
            # Also rows along the Auto axes of a mixed mesh: jax 0.11 cannot compile custom_partitioning there
            # (no implementation of its "Sharding" custom call).
            return list(rule.whole(*inputs))
        in_specs = tuple(_spec(role, rank, axes) for role, rank in zip(rule.roles, rule.ranks))
        out_specs = tuple(_spec(o.role, len(o.shape) + 1, axes) for o in rule.outputs)
        inputs = [x if _trimmed(vma.explicit_spec(x)) == _trimmed(spec)
                  else jax.sharding.reshard(x, NamedSharding(mesh, spec)) for x, spec in zip(inputs, in_specs)]
        body = jax.shard_map(_Shard(rule, axes).run, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             axis_names=frozenset(axes))
        return list(body(*inputs))
    return list(_partitioned(rule)(*inputs))
