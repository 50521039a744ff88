"""``grouped_mm`` on DTensor operands (torch.distributed.tensor), with the strategies of ``torch._grouped_mm``'s
DTensor sharding rule.

The call runs on each rank's local shards and its result is a DTensor. On every mesh dim the operands'
placements pick one of the strategies below (those of ``torch._grouped_mm``'s rule, plus the bias's, plus
replicating everything) where they match one. Otherwise the operands are redistributed to the strategy that
moves the fewest bytes (a split or a partial taken from a replicated operand moves none), then changes the
fewest operands; torch weighs its redistributions its own way, so it may pick another strategy there. The
ragged dim (M, T or N, the one ``offs`` indexes) and ``offs`` itself are never split: the offsets are global
positions along it. A choice whose shards would break the kernels' 16-byte rule (in the narrowest of the
input, output and bias types), or split a dim unevenly, is not taken: every operand is then replicated, on
every mesh dim.

Gradients come back through ``to_local``/``from_local``: a replicated operand's local gradient is one rank's
share wherever the result is split or partial along that mesh dim (``Partial``), a whole one where the result
is replicated; a sharded operand's is its shard; a partial operand's is replicated. A redistributed operand's
comes back at its own placements, through DTensor's backward of the redistribution.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard


class _Strategy(NamedTuple):
    """One mesh dim's placements: of the result, then of a, b and bias (None: the mode takes no bias, or, for
    a partial result, a bias would be added on every rank)."""
    out: object
    a: object
    b: object
    bias: object


_R, _P = Replicate(), Partial()
# Per mode (a's rank, b's rank): the splits of torch._grouped_mm's rule, then the partial operands'.
_STRATEGIES = {
    # a (M, K) x b (E, K, N) -> (M, N); bias (E, N).
    (2, 3): (_Strategy(Shard(1), _R, Shard(2), Shard(1)),  # N
             _Strategy(_P, Shard(1), Shard(1), None)),  # K
    # a (H, T) x b (T, N) -> (E, H, N).
    (2, 2): (_Strategy(Shard(1), Shard(0), _R, None),  # H
             _Strategy(Shard(2), _R, Shard(1), None)),  # N
    # a (E, M, K) x b (E, K, N) -> (E, M, N); bias (E, N).
    (3, 3): (_Strategy(Shard(0), Shard(0), Shard(0), Shard(0)),  # E
             _Strategy(Shard(1), Shard(1), _R, _R),  # M
             _Strategy(Shard(2), _R, Shard(2), Shard(1)),  # N
             _Strategy(_P, Shard(2), Shard(1), None)),  # K
    # a (G, M, K) x b (K, N) -> (M, N).
    (3, 2): (_Strategy(Shard(0), Shard(1), _R, None),  # M
             _Strategy(_P, Shard(2), Shard(0), None)),  # K
}
_PARTIAL_OPERAND = (_Strategy(_P, _P, _R, None), _Strategy(_P, _R, _P, None))
_REPLICATED = _Strategy(_R, _R, _R, _R)
# Dims of (a, b) that may be split into shards of any size: the expert dims of the batched mode, and its M
# (rows of an (E*M, K) matrix need no alignment). Every other split dim is a K, N or H, whose shards the kernels
# read as 16-byte rows, or the M of 3-D x 2-D, kept to 16-byte multiples too (grouped_mm takes any M, but one
# off them costs a padded copy of a's shard).
_FREE_DIMS = {(3, 3): ({0, 1}, {0})}


def _operand_placements(name: str, t, mesh) -> tuple:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"grouped_mm: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if not isinstance(t, DTensor):
        raise ValueError(f"grouped_mm: {name}: expected a DTensor on the mesh of the other operands (every tensor "
                         f"operand a DTensor, as for torch._grouped_mm), got a {type(t).__name__}: distribute it "
                         f"(torch.distributed.tensor.distribute_tensor, Replicate() for offs)")
    if t.device_mesh != mesh:
        raise ValueError(f"grouped_mm: {name}: expected a DTensor on the mesh of a ({mesh}), got one on "
                         f"{t.device_mesh}")
    return tuple(t.placements)


def _move_cost(src, dst, nbytes: int) -> float:
    """Bytes a rank exchanges to take an operand from placement `src` to `dst` along one mesh dim (a Shard or
    a Partial from a Replicate is local; a Partial from a Shard or another Partial is not done)."""
    if src == dst or src.is_replicate():
        return 0
    if dst.is_partial():
        return float("inf")
    if src.is_partial():
        return nbytes * (2 if dst.is_replicate() else 1)  # all-reduce, reduce-scatter
    return nbytes  # all-gather, all-to-all


def _choose(mode, operands, placements) -> _Strategy:
    """The strategy of one mesh dim for (a, b, bias) at `placements` (bias None: not given): the one they
    match; else the one that moves the fewest bytes, then changes the fewest operands (the replicated one
    first)."""
    candidates = [s for s in (_REPLICATED,) + _STRATEGIES[mode] + _PARTIAL_OPERAND
                  if operands[2] is None or s.bias is not None]

    best, best_cost, best_moves = None, None, None
    for s in candidates:  # a loop, not min(key=...), which torch.compile cannot trace over symbolic sizes
        moves = [(p, w, t) for p, w, t in zip(placements, (s.a, s.b, s.bias), operands) if t is not None and p != w]
        cost = sum(_move_cost(p, w, t.numel() * t.element_size()) for p, w, t in moves)
        if best is None or cost < best_cost or (cost == best_cost and len(moves) < best_moves):
            best, best_cost, best_moves = s, cost, len(moves)
    return best


def _splits_fit(mode, a, b, chosen, mesh, align: int) -> bool:
    """Whether each split dim of a and b divides evenly into the ranks along it, in 16-byte multiples where
    the kernels read it as rows."""
    free = _FREE_DIMS.get(mode, (set(), set()))
    for name, t, free_dims in (("a", a, free[0]), ("b", b, free[1])):
        ranks = [1] * t.dim()
        for mesh_dim, s in enumerate(chosen):
            p = getattr(s, name)
            if p.is_shard():
                ranks[p.dim] *= mesh.size(mesh_dim)
        for dim, n in enumerate(ranks):
            if n > 1 and t.shape[dim] % (n * (1 if dim in free_dims else align)):
                return False
    return True


def _dense_strides(shape, order) -> tuple:
    """Strides of a dense tensor of `shape` whose dims run from outermost to innermost in `order`."""
    stride, step = [0] * len(shape), 1
    for d in reversed(order):
        stride[d] = step
        step *= max(1, shape[d])
    return tuple(stride)


class _GradInOperandOrder(torch.autograd.Function):
    """The identity on an operand's local shard, whose backward lays the gradient out in the dim order of the
    operand's own (global) strides, as the operand's gradient is accumulated (a transposed operand's can
    arrive in the other order). Gradient accumulation would otherwise copy it into that order as a DTensor
    op, and torch 2.11's copy of a Partial gradient all-reduces it into a Replicate one."""

    @staticmethod
    def forward(ctx, local, order):
        ctx.order = order
        return local.view_as(local)

    @staticmethod
    def backward(ctx, grad):
        want = _dense_strides(grad.shape, ctx.order)
        if all(n == 1 or s == w for n, s, w in zip(grad.shape, grad.stride(), want)):
            return grad, None
        return torch.empty_strided(grad.shape, want, dtype=grad.dtype, device=grad.device).copy_(grad), None


