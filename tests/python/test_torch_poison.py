"""No needless fills: outputs come from a poisoned allocator; addressed elements are written, tail rows
keep the poison unless zero_tail, wgrad of empty experts is exactly zero. Cases C01-C04, C07, C09, C12; every
output of the GLU, dGLU, squared-ReLU forward and backward and the dense ops.

On CPU the allocator is glibc malloc behind torch's CPU allocator. During each CPU test glibc's M_PERTURB
option is on: every block malloc hands out, the ops' at::empty outputs included, starts filled with 0x7F
bytes (3.39e38 in bf16 and f32), so an element the op does not write keeps that pattern. A probe checks that
the C library honours the option (a skip says it does not: the tail assertions would prove nothing).
On CUDA the caching allocator reuses a freed block filled with 0xFF bytes (NaN) for the next output of its
size; every op has an sm_90a kernel (gpu_support), so on CUDA each case, wgrad's exact-zero experts
included, runs the kernels.
"""

import pytest
import torch

import moegemm.torch as mt
from torch_helpers import (DEVICES, PERTURB_FILL, activation, assert_close, end_row, expect_malloc_perturbed,
                           glu_halves, malloc_perturb, offsets_of, poison, randn, ranges, ref_linear)

ops = torch.ops.moegemm
POISON_BYTE = {"cpu": PERTURB_FILL, "cuda": 0xFF}


@pytest.fixture(autouse=True)
def _poisoned_cpu_allocations(request):
    """CPU tests run with every allocation poisoned (M_PERTURB); CUDA tests poison blocks themselves."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("device") != "cpu":
        yield
        return
    with malloc_perturb():
        yield


def _poisoned(nbytes, device):
    """The next output of `nbytes` bytes (or the next outputs of a list of sizes, in allocation order) starts
    poisoned: on CUDA freed 0xFF blocks of those sizes, side by side, are reused; on CPU every allocation is (a
    probe of each size checks it)."""
    sizes = [nbytes] if isinstance(nbytes, int) else list(nbytes)
    if device == "cuda":
        poison(sizes, device)
        return
    for n in sizes:
        expect_malloc_perturbed(n)


def poisoned_rows(t: torch.Tensor) -> torch.Tensor:
    """Per-row mask: every byte of the row still holds the device's poison byte."""
    rows = t.contiguous().view(torch.uint8).reshape(t.shape[0], -1)
    return (rows == POISON_BYTE[t.device.type]).all(dim=-1)


