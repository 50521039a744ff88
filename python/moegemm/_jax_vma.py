"""Varying-manual-axes types for moegemm's custom calls under ``jax.shard_map(check_vma=True)``.

Inside ``shard_map`` every value is typed with the mesh axes along which it varies. ``jax.ffi.ffi_call`` needs
its operands to agree and types its results as given (varying along no axis), so moegemm's calls cast their
operands to the union of the operands' axes and their results to it as well (a result depends on every
operand). The gradient of an operand that varies along fewer axes than its cotangent is summed over the extra
axes (what ``jax.lax.pcast(..., to="varying")`` transposes to), and a cotangent that varies along fewer axes
than its operand is cast up. Outside ``shard_map`` every set is empty and these are identities.

Under explicit sharding (a mesh with ``jax.sharding.AxisType.Explicit`` axes) a call's results are typed
replicated, or, where moegemm._jax_partition runs it on each device's rows, with the rows' sharding; a
cotangent is resharded to its operand's sharding so that the custom_vjp rules type-check.
"""

from __future__ import annotations

from typing import Iterable

import jax


def varying_axes(x) -> frozenset:
    """The mesh axes ``x`` varies along inside ``shard_map`` (empty outside it, and for None)."""
    if x is None:
        return frozenset()
    aval = jax.typeof(x)
    manual = getattr(aval, "manual_axis_type", None)  # jax 0.10: ManualAxisType(varying=..., ...)
    if manual is not None:
        return frozenset(manual.varying)
    return frozenset(getattr(aval, "vma", ()))


def _cast_varying(x, axes: frozenset):
    missing = tuple(sorted(axes - varying_axes(x)))
    if not missing:
        return x
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, missing, to="varying")
    return jax.lax.pvary(x, missing)


def union(values: Iterable) -> frozenset:
    """Every axis any of ``values`` varies along."""
    axes = frozenset()
    for x in values:
        axes |= varying_axes(x)
    return axes


def cast_all(values: Iterable, axes: frozenset) -> list:
    """``values`` (None kept) cast to vary along ``axes`` too."""
    return [None if x is None else _cast_varying(x, axes) for x in values]


def explicit_sharding(x):
    """The sharding in the type of ``x`` when its mesh has an Explicit axis (jax.sharding.AxisType), else None."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or getattr(mesh, "empty", True):
        return None
    explicit = getattr(jax.sharding.AxisType, "Explicit", None)
    if explicit is None or explicit not in tuple(getattr(mesh, "axis_types", ())):
        return None
    return sharding


def explicit_spec(x):
    """The PartitionSpec of ``x`` when its mesh has an Explicit axis (jax.sharding.AxisType), else None."""
    sharding = explicit_sharding(x)
    return None if sharding is None else sharding.spec


def cotangent_like(ct, primal):
    """``ct`` typed as ``primal``'s cotangent: summed over the axes only ``ct`` varies along, cast up to those
    only ``primal`` varies along, and, on a mesh with Explicit axes, resharded to ``primal``'s sharding (the
    custom calls' results are typed replicated there). None stays None."""
    if ct is None:
        return None
    want = varying_axes(primal)
    extra = tuple(sorted(varying_axes(ct) - want))
    if extra:
        ct = jax.lax.psum(ct, extra)
    ct = _cast_varying(ct, want)
    sharding = explicit_sharding(primal)
    if sharding is not None and explicit_spec(ct) != sharding.spec:
        # The sharding, not its spec: a bare spec needs a mesh context (jax.set_mesh), which a caller of
        # explicitly sharded arrays need not have entered.
        ct = jax.sharding.reshard(ct, sharding)
    return ct


def requested_sharding(op: str, out_sharding, rank: int):
    """``out_sharding`` as ``jax.lax.ragged_dot`` takes it: None, a NamedSharding (of the context's mesh, where
    ``jax.set_mesh`` or ``shard_map`` gives one), or a PartitionSpec of the context's mesh. Every mesh axis it
    names must be an Explicit axis (jax.sharding.AxisType) there, as jax.lax requires: the result is then
    resharded to it, and typed with it. Entries past ``rank`` may only be None (dropped). Returns the sharding
    to reshard to (None for None).

    Raises TypeError for any other type; NotImplementedError for unreduced axes; ValueError, naming
    ``moegemm.jax.<op>: out_sharding``, for a PartitionSpec outside a mesh context, a NamedSharding of another
    mesh than the context's, an entry past ``rank`` that is not None, or an axis that the mesh lacks or that
    is Auto or Manual there (inside ``shard_map``, its axes are Manual)."""
    if out_sharding is None:
        return None
    where = f"moegemm.jax.{op}: out_sharding"
    context = jax.sharding.get_abstract_mesh()
    if isinstance(out_sharding, jax.sharding.NamedSharding):
        mesh, spec = out_sharding.mesh, out_sharding.spec
        if not context.empty and mesh.abstract_mesh != context:
            raise ValueError(f"{where}: expected a sharding of the context's mesh {context}, got one of {mesh}")
    elif isinstance(out_sharding, jax.sharding.PartitionSpec):
        mesh, spec = context, out_sharding
        if mesh.empty:
            raise ValueError(f"{where}: a PartitionSpec needs a mesh context (jax.set_mesh); pass a NamedSharding "
                             f"instead, got {spec}")
    else:
        raise TypeError(f"{where}: expected a jax.sharding.NamedSharding, a PartitionSpec or None, got "
                        f"{type(out_sharding).__name__}")
    if getattr(spec, "unreduced", None) or getattr(spec, "reduced", None):
        raise NotImplementedError(f"{where}: unreduced or reduced axes are not supported, got {spec}")
    entries = tuple(spec)
    if any(entry is not None for entry in entries[rank:]):
        raise ValueError(f"{where}: expected at most {rank} entries (the result is {rank}-D) past which only None, "
                         f"got {spec}")
    types = dict(zip(mesh.axis_names, mesh.axis_types))  # the context's, where there is one (checked above)
    for entry in entries[:rank]:
        for name in entry if isinstance(entry, tuple) else (entry,):
            if name is None or name is jax.sharding.PartitionSpec.UNCONSTRAINED:
                continue
            if name not in types:
                raise ValueError(f"{where}: axis {name!r} of {spec} is not an axis of the mesh "
                                 f"{dict(zip(mesh.axis_names, mesh.axis_sizes))}")
            if types[name] != jax.sharding.AxisType.Explicit:
                raise ValueError(f"{where}: axis {name!r} of {spec} is {types[name]}; jax.lax.{op}'s "
                                 f"out_sharding takes Explicit axes only")
    if len(entries) <= rank:
        return out_sharding
    trimmed = jax.sharding.PartitionSpec(*entries[:rank])
    return trimmed if isinstance(out_sharding, jax.sharding.PartitionSpec) else \
        jax.sharding.NamedSharding(out_sharding.mesh, trimmed)
