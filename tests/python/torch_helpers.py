"""Shared helpers of the torch front-end tests: inputs, float64 torch references, poisoned allocators."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util

import pytest
import torch
import torch.nn.functional as F

from gpu_support import refused_dtype_pattern, torch_gpu_present

GPU = torch_gpu_present()
GPU_SKIP_REASON = "needs an sm_90 GPU"
GPU_MARKS = [pytest.mark.gpu, pytest.mark.skipif(not GPU, reason=GPU_SKIP_REASON)]

# The devices of a test that checks both backends (gpu_support's policy): "cpu" everywhere, "cuda" marked gpu
# and skipped, with GPU_SKIP_REASON, where torch has no sm_90 GPU.
DEVICES = ["cpu", pytest.param("cuda", marks=GPU_MARKS)]


def expect_refused_dtype(op):
    """Context manager: the body must raise NotImplementedError naming `op` and the dtype the kernels take
    (f16 operands on CUDA)."""
    return pytest.raises(NotImplementedError, match=refused_dtype_pattern(op))


def offsets_of(sizes, device="cpu") -> torch.Tensor:
    """(E,) int32 cumulative end rows of groups of the given sizes."""
    ends, total = [], 0
    for s in sizes:
        total += s
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device=device)


def randn(*shape, dtype=torch.bfloat16, device="cpu", seed=0, scale=1.0) -> torch.Tensor:
    """Random normal data (never zeros) from a seeded generator, in `dtype`."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype=dtype, device=device)


def ranges(offsets: torch.Tensor, m: int):
    """[(g, start, end)] of every expert, ends clamped into [previous end, m]."""
    out, prev = [], 0
    for g, end in enumerate(offsets.cpu().tolist()):
        end = min(max(end, prev), m)
        out.append((g, prev, end))
        prev = end
    return out


def weight_matrix(b: torch.Tensor, g: int, b_layout: str) -> torch.Tensor:
    """Expert g's (K, N) matrix in float64, whichever the storage layout."""
    w = b[g].double()
    return w.t() if b_layout == "nk" else w


def ref_linear(a, b, offsets, b_layout="nk", alpha=None, bias=None) -> torch.Tensor:
    """G = alpha[g] * a @ B_g (+ bias[g]) in float64; unaddressed rows are NaN."""
    m = a.shape[0]
    n = b.shape[1] if b_layout == "nk" else b.shape[2]
    out = torch.full((m, n), float("nan"), dtype=torch.float64)
    for g, s, e in ranges(offsets, m):
        if e == s:
            continue
        r = a[s:e].double().cpu() @ weight_matrix(b.cpu(), g, b_layout)
        if alpha is not None:
            r = r * float(alpha[g])
        if bias is not None:
            r = r + bias[g].double().cpu()
        out[s:e] = r
    return out


def end_row(offsets, m) -> int:
    return ranges(offsets, m)[-1][2] if offsets.numel() else 0


