"""moegemm.torch.grouped_mm against torch._grouped_mm: the shapes, offsets and transposed/strided operands
of PyTorch's own grouped GEMM tests (test/test_matmul_cuda.py), on CPU (torch's fallback) and CUDA. Every
mode runs on the sm_90a kernels on CUDA (gpu_support): 2-D x 3-D forward and backward (grouped_gemm,
grouped_gemm_wgrad), 2-D x 2-D (ragged K: grouped_gemm_wgrad, empty groups exact zeros over a poisoned
allocator; its backward through grouped_gemm against float64 autograd), 3-D x 3-D."""

import re

import numpy as np
import pytest
import torch

import moegemm.torch as mt
from torch_helpers import DEVICES, assert_close, offsets_of, poison, poisoned_allocations, randn

M, N, K, G = 16, 32, 64, 4


def torch_grouped_mm(*args, **kwargs):
    try:
        return torch._grouped_mm(*args, **kwargs)
    except (RuntimeError, NotImplementedError) as e:  # older torch builds have no CPU fallback
        pytest.skip(f"torch._grouped_mm unavailable here: {e}")


def make_b(strided, b_row_major, device, dtype=torch.bfloat16):
    """PyTorch's 2d/3d test weights: returns the logical (G, K, N) operand it passes to grouped_mm."""
    s = int(strided)
    if b_row_major:
        b = randn(G * (1 + s), N, K * (1 + s), dtype=dtype, device=device, seed=2)[::1 + s, :, :K]
    else:
        b = randn(G * (1 + s), K * (1 + s), N, dtype=dtype, device=device, seed=2).transpose(-2, -1)[::1 + s, :, :K]
    return b.transpose(-2, -1)


def make_a3(strided, a_row_major, device, seed):
    """PyTorch's 3-D activations: (G, M, K), each group row-major or its transpose column-major, every other
    group of a wider stack when strided."""
    s = int(strided)
    if a_row_major:
        return randn(G * (1 + s), M, K * (1 + s), device=device, seed=seed)[::1 + s, :, :K]
    return randn(G * (1 + s), K * (1 + s), M, device=device, seed=seed).transpose(-2, -1)[::1 + s, :, :K]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("b_row_major", [False, True])
@pytest.mark.parametrize("zero_size", [False, True])
def test_2d_3d_matches_torch(device, strided, b_row_major, zero_size):
    s = int(strided)
    a = randn(M * G, K * (1 + s), device=device, seed=1)[:, :K]  # row-major a (strided rows)
    b = make_b(strided, b_row_major, device)
    offs = torch.arange(M, G * M + 1, M, dtype=torch.int32, device=device)
    if zero_size:
        offs[0] = offs[1]
    out = mt.grouped_mm(a, b, offs)
    ref = torch_grouped_mm(a, b, offs=offs)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert_close(out, ref)
    if strided:
        # every other expert of a wider stack, with padded rows: read in place, exactly as its packed copy
        packed = b.contiguous() if not b_row_major else b.mT.contiguous().mT
        assert torch.equal(out, mt.grouped_mm(a, packed, offs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b_row_major", [False, True])
def test_2d_3d_strided_weights_backward_matches_torch(device, b_row_major):
    # every other expert with padded rows: dA reads the weight at its strides in the other layout, dB comes
    # back at the caller's stride order, with torch._grouped_mm's values
    a = randn(M * G, K, device=device, seed=40).requires_grad_(True)
    b = make_b(True, b_row_major, device).detach().requires_grad_(True)
    offs = offsets_of([M, 0, 2 * M, M - 3], device)
    dy = randn(M * G, N, device=device, seed=41)
    mt.grouped_mm(a, b, offs, zero_tail=True).backward(dy)
    ours = (a.grad.clone(), b.grad.clone())
    a.grad = b.grad = None
    torch_grouped_mm(a, b, offs=offs).backward(dy)
    end = int(offs[-1])
    assert_close(ours[0][:end], a.grad[:end])
    assert (ours[0][end:] == 0).all()
    assert_close(ours[1], b.grad)


@pytest.mark.parametrize("b_row_major", [False, True])
def test_weight_strides_off_the_16_byte_rule_are_refused_in_the_callers_dims(b_row_major):
    # the ops see a transposed weight as its (E, N, K) view; the message gives the caller's dims and strides
    a = randn(M * G, K, seed=1)
    offs = torch.arange(M, G * M + 1, M, dtype=torch.int32)
    if b_row_major:
        b = randn(G, N, K + 4, seed=2)[:, :, :K].mT  # logical (G, K, N) over rows of K + 4 = 68 (136 bytes)
        dim, what = 2, rf"a row stride stride\(2\) >= K={K}"
    else:
        b = randn(G, K, N + 4, seed=2)[:, :, :N]
        dim, what = 1, rf"a row stride stride\(1\) >= N={N}"
    pattern = (rf"grouped_mm: b: expected {what} that is a multiple of 16 bytes \(16-byte alignment rule\), got "
               rf"stride\({dim}\)={b.stride(dim)} elements \({2 * b.stride(dim)} bytes\), shape \({G}, {K}, {N}\) "
               rf"with strides \({', '.join(map(str, b.stride()))}\)")
    with pytest.raises(ValueError, match=pattern):
        mt.grouped_mm(a, b, offs)
    odd_experts = torch.as_strided(randn(G * (K * N + 4), seed=3), (G, K, N), (K * N + 4, N, 1))
    with pytest.raises(ValueError, match=rf"grouped_mm: b: expected a positive expert stride that is a multiple of "
                                         rf"16 bytes .*got stride\(0\)={K * N + 4} elements"):
        mt.grouped_mm(a, odd_experts, offs)
    # N or K off the 16-byte rule: the extent is named (as for a packed weight), not the row stride it implies.
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected N \* sizeof\(torch\.bfloat16\) a multiple of 16 "
                                         r"bytes .*got N=33"):
        mt.grouped_mm(a, randn(G, K, 33, seed=5), offs)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected N \* sizeof\(torch\.bfloat16\) a multiple of 16 "
                                         r"bytes .*got N=33"):
        mt.grouped_mm(a, randn(G, 33, K, seed=5).mT, offs)
    broadcast = randn(1, K, N, seed=4).expand(G, K, N)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected a positive expert stride .*got stride\(0\)=0"):
        mt.grouped_mm(a, broadcast, offs)


@pytest.mark.parametrize("device", DEVICES)
def test_2d_3d_backward_matches_torch(device):
    # da: grouped_gemm with the transposed weight; db: grouped_gemm_wgrad
    a = randn(M * G, K, device=device, seed=3).requires_grad_(True)
    b = make_b(False, True, device).detach().requires_grad_(True)
    offs = torch.arange(M, G * M + 1, M, dtype=torch.int32, device=device)
    dy = randn(M * G, N, device=device, seed=4)
    mt.grouped_mm(a, b, offs).backward(dy)
    assert a.grad.device.type == b.grad.device.type == device
    ours = (a.grad.clone(), b.grad.clone())
    a.grad = b.grad = None
    torch_grouped_mm(a, b, offs=offs).backward(dy)
    assert_close(ours[0], a.grad)
    assert_close(ours[1], b.grad)
    assert ours[1].stride() == b.stride()


# PyTorch's four grouped_mm tests (test_grouped_gemm_2d_3d, _2d_2d, _3d_3d, _3d_2d) with every layout they
# run: each 2-D operand row-major or column-major, each 3-D one per group either way, all of them also as
# slices of wider or longer tensors (strided). Values and gradients against float64 autograd of the
# per-group products, and against torch._grouped_mm; the other layout of an operand (read in place or
# copied) gives bitwise what the kernels' first order gives.
LAYOUTS = [(s, a_rm, b_rm) for s in (False, True) for a_rm in (False, True) for b_rm in (False, True)]


def _float64_grads(fn, inputs, grad_out):
    """fn on float64 copies of ``inputs`` (on the CPU) and the gradients of <fn(...), grad_out> for each."""
    leaves = [t.detach().double().cpu().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, grad_out.double().cpu())
    return out.detach(), grads


def _ours_and_torchs_grads(a, b, offs, grad_out, with_torch=True):
    """(out, a.grad, b.grad) of moegemm's grouped_mm and, with_torch and where this torch build runs it, of
    torch._grouped_mm (else None)."""
    results = []
    for f in (mt.grouped_mm, torch._grouped_mm) if with_torch else (mt.grouped_mm,):
        a.grad = b.grad = None
        try:
            out = f(a, b, offs=offs) if offs is not None else f(a, b)
        except (RuntimeError, NotImplementedError):
            assert f is torch._grouped_mm, "moegemm's grouped_mm raised"
            results.append(None)
            continue
        out.backward(grad_out)
        results.append((out.detach(), a.grad.clone(), b.grad.clone()))
    return results if with_torch else results + [None]


def _check_against(ours, ref, theirs):
    for got, want in zip(ours, ref):
        assert_close(got, want)
    if theirs is not None:
        for got, want in zip(ours, theirs):
            assert got.shape == want.shape
            assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
