"""grouped_mm on DTensor operands, on two CPU ranks (gloo): every mode under each strategy of
torch._grouped_mm's DTensor rule (and the bias's), placements that match none taken to the cheapest, the
result's placements (those torch._grouped_mm gives where its rule takes the same operands), its values against
grouped_mm on the whole tensors (bitwise where no rank's partial sum is added), the gradients' values and
placements; splits off the 16-byte rule (of the output's type too) replicated; a plain tensor or another mesh
among the operands refused, naming it, and a non-tensor operand."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import moegemm.torch as mt
from torch_helpers import assert_close, offsets_of, randn

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor  # noqa: E402

WORLD = 2
R, P = Replicate(), Partial()


def _operands(mode, n=48):
    """Whole operands of a mode (the same on every rank), its offs, and whether it takes a bias."""
    if mode == "2dx3d":
        return randn(64, 32, seed=1), randn(4, 32, n, seed=2), offsets_of([10, 0, 30, 20])  # 4 tail rows
    if mode == "2dx2d":
        return randn(64, 32, seed=3).t(), randn(64, n, seed=4), offsets_of([10, 0, 30, 20])  # a = x.t()
    if mode == "3dx3d":
        return randn(4, 16, 32, seed=5), randn(4, 32, n, seed=6), None
    return randn(3, 16, 32, seed=7), randn(32, n, seed=8), offsets_of([10, 20, 10])  # 3dx2d: 8 tail columns


def _placed(t, mesh, placement, rank):
    """t as a DTensor with `placement`; a Partial one holds a different random share on each rank."""
    if placement.is_partial():
        share = randn(*t.shape, seed=90)  # rank 0's; rank 1 holds the rest, rounded (the whole is their sum)
        local = share if rank == 0 else (t.float() - share.float()).to(t.dtype)
        return DTensor.from_local(local, mesh, [P], run_check=False)
    return distribute_tensor(t.contiguous() if placement.is_shard() else t, mesh, [placement])


# mode, a's placement, b's, bias's (None: no bias), the result's[, the operands redistributed first]: the
# table's strategies, then placements that match none, taken to the strategy that moves the fewest bytes.
CASES = [
    ("2dx3d", R, Shard(2), Shard(1), Shard(1)),  # N
    ("2dx3d", R, Shard(2), None, Shard(1)),
    ("2dx3d", Shard(1), Shard(1), None, P),  # K
    ("2dx3d", P, R, None, P),
    ("2dx3d", R, P, None, P),
    ("2dx3d", Shard(0), R, None, R),  # the ragged M: replicated first
    ("2dx3d", Shard(1), Shard(1), R, R),  # K with a bias: the bias would be added on both ranks
    ("2dx2d", Shard(0), R, None, Shard(1)),  # H
    ("2dx2d", R, Shard(1), None, Shard(2)),  # N
    ("2dx2d", Shard(1), Shard(0), None, R),  # the ragged T
    ("3dx3d", Shard(0), Shard(0), Shard(0), Shard(0)),  # E
    ("3dx3d", Shard(1), R, R, Shard(1)),  # M
    ("3dx3d", R, Shard(2), Shard(1), Shard(2)),  # N
    ("3dx3d", Shard(2), Shard(1), None, P),  # K
    ("3dx2d", Shard(1), R, None, Shard(0)),  # M
    ("3dx2d", Shard(2), Shard(0), None, P),  # K
    ("3dx2d", R, Shard(1), None, R),  # the ragged N
    ("3dx3d", R, Shard(0), None, Shard(0), "a"),  # E: a split where it lies, b not gathered
    ("2dx3d", R, Shard(1), None, P, "a"),  # K
    ("2dx3d", P, P, None, P, "a"),  # a (the smaller) all-reduced, b kept partial
]


def _grad_placement(placement, out, moved):
    """Where an operand's gradient comes back: at the operand's own placement through a redistribution
    (DTensor's backward of it); else a shard's as it, a partial operand's replicated, a replicated one's
    partial (each rank's share) where the result is split or partial."""
    if moved or placement.is_shard():
        return placement
    return P if placement.is_replicate() and not out.is_replicate() else R


def _close(actual, expected, label):
    try:
        assert_close(actual, expected)
    except AssertionError as e:
        raise AssertionError(f"{label}: {e}") from None


def _check_case(rank, mesh, mode, a_p, b_p, bias_p, out_p, moved=""):
    a, b, offs = _operands(mode)
    da, db = _placed(a, mesh, a_p, rank), _placed(b, mesh, b_p, rank)
    a_whole, b_whole = (x.full_tensor().detach() for x in (da, db))  # what a Partial operand sums to
    dbias = bias = None
    if bias_p is not None:
        bias = randn(b.shape[0], b.shape[-1], dtype=torch.float32, seed=11)
        dbias = _placed(bias, mesh, bias_p, rank).requires_grad_()
    da.requires_grad_()
    db.requires_grad_()
    doffs = None if offs is None else distribute_tensor(offs, mesh, [R])
    out = mt.grouped_mm(da, db, doffs, dbias, zero_tail=True)
    label = f"{mode} a {a_p} b {b_p} bias {bias_p}"
    assert isinstance(out, DTensor) and tuple(out.placements) == (out_p,), (label, out.placements)

    ref_a, ref_b = a_whole.clone().requires_grad_(), b_whole.clone().requires_grad_()
    ref_bias = None if bias is None else bias.clone().requires_grad_()
    want = mt.grouped_mm(ref_a, ref_b, offs, ref_bias, zero_tail=True)
    got = out.full_tensor()  # gathered into a contiguous tensor: the DTensor's own stride is the layout's
    assert out.shape == want.shape and out.stride() == want.stride(), (label, out.stride(), want.stride())
    if out_p.is_partial():
        _close(got.float(), want.float(), label)
    else:
        assert torch.equal(got, want), label

    t = randn(*want.shape, dtype=torch.float32, seed=12)
    (got.float() * t).sum().backward()
    (want.float() * t).sum().backward()
    for name, d, ref, placement in (("a", da, ref_a, a_p), ("b", db, ref_b, b_p), ("bias", dbias, ref_bias, bias_p)):
        if d is None:
            continue
        want_p = _grad_placement(placement, out_p, name in moved or (out_p.is_replicate() and placement.is_shard()))
        assert isinstance(d.grad, DTensor) and tuple(d.grad.placements) == (want_p,), (label, name, d.grad.placements)
        _close(d.grad.full_tensor().float(), ref.grad.float(), f"{label}: d{name}")

    # torch._grouped_mm's own rule gives the same placements where it takes the operands (no bias; its
    # DTensor rule, where the torch installed has one: 2.15 has) and the strategy is the same.
    if bias_p is None and not out_p.is_replicate() and hasattr(torch, "_grouped_mm"):
        try:
            theirs = torch._grouped_mm(da.detach(), db.detach(), doffs)
        except Exception:  # an older torch without the rule, or without a CPU path for the mode
            return
        assert tuple(theirs.placements) == (out_p,), (label, theirs.placements)


def _rank_checks(rank: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        for case in CASES:
            _check_case(rank, mesh, *case)

        # N = 40 splits into 20 columns a rank, off the 16-byte rule (multiples of 8): replicated first.
        a, b, offs = _operands("2dx3d", n=40)
        out = mt.grouped_mm(distribute_tensor(a, mesh, [R]), distribute_tensor(b, mesh, [Shard(2)]),
                            distribute_tensor(offs, mesh, [R]), zero_tail=True)
        assert tuple(out.placements) == (R,), out.placements
        assert torch.equal(out.full_tensor(), mt.grouped_mm(a, b, offs, zero_tail=True))

        # f32 inputs (CPU) split along N into 4 columns a rank: 16 bytes, but 8 of a bf16 output: replicated.
        b32 = randn(4, 32, 8, dtype=torch.float32, seed=13)
        a32 = randn(64, 32, dtype=torch.float32, seed=14)
        out = mt.grouped_mm(distribute_tensor(a32, mesh, [R]), distribute_tensor(b32, mesh, [Shard(2)]),
                            distribute_tensor(offs, mesh, [R]), out_dtype=torch.bfloat16, zero_tail=True)
        assert tuple(out.placements) == (R,), out.placements
        assert torch.equal(out.full_tensor(), mt.grouped_mm(a32, b32, offs, out_dtype=torch.bfloat16, zero_tail=True))

        # torch.compile(fullgraph=True) with dynamic shapes traces the strategy choice (sizes symbolic): equal
        # to eager, for placements that match a strategy and for ones redistributed first.
        a, b, offs = _operands("2dx3d")
        for a_p, b_p in ((R, Shard(2)), (Shard(0), R)):
            args = (distribute_tensor(a, mesh, [a_p]), distribute_tensor(b, mesh, [b_p]),
                    distribute_tensor(offs, mesh, [R]))
            torch._dynamo.reset()
            compiled = torch.compile(lambda x, w, o: mt.grouped_mm(x, w, o, zero_tail=True), backend="aot_eager",
                                     fullgraph=True, dynamic=True)(*args)
            eager = mt.grouped_mm(*args, zero_tail=True)
            assert compiled.placements == eager.placements and torch.equal(compiled.full_tensor(), eager.full_tensor())

        # Every tensor operand a DTensor on the one mesh, as torch._grouped_mm asks.
        a, b, offs = _operands("2dx3d")
        da, db = distribute_tensor(a, mesh, [R]), distribute_tensor(b, mesh, [R])
        with pytest.raises(ValueError, match=r"^grouped_mm: offs: expected a DTensor on the mesh of the other "
                                             r"operands .*got a Tensor"):
            mt.grouped_mm(da, db, offs)
        with pytest.raises(ValueError, match=r"^grouped_mm: a: expected a DTensor .*got a Tensor"):
            mt.grouped_mm(a, db, distribute_tensor(offs, mesh, [R]))
        with pytest.raises(TypeError, match=r"^grouped_mm: a: expected a torch.Tensor, got list"):
            mt.grouped_mm([[1.0]], db, distribute_tensor(offs, mesh, [R]))
        other = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("other",))
        with pytest.raises(ValueError, match=r"^grouped_mm: b: expected a DTensor on the mesh of a"):
            mt.grouped_mm(da, distribute_tensor(b, other, [R]), distribute_tensor(offs, mesh, [R]))
        # The local call's own checks name the caller's operands.
        with pytest.raises(ValueError, match=r"^grouped_mm: b: expected a's dtype"):
            mt.grouped_mm(da, distribute_tensor(b.float(), mesh, [R]), distribute_tensor(offs, mesh, [R]))
    finally:
        dist.destroy_process_group()


def _rank_main(rank: int, store: str) -> None:
    """_rank_checks, then an exit that skips the interpreter's teardown (see test_torch_distributed.py: torch's
    gloo threads sometimes abort the process there after every check passed)."""
    _rank_checks(rank, store)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def test_grouped_mm_on_dtensor_operands_on_two_ranks(tmp_path):
    torch.multiprocessing.spawn(_rank_main, args=(str(tmp_path / "store"),), nprocs=WORLD, join=True)
