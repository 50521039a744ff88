"""No needless fills: outputs come from a poisoned allocator; addressed elements are written, tail rows
keep the poison unless zero_tail, wgrad of empty experts is exactly zero. Cases C01-C04, C12.

On CPU the "allocator" is glibc malloc behind torch's CPU allocator: the helper keeps freed blocks in the
heap so the op's at::empty reuses a NaN-filled block, and each test first checks (probe) that the reuse
happened, then that the op's output starts at the probed address; if either did not happen, the tail
assertions would prove nothing and the test says so by skipping.
The CUDA caching allocator always reuses, so the same tests under the gpu marker are strict; every op has
an sm_90a kernel (gpu_support), so on CUDA each case, wgrad's exact-zero experts included, runs the kernels.
"""

import pytest
import torch

import moegemm.torch  # noqa: F401
from torch_helpers import (DEVICES, assert_close, end_row, in_poisoned_block, is_poison, offsets_of, poison, randn,
                           ranges, ref_linear)

ops = torch.ops.moegemm
GLIBC_CHUNK_HEADER_BYTES = 64  # free-list pointers glibc may keep in a freed chunk's first bytes (at most 32)


def _poisoned(nbytes, device):
    if not poison([nbytes], device):
        pytest.skip("the CPU allocator did not hand back the poisoned block; nothing to prove here")


def _landed(t, device):
    """On CPU, skip unless `t` was allocated in the poisoned block (glibc may place it elsewhere even after
    the probe found the poison); the CUDA caching allocator reuses the block, so CUDA stays strict."""
    if device == "cpu" and not in_poisoned_block(t):
        pytest.skip("the op's output did not land in the poisoned CPU block; nothing to prove here")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("zero_tail", [False, True])
def test_c04_tail_rows_untouched_unless_zero_tail(device, zero_tail):
    # C04: M = 1000 rows, offsets[-1] = 744 over 8 experts, output pre-filled with NaN.
    sizes = [100, 0, 144, 200, 50, 0, 150, 100]
    m, k, n = 1000, 64, 256
    a, b = randn(m, k, device=device), randn(8, n, k, device=device, seed=1, scale=0.2)
    offsets = offsets_of(sizes, device)
    _poisoned(m * n * 2, device)
    d, _ = ops.grouped_gemm(a, b, offsets, zero_tail=zero_tail)
    assert_close(d[:744], ref_linear(a, b, offsets)[:744])
    if zero_tail:
        assert (d[744:] == 0).all()
    else:
        _landed(d, device)
        assert is_poison(d[744:]).all(), "tail rows were written"


@pytest.mark.parametrize("device", DEVICES)
def test_c01_wgrad_empty_experts_exactly_zero_over_poison(device):
    sizes = [162, 0, 2577, 446, 0, 83]
    m, h, n = sum(sizes), 2048, 768
    x, dy = randn(m, h, device=device, seed=2), randn(m, n, device=device, seed=3)
    offsets = offsets_of(sizes, device)
    _poisoned(6 * h * n * 4, device)
    w = ops.grouped_gemm_wgrad(x, dy, offsets)
    assert w.device.type == device and w.shape == (6, h, n) and w.dtype == torch.float32
    assert (w[1] == 0).all() and (w[4] == 0).all()
    for g, s, e in ranges(offsets, m):
        if g in (0, 5):  # spot-check two non-empty experts in float64 (the big ones cost seconds on CPU)
            assert_close(w[g], x[s:e].double().cpu().t() @ dy[s:e].double().cpu())
    assert torch.isfinite(w).all()


