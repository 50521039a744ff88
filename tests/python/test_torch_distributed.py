"""MoEMLP with DTensor parameters (torch.distributed.tensor), on two CPU ranks (gloo): experts split over the
ranks (Shard(0), expert parallelism as torchtitan distributes its experts) run on each rank's local experts
with its own tokens and offsets, with the values and gradients of moe_mlp on those experts' weights;
replicated ones give Partial gradients (summed over the ranks where read); other placements, a rank without
an expert and DTensor operands of moe_mlp are refused, naming the operand."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import moegemm.torch as mt
from torch_helpers import offsets_of, randn

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard, distribute_module,  # noqa: E402
                                      distribute_tensor)

WORLD, E, H, I = 2, 4, 32, 64
LOCAL = E // WORLD


def _distributed(module, mesh, placement):
    def partition(name, submodule, device_mesh):
        for pname, p in list(submodule.named_parameters(recurse=False)):
            submodule.register_parameter(pname, torch.nn.Parameter(distribute_tensor(p, device_mesh, [placement])))
    distribute_module(module, mesh, partition)
    return module


def _expect(error, text, fn):
    with pytest.raises(error) as caught:
        fn()
    assert text in str(caught.value), str(caught.value)


def _rank_checks(rank: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        x = randn(40, H, seed=10 + rank)  # this rank's tokens, for its local experts
        prob = randn(40, dtype=torch.float32, seed=20 + rank).abs()
        offsets = offsets_of([15 + 5 * rank, 25 - 5 * rank])

        torch.manual_seed(0)  # the same full weights on every rank
        model = _distributed(mt.MoEMLP(E, H, I, dtype=torch.bfloat16), mesh, Shard(0))
        full_up, full_down = (w.full_tensor().detach() for w in (model.w_up, model.w_down))
        y = model(x, offsets, prob)
        y.float().square().sum().backward()

        up = full_up[rank * LOCAL:(rank + 1) * LOCAL].clone().requires_grad_()
        down = full_down[rank * LOCAL:(rank + 1) * LOCAL].clone().requires_grad_()
        expected = mt.moe_mlp(x, up, down, offsets, prob)
        expected.float().square().sum().backward()
        assert torch.equal(y, expected)
        for w, ref in ((model.w_up, up), (model.w_down, down)):
            assert isinstance(w.grad, DTensor) and w.grad.placements == (Shard(0),)
            assert torch.equal(w.grad.to_local(), ref.grad)

        # Replicated experts: every rank runs all of them on its own tokens, and the gradients are Partial, the
        # sum over the ranks of each rank's own (f32 here, for gloo's all-reduce).
        torch.manual_seed(0)
        replicated = _distributed(mt.MoEMLP(E, H, I, dtype=torch.float32), mesh, Replicate())
        all_offsets = offsets_of([10, 10, 10, 10])
        up, down = (w.full_tensor().detach().requires_grad_() for w in (replicated.w_up, replicated.w_down))
        y = replicated(x.float(), all_offsets)
        expected = mt.moe_mlp(x.float(), up, down, all_offsets)
        assert torch.equal(y, expected)
        y.square().sum().backward()
        expected.square().sum().backward()
        for w, ref in ((replicated.w_up, up), (replicated.w_down, down)):
            assert w.grad.placements == (Partial(),)
            assert torch.equal(w.grad.to_local(), ref.grad)
            summed = ref.grad.clone()
            dist.all_reduce(summed)
            assert torch.equal(w.grad.full_tensor(), summed)

        # More ranks than experts: the rank without one is told so.
        single = _distributed(mt.MoEMLP(1, H, I, dtype=torch.bfloat16), mesh, Shard(0))
        if rank == 0:
            assert single(x, offsets_of([40])).shape == x.shape
        else:
            _expect(ValueError, "MoEMLP: w_up: expected at least one expert on this rank, got none of the 1 experts",
                    lambda: single(x, offsets_of([40])))

        # Sharded within the experts: refused, naming the parameter and its placements.
        split = _distributed(mt.MoEMLP(E, H, I, dtype=torch.bfloat16), mesh, Shard(2))
        _expect(ValueError, "MoEMLP: w_up: expected a DTensor sharded over experts (Shard(0)) or replicated, got "
                "placements (Shard(dim=2),)", lambda: split(x, offsets))

        # The functional forms take local tensors.
        dx = distribute_tensor(x, mesh, [Replicate()])
        _expect(NotImplementedError, "moe_mlp: x: expected a local torch.Tensor, got a DTensor with placements "
                "(Replicate(),)", lambda: mt.moe_mlp(dx, full_up, full_down, all_offsets))
        _expect(NotImplementedError, "moe_mlp: w_up: expected a local torch.Tensor",
                lambda: mt.moe_mlp(x, model.w_up, model.w_down, offsets))
        # grouped_mm takes DTensors (test_torch_dtensor.py), all of them, as torch._grouped_mm does.
        _expect(ValueError, "grouped_mm: a: expected a DTensor on the mesh of the other operands",
                lambda: mt.grouped_mm(x, distribute_tensor(full_up, mesh, [Replicate()]), all_offsets))
    finally:
        dist.destroy_process_group()


def _rank_main(rank: int, store: str) -> None:
    """_rank_checks, then an exit that skips the interpreter's teardown: there torch's gloo threads sometimes
    end the process with "terminate called without an active exception" (SIGABRT), after every check passed
    and the process group was destroyed (torch 2.11 and 2.15, CPU). A failed check still raises, and spawn
    reports it."""
    _rank_checks(rank, store)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def test_moe_mlp_with_dtensor_parameters_on_two_ranks(tmp_path):
    torch.multiprocessing.spawn(_rank_main, args=(str(tmp_path / "store"),), nprocs=WORLD, join=True)