def poisoned_elements(t: torch.Tensor) -> torch.Tensor:
    """Per-element mask: every byte of the element still holds the device's poison byte."""
    raw = t.contiguous().view(torch.uint8).reshape(*t.shape, t.element_size())
    return (raw == POISON_BYTE[t.device.type]).all(dim=-1)


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
        assert poisoned_rows(d[744:]).all(), "tail rows were written"


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
    assert poisoned_rows(d).all()
    dy = randn(128, n, device=device, seed=11)
    _poisoned(256 * k * n * 4, device)  # every expert's block of w reads poison unless the op writes its zeros
    w = ops.grouped_gemm_wgrad(a, dy, offsets)
    assert (w == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("zero_tail", [False, True])
def test_glu_outputs_written_where_addressed(device, zero_tail):
    """grouped_gemm_glu (swiglu, halves) with generate_c over a poisoned allocator, both outputs' sizes: every
    element of the 89 addressed rows of h (M, I) and c (M, 2I) is written (the CPU poison is a finite 3.39e38,
    so finiteness proves nothing) and matches the float64 reference, c = G and h = silu(gate) * up (docs/ops.md
    section 2), at the spec's bf16 tolerance; the 11 tail rows of both keep the poison, or are 0 with zero_tail."""
    sizes = [30, 0, 50, 9]
    m, k, i = 100, 64, 64
    a, b = randn(m, k, device=device), randn(4, 2 * i, k, device=device, seed=12, scale=0.2)
    offsets = offsets_of(sizes, device)
    end = end_row(offsets, m)
    assert end == 89
    _poisoned([m * i * 2, m * 2 * i * 2], device)  # h, then c: the order the op allocates them
    h, c = ops.grouped_gemm_glu(a, b, offsets, generate_c=True, zero_tail=zero_tail)
    assert h.shape == (m, i) and c.shape == (m, 2 * i)
    assert not poisoned_elements(h[:end]).any(), "elements of h left unwritten"
    assert not poisoned_elements(c[:end]).any(), "elements of c left unwritten"
    g = ref_linear(a, b, offsets)
    gate, up = glu_halves(g, "halves")
    assert_close(c, g, rows=slice(0, end))
    assert_close(h, activation(gate, up, "swiglu"), rows=slice(0, end))
    if zero_tail:
        assert (h[end:] == 0).all() and (c[end:] == 0).all()
    else:
        assert poisoned_rows(h[end:]).all() and poisoned_rows(c[end:]).all(), "tail rows were written"


def _check_row_output(name, t, ref, end, zero_tail, bf16=True):
    """A row-indexed output over a poisoned allocator: its `end` addressed rows all written and close to the
    float64 reference (rows [0, end) of `ref`); the rows past them still poisoned, or exactly 0 with zero_tail."""
    assert not poisoned_elements(t[:end]).any(), f"elements of {name} left unwritten"
    assert_close(t[:end], ref[:end], bf16)
    if zero_tail:
        assert (t[end:] == 0).all(), f"{name}: tail rows are not 0"
    else:
        assert poisoned_rows(t[end:]).all(), f"{name}: tail rows were written"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("zero_tail", [False, True])
def test_dglu_outputs_written_where_addressed(device, zero_tail):
    """grouped_gemm_dglu (swiglu_clamped, interleaved32) with dprob, dbias and amax over a poisoned allocator, the
    four outputs' sizes in the order the op allocates them: every element of dC and dprob in the 89 addressed rows
    is written and matches torch autograd of the float64 activation at the saved C; the 11 tail rows keep the
    poison (0 with zero_tail); dbias is written for every expert (exactly 0 for the empty one) and amax whole."""
    sizes = [30, 0, 50, 9]
    m, k, i = 100, 64, 64
    offsets = offsets_of(sizes, device)
    end = end_row(offsets, m)
    dy = randn(m, k, device=device, seed=70)
    w_down = randn(4, i, k, device=device, seed=71, scale=0.2)  # (E, I, K): dH = dy @ w_down[g]^T
    c = randn(m, 2 * i, device=device, seed=72, scale=4.0)  # many gates and ups past the clamp limit of 7
    c = torch.where(c.abs() == 7, c / 2, c)  # none at +-7, where torch's clamp gradient (0) and the op's differ
    prob = randn(m, dtype=torch.float32, device=device, seed=73).abs()
    _poisoned([m * 2 * i * 2, m * 4, 4 * 2 * i * 4, 2 * 4], device)  # dc, dprob, dbias, amax
    dc, dprob, dbias, amax = ops.grouped_gemm_dglu(dy, w_down, c, offsets, prob=prob, activation="swiglu_clamped",
                                                   glu_layout="interleaved32", compute_dprob=True,
                                                   compute_dbias=True, compute_amax=True, zero_tail=zero_tail)
    dh = ref_linear(dy, w_down, offsets).nan_to_num()
    cg = c.double().cpu().requires_grad_(True)
    gate, up = glu_halves(cg, "interleaved32")
    h = activation(gate, up, "swiglu_clamped")
    (prob.double().cpu()[:, None] * h * dh).sum().backward()
    _check_row_output("dc", dc, cg.grad, end, zero_tail)
    _check_row_output("dprob", dprob, (h * dh).sum(1).detach(), end, zero_tail)
    assert not poisoned_elements(dbias).any() and not poisoned_elements(amax).any()
    assert (dbias[1] == 0).all(), "the empty expert's dbias is not exactly 0"
    assert_close(dbias, torch.stack([cg.grad[s:e].sum(0) for _, s, e in ranges(offsets, m)]))
    d_gate, d_up = glu_halves(cg.grad[:end], "interleaved32")
    torch.testing.assert_close(amax.double().cpu(), torch.stack([d_gate.abs().max(), d_up.abs().max()]),
                               rtol=3e-2, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("zero_tail", [False, True])
def test_srelu_and_dsrelu_outputs_written_where_addressed(device, zero_tail):
    """grouped_gemm_srelu (d, c) and grouped_gemm_dsrelu (dc, dprob, dbias, amax) over a poisoned allocator: every
    element of the addressed rows written and equal to the float64 reference (c = G, d = prob relu(G)^2; dc = 2
    relu(C) dH prob, dprob = sum relu(C)^2 dH); tail rows poisoned (0 with zero_tail); dbias of every expert
    written (0 for the empty one), amax written."""
    sizes = [30, 0, 50, 9]
    m, k, n = 100, 64, 64
    offsets = offsets_of(sizes, device)
    end = end_row(offsets, m)
    a = randn(m, k, device=device, seed=74)
    b = randn(4, n, k, device=device, seed=75, scale=0.2)
    bias = randn(4, n, dtype=torch.float32, device=device, seed=76, scale=0.5)
    prob = randn(m, dtype=torch.float32, device=device, seed=77).abs()
    _poisoned([m * n * 2, m * n * 2], device)  # d, c
    d, c = ops.grouped_gemm_srelu(a, b, offsets, prob=prob, bias=bias, generate_c=True, zero_tail=zero_tail)
    g = ref_linear(a, b, offsets, bias=bias.cpu())
    p = prob.double().cpu()[:, None]
    _check_row_output("srelu c", c, g, end, zero_tail)
    _check_row_output("srelu d", d, p * g.relu() ** 2, end, zero_tail)

    dy = randn(m, k, device=device, seed=78)
    saved = randn(m, n, device=device, seed=79)
    _poisoned([m * n * 2, m * 4, 4 * n * 4, 4], device)  # dc, dprob, dbias, amax
    dc, dprob, dbias, amax = ops.grouped_gemm_dsrelu(dy, b, saved, offsets, prob=prob, compute_dprob=True,
                                                     compute_dbias=True, compute_amax=True, zero_tail=zero_tail)
    dh = ref_linear(dy, b, offsets).nan_to_num()
    relu_c = saved.double().cpu().relu()
    ref_dc = 2 * relu_c * dh * p
    _check_row_output("dsrelu dc", dc, ref_dc, end, zero_tail)
    _check_row_output("dsrelu dprob", dprob, (relu_c ** 2 * dh).sum(1), end, zero_tail)
    assert not poisoned_elements(dbias).any() and not poisoned_elements(amax).any()
    assert (dbias[1] == 0).all(), "the empty expert's dbias is not exactly 0"
    assert_close(dbias, torch.stack([ref_dc[s:e].sum(0) for _, s, e in ranges(offsets, m)]))
    torch.testing.assert_close(amax.double().cpu(), ref_dc[:end].abs().max().reshape(1), rtol=3e-2, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_dense_ops_write_every_element(device):
    """gemm_swiglu (ab12, c), gemm_amax (c, amax), gemm_srelu (d, c) and gemm_dsrelu (dc, dprob, dbias, amax) over a poisoned
    allocator, each op's outputs' sizes in the order it allocates them: every element written (every row is
    addressed) and equal to the float64 reference."""
    m, k, n = 100, 64, 128
    a = randn(m, k, device=device, seed=80)
    b = randn(n, k, device=device, seed=81, scale=0.2)  # (N, K)
    prob = randn(m, dtype=torch.float32, device=device, seed=82).abs()
    g = a.double().cpu() @ b.double().cpu().t()
    p = prob.double().cpu()[:, None]

    _poisoned([m * n * 4, m * n // 2 * 2], device)  # ab12 (f32), c
    ab12, c = ops.gemm_swiglu(a, b, alpha=0.5)
    gate, up = glu_halves(0.5 * g, "interleaved32_up_first")
    for name, t, ref, bf16 in (("gemm_swiglu ab12", ab12, 0.5 * g, False),
                               ("gemm_swiglu c", c, activation(gate, up), True)):
        assert not poisoned_elements(t).any(), f"elements of {name} left unwritten"
        assert_close(t, ref, bf16)

    _poisoned([m * n * 2, 4], device)  # c, amax
    c, amax = ops.gemm_amax(a, b)
    assert not poisoned_elements(c).any() and not poisoned_elements(amax).any()
    assert_close(c, g)
    torch.testing.assert_close(amax.double().cpu(), g.abs().max().reshape(1), rtol=1e-2, atol=1e-3)

    _poisoned([m * n * 2, m * n * 2], device)  # d, c
    d, c = ops.gemm_srelu(a, b, alpha=2.0, prob=prob, generate_c=True)
    for name, t, ref in (("gemm_srelu d", d, p * (2 * g).relu() ** 2), ("gemm_srelu c", c, 2 * g)):
        assert not poisoned_elements(t).any(), f"elements of {name} left unwritten"
        assert_close(t, ref)

    dy = randn(m, k, device=device, seed=83)
    saved = randn(m, n, device=device, seed=84)
    _poisoned([m * n * 2, m * 4, n * 4, 4], device)  # dc, dprob, dbias, amax
    dc, dprob, dbias, amax = ops.gemm_dsrelu(dy, b, saved, alpha=0.75, prob=prob, compute_dprob=True,
                                             compute_dbias=True, compute_amax=True)
    dh = 0.75 * dy.double().cpu() @ b.double().cpu().t()
    relu_c = saved.double().cpu().relu()
    dc_ref = 2 * relu_c * dh * p
    for name, t, ref in (("gemm_dsrelu dc", dc, dc_ref), ("gemm_dsrelu dprob", dprob, (relu_c ** 2 * dh).sum(1)),
                         ("gemm_dsrelu dbias", dbias, dc_ref.sum(0))):
        assert not poisoned_elements(t).any(), f"elements of {name} left unwritten"
        assert_close(t, ref)
    assert not poisoned_elements(amax).any()
    torch.testing.assert_close(amax.double().cpu(), dc_ref.abs().max().reshape(1), rtol=1e-2, atol=1e-3)


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


@pytest.mark.parametrize("device", DEVICES)
def test_c07_every_n_including_partial_column_tiles(device):
    """C07: M = 512, K = 64, two experts of 256 rows, N in {128, 160, 200, 768}: 160 and 200 end in a partial
    column tile for every power-of-two tile width from 64 up (200 from 16 up). Through grouped_gemm (b (E, N, K)
    with b_layout "nk" and (E, K, N) with "kn") and grouped_mm (b row-major (E, K, N) and the view w.mT of an
    (E, N, K) stack), every element of D is written over a poisoned allocator and matches the float64
    reference."""
    m, k = 512, 64
    a = randn(m, k, device=device, seed=60)
    offsets = offsets_of([256, 256], device)
    for n in (128, 160, 200, 768):
        w = randn(2, n, k, device=device, seed=61, scale=0.2)  # (E, N, K)
        w_kn = w.mT.contiguous()  # the same weights, (E, K, N) row-major
        ref = ref_linear(a, w, offsets)
        calls = (("grouped_gemm nk", lambda: ops.grouped_gemm(a, w, offsets)[0]),
                 ("grouped_gemm kn", lambda: ops.grouped_gemm(a, w_kn, offsets, b_layout="kn")[0]),
                 ("grouped_mm (E, K, N)", lambda: mt.grouped_mm(a, w_kn, offsets)),
                 ("grouped_mm w.mT", lambda: mt.grouped_mm(a, w.mT, offsets)))
        for name, call in calls:
            _poisoned(m * n * 2, device)
            d = call()
            assert d.shape == (m, n) and d.dtype == torch.bfloat16, (name, n)
            assert not poisoned_elements(d).any(), f"{name}, N={n}: elements left unwritten"
            assert_close(d, ref)


def _ends_on_8_not_64(e, m, seed):
    """E expert ends in (0, m) that are multiples of 8 and not of 64, sorted, the last the largest such end
    (m % 64 == 0: the last 8 rows belong to no expert); with E >= 5 every fifth expert empty (an end
    repeated)."""
    gen = torch.Generator().manual_seed(seed)
    candidates = [v for v in range(8, m, 8) if v % 64]
    picks = torch.randperm(len(candidates) - 1, generator=gen)[:e - e // 5 - 1].tolist()
    ends = sorted(candidates[p] for p in picks) + candidates[-1:]
    return sorted(ends + ends[:e // 5])  # a repeated end empties the expert after it


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("e", [2, 7, 12])
def test_c09_wgrad_offsets_on_8_not_64(device, e):
    """C09 at the case's full size on both backends (0.4-2 s per E on a 2-core CPU): X (2560, 512), dY (2560,
    1536) bf16, E experts whose ends are multiples of 8 and none of 64 (so none of 128 or 256 either), empty
    experts with E >= 5, the 8 rows past the last end in no expert. grouped_gemm_wgrad and grouped_mm's 2-D x 2-D
    mode (a = X.t(), out_dtype float32) write f32 W over a poisoned allocator; every expert with rows matches
    X[rows]^T @ dY[rows] in float64 to the case's ~1e-3: relative Frobenius error < 1e-3 and each element
    within 1e-3 of the expert's max |W| (f32 accumulation of exact bf16 products is ~1e-6 off; a lost or extra
    group of 8 rows is ~1e-1). Empty experts are exactly 0."""
    m, h, n = 2560, 512, 1536
    x, dy = randn(m, h, device=device, seed=62), randn(m, n, device=device, seed=63)
    ends = _ends_on_8_not_64(e, m, seed=64 + e)
    assert all(v % 8 == 0 and v % 64 for v in ends) and len(set(ends)) == e - e // 5
    offsets = torch.tensor(ends, dtype=torch.int32, device=device)
    x64, dy64 = x.double().cpu(), dy.double().cpu()
    refs = {g: x64[s:t].t() @ dy64[s:t] for g, s, t in ranges(offsets, m) if t > s}
    calls = (("grouped_gemm_wgrad", lambda: ops.grouped_gemm_wgrad(x, dy, offsets)),
             ("grouped_mm", lambda: mt.grouped_mm(x.t(), dy, offsets, out_dtype=torch.float32)))
    for name, call in calls:
        _poisoned(e * h * n * 4, device)
        w = call()
        assert w.device.type == device and w.shape == (e, h, n) and w.dtype == torch.float32, name
        for g in range(e):
            if g not in refs:
                assert (w[g] == 0).all(), f"{name}: empty expert {g} is not exactly 0"
                continue
            err = w[g].double().cpu() - refs[g]
            fro, worst = (err.norm() / refs[g].norm()).item(), (err.abs().max() / refs[g].abs().max()).item()
            assert fro < 1e-3 and worst < 1e-3, f"{name}, expert {g}: relative error {fro:.2e}, largest {worst:.2e}"