def _local(t: DTensor, mesh, placements: list, out_placements: list):
    """t redistributed to `placements`, as a local tensor whose gradient comes back as the module docstring
    says."""
    grads = [Replicate() if p.is_partial() else (Partial() if p.is_replicate() and not o.is_replicate() else p)
             for p, o in zip(placements, out_placements)]
    order = []  # t's dims by decreasing stride, as the caller passed it (an insertion, which torch.compile traces)
    for d in range(t.dim()):
        i = len(order)
        while i > 0 and t.stride(order[i - 1]) < t.stride(d):
            i -= 1
        order.insert(i, d)
    if tuple(t.placements) != tuple(placements):
        # (not when they are equal: the identity's backward would all-reduce a Partial gradient)
        t = t.redistribute(mesh, placements)
    local = t.to_local(grad_placements=grads)
    return _GradInOperandOrder.apply(local, tuple(order)) if local.requires_grad else local


def _global_stride(shape, local: torch.Tensor) -> tuple:
    """Strides of a tensor of `shape` laid out in memory as `local` is: row-major, or (the 3-D x 2-D mode's
    result) the transpose of a row-major tensor."""
    if local.dim() == 2 and local.stride(0) == 1 and local.stride(1) != 1:
        return (1, max(1, shape[0]))
    return _dense_strides(shape, range(len(shape)))