def glu_halves(g: torch.Tensor, layout: str):
    """(gate, up) column blocks of a pre-activation (M, 2I) in a GLU layout."""
    m, n2 = g.shape
    if layout == "halves":
        return g[:, : n2 // 2], g[:, n2 // 2:]
    blocks = g.reshape(m, n2 // 64, 2, 32)
    first, second = blocks[:, :, 0, :].reshape(m, n2 // 2), blocks[:, :, 1, :].reshape(m, n2 // 2)
    return (first, second) if layout == "interleaved32" else (second, first)


def glu_join(gate: torch.Tensor, up: torch.Tensor, layout: str) -> torch.Tensor:
    """Inverse of glu_halves."""
    if layout == "halves":
        return torch.cat([gate, up], dim=1)
    m, i = gate.shape
    first, second = (gate, up) if layout == "interleaved32" else (up, gate)
    return torch.stack([first.reshape(m, i // 32, 32), second.reshape(m, i // 32, 32)], dim=2).reshape(m, 2 * i)


def activation(gate, up, kind="swiglu", limit=7.0, act_alpha=1.702, linear_offset=1.0):
    """The gated activations of docs/ops.md §2 in torch."""
    if kind == "swiglu":
        return F.silu(gate) * up
    if kind == "geglu":
        return F.gelu(gate, approximate="tanh") * up
    g = gate.clamp(max=limit)
    u = up.clamp(min=-limit, max=limit)
    return (u + linear_offset) * g * torch.sigmoid(act_alpha * g)


def clamp_edge_inputs(m, h, i, e, layout, seed=0):
    """x (M, H) and w_up (E, H, 2I) in bf16 for swiglu_clamped whose f32 pre-activations x @ w_up are exact
    and crowd around +-7: x[:, :2] = 1, w_up[:, 0] = 7 on gate columns and +-7 on up columns, w_up[:, 1] =
    +-2^-11 (so that no value is exactly +-7, where frameworks' clamp gradients differ); the rest of x in
    {-1, 0, 1} and of w_up multiples of 2^-10 no larger than 2^-7 (H <= 64 keeps every sum exact). About 5%
    of the gate values then lie in (7, 7 + 2^-6], which bf16 rounds to 7: not clamped any more."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (m, h), generator=gen).float()
    x[:, :2] = 1
    w_up = torch.randint(-8, 9, (e, h, 2 * i), generator=gen).float() / 1024
    w_up[:, 1, :] = torch.where(torch.randint(0, 2, (e, 2 * i), generator=gen) == 1, 1.0, -1.0) / 2048
    gate_cols = torch.zeros(2 * i, dtype=torch.bool)
    if layout == "halves":
        gate_cols[:i] = True
    else:
        gate_cols = (torch.arange(2 * i) // 32) % 2 == (0 if layout == "interleaved32" else 1)
    sign = torch.where(torch.randint(0, 2, (e, 2 * i), generator=gen) == 1, 1.0, -1.0)
    w_up[:, 0, :] = torch.where(gate_cols, 7.0, 7.0 * sign)
    return x.to(torch.bfloat16), w_up.to(torch.bfloat16)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, bf16: bool = True, rows=None):
    """docs/ops.md §9 tolerance after scaling: rel. Frobenius < 1e-2, elementwise rtol 2e-2 / atol 4e-2
    (bf16/f16); float32/64 results: 1e-5 relative."""
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    if rows is not None:
        a, e = a[rows], e[rows]
    assert a.shape == e.shape, (a.shape, e.shape)
    assert torch.isfinite(a).all(), "non-finite values in the result"
    if e.numel() == 0:
        return
    scale = max(e.abs().max().item(), 1e-30)
    fro = (a - e).norm() / max(e.norm().item(), 1e-30)
    if bf16:
        assert fro < 1e-2, f"relative Frobenius error {fro:.3e}"
        torch.testing.assert_close(a / scale, e / scale, rtol=2e-2, atol=4e-2)
    else:
        torch.testing.assert_close(a / scale, e / scale, rtol=1e-5, atol=1e-5)


# ---- poisoned allocators -----------------------------------------------------------------------

_malloc_pinned = False
M_PERTURB = -6  # mallopt parameter (glibc): fill each allocated block with perturb ^ 0xFF, each freed one with perturb
PERTURB = 0x80
PERTURB_FILL = PERTURB ^ 0xFF  # the byte every CPU allocation starts as under malloc_perturb()


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"))


@contextlib.contextmanager
def malloc_perturb():
    """While on, every block glibc's malloc hands out (torch's CPU tensors included) starts as PERTURB_FILL
    bytes; skips the test where the C library has no M_PERTURB."""
    libc = _libc()
    if not libc.mallopt(M_PERTURB, PERTURB):
        pytest.skip("the C library has no M_PERTURB; CPU outputs cannot be poisoned")
    try:
        yield
    finally:
        libc.mallopt(M_PERTURB, 0)


def expect_malloc_perturbed(nbytes):
    """Under malloc_perturb(): skips the test unless a fresh CPU allocation of `nbytes` bytes reads back as
    PERTURB_FILL bytes (the C library may not apply M_PERTURB to every block; then nothing is proven)."""
    probe = torch.empty(nbytes, dtype=torch.uint8)
    if not (probe == PERTURB_FILL).all():
        pytest.skip("malloc did not apply M_PERTURB to a block of this size; nothing to prove here")


@contextlib.contextmanager
def poisoned_allocations(nbytes_list, device):
    """While on, outputs of the given byte sizes (in the order the op allocates them) start poisoned, without
    relying on the CPU heap handing a freed block back: on CPU every block malloc hands out starts as
    PERTURB_FILL bytes (malloc_perturb(), 3.39e38 in bf16 and f32; a probe of each size checks it); on CUDA
    the caching allocator reuses side-by-side freed NaN (0xFF) blocks of those sizes (poison())."""
    if device == "cuda":
        poison(nbytes_list, device)
        yield
        return
    with malloc_perturb():
        for n in nbytes_list:
            expect_malloc_perturbed(n)
        yield


def _keep_freed_blocks_on_cpu():
    """Make glibc serve large CPU allocations from its heap (not fresh zeroed mmap pages), so that a
    freed block is handed to the next allocation of its size with its content intact."""
    global _malloc_pinned
    if _malloc_pinned:
        return
    libc = _libc()
    m_mmap_threshold, m_trim_threshold = -3, -1
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, 1 << 30)
    _malloc_pinned = True


def poison(nbytes_list, device="cpu"):
    """Allocate blocks of the given byte sizes, fill them with NaN (0xFF bytes) and free them, so that
    the next allocations of those sizes reuse NaN-filled memory (CUDA caching allocator; glibc heap on
    CPU). Returns whether a fresh allocation of the first size now reads back as poison (a probe: the
    CPU allocator gives no guarantee)."""
    if device == "cpu":
        _keep_freed_blocks_on_cpu()
    # On CPU one block four times the size: the next allocations are carved from its start.
    factor = 4 if device == "cpu" else 1
    for _ in range(2):  # the first round may race with lazily created buffers (thread pools) for the heap
        blocks = [torch.full((n * factor,), 0xFF, dtype=torch.uint8, device=device) for n in nbytes_list]
        del blocks
    probe = torch.empty(nbytes_list[0], dtype=torch.uint8, device=device)
    reused = bool((probe[-64:] == 0xFF).all())
    _last_probe[torch.device(device).type] = probe.data_ptr() if reused else None
    del probe
    return reused


_last_probe = {}


def in_poisoned_block(t: torch.Tensor) -> bool:
    """Whether `t` starts where the probe of the last poison() call on its device found the poison: the
    allocation really reused the poisoned block (on CPU a later allocation may still land elsewhere)."""
    ptr = _last_probe.get(t.device.type)
    return ptr is not None and t.data_ptr() == ptr


def is_poison(t: torch.Tensor) -> torch.Tensor:
    """Per-row mask: every element of the row still holds the 0xFF poison pattern (NaN for floats)."""
    if t.is_floating_point():
        return torch.isnan(t).all(dim=-1)
    return (t == -1).all(dim=-1)