@pytest.mark.parametrize("device", DEVICES)
def test_c02_wgrad_no_stale_values_across_calls(device):
    m, h, n = 32, 16, 16
    x, dy = randn(m, h, device=device, seed=4), randn(m, n, device=device, seed=5)
    first = ops.grouped_gemm_wgrad(x, dy, offsets_of([16, 0, 8, 8, 0], device))
    assert (first[1] == 0).all() and (first[4] == 0).all()
    del first  # its block goes back to the allocator with values in every expert
    offsets = offsets_of([0, 8, 8, 0, 16], device)
    w = ops.grouped_gemm_wgrad(x, dy, offsets)
    assert (w[0] == 0).all() and (w[3] == 0).all()
    for g, s, e in ranges(offsets, m):
        if e > s:
            assert_close(w[g], x[s:e].double().cpu().t() @ dy[s:e].double().cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_c03_many_empty_experts(device):
    g = torch.Generator().manual_seed(6)
    sizes = [0] * 256
    for e in torch.randperm(256, generator=g)[:16].tolist():
        sizes[e] = int(torch.randint(1, 41, (1,), generator=g))
    m, k, n = sum(sizes), 32, 64
    a, b = randn(m, k, device=device, seed=7), randn(256, n, k, device=device, seed=8, scale=0.2)
    offsets = offsets_of(sizes, device)
    d, _ = ops.grouped_gemm(a, b, offsets)
    assert_close(d, ref_linear(a, b, offsets))
    dy = randn(m, n, device=device, seed=9)
    w = ops.grouped_gemm_wgrad(a, dy, offsets)
    assert all((w[e] == 0).all() for e in range(256) if sizes[e] == 0)
    for e in [e for e in range(256) if sizes[e]][:4]:  # spot-check a few experts with rows
        s, t = sum(sizes[:e]), sum(sizes[:e + 1])
        assert_close(w[e], a[s:t].double().cpu().t() @ dy[s:t].double().cpu())

    # every expert empty, M = 128: nothing addressed, D rows stay poisoned, wgrad all zero
    a = randn(128, k, device=device, seed=10)
    offsets = torch.zeros(256, dtype=torch.int32, device=device)
    _poisoned(128 * n * 2, device)
    d, _ = ops.grouped_gemm(a, b, offsets)
    if device != "cpu" or in_poisoned_block(d):
        # On CPU glibc writes a freed chunk's free-list pointers into its first bytes (when the probe is
        # freed, before the op reuses the block): those are not the op's writes.
        flat = d.reshape(-1)[GLIBC_CHUNK_HEADER_BYTES // d.element_size():] if device == "cpu" else d.reshape(-1)
        assert torch.isnan(flat).all()
    dy = randn(128, n, device=device, seed=11)
    poison([256 * k * n * 4], device)  # every expert's block of w reads NaN unless the op writes its zeros
    w = ops.grouped_gemm_wgrad(a, dy, offsets)
    assert (w == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_glu_outputs_written_where_addressed(device):
    sizes = [30, 0, 50, 9]
    m, k, i = 100, 64, 64
    a, b = randn(m, k, device=device), randn(4, 2 * i, k, device=device, seed=12, scale=0.2)
    offsets = offsets_of(sizes, device)
    _poisoned(m * i * 2, device)
    h, c = ops.grouped_gemm_glu(a, b, offsets, generate_c=True)
    assert not is_poison(h[:89]).any() and torch.isfinite(h[:89]).all()
    assert torch.isfinite(c[:89]).all()
    _landed(h, device)
    assert is_poison(h[89:]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_c12_last_or_all_experts_empty(device):
    k, n = 32, 16
    for sizes in ([4, 7, 0], [0, 0, 0]):
        m = max(sum(sizes), 5)
        a, b = randn(m, k, device=device), randn(3, n, k, device=device, seed=13, scale=0.2)
        offsets = offsets_of(sizes, device)
        d, _ = ops.grouped_gemm(a, b, offsets, zero_tail=True)
        assert d.shape == (m, n)
        assert_close(d, ref_linear(a, b, offsets).nan_to_num(0.0))
        dy = randn(m, n, device=device, seed=14)
        w = ops.grouped_gemm_wgrad(a, dy, offsets)
        assert w.shape == (3, k, n) and (w[2] == 0).all()
        if sum(sizes) == 0:
            assert (w == 0).all()
        assert end_row(offsets, m) == sum(sizes)