def _out_shape(mode, a, b, offs) -> tuple:
    if mode == (2, 3):
        return (a.shape[0], b.shape[2])
    if mode == (2, 2):
        return (offs.shape[0], a.shape[0], b.shape[1])
    if mode == (3, 3):
        return (a.shape[0], a.shape[1], b.shape[2])
    return (a.shape[1], b.shape[1])


def sharded_grouped_mm(local_fn, a, b, offs, bias, out_dtype, zero_tail: bool, validate: bool) -> DTensor:
    """``local_fn`` (grouped_mm, called on local tensors) over DTensor operands on one mesh, as the module docstring
    says. Raises TypeError naming an operand that is not a tensor, ValueError naming one that is not a
    DTensor or is on another mesh."""
    mesh = next(t for t in (a, b, offs, bias) if isinstance(t, DTensor)).device_mesh
    a_p, b_p = _operand_placements("a", a, mesh), _operand_placements("b", b, mesh)
    if offs is not None:
        _operand_placements("offs", offs, mesh)
    bias_p = None if bias is None else _operand_placements("bias", bias, mesh)
    mode = (a.dim(), b.dim())
    if mode not in _STRATEGIES:  # an unsupported rank: the local call raises its error
        return local_fn(a.to_local(), b.to_local(), None if offs is None else offs.to_local(),
                        None if bias is None else bias.to_local(), out_dtype, zero_tail=zero_tail, validate=validate)
    chosen = [_choose(mode, (a, b, bias), (a_p[d], b_p[d], None if bias_p is None else bias_p[d]))
              for d in range(mesh.ndim)]
    # the 16-byte rule in the narrowest type the split rows are read or written in (a bad out_dtype: the
    # local call names it)
    sizes = [a.element_size(), getattr(out_dtype, "itemsize", a.element_size())] + \
        ([] if bias is None else [bias.element_size()])
    if not _splits_fit(mode, a, b, chosen, mesh, max(1, 16 // min(sizes))):
        chosen = [_REPLICATED] * mesh.ndim
    out_p = [s.out for s in chosen]
    a_l = _local(a, mesh, [s.a for s in chosen], out_p)
    b_l = _local(b, mesh, [s.b for s in chosen], out_p)
    offs_l = None if offs is None else _local(offs, mesh, [_R] * mesh.ndim, [_R] * mesh.ndim)
    bias_l = None if bias is None else _local(bias, mesh, [s.bias for s in chosen], out_p)
    out = local_fn(a_l, b_l, offs_l, bias_l, out_dtype, zero_tail=zero_tail, validate=validate)
    shape = _out_shape(mode, a, b, offs)
    return DTensor.from_local(out, mesh, out_p, run_check=False, shape=torch.Size(shape),
                              stride=_global_stride(shape, out))