def test_pytorch_2d_3d_every_layout(device, strided, a_row_major, b_row_major):
    s = int(strided)
    if a_row_major:
        a = randn(M * G, K * (1 + s), device=device, seed=70)[:, :K]
    else:
        a = randn(K, (M + 2 * s) * G, device=device, seed=70).t()[:M * G, :]
    b = make_b(strided, b_row_major, device).detach()  # logical (G, K, N)
    a.requires_grad_(True)
    b.requires_grad_(True)
    for zero_size in (False, True):
        offs = torch.arange(M, G * M + 1, M, dtype=torch.int32, device=device)
        if zero_size:
            offs[0] = offs[1]
        ends = [0] + offs.tolist()

        def per_group(x, w):
            return torch.cat([x[ends[g]:ends[g + 1]] @ w[g] for g in range(G)])

        grad_out = randn(M * G, N, device=device, seed=71)
        ours, theirs = _ours_and_torchs_grads(a, b, offs, grad_out)
        ref_out, ref_grads = _float64_grads(per_group, (a, b), grad_out)
        _check_against(ours, (ref_out, *ref_grads), theirs)
        if not a_row_major:  # read in place (M-major A tiles): bitwise what its row-major copy gives
            assert torch.equal(ours[0], mt.grouped_mm(a.detach().contiguous(), b.detach(), offs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
def test_pytorch_3d_2d_every_layout(device, strided, a_row_major, b_row_major):
    # out[:, cols_g] = a[g] @ b[:, cols_g], run as the 2-D x 3-D product of the transposes
    s = int(strided)
    a = make_a3(strided, a_row_major, device, seed=72)
    if b_row_major:
        b = randn(N * G, K * (1 + s), device=device, seed=73)[:, :K]
    else:
        b = randn(K, N * (G + s), device=device, seed=73).transpose(-2, -1)[:N * G, :]
    b = b.transpose(-2, -1).detach()  # (K, N * G), as PyTorch's test passes it
    a, b = a.detach().requires_grad_(True), b.requires_grad_(True)
    for zero_size in (False, True):
        offs = torch.arange(N, G * N + 1, N, dtype=torch.int32, device=device)
        if zero_size:
            offs[0] = offs[1]
        ends = [0] + offs.tolist()

        def per_group(x, w):
            return torch.cat([x[g] @ w[:, ends[g]:ends[g + 1]] for g in range(G)], dim=1)

        grad_out = randn(M, N * G, device=device, seed=74)
        ours, theirs = _ours_and_torchs_grads(a, b, offs, grad_out)
        ref_out, ref_grads = _float64_grads(per_group, (a, b), grad_out)
        assert ours[0].shape == (M, N * G) and ours[0].stride() == (1, M)
        _check_against(ours, (ref_out, *ref_grads), theirs)
        if b_row_major is False:  # (K, N) row-major b, b.t() read M-major: bitwise what its copy gives
            assert torch.equal(ours[0], mt.grouped_mm(a.detach(), b.detach().t().contiguous().t(), offs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
def test_pytorch_3d_3d_every_layout(device, strided, a_row_major, b_row_major):
    a = make_a3(strided, a_row_major, device, seed=75)
    b = make_b(strided, b_row_major, device).detach()
    a, b = a.detach().requires_grad_(True), b.requires_grad_(True)
    grad_out = randn(G, M, N, device=device, seed=76)
    ours, theirs = _ours_and_torchs_grads(a, b, None, grad_out)
    ref_out, ref_grads = _float64_grads(torch.bmm, (a, b), grad_out)
    _check_against(ours, (ref_out, *ref_grads), theirs)
    if strided or not a_row_major:  # a copied to (G*M, K) rows: bitwise what its packed copy gives
        assert torch.equal(ours[0], mt.grouped_mm(a.detach().contiguous(), b.detach()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
def test_pytorch_2d_2d_every_layout(device, strided, a_row_major, b_row_major):
    s = int(strided)
    kt = K * G + K * s
    if a_row_major:
        a = randn(M, kt, device=device, seed=77)[:, :K * G]
    else:
        a = randn(kt, M, device=device, seed=77).t()[:, :K * G]
    if b_row_major:
        b = randn(N, kt, device=device, seed=78)[:, :K * G]
    else:
        b = randn(kt, N, device=device, seed=78).t()[:, :K * G]
    b = b.t().detach()  # (T, N), as PyTorch's test passes it
    a, b = a.detach().requires_grad_(True), b.requires_grad_(True)
    for sizes in ([K] * G, [3, 0, 77, K * G - 80]):  # PyTorch's groups, then unaligned ones with an empty one
        offs = offsets_of(sizes, device)
        ends = [0] + offs.tolist()

        def per_group(x, y):
            return torch.stack([x[:, ends[g]:ends[g + 1]] @ y[ends[g]:ends[g + 1]] for g in range(G)])

        grad_out = randn(G, M, N, device=device, seed=79)
        # torch._grouped_mm on CUDA only for PyTorch's own groups: it checks the ragged dimension on the device,
        # where a refused group would be a device-side assert (see _torch_ref_or_none)
        with_torch = not a.is_cuda or sizes == [K] * G
        ours, theirs = _ours_and_torchs_grads(a, b, offs, grad_out, with_torch)
        ref_out, ref_grads = _float64_grads(per_group, (a, b), grad_out)
        _check_against(ours, (ref_out, *ref_grads), theirs)
        if 0 in sizes:
            assert (ours[0][sizes.index(0)] == 0).all()
        if a_row_major or b_row_major:  # copied to the token-major order: bitwise what those copies give
            native = mt.grouped_mm(a.detach().t().contiguous().t(), b.detach().contiguous(), offs)
            assert torch.equal(ours[0], native)


@pytest.mark.parametrize("device", DEVICES)
def test_column_major_a_with_experts_from_any_row(device):
    """A column-major ``a`` is read in place (M-major A tiles, each expert's first tile starting at its first
    row rounded down to a multiple of 8): experts that start at odd rows, of one row or none give the
    per-expert products and bitwise the row-major call's rows; rows past offs[-1] keep the poison of the
    output's memory unless zero_tail. The same for the 3-D x 2-D mode's row-major ``b`` (read as ``b.t()``)."""
    from moegemm._torch_layouts import rows_or_columns

    m, k, n = 1000, 136, 192
    sizes = [3, 5, 1, 0, 130, 7, 256, 61, 1, 300, 9]  # 773 rows: 227 past offs[-1]
    offs = offsets_of(sizes, device)
    end = sum(sizes)
    x = randn(k, m, device=device, seed=31).t()  # (M, K) column-major, column stride M (2000 bytes)
    assert rows_or_columns(x) is x  # read in place
    assert rows_or_columns(randn(k, m + 4, device=device)[:, :m].t()).stride(1) == 1  # 2008 bytes: copied
    assert rows_or_columns(x[3:]).stride(1) == 1  # a slice of rows starting 6 bytes in: copied
    w = randn(len(sizes), k, n, device=device, seed=32)
    assert torch.equal(mt.grouped_mm(x[3:], w, offs)[:end], mt.grouped_mm(x[3:].contiguous(), w, offs)[:end])
    rows = torch.cat([x[r0:r0 + c].double().cpu() @ w[g].double().cpu()
                      for g, (r0, c) in enumerate(zip(np.cumsum([0] + sizes[:-1]).tolist(), sizes))])
    for zero_tail in (False, True):
        poisoned = poison([m * n * 2], device)
        got = mt.grouped_mm(x, w, offs, zero_tail=zero_tail)
        assert torch.equal(got[:end], mt.grouped_mm(x.contiguous(), w, offs)[:end])
        assert_close(got[:end], rows.to(got.device))
        if zero_tail:
            assert got[end:].eq(0).all()
        elif poisoned:
            assert got[end:].isnan().all()
    # 3-D x 2-D: out[:, cols_g] = a[g] @ b[:, cols_g]; a row-major (K, N) b is read as the column-major b.t()
    a3 = randn(len(sizes), 64, k, device=device, seed=33)
    b2 = randn(k, m, device=device, seed=34)
    out = mt.grouped_mm(a3, b2, offs)
    assert torch.equal(out[:, :end], mt.grouped_mm(a3, b2.t().contiguous().t(), offs)[:, :end])


@pytest.mark.parametrize("device", DEVICES)
def test_3d_2d_tail_columns(device):
    """3-D x 2-D: the columns of out at or past offs[-1] are the tail: zeros with zero_tail (written over
    poisoned memory, as are the rows of the (N, M) product the mode runs), and no gradient reaches b there."""
    a = randn(G, M, K, device=device, seed=87).requires_grad_(True)
    b = randn(N * G, K, device=device, seed=88).t().detach().requires_grad_(True)  # (K, N*G), column-major
    offs = offsets_of([N, 0, N, N - 5], device)
    with poisoned_allocations([N * G * M * 2], device):
        out = mt.grouped_mm(a, b, offs, zero_tail=True)
    end = int(offs[-1])
    assert (out[:, end:] == 0).all()
    ref = torch.cat([a[0] @ b[:, :N], a[2] @ b[:, N:2 * N], a[3] @ b[:, 2 * N:end]], dim=1)
    assert_close(out[:, :end], ref)
    out.backward(torch.ones_like(out))
    assert (b.grad[:, end:] == 0).all() and (b.grad[:, N:N] == 0).all()
    assert (a.grad[1] == 0).all()  # the empty group's weights get exact zeros


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m, out_dtype, m_pad", [(12, None, 16), (1, None, 8), (13, torch.float32, 16),
                                                 (4, torch.float32, 8), (20, torch.float32, 24)])
@pytest.mark.parametrize("a_row_major", [True, False])
def test_3d_2d_takes_any_m(device, m, out_dtype, m_pad, a_row_major):
    """3-D x 2-D with M off the 16-byte rule, which torch._grouped_mm takes: a is copied with zero rows up to
    M' and the result is the (M, N) view of the (N, M') product, strides (1, M'). Values and both gradients
    against float64 autograd (and torch._grouped_mm where it runs), the tail columns zeros with zero_tail over
    poisoned memory, an empty group's weights an exact zero gradient."""
    if a_row_major:
        a = randn(G, m, K, device=device, seed=89)
    else:  # column-major at a column stride of M': a slice of a wider stack (a stride of M is refused, below)
        a = randn(G, K, m_pad, device=device, seed=89)[:, :, :m].transpose(-2, -1)
    a = a.detach().requires_grad_(True)
    b = randn(K, N * G, device=device, seed=90).requires_grad_(True)
    offs = offsets_of([N, 0, N, N - 5], device)
    ends = [0] + offs.tolist()
    out_bytes = N * G * m_pad * (out_dtype or torch.bfloat16).itemsize
    with poisoned_allocations([G * m_pad * K * 2, out_bytes], device):
        out = mt.grouped_mm(a, b, offs, out_dtype=out_dtype, zero_tail=True)
    assert out.shape == (m, N * G) and out.stride() == (1, m_pad) and out.dtype == (out_dtype or torch.bfloat16)
    assert (out[:, ends[-1]:] == 0).all()

    def per_group(x, w):  # with zero_tail: the tail columns are zeros, through which no gradient flows
        tail = x.new_zeros(x.shape[1], w.shape[1] - ends[-1])
        return torch.cat([x[g] @ w[:, ends[g]:ends[g + 1]] for g in range(G)] + [tail], dim=1)

    grad_out = randn(m, N * G, dtype=out.dtype, device=device, seed=91)
    out.backward(grad_out)
    ref_out, (ref_da, ref_db) = _float64_grads(per_group, (a, b), grad_out)
    assert_close(out.detach(), ref_out)
    assert_close(a.grad, ref_da)
    assert_close(b.grad, ref_db)
    assert (a.grad[1] == 0).all() and (b.grad[:, ends[-1]:] == 0).all()
    if out_dtype is None:  # without zero_tail: the tail columns and their rows of b's gradient are unspecified
        ours, theirs = _ours_and_torchs_grads(a, b, offs, grad_out)
        if theirs is not None:
            assert theirs[0].shape == ours[0].shape
            assert_close(ours[0][:, :ends[-1]], theirs[0][:, :ends[-1]])
            assert_close(ours[1], theirs[1])
            assert_close(ours[2][:, :ends[-1]], theirs[2][:, :ends[-1]])


@pytest.mark.parametrize("m", [13, 16])
def test_3d_2d_layout_rules_do_not_depend_on_m(m):
    """The layouts of a that an M of whole 16-byte rows refuses are refused where M is padded too (a broadcast
    group, a base address off 16 bytes, experts innermost), a K off the rule is named as K either way, and a
    column stride off the rule, which only an M off it gives a contiguous column-major a, is refused
    (torch._grouped_mm refuses it too)."""
    b, offs = randn(K, 24), offsets_of([8, 8, 8])
    name = re.escape("grouped_mm: a (read as a.transpose(-2, -1)): ")
    with pytest.raises(ValueError, match=name + r"expected a positive expert stride that is a multiple of 16 bytes"):
        mt.grouped_mm(randn(1, m, K).expand(3, m, K), b, offs)
    with pytest.raises(ValueError, match=name + r"expected a 16-byte aligned base address"):
        mt.grouped_mm(randn(3 * m * K + 1)[1:].view(3, m, K), b, offs)
    with pytest.raises(ValueError, match=name + r"expected an \(E, K, M\) weight whose M dim is contiguous .*"
                                       r"pass a\.contiguous\(\) to copy it"):
        mt.grouped_mm(randn(m, K, 3).permute(2, 0, 1), b, offs)
    with pytest.raises(ValueError, match=r"grouped_mm: b \(read as b.t\(\)\): expected K \* sizeof\(torch\.bfloat16\) a "
                                         r"multiple of 16 bytes .*got K=12"):
        mt.grouped_mm(randn(3, m, 12), randn(12, 24), offs)
    column_major = randn(3, K, m).transpose(-2, -1)
    if m % 8:
        with pytest.raises(ValueError, match=name + rf"expected a row stride stride\(1\) >= M={m} that is a "
                                           rf"multiple of 16 bytes .*got stride\(1\)={m} elements"):
            mt.grouped_mm(column_major, b, offs)
    else:
        assert_close(mt.grouped_mm(column_major, b, offs), mt.grouped_mm(column_major.contiguous(), b, offs))


@pytest.mark.parametrize("device", DEVICES)
def test_layouts_with_a_dim_of_one_and_single_column_major_groups(device):
    """Operands with a dim of one at any stride, and a 3-D a whose one group (or rows of one) is column-major,
    run forward and backward as torch._grouped_mm runs them (they used to be refused, or crash in dB)."""
    bf, on = torch.bfloat16, dict(device=device)
    cases = [  # (a, b, offs)
        (randn(8, 16, **on).t()[:1], randn(1, 8, 8, **on), offsets_of([1], device)),  # 2-D x 3-D, M = 1
        (randn(8, 16, **on)[:, :1], randn(1, 8, **on), offsets_of([1], device)),  # 2-D x 2-D, T = 1
        (randn(1, 8, 8, **on), randn(8, 16, **on)[:, :1], offsets_of([1], device)),  # 3-D x 2-D, N = 1
        (randn(2, 8, 16, **on).mT[:, :1], randn(2, 8, 8, **on), None),  # 3-D x 3-D, M = 1
        (randn(1, 16, 8, **on).mT, randn(1, 16, 24, **on), None),  # 3-D x 3-D, one column-major group
    ]
    for a, b, offs in cases:
        a, b = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
        assert a.dtype == b.dtype == bf
        ref_a, ref_b = a.detach().double().cpu().requires_grad_(True), b.detach().double().cpu().requires_grad_(True)
        if offs is None:
            out, ref = mt.grouped_mm(a, b), torch.matmul(ref_a, ref_b)
        elif a.dim() == 2 and b.dim() == 3:
            out, ref = mt.grouped_mm(a, b, offs), ref_a @ ref_b[0]
        else:
            out, ref = mt.grouped_mm(a, b, offs), (ref_a @ ref_b if a.dim() == 2 else ref_a[0] @ ref_b)
            ref = ref.unsqueeze(0) if a.dim() == 2 else ref
        assert out.shape == ref.shape
        assert_close(out, ref)
        grad = randn(*out.shape, device=device, seed=89)
        out.backward(grad)
        ref.backward(grad.double().cpu())
        assert_close(a.grad, ref_a.grad)
        assert_close(b.grad, ref_b.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_outputs_keep_the_autograd_graph(device):
    """No groups in 3-D x 3-D, M = 0 in 3-D x 2-D and H = 0 in 2-D x 2-D give torch._grouped_mm's empty outputs,
    connected to the inputs (a backward through them gives zero gradients)."""
    on = dict(device=device)
    calls = [(randn(0, 16, 16, **on), randn(0, 16, 24, **on), None, (0, 16, 24)),
             (randn(3, 0, 16, **on), randn(16, 24, **on), offsets_of([8, 16, 0], device), (0, 24)),
             (randn(0, 24, **on), randn(24, 16, **on), offsets_of([8, 8, 8], device), (3, 0, 16))]
    for a, b, offs, shape in calls:
        a, b = a.requires_grad_(True), b.requires_grad_(True)
        out = mt.grouped_mm(a, b) if offs is None else mt.grouped_mm(a, b, offs)
        assert out.shape == shape and out.requires_grad
        out.sum().backward()
        assert a.grad.shape == a.shape and (b.grad == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens_in_2d_x_2d_take_a_of_any_strides(device):
    """T = 0 in 2-D x 2-D (a step that routed no tokens, a sliced from a row-major (H, T_max) buffer): the
    empty a's strides do not matter (docs/ops.md: an empty matrix any strides), and the result is
    torch._grouped_mm's (E, H, N) of exact zeros, with zero gradients."""
    on = dict(device=device)
    for a in (randn(16, 8, **on)[:, :0], torch.empty_strided((16, 0), (16, 1), dtype=torch.bfloat16, **on),
              randn(0, 16, **on).t()):
        for grad in (False, True):
            a_in, b = a.detach().requires_grad_(grad), randn(0, 24, **on).requires_grad_(grad)
            out = mt.grouped_mm(a_in, b, offsets_of([0, 0, 0], device))
            assert out.shape == (3, 16, 24) and (out == 0).all(), a.stride()
            if grad:
                out.float().square().sum().backward()
                assert a_in.grad.shape == (16, 0) and b.grad.shape == (0, 24)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_output_extents_check_what_a_call_with_rows_checks(device):
    """H = 0 in 2-D x 2-D and M = 0 in 3-D x 2-D run no op (the output is empty) but their ragged extent, T or N,
    is not: validate=True checks offs against it with the message of the same call with rows (less the op's
    "(checked as ...)"), and the group count and the 16-byte rules are checked too."""
    on = dict(device=device)

    def two_2d(h, t=32, n=24):
        return randn(t, h, **on).t(), randn(t, n, seed=3, **on)

    def three_2d(m, k=32, n=24):
        return randn(4, m, k, **on), randn(k, n, seed=4, **on)

    def message(call):
        with pytest.raises(ValueError) as err:
            call()
        return str(err.value)

    def ends(values):
        return torch.tensor(values, dtype=torch.int32, device=device)

    bad_offs = ([8, 4, 16, 24], [-1, 8, 16, 24], [8, 8, 16, 40])
    for make, empty, full, extent in ((two_2d, 0, 16, 32), (three_2d, 0, 16, 24)):
        for values in bad_offs + ([8, 8, 16, extent + 1],):  # one past the ragged extent, T or N, is past it too
            offs = ends(values)
            with_rows = message(lambda: mt.grouped_mm(*make(full), offs, validate=True))
            assert with_rows.endswith("'s offsets)")
            assert message(lambda: mt.grouped_mm(*make(empty), offs, validate=True)) == \
                with_rows[:with_rows.rindex(" (checked as")]
            assert mt.grouped_mm(*make(empty), offs).numel() == 0  # clamped on the device without validate
        assert mt.grouped_mm(*make(empty), ends([8, 8, 16, 24]), validate=True).numel() == 0
        many = torch.zeros(1025, dtype=torch.int32, device=device)
        for m in (empty, full):
            x, w = make(m)
            if make is three_2d:
                x = randn(1025, m, 32, **on)
            with pytest.raises(ValueError, match=r"^grouped_mm: offs: expected 1 <= E <= 1024 experts, got E=1025"):
                mt.grouped_mm(x, w, many)
    # the 16-byte rules: N in 2-D x 2-D (b's rows, and out's in out_dtype), K in 3-D x 2-D
    offs = ends([8, 8, 16, 32])
    for h in (0, 16):
        with pytest.raises(ValueError, match=r"^grouped_mm: b: expected N.* a multiple of .*got N=12"):
            mt.grouped_mm(*two_2d(h, n=12), offs)
    a_f32, b_f32 = randn(32, 0, dtype=torch.float32, **on).t(), randn(32, 12, dtype=torch.float32, **on)
    with pytest.raises(ValueError, match=r"^grouped_mm: out: expected N \* sizeof\(torch\.float16\) a multiple of "
                                         r"16 bytes .*got N=12"):
        mt.grouped_mm(a_f32, b_f32, offs, out_dtype=torch.float16)
    for m in (0, 16):
        with pytest.raises(ValueError, match=r"^grouped_mm: (a|b \(read as b\.t\(\)\)): expected K.* a multiple of "
                                             r".*got K=12"):
            mt.grouped_mm(*three_2d(m, k=12), ends([8, 8, 16, 24]))


def test_out_dtype_float64_with_float64_inputs_is_their_default():
    """out_dtype=a.dtype (torch._grouped_mm's only choice) is accepted for float64 inputs (CPU) in every mode and
    gives the default's output; with other inputs float64 is refused by name."""
    f64 = dict(dtype=torch.float64)
    offs = torch.tensor([3, 8], dtype=torch.int32)
    calls = [(randn(8, 16, **f64), randn(2, 16, 8, seed=5, **f64), offs),
             (randn(16, 8, **f64), randn(8, 8, seed=6, **f64), offs),
             (randn(2, 8, 16, **f64), randn(16, 8, seed=7, **f64), offs),
             (randn(2, 8, 16, **f64), randn(2, 16, 8, seed=8, **f64), None)]
    for a, b, o in calls:
        out = mt.grouped_mm(a, b, o, out_dtype=torch.float64)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, mt.grouped_mm(a, b, o), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^grouped_mm: out_dtype: expected None, torch\.bfloat16, torch\.float16 or "
                                         r"torch\.float32 \(or torch\.float64 with float64 inputs\), got "
                                         r"torch\.float64$"):
        mt.grouped_mm(randn(8, 16), randn(2, 16, 8, seed=9), offs, out_dtype=torch.float64)


def test_unsupported_input_dtypes_are_named_in_every_mode():
    """8-bit inputs are NotImplementedError, as the ops raise for them (moe_mlp names its x the same way); other
    dtypes the ops do not take are ValueError."""
    offs = offsets_of([M] * G)
    for a, b in ((randn(M * G, K), randn(G, K, N)), (randn(K, M * G).t(), randn(M * G, N)),
                 (randn(G, M, K), randn(G, K, N)), (randn(G, M, K), randn(K, N * G))):
        o = None if a.dim() == 3 and b.dim() == 3 else offs
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            with pytest.raises(NotImplementedError, match=r"^grouped_mm: a: expected dtype torch\.bfloat16 "
                                                          r"\(torch\.float16, torch\.float32 or torch\.float64 on "
                                                          rf"CPU\), got {re.escape(str(dtype))} \(8-bit and FP4 "
                                                          r"inputs are not supported yet\)$"):
                mt.grouped_mm(a.to(dtype), b.to(dtype), o)
        with pytest.raises(ValueError, match=r"^grouped_mm: a: expected dtype torch\.bfloat16 \(torch\.float16, "
                                             r"torch\.float32 or torch\.float64 on CPU\), got torch\.int8$"):
            mt.grouped_mm(a.to(torch.int8), b.to(torch.int8), o)
    with pytest.raises(NotImplementedError, match=r"^moe_mlp: x: expected dtype torch\.bfloat16 .*got "
                                                  r"torch\.float8_e4m3fn \(8-bit and FP4 inputs are not supported "
                                                  r"yet\)$"):
        mt.moe_mlp(randn(M, K).to(torch.float8_e4m3fn), randn(1, K, 2 * N).to(torch.float8_e4m3fn),
                   randn(1, N, K).to(torch.float8_e4m3fn), offsets_of([M]))


def test_empty_outputs_and_no_groups_check_the_other_operand_as_a_call_with_rows():
    """H = 0 or E = 0 (2-D x 2-D) and M = 0 (3-D x 2-D) run no op, yet refuse what the same call with rows
    refuses, with its message less the op's "(checked as ...)": b's overlapping rows, a row stride or a base
    off 16 bytes, strided offs."""
    offs = offsets_of([8, 0, 8, 16])

    def message(call):
        with pytest.raises(ValueError) as err:
            call()
        return str(err.value)

    misaligned = torch.empty(32 * 24 + 1, dtype=torch.bfloat16)[1:].view(32, 24)
    for b in (randn(1, 24).expand(32, 24), randn(32, 28)[:, :24], misaligned):
        with_rows = message(lambda: mt.grouped_mm(randn(32, 16).t(), b, offs))
        assert with_rows.startswith("grouped_mm: b: ") and with_rows.endswith(" (checked as grouped_gemm_wgrad's dy)")
        for a, o in ((randn(32, 0).t(), offs), (randn(32, 16).t(), offs[:0])):
            assert message(lambda: mt.grouped_mm(a, b, o)) == with_rows[:with_rows.rindex(" (checked as")]
    strided_offs = torch.tensor([8, 0, 8, 0, 16, 0, 32, 0], dtype=torch.int32)[::2]
    for b, o in ((randn(32, 1).expand(32, 40), offsets_of([8, 0, 16, 40])), (randn(32, 40), strided_offs)):
        with_rows = message(lambda: mt.grouped_mm(randn(4, 8, 32), b, o))
        assert with_rows.endswith("(checked as grouped_gemm's a)") or with_rows.endswith("(checked as grouped_gemm's "
                                                                                        "offsets)")
        assert message(lambda: mt.grouped_mm(randn(4, 0, 32), b, o)) == with_rows[:with_rows.rindex(" (checked as")]


def test_operands_on_two_devices_are_named_as_the_caller_passes_them():
    """The 2-D x 2-D and 3-D x 2-D modes run ops whose operands are other views (x = a.t(), rows = b.t()):
    a device mix is reported against a, in grouped_mm's names."""
    on_meta = dict(device="meta")
    offs = offsets_of([8, 0, 8, 16])
    expected = r"^grouped_mm: b: expected a tensor on cpu \(the device of a\), got one on meta$"
    with pytest.raises(ValueError, match=expected):
        mt.grouped_mm(randn(4, 8, 16), torch.empty(16, 40, dtype=torch.bfloat16, **on_meta), offsets_of([8, 8, 16, 40]))
    with pytest.raises(ValueError, match=expected):
        mt.grouped_mm(randn(32, 16).t(), torch.empty(32, 24, dtype=torch.bfloat16, **on_meta), offs)
    with pytest.raises(ValueError, match=r"^grouped_mm: offs: expected a tensor on cpu \(the device of a\), got one "
                                         r"on meta$"):
        mt.grouped_mm(randn(32, 16).t(), randn(32, 24), offs.to("meta"))


def test_operand_layouts_that_are_neither_row_nor_column_major_are_refused():
    offs = offsets_of([M] * G)
    every_other_column = randn(M * G, 2 * K, seed=80)[:, ::2]  # strides (128, 2)
    with pytest.raises(ValueError, match=r"grouped_mm: a: .*row-major"):
        mt.grouped_mm(every_other_column, make_b(False, True, "cpu"), offs)
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected a row-major or column-major \(H, T\) tensor"):
        mt.grouped_mm(randn(M, 2 * K * G, seed=81)[:, ::2], randn(K * G, N, seed=82), offs)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected a row-major or column-major \(T, N\) tensor"):
        mt.grouped_mm(randn(M * G, M, seed=83).t(), randn(M * G, 2 * N, seed=84)[:, ::2], offs)
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected an \(E, M, K\) tensor whose K dim"):
        mt.grouped_mm(randn(2 * G, M, 2 * K, seed=85)[::2, :, ::2], make_b(False, True, "cpu"))
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected an \(E, M, K\) tensor whose K dim .*got strides "
                                         r"\(4096, 256, 2\)"):  # one (E*M, K) view exists, with the caller's strides
        mt.grouped_mm(randn(G, 2 * M, 2 * K, seed=86)[:, ::2, ::2], make_b(False, True, "cpu"))


def _torch_ref_or_none(a, b, offs, sizes):
    """torch._grouped_mm(a, b, offs=offs), or None where it is not a reference: on CUDA only for groups that
    are all non-empty multiples of 16 columns (PyTorch's own 2d/2d case: its kernel checks the ragged
    dimension on the device, where a refused empty or unaligned group would be a device-side assert), and
    None when this torch build cannot run it. The float64 oracle is always compared."""
    if a.is_cuda and not all(s > 0 and s % 16 == 0 for s in sizes):
        return None
    try:
        return torch._grouped_mm(a, b, offs=offs)
    except (RuntimeError, NotImplementedError):
        return None


# Group sizes along the ragged K (token) dimension, K * G = 256 columns: uniform, empty first / last group,
# and sizes that are no multiple of anything (with an empty group in the middle).
RAGGED_K_SIZES = [[K] * G, [0, 2 * K, K, K], [K, K, 2 * K, 0], [3, 0, 77, K * G - 80]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided", [False, True])
def test_2d_2d_matches_torch(device, strided):
    # PyTorch's 2d/2d test with a and b column-major (the token dim strided in memory): out[g] = a[:, k_g] @ b[k_g, :]
    kt = K * G + K * int(strided)
    a = randn(kt, M, device=device, seed=6).t()[:, :K * G]
    b = randn(kt, N, device=device, seed=7)[:K * G]
    for sizes in RAGGED_K_SIZES:
        offs = offsets_of(sizes, device)
        # an empty group's (M, N) block keeps the poison unless the op writes its zeros
        with poisoned_allocations([G * M * N * 2], device):
            out = mt.grouped_mm(a, b, offs)
        assert out.shape == (G, M, N) and out.dtype == a.dtype and out.device.type == device
        start = 0
        for g, size in enumerate(sizes):
            if size == 0:
                assert (out[g] == 0).all(), f"sizes {sizes}: empty group {g} is not exactly zero"
            else:
                cols = slice(start, start + size)
                assert_close(out[g], a[:, cols].double().cpu() @ b[cols].double().cpu())
            start += size
        ref = _torch_ref_or_none(a, b, offs, sizes)
        if ref is not None:
            assert ref.shape == out.shape and ref.dtype == out.dtype
            for g, size in enumerate(sizes):
                if size:  # torch's own result for an empty group is not what is compared here
                    assert_close(out[g], ref[g])


@pytest.mark.parametrize("device", DEVICES)
def test_2d_2d_every_group_empty_is_all_zeros(device):
    """Every group empty (offs all 0): out is exactly 0, written by the op over a poisoned allocator (CPU:
    M_PERTURB, every allocation starts as 0x7F bytes, 3.39e38 in f32; CUDA: a freed NaN block of out's size)."""
    a = randn(K * G, M, device=device, seed=21).t()
    b = randn(K * G, N, device=device, seed=22)
    offs = torch.zeros(G, dtype=torch.int32, device=device)
    with poisoned_allocations([G * M * N * 4], device):  # poison where the op does not write
        out = mt.grouped_mm(a, b, offs, out_dtype=torch.float32)
    assert out.shape == (G, M, N) and out.dtype == torch.float32
    assert (out == 0).all()


def _ragged_k_reference_grads(x, dy, sizes, dout):
    """dX and dY of out[g] = x[cols_g]^T @ dy[cols_g] by autograd in float64 on the CPU."""
    xr = x.detach().double().cpu().requires_grad_(True)
    dyr = dy.detach().double().cpu().requires_grad_(True)
    outs, start = [], 0
    for size in sizes:
        outs.append(xr[start:start + size].t() @ dyr[start:start + size])
        start += size
    torch.stack(outs).backward(dout.double().cpu())
    return xr.grad, dyr.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sizes", RAGGED_K_SIZES + [[5, 0, 70, 100]])  # the last: 81 columns past offs[-1]
@pytest.mark.parametrize("zero_tail", [False, True])
def test_2d_2d_backward_matches_float64_autograd(device, sizes, zero_tail):
    # dA = (b[cols_g] @ dout[g]^T)^T and dB = a.t()[cols_g] @ dout[g], through grouped_gemm; with zero_tail the
    # columns of T past offs[-1] get exact zeros (over poisoned memory), without it they are unspecified.
    t = K * G
    x = randn(t, M, device=device, seed=31).requires_grad_(True)  # a = x.t(): (M, T), stride(0) == 1
    dy = randn(t, N, device=device, seed=32).requires_grad_(True)
    offs = offsets_of(sizes, device)
    dout = randn(G, M, N, device=device, seed=33)
    out = mt.grouped_mm(x.t(), dy, offs, zero_tail=zero_tail)
    with poisoned_allocations([t * M * 2, t * N * 2], device):
        out.backward(dout)
    want_x, want_dy = _ragged_k_reference_grads(x, dy, sizes, dout)
    end = sum(sizes)
    assert x.grad.device.type == dy.grad.device.type == device
    assert_close(x.grad[:end], want_x[:end])
    assert_close(dy.grad[:end], want_dy[:end])
    if zero_tail:
        assert (x.grad[end:] == 0).all() and (dy.grad[end:] == 0).all()


def test_2d_2d_gradcheck_cpu_f64():
    x = randn(20, 8, dtype=torch.float64, seed=34).requires_grad_(True)
    dy = randn(20, 6, dtype=torch.float64, seed=35).requires_grad_(True)
    offs = offsets_of([3, 0, 9])  # columns 12..19 of T are in no group
    assert torch.autograd.gradcheck(lambda a, b: mt.grouped_mm(a.t(), b, offs, zero_tail=True), (x, dy))


def test_2d_2d_backward_is_first_order_only():
    x = randn(K * G, M, dtype=torch.float64, seed=36).requires_grad_(True)
    dy = randn(K * G, N, dtype=torch.float64, seed=37).requires_grad_(True)
    out = mt.grouped_mm(x.t(), dy, offsets_of([K] * G))
    (gx,) = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gx.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_2d_2d_no_groups_backward_is_zero(device):
    x = randn(K, M, device=device, seed=38).requires_grad_(True)
    dy = randn(K, N, device=device, seed=39).requires_grad_(True)
    out = mt.grouped_mm(x.t(), dy, torch.zeros(0, dtype=torch.int32, device=device))
    assert out.shape == (0, M, N)
    out.sum().backward()
    assert (x.grad == 0).all() and (dy.grad == 0).all()


def test_2d_2d_no_groups_takes_any_token_count():
    """T, the ragged dimension of the 2-D x 2-D mode, has no alignment rule with groups, and none without:
    no groups gives the (0, H, N) output for T = 30 (it used to be refused as 'K a multiple of 8')."""
    x, dy = randn(30, M, seed=60), randn(30, N, seed=61)
    no_offs = torch.zeros(0, dtype=torch.int32)
    assert mt.grouped_mm(x.t(), dy, no_offs).shape == (0, M, N)
    assert mt.grouped_mm(x.t(), dy, offsets_of([10, 20])).shape == (2, M, N)  # the same T with groups
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected shape \(T=30, N\) .*got \(31, 32\)"):
        mt.grouped_mm(x.t(), randn(31, N, seed=62), no_offs)


def test_weights_with_no_columns_are_refused_as_empty_not_as_padded():
    """A contiguous (E, K, 0) weight (torch strides its empty dim 1) has no padding: the error is N = 0, as for
    the same weight as a transposed view and in the other modes, not a padding error that suggests
    .contiguous() on a tensor that already is."""
    a, offs = randn(M, K, seed=63), offsets_of([M // G] * G)
    for b in (randn(G, K, 0, seed=64), randn(G, 0, K, seed=65).mT):
        with pytest.raises(ValueError, match=r"grouped_mm: b: expected N > 0, got N=0"):
            mt.grouped_mm(a, b, offs)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected N > 0, got N=0"):
        mt.grouped_mm(randn(G, M, K, seed=66), randn(G, K, 0, seed=67))


@pytest.mark.parametrize("device", DEVICES)
def test_3d_3d_matches_torch(device):
    a = randn(G, M, K, device=device, seed=10)
    b = make_b(False, False, device)
    assert_close(mt.grouped_mm(a, b), torch_grouped_mm(a, b))


def _misaligned_copy(t):
    """A contiguous copy of ``t`` whose base address is 2 bytes past the 16-byte grid (a view into a longer
    buffer), as autograd hands over the gradient of an output that was flattened and sliced."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:]
    out = flat.view(t.shape).copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 16 == 2
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["2d_3d", "2d_2d", "3d_3d", "3d_2d"])
def test_backward_takes_an_incoming_gradient_off_the_16_byte_grid(device, mode):
    """Autograd may pass a contiguous gradient at any element offset (torch.cat([z, y.flatten()])); torch's
    backward takes it, and grouped_mm's gives the gradients of an aligned copy of it, bitwise, leaving the
    given gradient as it was."""
    offs_m = torch.tensor([5, 5, 12, 16], dtype=torch.int32, device=device)
    a, b, offs = {
        "2d_3d": (randn(M, K, device=device, seed=40), randn(G, K, N, device=device, seed=41), offs_m),
        "2d_2d": (randn(K, M, device=device, seed=40).t(), randn(K, N, device=device, seed=41),
                  torch.tensor([20, 20, 50, 64], dtype=torch.int32, device=device)),
        "3d_3d": (randn(G, M, K, device=device, seed=40), randn(G, K, N, device=device, seed=41), None),
        "3d_2d": (randn(G, M, K, device=device, seed=40), randn(M, K, device=device, seed=41).t(), offs_m),
    }[mode]
    grads = []
    for misaligned in (False, True):
        a_leaf, b_leaf = a.detach().requires_grad_(), b.detach().requires_grad_()
        out = mt.grouped_mm(a_leaf, b_leaf, offs) if offs is not None else mt.grouped_mm(a_leaf, b_leaf)
        g = randn(*out.shape, device=device, seed=42)
        given = _misaligned_copy(g) if misaligned else g
        out.backward(given)
        assert torch.equal(given, g)
        grads.append((a_leaf.grad, b_leaf.grad))
    for aligned, off_grid in zip(*grads):
        assert torch.equal(aligned, off_grid)
    # The same through a graph that slices the output's gradient off the grid itself: the gradients of
    # out.sum(), whose incoming gradient is aligned.
    results = []
    for pad in (0, 3):
        a_leaf, b_leaf = a.detach().requires_grad_(), b.detach().requires_grad_()
        out = mt.grouped_mm(a_leaf, b_leaf, offs) if offs is not None else mt.grouped_mm(a_leaf, b_leaf)
        torch.cat([torch.zeros(pad, dtype=out.dtype, device=device), out.flatten()]).float().sum().backward()
        results.append((a_leaf.grad, b_leaf.grad))
    for aligned, off_grid in zip(*results):
        assert torch.equal(aligned, off_grid)


def test_3d_3d_with_empty_groups_has_the_output_shape():
    # M = 0 rows per group: (G, 0, N) as torch._grouped_mm gives, not a reshape error.
    a, b = randn(G, 0, K, seed=16), make_b(False, False, "cpu")
    out = mt.grouped_mm(a, b)
    assert out.shape == (G, 0, N) and out.dtype == a.dtype


@pytest.mark.parametrize("device", DEVICES)
def test_zero_groups_give_torchs_shapes(device):
    """No groups at all, in each mode, as torch._grouped_mm accepts them: 2-D x 3-D gives (M, N), every row past
    the last offset (zeros with zero_tail, also in dA); the other modes give (0, ., .). A K mismatch or a
    wrong offs is still an error."""
    no_offs = torch.zeros(0, dtype=torch.int32, device=device)
    a = randn(M, K, device=device, seed=30).requires_grad_()
    b = randn(0, K, N, device=device, seed=31).requires_grad_()
    out = mt.grouped_mm(a, b, no_offs)
    # The shapes come from torch's CPU fallback: on CUDA, torch._grouped_mm with no groups stops the process
    # with SIGFPE (torch 2.11, H200).
    def cpu(t):
        return t.detach().cpu()

    ref = torch_grouped_mm(cpu(a), cpu(b), offs=cpu(no_offs))
    assert out.shape == ref.shape == (M, N) and out.dtype == ref.dtype
    out = mt.grouped_mm(a, b, no_offs, zero_tail=True)
    assert (out == 0).all()
    out.float().sum().backward()
    assert a.grad.shape == a.shape and (a.grad == 0).all() and b.grad.shape == (0, K, N)
    at, bt = randn(32, K, device=device, seed=32).t(), randn(32, N, device=device, seed=33)
    ref_shape = torch_grouped_mm(cpu(at), cpu(bt), offs=cpu(no_offs)).shape
    assert mt.grouped_mm(at, bt, no_offs).shape == ref_shape == (0, K, N)
    a3 = randn(0, M, K, device=device, seed=34)
    assert mt.grouped_mm(a3, b.detach()).shape == torch_grouped_mm(cpu(a3), cpu(b)).shape == (0, M, N)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected shape \(E, K=64, N\) with K from a.shape\[1\]"):
        mt.grouped_mm(a.detach(), randn(0, 32, N, device=device, seed=35), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: offs: expected a torch\.int32 tensor of shape \(0,\)"):
        mt.grouped_mm(a.detach(), b.detach(), no_offs.long())


def test_c13_unusual_weight_stride_orders():
    a, offs = randn(M * G, K, seed=11), offsets_of([M] * G)
    experts_inner = randn(K, N, G, seed=12).permute(2, 0, 1)  # (G, K, N) with experts innermost
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected an \(E, K, N\) weight whose N dim is contiguous.*"
                                         r"got shape \(4, 64, 32\) with strides \(1, 128, 4\)"):
        mt.grouped_mm(a, experts_inner, offs)
    # experts that share memory (an expert stride of 16 bytes, smaller than a matrix): an input, read as given,
    # with the values of its packed copy
    overlap = torch.as_strided(randn(K * N + 64, seed=13), (G, K, N), (8, N, 1))
    assert torch.equal(mt.grouped_mm(a, overlap, offs), mt.grouped_mm(a, overlap.contiguous(), offs))
    assert_close(mt.grouped_mm(a, overlap, offs), torch_grouped_mm(a, overlap.contiguous(), offs=offs))
    # a transposed view is honoured exactly (no copy): same values as its contiguous copy
    b_view = randn(G, N, K, seed=14).mT
    assert torch.equal(mt.grouped_mm(a, b_view, offs), mt.grouped_mm(a, b_view.contiguous(), offs))


def test_extensions_bias_out_dtype_zero_tail():
    a, offs = randn(50, K, seed=15), offsets_of([10, 0, 20, 5])
    b, bias = make_b(False, True, "cpu"), randn(G, N, dtype=torch.float32, seed=16)
    out = mt.grouped_mm(a, b, offs, bias=bias, out_dtype=torch.float32, zero_tail=True)
    ref = torch_grouped_mm(a, b, offs=offs).double()
    for g, (s, e) in enumerate([(0, 10), (10, 10), (10, 30), (30, 35)]):
        ref[s:e] += bias[g].double()
    assert out.dtype == torch.float32
    assert_close(out[:35], ref[:35])
    assert (out[35:] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_validate_reports_bad_offs_by_the_callers_name(device):
    """validate=True (spec §0's opt-in host check) in every mode that takes offs, with and without autograd;
    without it, the same offsets are clamped and the call returns."""
    a, b = randn(8, 16, device=device), randn(2, 16, 16, seed=1, device=device)
    bad = {"decreasing": ([5, 3], r"offs\[1\] = 3 < offs\[0\] = 5"),
           "past_the_end": ([3, 9], r"offs\[1\] = 9")}
    for offs, got in bad.values():
        offs = torch.tensor(offs, dtype=torch.int32, device=device)
        for x in (a, a.clone().requires_grad_()):
            with pytest.raises(ValueError, match=r"grouped_mm: offs: expected non-decreasing .*" + got):
                mt.grouped_mm(x, b, offs, validate=True)
            assert mt.grouped_mm(x, b, offs).shape == (8, 16)
        # 2-D x 2-D: the bound is T, the ragged dimension (as in the mode's other messages), not the op's M
        with pytest.raises(ValueError, match=r"grouped_mm: offs: expected non-decreasing group ends along T in "
                                             r"\[0, T=8\], .*" + got):
            mt.grouped_mm(randn(8, 16, device=device).t(), randn(8, 16, seed=2, device=device), offs, validate=True)
    good = offsets_of([3, 5]).to(device)
    torch.testing.assert_close(mt.grouped_mm(a, b, good, validate=True), mt.grouped_mm(a, b, good), rtol=0, atol=0)


def test_errors():
    """Every error names grouped_mm and the caller's operand (a, b, offs, bias, out_dtype), also where an op
    it calls finds the problem (the message then says which op's operand it checked)."""
    a, b = randn(M * G, K), make_b(False, True, "cpu")
    offs = offsets_of([M] * G)
    with pytest.raises(ValueError,
                       match=r"grouped_mm: offs: expected shape \(E=4,\) with E from b.shape\[0\], got \(3,\)"):
        mt.grouped_mm(a, b, offsets_of([M] * 3))
    with pytest.raises(ValueError,
                       match=r"^grouped_mm: offs: expected dtype torch\.int32, got torch\.int64$"):
        mt.grouped_mm(a, b, offs.long())
    for bad in (offs.view(2, 2), offs[0]):  # 2-D x 2-D and 2-D x 3-D; a 0-d offs too
        with pytest.raises(ValueError, match=r"grouped_mm: offs: expected a 1-D \(E,\) torch\.int32 tensor, got shape "
                                             + re.escape(str(tuple(bad.shape)))):
            mt.grouped_mm(a.t(), randn(M * G, N), bad)
        with pytest.raises(ValueError, match=r"grouped_mm: offs: expected a 1-D \(E,\) torch\.int32 tensor"):
            mt.grouped_mm(a, b, bad)
    with pytest.raises(ValueError, match=r"grouped_mm: out_dtype: expected None, torch\.bfloat16, torch\.float16 "
                                         r"or torch\.float32 \(or torch\.float64 with float64 inputs\), got "
                                         r"torch\.int32"):
        mt.grouped_mm(a, b, offs, out_dtype=torch.int32)
    with pytest.raises(ValueError, match="offs: required"):
        mt.grouped_mm(a, b)
    with pytest.raises(ValueError, match="offs: must be None"):
        mt.grouped_mm(randn(G, M, K), b, offs)
    # 3-D x 2-D, in the caller's terms (the op runs on the transposes).
    a3, b2, offs_n = randn(G, M, K), randn(K, N * G), offsets_of([N] * G)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected shape \(K=64, N\) with K from a.shape\[2\], "
                                         r"got \(32, 128\)"):
        mt.grouped_mm(a3, randn(32, N * G), offs_n)
    with pytest.raises(ValueError, match=r"grouped_mm: offs: expected shape \(G=4,\) with G from a.shape\[0\]"):
        mt.grouped_mm(a3, b2, offsets_of([N] * 3))
    with pytest.raises(ValueError, match=r"grouped_mm: bias: not supported in the 3-D x 2-D mode"):
        mt.grouped_mm(a3, b2, offs_n, bias=randn(G, M))
    with pytest.raises(ValueError, match=r"grouped_mm: offs: required for 3-D x 2-D inputs"):
        mt.grouped_mm(a3, b2)
    with pytest.raises(ValueError, match=r"grouped_mm: b \(read as b.t\(\)\): expected column stride stride\(1\) "
                                         r">= N=13 .*got stride\(1\)=4"):  # b's rows overlap
        mt.grouped_mm(randn(3, 8, 16), randn(512).as_strided((16, 13), (4, 1)), offsets_of([4, 4, 11]))
    # Neither order: named as the op reads a (row-major, or column-major with more than one row).
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected a row-major matrix \(stride\(1\) == 1\) or, "
                                         r"with more than one row, a column-major one"):
        mt.grouped_mm(randn(32, 32)[::2, ::2], randn(2, 16, 8), offsets_of([5, 16]))
    # K off the 16-byte rule with a column-major a (read in place): named against a, as for a row-major one.
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected K \* sizeof\(torch\.bfloat16\) a multiple of 16 "
                                         r"bytes .*got K=12"):
        mt.grouped_mm(randn(12, 32).t(), randn(2, 12, 16), offsets_of([5, 32]))
    with pytest.raises(ValueError, match=r"grouped_mm: a \(read as a.transpose\(-2, -1\)\): expected an "
                                         r"\(E, K, M\) weight whose M dim is contiguous"):
        mt.grouped_mm(randn(G, 2 * M, 2 * K)[:, ::2, ::2], b2, offs_n)
    with pytest.raises(ValueError, match=r"grouped_mm: offs: .*group ends along N in \[0, N=128\].*"
                                         r"\(checked as grouped_gemm's offsets\)"):
        mt.grouped_mm(a3, b2, offsets_of([N, N, N, N + 1]), validate=True)
    # Shapes as the caller wrote them: a transposed view of an (E, N, K) weight is reported as (E, K, N).
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected shape \(E, K=64, N\) with K from a.shape\[1\], "
                                         r"got \(4, 32, 32\)"):
        mt.grouped_mm(a, randn(G, N, 32).mT, offs)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected shape \(E=4, K=64, N\) with E and K from a"):
        mt.grouped_mm(randn(G, M, K), randn(G, 32, N))
    with pytest.raises(ValueError, match=r"grouped_mm: bias: expected shape \(E=4, N=32\) with E from offs, N from "
                                         r"b, got \(4, 16\) \(checked as grouped_gemm's bias\)"):
        mt.grouped_mm(a, b, offs, bias=randn(G, 16))
    # 2-D x 2-D: b is the (T, N) operand of the op's dy.
    x, dy = randn(M * G, K), randn(M * G, N)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected a row-major or column-major \(T, N\) tensor"):
        mt.grouped_mm(x.t(), randn(M * G, 2 * N)[:, ::2], offs)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected a's dtype torch\.bfloat16, got torch\.float16"):
        mt.grouped_mm(x.t(), dy.half(), offs)
    # 3-D x 3-D has no offs to blame.
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected at most 1024 groups \(dim 0\)"):
        mt.grouped_mm(randn(1025, 1, 16), randn(1025, 16, 8))
    # E * M rows past the last int32 offset (storage-less tensors: the check comes before any op).
    big = dict(dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected E \* M <= 2147483647 rows in all .*got shape "
                                         r"\(3, 1073741824, 8\)"):
        mt.grouped_mm(torch.empty(3, 2**30, 8, **big), torch.empty(3, 8, 8, **big))
    # K = 0 sliced from a wider weight keeps its parent's expert stride: the empty extent is named, not the
    # packing (which w.contiguous() could not change).
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected K > 0, got K=0"):
        mt.grouped_mm(a[:, :0], randn(G, K, N)[:, :0], offs)
    with pytest.raises(ValueError, match=r"grouped_mm: bias: expected shape \(E=4, N=32\) with E and N from b"):
        mt.grouped_mm(randn(G, M, K), b, bias=randn(3, N))
    for name, args in (("a", ([[1.0]], b, offs)), ("b", (a, [[1.0]], offs)), ("offs", (a, b, [M] * G)),
                       ("bias", (a, b, offs, [[1.0]]))):
        with pytest.raises(TypeError, match=rf"grouped_mm: {name}: expected a torch\.Tensor, got list"):
            mt.grouped_mm(*args)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected shape \(T=64, N\) with T .*from a.shape\[1\], "
                                         r"got \(120, 32\)"):
        mt.grouped_mm(x.t(), randn(120, N), offs)


@pytest.mark.parametrize("groups", [2, 0])
@pytest.mark.parametrize("mode", ["2d3d", "2d2d", "3d3d"])
def test_out_rows_named_as_out(mode, groups):
    """An output row that out_dtype widens past the 16-byte rule (f64 operands, N = 6, out_dtype=float32: 24-byte
    rows) is refused as grouped_mm's out in every mode, with groups (the op's d or w, renamed) and without (no
    op runs: grouped_mm checks it itself)."""
    f64 = dict(dtype=torch.float64)
    offs = offsets_of([4, 4][:groups])
    args = {"2d3d": (randn(8, 2, **f64), randn(groups, 2, 6, **f64), offs),
            "2d2d": (randn(8, 2, **f64).t(), randn(8, 6, **f64), offs),
            "3d3d": (randn(groups, 4, 2, **f64), randn(groups, 2, 6, **f64))}[mode]
    with pytest.raises(ValueError, match=r"^grouped_mm: out: expected N \* sizeof\(torch\.float32\) a multiple of 16 "
                                         r"bytes .*got N=6 \(24 bytes\)"):
        mt.grouped_mm(*args, out_dtype=torch.float32)


@pytest.mark.parametrize("name, value, got", [
    ("validate", "no", "str 'no'"), ("validate", 0.0, "float 0.0"), ("zero_tail", "yes", "str 'yes'"),
    ("zero_tail", None, "NoneType None"),
])
@pytest.mark.parametrize("mode", ["2d3d", "2d2d", "3d3d"])
def test_flags_take_bools_only(name, value, got, mode):
    """zero_tail and validate are bools in every mode: validate="no" used to validate, and zero_tail="yes"
    reached the op's schema."""
    G, M, K, N = 4, 64, 32, 32
    args = {"2d3d": (randn(M, K), randn(G, K, N), offsets_of([10, 0, 30, 24])),
            "2d2d": (randn(M, K).t(), randn(M, N), offsets_of([10, 0, 30, 24])),
            "3d3d": (randn(G, M, K), randn(G, K, N))}[mode]
    with pytest.raises(TypeError, match=rf"^grouped_mm: {name}: expected a bool, got {got}$"):
        mt.grouped_mm(*args, **{name: value})
    assert mt.grouped_mm(*args, **{name: np.bool_(False)}).dim() == 3 - (mode == "2d3d")


def test_zero_groups_check_their_operands():
    """With no groups no op runs, and grouped_mm checks what the ops would have: dtypes, devices, stride
    orders, K and N (> 0, the 16-byte rule), a's row stride and base address, bias."""
    no_offs = torch.zeros(0, dtype=torch.int32)
    a = randn(M, K)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected N a multiple of 8 for torch\.bfloat16.*got N=33"):
        mt.grouped_mm(a, randn(0, K, 33), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected K a multiple of 8 for torch\.bfloat16.*got K=33"):
        mt.grouped_mm(randn(M, 33), randn(0, 33, N), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected dtype torch\.bfloat16 .*got torch\.int32"):
        mt.grouped_mm(a.int(), randn(0, K, N).int(), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: bias: expected shape \(E=0, N=32\), got \(5, 5\)"):
        mt.grouped_mm(a, randn(0, K, N), no_offs, bias=torch.randn(5, 5))
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected H = a.shape\[0\] a multiple of 8"):
        mt.grouped_mm(randn(M, 12).t(), randn(M, N), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: offs: expected a tensor on cpu \(the device of a\), got one on "
                                         r"meta"):
        mt.grouped_mm(a, randn(0, K, N), no_offs.to("meta"))
    with pytest.raises(ValueError, match=r"grouped_mm: bias: expected dtype torch\.bfloat16, torch\.float32 or "
                                         r"torch\.float64, got torch\.int32"):
        mt.grouped_mm(a, randn(0, K, N), no_offs, bias=torch.zeros(0, N, dtype=torch.int32))
    # What the ops check with groups, checked with none too: K, N > 0, a's row stride and base address.
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected K > 0, got K=0"):
        mt.grouped_mm(randn(M, 0), randn(0, 0, N), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected N > 0, got N=0"):
        mt.grouped_mm(a, randn(0, K, 0), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected a row stride that is a multiple of 16 bytes "
                                         r"\(16-byte alignment rule\), got stride\(0\)=68 elements \(136 bytes\)"):
        mt.grouped_mm(randn(M, K + 4)[:, :K], randn(0, K, N), no_offs)
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected a 16-byte aligned base address .*got 0x[0-9a-f]+; "
                                         r"pass a copy of the operand, which starts aligned$"):
        mt.grouped_mm(randn(M * K + 1)[1:].view(M, K), randn(0, K, N), no_offs)
    # The (M, N) output is allocated with no groups too: past 2^62 bytes it gets the ops' error, not the
    # allocator's (b of no experts has no elements whatever its N).
    with pytest.raises(ValueError, match=r"grouped_mm: out: expected at most 2\^62 bytes \(its sizes multiplied\), "
                                         r"got shape \(1048576, 4398046511104\) of torch\.bfloat16$"):
        mt.grouped_mm(torch.empty(2**20, K, dtype=torch.bfloat16), torch.empty(0, K, 2**42, dtype=torch.bfloat16),
                      no_offs)
    f64 = torch.float64  # an f64 bias is the CPU backend's, with groups or without
    assert mt.grouped_mm(randn(M, K, dtype=f64), randn(0, K, N, dtype=f64), no_offs,
                         bias=torch.zeros(0, N, dtype=f64)).shape == (M, N)
    # Layouts that are neither row- nor column-major (a column-major one is read, with groups or without).
    with pytest.raises(ValueError, match=r"grouped_mm: a: expected a row-major or column-major \(M, K\) tensor"):
        mt.grouped_mm(randn(M, 2 * K)[:, ::2], randn(0, K, N), no_offs)
    assert mt.grouped_mm(randn(K, M).t(), randn(0, K, N), no_offs, zero_tail=True).eq(0).all()
    with pytest.raises(ValueError, match=r"grouped_mm: b: expected a row-major or column-major \(T, N\) tensor"):
        mt.grouped_mm(randn(32, K).t(), randn(32, 2 * N)[:, ::2], no_offs)
    assert mt.grouped_mm(randn(32, K).t(), randn(N, 32).t(), no_offs).shape == (0, K, N)
    # Rows that overlap: refused as with groups (an expanded a of 2^40 rows used to reach the allocator), and
    # the 2-D x 2-D mode's x = a.t() gets the rules on its rows too. Each message is the one a call with a group
    # gives.
    one = torch.tensor([4], dtype=torch.int32)
    for rows in (2**40, 4):
        expanded = torch.empty(1, K, dtype=torch.bfloat16).expand(rows, K)
        for offs, b in ((no_offs, randn(0, K, N)), (one, randn(1, K, N))):
            with pytest.raises(ValueError, match=rf"grouped_mm: a: expected row stride stride\(0\) >= K={K} \(rows "
                                                 r"must not overlap\), got stride\(0\)=0"):
                mt.grouped_mm(expanded, b, offs, zero_tail=True)
    x_name = re.escape("grouped_mm: a (read as a.t(), the (T, H) tensor it views): ")
    overlap = rf"expected row stride stride\(0\) >= H={K} \(rows must not overlap\)"
    for x, expected in ((randn(1, K).expand(8, K), overlap),
                        (randn(8, K + 4)[:, :K], r"expected a row stride that is a multiple of 16 bytes"),
                        (randn(8 * K + 1)[1:].view(8, K), r"expected a 16-byte aligned base address")):
        for offs in (no_offs, one):
            with pytest.raises(ValueError, match=x_name + expected):
                mt.grouped_mm(x.t(), randn(8, N), offs)


def test_f32_bias_gradient_sums_the_f32_output_gradient():
    """out_dtype=float32 with an f32 bias: dbias is the per-expert sum of the incoming f32 gradient itself (dA
    and dB read it rounded to bf16, which would cost dbias ~1e-2 absolute at values near 1000)."""
    a, b, offs = randn(50, K, seed=17), make_b(False, True, "cpu"), offsets_of([10, 0, 20, 5])
    bias = torch.zeros(G, N, dtype=torch.float32, requires_grad=True)
    out = mt.grouped_mm(a, b, offs, bias=bias, out_dtype=torch.float32)
    dout = 1000 + torch.randn(50, N, generator=torch.Generator().manual_seed(18), dtype=torch.float64)
    out.backward(dout.float())
    for g, (s, e) in enumerate([(0, 10), (10, 10), (10, 30), (30, 35)]):
        expected = dout[s:e].sum(0)
        assert torch.allclose(bias.grad[g].double(), expected, rtol=0, atol=0.05), (g, bias.grad[g], expected)


@pytest.mark.parametrize("bad, clamped", [
    ([4, 2, 10, 12], [4, 4, 10, 12]),    # decreasing
    ([-5, 6, 3, 100], [0, 6, 6, 16]),    # negative, decreasing, past M
])
def test_bias_gradient_owns_the_rows_of_the_clamped_offsets(bad, clamped):
    """Without validate, bad offsets are clamped as the kernels clamp them (docs/ops.md §0); dbias sums the rows
    each expert owned in the forward, as dA and dB do. Reference: the same call with the clamped offsets, and
    the per-expert sums of the incoming gradient over those rows."""
    a, b = randn(16, 8, dtype=torch.float64, seed=21), randn(G, 8, 8, dtype=torch.float64, seed=22)
    dout = randn(16, 8, dtype=torch.float64, seed=23)
    grads = []
    for offs in (bad, clamped):
        bias = randn(G, 8, dtype=torch.float64, seed=24).requires_grad_(True)
        out = mt.grouped_mm(a, b, torch.tensor(offs, dtype=torch.int32), bias=bias)
        grads.append((out[:clamped[-1]].detach(), torch.autograd.grad(out, bias, dout)[0]))
    assert torch.equal(grads[0][0], grads[1][0])  # the forward clamps
    assert torch.equal(grads[0][1], grads[1][1])
    starts = [0] + clamped[:-1]
    expected = torch.stack([dout[s:e].sum(0) for s, e in zip(starts, clamped)])
    assert torch.allclose(grads[0][1], expected, rtol=0, atol=1e-12)


def test_f64_bias_gradient_is_summed_in_f64():
    """f64 operands (the CPU backend's gradient checks): dbias is exact to f64 rounding, not summed in f32."""
    a, b = randn(16, 8, dtype=torch.float64, seed=25), randn(2, 8, 8, dtype=torch.float64, seed=26)
    bias = torch.zeros(2, 8, dtype=torch.float64, requires_grad=True)
    dout = torch.full((16, 8), 0.1, dtype=torch.float64)
    dbias, = torch.autograd.grad(mt.grouped_mm(a, b, offsets_of([7, 16]), bias=bias), bias, dout)
    expected = torch.stack([dout[:7].sum(0), dout[7:].sum(0)])
    assert torch.allclose(dbias, expected, rtol=1e-15, atol=0), (dbias - expected).abs().max()


def test_keywords_left_out_are_the_schema_defaults():
    """grouped_mm passes grouped_gemm only the keywords that differ from its schema's defaults (each keyword
    costs the dispatcher time on the eager path): what it leaves out must be exactly those defaults, or a call
    would silently run with other options."""
    from moegemm._torch_grouped_mm import _rows_options
    defaults = {arg.name: arg.default_value for arg in torch.ops.moegemm.grouped_gemm.default._schema.arguments
                if arg.kwarg_only}
    assert _rows_options("nk", None, None, False, False) == {}
    assert {k: defaults[k] for k in ("b_layout", "bias", "out_dtype", "zero_tail", "validate")} == {
        "b_layout": "nk", "bias": None, "out_dtype": None, "zero_tail": False, "validate": False}
    bias = randn(2, 8)
    given = _rows_options("kn", bias, torch.float32, True, True)
    assert given.keys() == {"b_layout", "bias", "out_dtype", "zero_tail", "validate"}
    assert given["b_layout"] == "kn" and given["bias"] is bias and given["out_dtype"] is torch.float32
    assert given["zero_tail"] is True and given["validate"] is True


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_sparse_operands_are_refused_by_name():
    """A sparse operand fails inside torch or the ops with errors that do not name it (an is_contiguous the CSR
    layout lacks, a (0, 0, 0) stride, a dispatcher key): grouped_mm names it instead."""
    a, b, offs = randn(M * G, K), randn(G, K, N), offsets_of([M] * G)
    for name, call in (("a", lambda: mt.grouped_mm(a.to_sparse(), b, offs)),
                       ("a", lambda: mt.grouped_mm(a.float().to_sparse_csr(), b.float(), offs)),
                       ("b", lambda: mt.grouped_mm(a, b.to_sparse(), offs)),
                       ("offs", lambda: mt.grouped_mm(a, b, offs.to_sparse())),
                       ("bias", lambda: mt.grouped_mm(a, b, offs, bias=torch.randn(G, N).to_sparse()))):
        with pytest.raises(ValueError, match=rf"^grouped_mm: {name}: expected a strided \(dense\) tensor, got "
                                             r"layout torch\.sparse_(coo|csr)$"):
            call()
    # A nested tensor of the strided layout has no sizes to read (torch's "Internal error"), and its dim() of 3
    # sent a 2-D one down the 3-D x 3-D mode, whose error named offs.
    nested = torch.nested.nested_tensor
    for name, call in (("a", lambda: mt.grouped_mm(nested([a, a]), b, offs)),
                       ("a", lambda: mt.grouped_mm(nested([a, a]), b)),
                       ("b", lambda: mt.grouped_mm(a, nested(list(b)), offs)),
                       ("offs", lambda: mt.grouped_mm(a, b, nested([offs])))):
        with pytest.raises(ValueError, match=rf"^grouped_mm: {name}: expected a strided \(dense\) tensor, got a "
                                             r"nested tensor$"):
            call()
