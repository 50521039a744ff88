"""torch.ops.moegemm on CPU: values against float64 torch references, output conventions, errors (FP8 inputs
also on CUDA)."""

import re

import pytest
import torch

import moegemm.torch  # noqa: F401  (loads the ops)
from torch_helpers import (DEVICES, PERTURB_FILL, activation, assert_close, end_row, glu_halves, glu_join, offsets_of,
                           poisoned_allocations, randn, ranges, ref_linear)

ops = torch.ops.moegemm
SIZES = [[5, 0, 17, 3], [0, 0, 9, 0], [24], [1, 1, 1, 1, 1, 1, 1, 1]]


def weights(e, k, n, b_layout, dtype=torch.bfloat16, seed=1):
    shape = (e, n, k) if b_layout == "nk" else (e, k, n)
    return randn(*shape, dtype=dtype, seed=seed, scale=0.2)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("b_layout", ["nk", "kn"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_gemm_values(sizes, b_layout, dtype):
    m, k, n = sum(sizes) + 3, 32, 24
    a = randn(m, k, dtype=dtype)
    b = weights(len(sizes), k, n, b_layout, dtype)
    offsets = offsets_of(sizes)
    alpha = randn(len(sizes), dtype=torch.float32, seed=2)
    prob = randn(m, dtype=torch.float32, seed=3).abs()
    bias = randn(len(sizes), n, dtype=torch.float32, seed=4)
    d, c = ops.grouped_gemm(a, b, offsets, b_layout=b_layout, alpha=alpha, prob=prob, bias=bias, generate_c=True)
    g = ref_linear(a, b, offsets, b_layout, alpha, bias)
    rows = slice(0, end_row(offsets, m))
    bf16 = dtype != torch.float32
    assert d.dtype == dtype and c.dtype == dtype and d.shape == (m, n)
    assert_close(c, g, bf16, rows)
    assert_close(d, g * prob.double()[:, None], bf16, rows)


def test_not_requested_outputs_are_empty():
    a, b, offsets = randn(8, 16), weights(2, 16, 8, "nk"), offsets_of([3, 5])
    d, c = ops.grouped_gemm(a, b, offsets)
    assert c.shape == (0,) and d.shape == (8, 8)
    dc, dprob, dbias, amax = ops.grouped_gemm_dsrelu(a[:, :8].contiguous(), b.transpose(1, 2).contiguous(),
                                                     randn(8, 16), offsets)
    assert dc.shape == (8, 16) and dprob.shape == dbias.shape == amax.shape == (0,)


@pytest.mark.parametrize("act", ["swiglu", "geglu", "swiglu_clamped"])
@pytest.mark.parametrize("layout", ["halves", "interleaved32"])
def test_grouped_gemm_glu_and_dglu_values(act, layout):
    sizes = [7, 0, 20, 5]
    m, k, i = sum(sizes) + 2, 32, 64
    x = randn(m, k, scale=2.0)
    w_up = weights(len(sizes), k, 2 * i, "kn", seed=5)
    offsets = offsets_of(sizes)
    prob = randn(m, dtype=torch.float32, seed=6).abs()
    h, c = ops.grouped_gemm_glu(x, w_up, offsets, b_layout="kn", prob=prob, activation=act, glu_layout=layout,
                                generate_c=True)
    rows = slice(0, end_row(offsets, m))
    g = ref_linear(x, w_up, offsets, "kn")
    gate, up = glu_halves(g, layout)
    assert_close(c, g, True, rows)
    assert_close(h, prob.double()[:, None] * activation(gate, up, act), True, rows)

    # Backward through the activation: compare with torch autograd of the float64 forward on the saved C.
    w_down = weights(len(sizes), i, k, "kn", seed=7)  # (E, I, H): read as "nk" gives dH = dy @ w_down^T
    dy = randn(m, k, seed=8)
    dc, dprob, dbias, amax = ops.grouped_gemm_dglu(dy, w_down, c, offsets, b_layout="nk", prob=prob,
                                                   activation=act, glu_layout=layout, compute_dprob=True,
                                                   compute_dbias=True, compute_amax=True)
    dh = ref_linear(dy, w_down.transpose(1, 2), offsets, "kn").nan_to_num()
    cg = c.double().requires_grad_(True)
    pg = prob.double().requires_grad_(True)
    gate_c, up_c = glu_halves(cg, layout)
    (pg[:, None] * activation(gate_c, up_c, act) * dh).sum().backward()
    assert_close(dc, cg.grad, True, rows)
    assert_close(dprob, pg.grad, True, rows)
    e_rows = ranges(offsets, m)
    ref_dbias = torch.stack([cg.grad[s:e].sum(0) for _, s, e in e_rows])
    assert_close(dbias, ref_dbias)
    d_gate, d_up = glu_halves(cg.grad[rows], layout)
    torch.testing.assert_close(amax.double(), torch.stack([d_gate.abs().max(), d_up.abs().max()]),
                               rtol=3e-2, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_propagates_as_in_torch(device):
    """A NaN input reaches the outputs the way torch's own formulas carry it: through the clamps of
    swiglu_clamped (torch.clamp keeps NaN), into dprob, dbias and amax (torch.amax keeps NaN)."""
    sizes = [7, 0, 20, 5]
    m, k, i = sum(sizes), 64, 64
    offsets = offsets_of(sizes, device)
    x = randn(m, k, scale=2.0)
    x[3, 5] = float("nan")  # row 3: every gate and up value is NaN
    w_up = weights(len(sizes), k, 2 * i, "kn", seed=5)
    h, c = ops.grouped_gemm_glu(x.to(device), w_up.to(device), offsets, b_layout="kn", activation="swiglu_clamped",
                                generate_c=True)
    g = ref_linear(x, w_up, offsets.cpu(), "kn")
    assert c.cpu().isnan().equal(g.isnan()) and int(c.isnan().sum()) == 2 * i
    assert_close(c.cpu().nan_to_num(), g.nan_to_num())
    gate, up = glu_halves(g, "halves")
    want = activation(gate, up, "swiglu_clamped")
    assert h.cpu().isnan().equal(want.isnan()) and h[3].isnan().all() and int(h.isnan().sum()) == i
    assert_close(h.cpu().nan_to_num(), want.nan_to_num())

    # dGLU with a NaN gate in row 10 of the saved C: torch's autograd of the clamped forward gives d_gate = 0
    # there (the clamp's mask is false for NaN) and d_up = NaN.
    c_saved = randn(m, 2 * i, seed=9, scale=3.0)
    c_saved[10, 2] = float("nan")
    w_down = weights(len(sizes), i, k, "kn", seed=7)
    dy = randn(m, k, seed=8)
    dc, dprob, dbias, amax = ops.grouped_gemm_dglu(dy.to(device), w_down.to(device), c_saved.to(device), offsets,
                                                   b_layout="nk", activation="swiglu_clamped", compute_dprob=True,
                                                   compute_dbias=True, compute_amax=True)
    dh = ref_linear(dy, w_down.transpose(1, 2), offsets.cpu(), "kn")
    cg = c_saved.double().requires_grad_(True)
    gate_c, up_c = glu_halves(cg, "halves")
    pg = torch.ones(m, dtype=torch.float64, requires_grad=True)
    (pg[:, None] * activation(gate_c, up_c, "swiglu_clamped") * dh).sum().backward()
    want_dc = cg.grad
    assert want_dc[10, 2] == 0 and want_dc[10, i + 2].isnan() and int(want_dc.isnan().sum()) == 1
    assert dc.cpu().isnan().equal(want_dc.isnan())
    assert_close(dc.cpu().nan_to_num(), want_dc.nan_to_num())
    assert dprob.cpu().isnan().equal(pg.grad.isnan()) and int(dprob.isnan().sum()) == 1
    assert_close(dprob.cpu().nan_to_num(), pg.grad.nan_to_num())
    want_dbias = torch.stack([want_dc[s:e].sum(0) for _, s, e in ranges(offsets.cpu(), m)])
    assert dbias.cpu().isnan().equal(want_dbias.isnan()) and int(dbias.isnan().sum()) == 1
    assert_close(dbias.cpu().nan_to_num(), want_dbias.nan_to_num())
    d_gate, _ = glu_halves(want_dc, "halves")
    assert amax.cpu().isnan().tolist() == [False, True]
    torch.testing.assert_close(amax[0].cpu().double(), d_gate.abs().max(), rtol=3e-2, atol=1e-3)


def test_grouped_gemm_srelu_and_dsrelu_values():
    sizes = [4, 9, 0, 11]
    m, k, n = sum(sizes), 32, 16
    a, b, offsets = randn(m, k), weights(4, k, n, "nk", seed=9), offsets_of(sizes)
    prob = randn(m, dtype=torch.float32, seed=10).abs()
    d, c = ops.grouped_gemm_srelu(a, b, offsets, prob=prob, generate_c=True)
    g = ref_linear(a, b, offsets, "nk")
    assert_close(c, g)
    assert_close(d, prob.double()[:, None] * g.relu() ** 2)
    dy = randn(m, k, seed=11)  # gradient of a next layer with K outputs whose weights are b: dH = dy @ B_g^T
    dc, dprob, dbias, amax = ops.grouped_gemm_dsrelu(dy, b, c, offsets, prob=prob, compute_dprob=True,
                                                     compute_dbias=True, compute_amax=True)
    dh = ref_linear(dy, b.transpose(1, 2), offsets, "kn")
    relu_c = c.double().relu()
    ref_dc = 2 * relu_c * dh * prob.double()[:, None]
    assert_close(dc, ref_dc)
    assert_close(dprob, (relu_c ** 2 * dh).sum(1))
    assert_close(dbias, torch.stack([ref_dc[s:e].sum(0) for _, s, e in ranges(offsets, m)]))
    torch.testing.assert_close(amax.double(), ref_dc.abs().max().reshape(1), rtol=3e-2, atol=1e-3)


def test_every_op_documents_its_arguments_and_outputs():
    """help() of every op and overload prints a docstring (ops registered in C++ carry none) that names each
    argument and each output of the overload's schema, so that a changed schema cannot leave its doc behind."""
    ops = [name.split("::")[1] for name in torch._C._dispatch_get_all_op_names() if name.startswith("moegemm::")]
    assert len({op.split(".")[0] for op in ops}) == 10, ops
    for op in ops:
        packet_name, _, overload_name = op.partition(".")
        packet = getattr(torch.ops.moegemm, packet_name)
        overload = getattr(packet, overload_name or "default")
        assert packet.__doc__ and overload.__doc__ == packet.__doc__, op
        schema = overload._schema
        for name in [a.name for a in schema.arguments] + [r.name for r in schema.returns if r.name]:
            assert re.search(rf"\b{name}\b", overload.__doc__), f"{op}: {name} is not in its docstring"
        assert "Raises:" in overload.__doc__ and "docs/ops.md" in overload.__doc__, op


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("out_dtype", [None, torch.bfloat16])
def test_grouped_gemm_wgrad_values(transpose, out_dtype):
    """Each expert's W (or its transpose) against X[rows]^T @ dY[rows] in float64, at the tolerance of w's dtype:
    bf16's for bf16, f32's 1e-5 for the default f32 (f32 sums of exact bf16 products); empty experts +0."""
    sizes = [6, 0, 13, 1, 0]
    m, h, n = sum(sizes) + 4, 16, 24
    x, dy, offsets = randn(m, h, seed=12), randn(m, n, seed=13), offsets_of(sizes)
    w = ops.grouped_gemm_wgrad(x, dy, offsets, transpose_output=transpose, out_dtype=out_dtype)
    assert w.dtype == (out_dtype or torch.float32)
    ref = torch.stack([x[s:e].double().t() @ dy[s:e].double() for _, s, e in ranges(offsets, m)])
    ref = ref.transpose(1, 2) if transpose else ref
    for g, s, e in ranges(offsets, m):
        if s == e:
            assert (w[g] == 0).all() and not torch.signbit(w[g]).any()
        else:
            assert_close(w[g], ref[g], bf16=out_dtype is not None)  # f32 w: f32's 1e-5


def test_grouped_gemm_wgrad_accumulate_adds_in_place_and_leaves_empty_experts():
    sizes = [5, 0, 11]
    m, h, n = sum(sizes), 16, 8
    x, dy, offsets = randn(m, h, seed=14), randn(m, n, seed=15), offsets_of(sizes)
    start = randn(3, h, n, dtype=torch.float32, seed=16)
    w = start.clone()
    ptr = w.data_ptr()
    ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, w)
    assert w.data_ptr() == ptr
    ref = torch.stack([x[s:e].double().t() @ dy[s:e].double() for _, s, e in ranges(offsets, m)])
    assert torch.equal(w[1], start[1])
    assert_close(w[0], start[0].double() + ref[0])
    assert_close(w[2], start[2].double() + ref[2])


def test_grouped_gemm_wgrad_accumulate_refuses_a_w_that_shares_memory_with_its_inputs():
    """accumulate reads x and dy while it adds into w: a w over their memory is refused by name, before any
    work, and left as it was."""
    offsets = offsets_of([8, 8])
    dy = randn(16, 8, dtype=torch.float32, seed=23)

    def refused_as_x_and_as_dy(shared, w, message):
        before = w.clone()
        for name, args in (("x", (shared, dy)), ("dy", (dy, shared))):
            with pytest.raises(ValueError, match=r"grouped_gemm_wgrad\.accumulate: w: expected memory " +
                                                 message.format(name=name)):
                ops.grouped_gemm_wgrad.accumulate(*args, offsets, w)
        assert torch.equal(w, before)

    buf = randn(2 * 8 * 8, dtype=torch.float32, seed=22)
    refused_as_x_and_as_dy(buf.view(16, 8), buf.view(2, 8, 8),
                           "that does not overlap {name}, got a w that shares memory with {name}")
    # Inputs with padded rows (not dense) and a w of its own: no overlap, nothing refused.
    padded = randn(16, 12, dtype=torch.float32, seed=24)[:, :8]
    ops.grouped_gemm_wgrad.accumulate(padded, dy, offsets, torch.zeros(2, 8, 8))
    # A w over the storage of an x with padded rows, where torch's own overlap check cannot decide: refused
    # too (it used to run, and its sums read the w it was writing).
    storage = randn(16, 64, dtype=torch.float32, seed=25)
    span = (r"outside the span of {name}'s elements \({name} has strides \({pitch}, 1\): torch cannot tell which "
            r"bytes inside it {name} uses\), got a w inside that span")
    refused_as_x_and_as_dy(storage[:, :8], storage.view(-1)[:2 * 8 * 8].view(2, 8, 8), span.replace("{pitch}", "64"))
    # The message says what is refused, the span: a w in the padding of row 0 shares no element, refused all the same.
    wide = randn(16, 200, dtype=torch.float32, seed=26)
    refused_as_x_and_as_dy(wide[:, :8], wide.view(-1)[8:8 + 2 * 8 * 8].view(2, 8, 8), span.replace("{pitch}", "200"))


def test_grouped_gemm_wgrad_accumulate_bumps_the_version_of_w():
    """accumulate writes w in place (schema Tensor(a!) w): its version counter moves, as with torch's in-place
    ops, so that autograd refuses a w saved before the write instead of using the overwritten values."""
    x, dy, offsets = randn(16, 8, seed=19), randn(16, 8, seed=20), offsets_of([8, 8])
    w0 = randn(2, 8, 8, dtype=torch.float32, seed=21).requires_grad_(True)
    w = w0.clone()
    loss = (w ** 2).sum()  # saves w for the backward
    before = w._version
    ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, w)
    assert w._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_grouped_gemm_wgrad_accumulate_refuses_inputs_that_require_grad():
    """accumulate has no derivative and returns nothing autograd could mark: x or dy that require grad are
    refused at the call (their gradient would otherwise be dropped without a word), w untouched; under no_grad
    or with detached inputs it runs. A w with a history keeps it (the added part does not depend on w)."""
    x, dy, offsets = randn(16, 8, seed=26), randn(16, 8, seed=27), offsets_of([8, 8])
    w = randn(2, 8, 8, dtype=torch.float32, seed=28)
    before = w.clone()
    for name, args in (("x", (x.requires_grad_(True), dy)), ("dy", (x.detach(), dy.requires_grad_(True)))):
        with pytest.raises(NotImplementedError, match=rf"grouped_gemm_wgrad\.accumulate: {name}: expected a tensor "
                                                      r"that does not require grad"):
            ops.grouped_gemm_wgrad.accumulate(*args, offsets, w)
        assert torch.equal(w, before)
    with torch.no_grad():
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, w)
    assert not torch.equal(w, before)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        ops.grouped_gemm_wgrad.accumulate(x.detach(), dy.detach(), offsets, torch.zeros(2, 8, 8, requires_grad=True))
    base = torch.zeros(2, 8, 8, requires_grad=True)
    w2 = base * 1.0
    ops.grouped_gemm_wgrad.accumulate(x.detach(), dy.detach(), offsets, w2)
    (w2 * 3.0).sum().backward()
    assert torch.equal(base.grad, torch.full_like(base, 3.0))


def test_grouped_gemm_wgrad_accumulate_refuses_a_negative_view_of_w_and_dual_inputs():
    """A negative view of w (torch._neg_view) is refused by name: torch's fallback for such views would copy a
    returned output back into w, and accumulate returns none (it read past the stack and freed x). Negative
    views of x and dy are read as their values. Forward-mode tangents of x or dy are refused, as the other ops
    refuse them (w was written and its tangent silently left out of date)."""
    x, dy, offsets = randn(16, 8, seed=31), randn(16, 8, seed=32), offsets_of([8, 8])
    w = randn(2, 8, 8, dtype=torch.float32, seed=33)
    before = w.clone()
    with pytest.raises(ValueError, match=r"^grouped_gemm_wgrad\.accumulate: w: expected a tensor that holds its "
                                         r"own values, got a negative view \(torch\._neg_view\)"):
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, torch._neg_view(w))
    assert torch.equal(w, before) and x._use_count() >= 1
    want, got = w.clone(), w.clone()
    ops.grouped_gemm_wgrad.accumulate(-x, dy, offsets, want)
    ops.grouped_gemm_wgrad.accumulate(torch._neg_view(x), dy, offsets, got)
    assert torch.equal(got, want)
    import torch.autograd.forward_ad as fwad
    with fwad.dual_level():
        dual = fwad.make_dual(x, torch.ones_like(x))
        with pytest.raises(NotImplementedError, match=r"^grouped_gemm_wgrad\.accumulate: x: expected a tensor "
                                                      r"without a forward-mode tangent"):
            ops.grouped_gemm_wgrad.accumulate(dual, dy, offsets, w)
    assert torch.equal(w, before)


@pytest.mark.skipif(not hasattr(torch, "_lazy_clone"), reason="this torch has no copy-on-write tensors")
def test_inputs_the_ops_only_read_stay_copy_on_write():
    """The ops take read-only operands without write access: a copy-on-write input (torch._lazy_clone) is not
    copied, as torch.mm leaves it."""
    x, dy, offsets = randn(64, 16, seed=34), randn(64, 8, seed=35), offsets_of([32, 32])
    lazy = torch._lazy_clone(x)
    ops.grouped_gemm_wgrad(lazy, dy, offsets)
    assert torch._C._is_cow_tensor(lazy)


def test_grouped_gemm_wgrad_accumulate_refuses_what_torch_in_place_ops_refuse_before_writing():
    """accumulate refuses the w that torch's own in-place ops refuse, with torch's errors, before anything is
    written: an inference tensor outside InferenceMode, a view of a leaf that requires grad. Where torch allows
    the in-place update (inside InferenceMode, under no_grad), so does the op."""
    x, dy, offsets = randn(16, 8, seed=29), randn(16, 16, seed=30), offsets_of([8, 8])
    with torch.inference_mode():
        w = randn(2, 8, 16, dtype=torch.float32, seed=31)
        probe = torch.zeros(1)
    before = w.clone()
    inference = "Inplace update to inference tensor outside InferenceMode is not allowed"
    with pytest.raises(RuntimeError, match=inference):
        probe.add_(1)  # torch's own rule (its error comes after the write: probe is 1 now)
    with pytest.raises(RuntimeError, match=inference):
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, w)
    assert torch.equal(w, before)
    with torch.inference_mode():
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, w)
    assert not torch.equal(w, before)

    leaf = torch.zeros(4, 8, 16, requires_grad=True)
    view_of_leaf = "a view of a leaf Variable that requires grad is being used in an in-place operation"
    with pytest.raises(RuntimeError, match=view_of_leaf):
        leaf[:2].add_(1)  # torch's own rule
    with pytest.raises(RuntimeError, match=view_of_leaf):
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, leaf[:2])
    assert (leaf == 0).all() and leaf.grad is None
    with torch.no_grad():
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, leaf[:2])
    assert (leaf[:2] != 0).any() and (leaf[2:] == 0).all()


def test_grouped_gemm_wgrad_checks_the_call_before_allocating_w():
    """With T = 0, x and dy are empty while w (E, H, N) is not: a call the op refuses gets the op's own error
    before w is allocated (here w would be 2^36 bytes, past what the host allocator hands out)."""
    h = 2**31 + 1  # not a multiple of 8 either
    x, dy = torch.empty(0, h, dtype=torch.bfloat16), torch.empty(0, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError,
                       match=r"grouped_gemm_wgrad: offsets: expected dtype torch\.int32, got torch\.int64$"):
        ops.grouped_gemm_wgrad(x, dy, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad: x: expected H \* sizeof\(torch\.bfloat16\) a multiple "
                                         r"of 16 bytes .*got H=2147483649 \(4294967298 bytes\)"):
        ops.grouped_gemm_wgrad(x, dy, torch.zeros(4, dtype=torch.int32))
    # The same T = 0 call with valid operands: every expert exactly 0.
    w = ops.grouped_gemm_wgrad(torch.empty(0, 16, dtype=torch.bfloat16), dy, torch.zeros(4, dtype=torch.int32))
    assert w.shape == (4, 16, 8) and (w == 0).all()


def _expanded_rows(m, k, device, seed):
    """An (m, k) bf16 view of one row (stride 0): no memory, but outputs of m rows would be m * N elements."""
    return randn(1, k, seed=seed, device=device).expand(m, k)


@pytest.mark.parametrize("call", [
    lambda a, b, c, offs: ops.grouped_gemm(a, b, offs, b_layout="kn", generate_c=True),
    lambda a, b, c, offs: ops.grouped_gemm_glu(a, b, offs, b_layout="kn", generate_c=True),
    lambda a, b, c, offs: ops.grouped_gemm_srelu(a, b, offs, b_layout="kn", generate_c=True),
    lambda a, b, c, offs: ops.grouped_gemm_dglu(a, b, c, offs, b_layout="kn", compute_dprob=True,
                                                compute_dbias=True, compute_amax=True),
    lambda a, b, c, offs: ops.grouped_gemm_dsrelu(a, b, c, offs, b_layout="kn", compute_dprob=True,
                                                  compute_dbias=True, compute_amax=True),
    lambda a, b, c, offs: ops.gemm_swiglu(a, b[0], b_layout="kn"),
    lambda a, b, c, offs: ops.gemm_amax(a, b[0], b_layout="kn"),
    lambda a, b, c, offs: ops.gemm_srelu(a, b[0], b_layout="kn", generate_c=True),
    lambda a, b, c, offs: ops.gemm_dsrelu(a, b[0], c, b_layout="kn", compute_dprob=True, compute_dbias=True,
                                          compute_amax=True),
], ids=["grouped_gemm", "grouped_gemm_glu", "grouped_gemm_srelu", "grouped_gemm_dglu", "grouped_gemm_dsrelu",
        "gemm_swiglu", "gemm_amax", "gemm_srelu", "gemm_dsrelu"])
@pytest.mark.parametrize("device", DEVICES)
def test_ops_check_the_call_before_allocating_outputs(call, device):
    """A refused call gets the op's own error before any output is allocated: with a of 2^40 rows (an expanded
    view, row stride 0, which the contract refuses), the outputs would take 2^45 bytes and more, past what
    either allocator hands out (the allocator's own error would be a RuntimeError, not this ValueError)."""
    m, k, n = 2**40, 16, 32
    a = _expanded_rows(m, k, device, seed=31)
    b = randn(2, k, n, seed=32, device=device)
    c = _expanded_rows(m, n, device, seed=33)  # a saved pre-activation as large; a's stride is refused first
    offsets = torch.tensor([8, 16], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r": a: expected row stride stride\(0\) >= K=16"):
        call(a, b, c, offsets)


# Calls whose outputs dwarf their inputs: a (2^20, 16) and b (E, 16, 2^20) give outputs of 2^40 elements (2 TiB
# and more), past what either allocator hands out.
_HUGE_OUTPUT_CALLS = {
    "grouped_gemm": lambda a, b, offs, **kw: ops.grouped_gemm(a, b, offs, b_layout="kn", generate_c=True, **kw),
    "grouped_gemm_glu": lambda a, b, offs, **kw: ops.grouped_gemm_glu(a, b, offs, b_layout="kn", **kw),
    "grouped_gemm_srelu": lambda a, b, offs, **kw: ops.grouped_gemm_srelu(a, b, offs, b_layout="kn", **kw),
    "gemm_swiglu": lambda a, b, offs: ops.gemm_swiglu(a, b[0], b_layout="kn"),
    "gemm_amax": lambda a, b, offs: ops.gemm_amax(a, b[0], b_layout="kn"),
    "gemm_srelu": lambda a, b, offs: ops.gemm_srelu(a, b[0], b_layout="kn"),
    # x (1, 2^20) (a's first 2^20 elements) and dy (1, 2^20): w is (E, 2^20, 2^20) f32, 4 TiB per expert.
    "grouped_gemm_wgrad": lambda a, b, offs, **kw: ops.grouped_gemm_wgrad(a.view(1, -1)[:, :2**20], b[0, :1], offs,
                                                                          **kw),
}
_VALIDATING = ["grouped_gemm", "grouped_gemm_glu", "grouped_gemm_srelu", "grouped_gemm_wgrad"]


def _huge_output_operands(device, misaligned):
    """a (2^20, 16) bf16, 2 bytes past a 16-byte boundary when `misaligned`, and b (2, 16, 2^20) bf16. Never
    read: every call made with them is refused."""
    m, k, n = 2**20, 16, 2**20
    flat = torch.empty(m * k + 8, dtype=torch.bfloat16, device=device)
    a = flat[1:1 + m * k].view(m, k) if misaligned else flat[:m * k].view(m, k)
    assert (a.data_ptr() % 16 != 0) == misaligned
    return a, torch.empty(2, k, n, dtype=torch.bfloat16, device=device)


@pytest.mark.parametrize("op", list(_HUGE_OUTPUT_CALLS))
@pytest.mark.parametrize("device", DEVICES)
def test_ops_check_base_addresses_before_allocating_outputs(op, device):
    """The 16-byte rule on the operands' base addresses is checked before the outputs are allocated: a call
    whose outputs no allocator can hold gets the op's own ValueError, not the allocator's RuntimeError.
    (Strict on CUDA; a host that overcommits memory could hand out the CPU block, which the op then refuses
    all the same.)"""
    a, b = _huge_output_operands(device, misaligned=True)
    offsets = torch.tensor([1] if op == "grouped_gemm_wgrad" else [8, 16], dtype=torch.int32, device=device)
    operand = "x" if op == "grouped_gemm_wgrad" else "a"
    with pytest.raises(ValueError, match=rf"^{op}: {operand}: expected a 16-byte aligned base address "
                                         r"\(16-byte alignment rule\), got 0x"):
        _HUGE_OUTPUT_CALLS[op](a, b, offsets)


@pytest.mark.parametrize("op", _VALIDATING)
@pytest.mark.parametrize("device", DEVICES)
def test_validate_reads_the_offsets_before_allocating_outputs(op, device):
    """validate=True's check of the offsets values runs before the outputs are allocated (as the base
    addresses above): offsets past M get the op's own error, though the outputs could not be allocated."""
    a, b = _huge_output_operands(device, misaligned=False)
    rows = 1 if op == "grouped_gemm_wgrad" else a.shape[0]
    offsets = torch.tensor([rows + 1] if op == "grouped_gemm_wgrad" else [8, rows + 1], dtype=torch.int32,
                           device=device)
    bad = len(offsets) - 1
    with pytest.raises(ValueError, match=rf"^{op}: offsets: expected non-decreasing expert end rows in "
                                         rf"\[0, M={rows}\], each <= M, got offsets\[{bad}\] = {rows + 1}$"):
        _HUGE_OUTPUT_CALLS[op](a, b, offsets, validate=True)


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
def test_dense_ops_values(b_layout):
    m, k, n = 12, 32, 128
    a = randn(m, k, seed=17)
    b = randn(*((n, k) if b_layout == "nk" else (k, n)), seed=18, scale=0.2)
    bmat = b.double().t() if b_layout == "nk" else b.double()
    g = a.double() @ bmat
    ab12, cs = ops.gemm_swiglu(a, b, b_layout=b_layout, alpha=0.5)
    assert_close(ab12, 0.5 * g)
    gate, up = glu_halves(0.5 * g, "interleaved32_up_first")
    assert_close(cs, activation(gate, up))
    c, amax = ops.gemm_amax(a, b, b_layout=b_layout)
    assert_close(c, g)
    torch.testing.assert_close(amax.double(), g.abs().max().reshape(1), rtol=1e-2, atol=1e-3)
    prob = randn(m, dtype=torch.float32, seed=19).abs()
    d, c2 = ops.gemm_srelu(a, b, b_layout=b_layout, alpha=2.0, prob=prob, generate_c=True)
    assert_close(c2, 2 * g)
    assert_close(d, prob.double()[:, None] * (2 * g).relu() ** 2)
    bias = randn(n, dtype=torch.float32, seed=21)
    d_bias, c_bias = ops.gemm_srelu(a, b, b_layout=b_layout, alpha=2.0, prob=prob, bias=bias, generate_c=True)
    assert_close(c_bias, 2 * g + bias.double())
    assert_close(d_bias, prob.double()[:, None] * (2 * g + bias.double()).relu() ** 2)
    dy = randn(m, k, seed=20)  # any (M, K) operand whose GEMM with b gives dH of C's shape (M, N)
    dc, dprob, dbias, amax = ops.gemm_dsrelu(dy, b, c2, b_layout=b_layout, prob=prob, compute_dprob=True)
    assert dbias.shape == (0,) and amax.shape == (0,)  # not requested
    dh = dy.double() @ bmat
    dc_ref = 2 * c2.double().relu() * dh * prob.double()[:, None]
    assert_close(dc, dc_ref)
    assert_close(dprob, (c2.double().relu() ** 2 * dh).sum(1))
    for dbias_dtype in (None, torch.bfloat16):
        dc, _, dbias, amax = ops.gemm_dsrelu(dy, b, c2, b_layout=b_layout, prob=prob, compute_dbias=True,
                                             compute_amax=True, dbias_dtype=dbias_dtype, dc_dtype=torch.float32)
        assert dbias.shape == (n,) and dbias.dtype == (dbias_dtype or torch.float32)
        assert_close(dbias, dc_ref.sum(0))  # the column sums of the f32 dC, before rounding
        assert amax.shape == (1,) and amax.dtype == torch.float32
        torch.testing.assert_close(amax.double(), dc_ref.abs().max().reshape(1), rtol=1e-2, atol=1e-3)
        assert amax.item() == dc.abs().max().item()  # max |dC| of the values dC holds (f32 here)


def test_f32_outputs_default_to_f32():
    # wgrad's w and gemm_swiglu's ab12 default to f32, as in the cuDNN ops and moegemm.jax (f64 for f64 inputs);
    # the other outputs follow a. The fake kernels give the same dtypes.
    a, b, offsets = randn(8, 32), weights(2, 32, 64, "nk"), offsets_of([3, 5])
    for device in ("cpu", "meta"):
        x, dense = a.to(device), b[0].to(device)
        ab12, c = ops.gemm_swiglu(x, dense)
        assert ab12.dtype == torch.float32 and c.dtype == torch.bfloat16
        assert ops.grouped_gemm_wgrad(x, x, offsets.to(device)).dtype == torch.float32
        assert ops.gemm_swiglu(x, dense, ab12_dtype=torch.bfloat16)[0].dtype == torch.bfloat16
    ab12, c = ops.gemm_swiglu(a.double(), b[0].double())
    assert ab12.dtype == torch.float64 and c.dtype == torch.float64
    assert_close(ab12, a.double() @ b[0].double().t())


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_dbias_dtype_is_checked_by_name(device):
    # dbias is f32 or bf16 on every backend: another dtype is refused as the schema's argument, not as the output.
    a, b, offsets = randn(8, 16), weights(2, 16, 8, "nk"), offsets_of([3, 5])
    a, b, offsets = a.to(device), b.to(device), offsets.to(device)
    glu_c, srelu_c = randn(8, 16).to(device), randn(8, 16).to(device)  # C: (M, 2N) and (M, N)
    expected = r"expected None, torch\.float32 or torch\.bfloat16, got torch\.float16"
    with pytest.raises(ValueError, match=r"grouped_gemm_dglu: dbias_dtype: " + expected):
        ops.grouped_gemm_dglu(a, b, glu_c, offsets, compute_dbias=True, dbias_dtype=torch.float16)
    with pytest.raises(ValueError, match=r"grouped_gemm_dsrelu: dbias_dtype: " + expected):
        ops.grouped_gemm_dsrelu(a, weights(2, 16, 16, "nk").to(device), srelu_c, offsets, compute_dbias=True,
                                dbias_dtype=torch.float16)
    _, _, dbias, _ = ops.grouped_gemm_dglu(a, b, glu_c, offsets, compute_dbias=True, dbias_dtype=torch.bfloat16)
    assert dbias.dtype == torch.bfloat16 and dbias.shape == (2, 16)


# The contract's dtype names (docs/ops.md: bf16, f32, i32, ...) as words of their own.
CONTRACT_DTYPE_WORD = re.compile(r"(?<![\w.])(bf16|f16|f32|f64|i32|i64|u8|e4m3|e5m2|e2m1)(?!\w)")


def test_contract_errors_name_dtypes_as_torch_does():
    """The ops' dtype rules are the C++ contract's; through torch, their messages name dtypes as torch does
    (torch.int32, not i32), operand tensors and the dtypes they are expected to have alike; so do the
    binding's own checks."""
    a, b, offsets = randn(8, 16), weights(2, 16, 8, "nk"), offsets_of([3, 5])
    calls = {
        r"grouped_gemm: offsets: expected dtype torch\.int32, got torch\.int64$":
            lambda: ops.grouped_gemm(a, b, offsets.long()),
        r"grouped_gemm: offsets: expected dtype torch\.int32, got torch\.int16$":
            lambda: ops.grouped_gemm(a, b, offsets.short()),
        r"grouped_gemm_wgrad: offsets: expected a 1-D \(E,\) torch\.int32 tensor, got shape \(\)$":
            lambda: ops.grouped_gemm_wgrad(a, randn(8, 8), offsets[0]),
        r"grouped_gemm: b: expected dtype torch\.bfloat16 \(the dtype of a\), got torch\.float32$":
            lambda: ops.grouped_gemm(a, b.float(), offsets),
        r"grouped_gemm: bias: expected dtype torch\.bfloat16, torch\.float32 or torch\.float64, got "
        r"torch\.float16$": lambda: ops.grouped_gemm(a, b, offsets, bias=randn(2, 8).half()),
        r"grouped_gemm_wgrad: dy: expected dtype torch\.bfloat16 \(the dtype of x\), got torch\.float32$":
            lambda: ops.grouped_gemm_wgrad(a, randn(8, 8).float(), offsets),
        r"grouped_gemm_glu: b: expected I = N/2 with I \* sizeof\(torch\.bfloat16\) a multiple of 16 bytes":
            lambda: ops.grouped_gemm_glu(a, weights(2, 16, 24, "nk"), offsets),
    }
    for expected, call in calls.items():
        with pytest.raises(ValueError, match=expected) as info:
            call()
        assert CONTRACT_DTYPE_WORD.search(str(info.value)) is None, str(info.value)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_output_dtypes_are_checked_by_name(device):
    """Every output-dtype argument refuses a dtype no output takes, naming the argument, with the same message
    on the meta device (the fake kernels, what torch.compile traces) as when the op runs."""
    def on(*ts):
        return [t.to(device) for t in ts]
    a, offsets, dense_b = on(randn(8, 16), offsets_of([3, 5]), randn(16, 16))
    b8, b16, b32 = on(weights(2, 16, 8, "nk"), weights(2, 16, 16, "nk"), weights(2, 16, 32, "nk"))
    c16, = on(randn(8, 16))
    bad = dict(dtype=torch.int32)
    calls = {
        ("grouped_gemm", "out_dtype"): lambda: ops.grouped_gemm(a, b8, offsets, out_dtype=bad["dtype"]),
        ("grouped_gemm_glu", "out_dtype"): lambda: ops.grouped_gemm_glu(a, b32, offsets, out_dtype=bad["dtype"]),
        ("grouped_gemm_srelu", "out_dtype"): lambda: ops.grouped_gemm_srelu(a, b8, offsets, out_dtype=bad["dtype"]),
        ("grouped_gemm_dglu", "dc_dtype"): lambda: ops.grouped_gemm_dglu(a, b8, c16, offsets, dc_dtype=bad["dtype"]),
        ("grouped_gemm_dsrelu", "dc_dtype"):
            lambda: ops.grouped_gemm_dsrelu(a, b16, c16, offsets, dc_dtype=bad["dtype"]),
        ("grouped_gemm_wgrad", "out_dtype"): lambda: ops.grouped_gemm_wgrad(a, c16, offsets, out_dtype=bad["dtype"]),
        ("gemm_swiglu", "ab12_dtype"): lambda: ops.gemm_swiglu(a, dense_b, glu_layout="halves",
                                                               ab12_dtype=bad["dtype"]),
        ("gemm_swiglu", "out_dtype"): lambda: ops.gemm_swiglu(a, dense_b, glu_layout="halves", out_dtype=bad["dtype"]),
        ("gemm_amax", "out_dtype"): lambda: ops.gemm_amax(a, dense_b, out_dtype=bad["dtype"]),
        ("gemm_srelu", "out_dtype"): lambda: ops.gemm_srelu(a, dense_b, out_dtype=bad["dtype"]),
        ("gemm_dsrelu", "dc_dtype"): lambda: ops.gemm_dsrelu(a, dense_b, c16, dc_dtype=bad["dtype"]),
    }
    for (op, arg), call in calls.items():
        with pytest.raises(ValueError, match=rf"^{op}: {arg}: expected None, torch\.bfloat16, torch\.float16, "
                                             rf"torch\.float32 or torch\.float64, got torch\.int32$"):
            call()
    bad["dtype"] = torch.float16  # a dtype every output argument takes: each call runs
    for call in calls.values():
        call()


def test_glu_join_inverts_split():
    g = randn(3, 128, dtype=torch.float64)
    for layout in ("halves", "interleaved32", "interleaved32_up_first"):
        assert torch.equal(glu_join(*glu_halves(g, layout), layout), g)


# ---- errors: clear, naming the operand, before any launch ----------------------------------------

def test_errors_name_the_operand():
    a, b, offsets = randn(8, 16), weights(2, 16, 8, "nk"), offsets_of([3, 5])
    with pytest.raises(ValueError, match=r"grouped_gemm: b_layout: .*got \"mn\""):
        ops.grouped_gemm(a, b, offsets, b_layout="mn")
    with pytest.raises(ValueError, match=r"grouped_gemm: a: expected a 2-D"):
        ops.grouped_gemm(a[None], b, offsets)
    with pytest.raises(ValueError, match=r"grouped_gemm: offsets: expected dtype torch\.int32, got torch\.int64$"):
        ops.grouped_gemm(a, b, offsets.long())
    with pytest.raises(ValueError, match=r"grouped_gemm: b: .*K=16"):
        ops.grouped_gemm(a, weights(2, 8, 8, "nk"), offsets)
    with pytest.raises(ValueError, match=r"grouped_gemm: b: .*16-byte"):
        ops.grouped_gemm(a, weights(2, 16, 12, "nk"), offsets)
    with pytest.raises(ValueError, match=r"grouped_gemm: a: expected a dtype moegemm reads or writes "
                                         r"\(torch\.bfloat16, .*\), got torch\.int8$"):
        ops.grouped_gemm(a.to(torch.int8), b, offsets)
    with pytest.raises(ValueError, match=r"grouped_gemm: offsets: expected dtype torch\.int32, got torch\.bool$"):
        ops.grouped_gemm(a, b, offsets.bool())
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: activation: .*relu"):
        ops.grouped_gemm_glu(a, b, offsets, activation="relu")
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad: dy: "):
        ops.grouped_gemm_wgrad(a, randn(7, 8), offsets)
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad\.accumulate: w: .*got \(3, 16, 8\)"):
        ops.grouped_gemm_wgrad.accumulate(a, randn(8, 8), offsets, torch.empty(3, 16, 8))
    # The overload's name also on what the C++ contract checks: w's layout, and its base address (checked when
    # the op runs).
    with pytest.raises(ValueError, match=r"^grouped_gemm_wgrad\.accumulate: w: expected a contiguous row-major "):
        ops.grouped_gemm_wgrad.accumulate(a, randn(8, 8), offsets, torch.zeros(2, 8, 16).mT)
    with pytest.raises(ValueError, match=r"^grouped_gemm_wgrad\.accumulate: w: expected a 16-byte aligned base "):
        ops.grouped_gemm_wgrad.accumulate(a, randn(8, 8), offsets, torch.zeros(2 * 16 * 8 + 1)[1:].view(2, 16, 8))
    # Output dtypes and the clamp limit are named as the schema's arguments, not as the outputs (d, w).
    dtype_error = (r"expected None, torch\.bfloat16, torch\.float16, torch\.float32 or torch\.float64, "
                   r"got torch\.int32")
    with pytest.raises(ValueError, match=r"grouped_gemm: out_dtype: " + dtype_error):
        ops.grouped_gemm(a, b, offsets, out_dtype=torch.int32)
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad: out_dtype: " + dtype_error):
        ops.grouped_gemm_wgrad(a, randn(8, 8), offsets, out_dtype=torch.int32)
    with pytest.raises(ValueError, match=r"gemm_swiglu: ab12_dtype: " + dtype_error):
        ops.gemm_swiglu(a, randn(16, 16), ab12_dtype=torch.int32)
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: limit: expected a positive clamp limit for "
                                         r"swiglu_clamped, got 0$"):
        ops.grouped_gemm_glu(a, b, offsets, activation="swiglu_clamped", limit=0.0)
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: limit: expected a positive clamp limit for "
                                         r"swiglu_clamped \(positive in f32\), got 1e-46, which f32 rounds to 0$"):
        ops.grouped_gemm_glu(a, b, offsets, activation="swiglu_clamped", limit=1e-46)
    ops.grouped_gemm_glu(a, weights(2, 16, 32, "nk"), offsets, activation="swiglu_clamped", limit=1e-40)  # subnormal
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: act_alpha: expected a finite act_alpha for "
                                         r"swiglu_clamped, got nan$"):
        ops.grouped_gemm_glu(a, b, offsets, activation="swiglu_clamped", act_alpha=float("nan"))
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: linear_offset: expected a finite linear_offset for "
                                         r"swiglu_clamped, got inf$"):
        ops.grouped_gemm_glu(a, b, offsets, activation="swiglu_clamped", linear_offset=float("inf"))
    # A finite value that f32 rounds to infinity is named with the value given.
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: act_alpha: expected a finite act_alpha for "
                                         r"swiglu_clamped \(finite in f32\), got 1e\+300, which f32 rounds to inf$"):
        ops.grouped_gemm_glu(a, b, offsets, activation="swiglu_clamped", act_alpha=1e300)
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: linear_offset: .*got -1e\+39, which f32 rounds to -inf$"):
        ops.grouped_gemm_glu(a, b, offsets, activation="swiglu_clamped", linear_offset=-1e39)
    # An I that breaks the 16-byte rule blames b, whose N sets it.
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: b: expected I = N/2 with I \* sizeof\(torch\.bfloat16\) "
                                         r"a multiple of 16 bytes .*in d of dtype torch\.bfloat16.*got N=24 "
                                         r"\(I=12\)"):
        ops.grouped_gemm_glu(a, weights(2, 16, 24, "nk"), offsets)


# Every required tensor operand of every op, passed as None (an undefined tensor to the C++ op), by position:
# the op's error names it, as it names a tensor of the wrong rank or device.
_UNDEFINED = [
    ("grouped_gemm", "abo", "a"), ("grouped_gemm", "abo", "b"), ("grouped_gemm", "abo", "offsets"),
    ("grouped_gemm_glu", "abo", "b"), ("grouped_gemm_glu", "abo", "offsets"),
    ("grouped_gemm_srelu", "abo", "b"), ("grouped_gemm_srelu", "abo", "offsets"),
    ("grouped_gemm_dglu", "abco", "b"), ("grouped_gemm_dglu", "abco", "c"), ("grouped_gemm_dglu", "abco", "offsets"),
    ("grouped_gemm_dsrelu", "abco", "b"), ("grouped_gemm_dsrelu", "abco", "offsets"),
    ("grouped_gemm_wgrad", "xyo", "x"), ("grouped_gemm_wgrad", "xyo", "dy"), ("grouped_gemm_wgrad", "xyo", "offsets"),
    ("gemm_swiglu", "ab", "b"), ("gemm_amax", "ab", "b"), ("gemm_srelu", "ab", "b"),
    ("gemm_dsrelu", "abc", "b"), ("gemm_dsrelu", "abc", "c"),
]


# The operand each letter of a signature stands for, by its schema name.
_OPERAND_NAMES = {"a": "a", "b": "b", "c": "c", "o": "offsets", "x": "x", "y": "dy"}


def _stand_ins(signature, device="cpu"):
    """A valid operand for each letter of ``signature`` (2-D b for the dense ops, 3-D for the grouped ones)."""
    a = randn(8, 16, device=device)
    dense = len(signature) < 3 or signature == "abc"
    return {"a": a, "b": randn(16, 16, device=device) if dense else weights(2, 16, 16, "nk").to(device),
            "c": randn(8, 32, device=device), "o": offsets_of([3, 5], device=device), "x": a,
            "y": randn(8, 16, device=device)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op, signature, operand", _UNDEFINED)
def test_undefined_tensor_operands_are_named(op, signature, operand, device):
    stand_in = _stand_ins(signature, device)
    args = [None if _OPERAND_NAMES[key] == operand else stand_in[key] for key in signature]
    with pytest.raises(ValueError, match=rf"^{op}: {operand}: expected a tensor, got an undefined one$"):
        getattr(ops, op)(*args)


@pytest.mark.parametrize("device", DEVICES)
def test_undefined_accumulate_target_is_named(device):
    x, dy, offsets = randn(8, 16, device=device), randn(8, 16, device=device), offsets_of([3, 5], device=device)
    with pytest.raises(ValueError, match=r"^grouped_gemm_wgrad\.accumulate: w: expected a tensor, got an undefined "
                                         r"one$"):
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, None)


# Operands that are not plain strided tensors, each as the dispatch key it brings (the pattern ends their
# message): without the library's kernels for those keys the dispatcher (or the jagged tensor's own dispatch)
# names no operand.
_MISFITS = {
    "sparse_coo": (lambda t: t.to_sparse(), r"expected a strided \(dense\) tensor, got layout torch\.sparse_coo"),
    "sparse_csr": (lambda t: t.to_sparse_csr(), r"expected a strided \(dense\) tensor, got layout torch\.sparse_csr"),
    "nested": (lambda t: torch.nested.nested_tensor([t]), r"expected a strided \(dense\) tensor, got a nested tensor"),
    # A Python subclass: refused by the library's Python registrations (_torch_ops.py), not by a C++ kernel.
    "jagged": (lambda t: torch.nested.nested_tensor([t], layout=torch.jagged),
               r"expected a strided \(dense\) tensor, got layout torch\.jagged"),
    "mkldnn": (lambda t: t.float().to_mkldnn(), r"expected a strided \(dense\) tensor, got layout torch\._mkldnn"),
    "quantized": (lambda t: torch.quantize_per_tensor(t.float(), 0.5, 0, torch.qint8),
                  r"expected a tensor of a plain dtype, got the quantized dtype torch\.qint8"),
}


def _misfit_cases():
    """(op, signature, operand, kind) for each operand of _UNDEFINED in each form torch can make of it: CSR
    of the 2-D operands only (not the offsets, nor a grouped op's 3-D b), MKL-DNN of the float ones."""
    for op, signature, operand in _UNDEFINED:
        grouped_b = operand == "b" and len(signature) >= 3 and signature != "abc"
        for kind in _MISFITS:
            if (kind == "sparse_csr" and (operand == "offsets" or grouped_b)
                    or kind == "mkldnn" and operand == "offsets"):
                continue
            yield op, signature, operand, kind


@pytest.mark.filterwarnings("ignore:.*(nested tensors|Sparse CSR|quantized tensor creation).*:UserWarning")
@pytest.mark.parametrize("op, signature, operand, kind", list(_misfit_cases()))
def test_operands_that_are_not_strided_tensors_are_named(op, signature, operand, kind):
    stand_in = _stand_ins(signature)
    make, message = _MISFITS[kind]
    args = [make(stand_in[key]) if _OPERAND_NAMES[key] == operand else stand_in[key] for key in signature]
    with pytest.raises(ValueError, match=rf"^{op}: {operand}: {message}$"):
        getattr(ops, op)(*args)


@pytest.mark.parametrize("device", DEVICES)
def test_optional_operands_and_the_accumulate_target_that_are_sparse_are_named(device):
    a, b, offsets = randn(8, 16, device=device), weights(2, 16, 16, "nk").to(device), offsets_of([3, 5], device=device)
    sparse = r"expected a strided \(dense\) tensor, got layout torch\.sparse_coo$"
    for name, options in (("alpha", {"alpha": torch.ones(1, device=device).to_sparse()}),
                          ("prob", {"prob": torch.ones(8, device=device).to_sparse()}),
                          ("bias", {"bias": torch.ones(2, 16, device=device).to_sparse()})):
        with pytest.raises(ValueError, match=rf"^grouped_gemm: {name}: {sparse}"):
            ops.grouped_gemm(a, b, offsets, **options)
    with pytest.raises(ValueError, match=rf"^grouped_gemm_wgrad\.accumulate: w: {sparse}"):
        ops.grouped_gemm_wgrad.accumulate(a, a, offsets, torch.zeros(2, 16, 16, device=device).to_sparse())


def test_operands_on_the_meta_device_are_rejected():
    # A meta operand sends the call to the fake kernel; it must raise like the C++ op, not return an
    # uninitialised tensor on the other operands' device.
    a, b, offsets = randn(8, 16), weights(2, 16, 8, "nk"), offsets_of([3, 5])
    with pytest.raises(ValueError, match=r"grouped_gemm: offsets: expected a tensor on cpu \(the device of a\), "
                                         r"got one on meta"):
        ops.grouped_gemm(a, b, offsets.to("meta"))
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: b: expected a tensor on cpu"):
        ops.grouped_gemm_glu(a, b.to("meta"), offsets)
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad: dy: expected a tensor on cpu \(the device of x\), "
                                         r"got one on meta"):
        ops.grouped_gemm_wgrad(a, randn(8, 8).to("meta"), offsets)
    # The C++ kernels' own device checks name the op's first operand too (a, or x for the weight gradient), as
    # a CUDA call with offsets left on the CPU meets them: run the CPU kernel past the dispatcher's choice.
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    with pytest.raises(ValueError, match=r"^grouped_gemm_wgrad: offsets: expected a tensor on cpu \(the device of "
                                         r"x\), got one on meta$"):
        ops.grouped_gemm_wgrad.default.redispatch(cpu, a, randn(8, 8), offsets.to("meta"))
    with pytest.raises(ValueError, match=r"^grouped_gemm_wgrad\.accumulate: w: expected a tensor on cpu \(the device "
                                         r"of x\), got one on meta$"):
        ops.grouped_gemm_wgrad.accumulate.redispatch(cpu, a, randn(8, 8), offsets, randn(2, 16, 8).to("meta"))
    with pytest.raises(ValueError, match=r"^grouped_gemm: offsets: expected a tensor on cpu \(the device of a\), got "
                                         r"one on meta$"):
        ops.grouped_gemm.default.redispatch(cpu, a, b, offsets.to("meta"))
    module = moegemm.torch.MoEMLP(2, 16, 16, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match=r"MoEMLP: x: expected a tensor on meta \(the module's parameters' device\), "
                                         r"got one on cpu"):
        module(a, offsets)
    # every operand on meta: shapes only, as torch's meta kernels do
    d, c = ops.grouped_gemm(a.to("meta"), b.to("meta"), offsets.to("meta"), generate_c=True)
    assert d.device.type == "meta" and d.shape == (8, 8) and c.shape == (8, 8)


def test_validate_reports_bad_offsets():
    a, b = randn(8, 16), weights(2, 16, 8, "nk")
    with pytest.raises(ValueError, match="offsets"):
        ops.grouped_gemm(a, b, torch.tensor([5, 3], dtype=torch.int32), validate=True)
    with pytest.raises(ValueError, match="offsets"):
        ops.grouped_gemm(a, b, torch.tensor([3, 9], dtype=torch.int32), validate=True)


def _validate_calls(device):
    """Every op with a validate flag (name as its errors give it -> call(offsets, validate)), on random inputs of
    M = 24 rows, K = 32, N = I = 16, E = 3; the accumulate overload adds into `w` (returned last)."""
    m, k, n = 24, 32, 16
    a = randn(m, k, device=device, seed=30)
    b = weights(3, k, n, "nk", seed=31).to(device)
    b_glu = weights(3, k, 2 * n, "nk", seed=32).to(device)
    c_dglu, c_dsrelu = randn(m, 2 * n, device=device, seed=33), randn(m, n, device=device, seed=34)
    dy = randn(m, n, device=device, seed=35)
    w = randn(3, k, n, dtype=torch.float32, device=device, seed=36)
    reductions = dict(compute_dprob=True, compute_dbias=True, compute_amax=True)
    return w, {
        "grouped_gemm": lambda o, v: ops.grouped_gemm(a, b, o, generate_c=True, validate=v),
        "grouped_gemm_glu": lambda o, v: ops.grouped_gemm_glu(a, b_glu, o, generate_c=True, validate=v),
        "grouped_gemm_dglu": lambda o, v: ops.grouped_gemm_dglu(a, b, c_dglu, o, **reductions, validate=v),
        "grouped_gemm_srelu": lambda o, v: ops.grouped_gemm_srelu(a, b, o, generate_c=True, validate=v),
        "grouped_gemm_dsrelu": lambda o, v: ops.grouped_gemm_dsrelu(a, b, c_dsrelu, o, **reductions, validate=v),
        "grouped_gemm_wgrad": lambda o, v: ops.grouped_gemm_wgrad(a, dy, o, validate=v),
        "grouped_gemm_wgrad.accumulate": lambda o, v: ops.grouped_gemm_wgrad.accumulate(a, dy, o, w, validate=v),
    }


_BAD_OFFSETS = [([5, 3, 17], r">= the one before it, got offsets\[1\] = 3 < offsets\[0\] = 5"),
                ([-1, 5, 17], r">= 0, got offsets\[0\] = -1"),
                ([5, 9, 25], r"<= M, got offsets\[2\] = 25")]


@pytest.mark.parametrize("op", list(_validate_calls("cpu")[1]))
@pytest.mark.parametrize("device", DEVICES)
def test_validate_reports_bad_offsets_of_every_op(op, device):
    """validate=True reports negative, decreasing and past-M offsets of every op that takes it (forward and
    backward, and wgrad's accumulate overload), naming the op and the first bad index, and leaves an
    accumulated w as it was; the same offsets without validate are clamped and the call goes through.
    Good offsets give the same outputs with validate as without."""
    w, calls = _validate_calls(device)
    call = calls[op]
    w_before = w.clone()
    for offs, got in _BAD_OFFSETS:
        offsets = torch.tensor(offs, dtype=torch.int32, device=device)
        w.copy_(w_before)
        with pytest.raises(ValueError, match=rf"^{re.escape(op)}: offsets: expected non-decreasing expert end rows in "
                                             rf"\[0, M=24\], each {got}$"):
            call(offsets, True)
        assert torch.equal(w, w_before), "a refused call wrote w"
        call(offsets, False)
    good = offsets_of([5, 0, 19], device)
    if op.endswith(".accumulate"):
        w.copy_(w_before)
        call(good, True)
        validated = w.clone()
        w.copy_(w_before)
        call(good, False)
        assert not torch.equal(validated, w_before) and torch.equal(validated, w)
        return
    validated, plain = call(good, True), call(good, False)
    for x, y in zip(validated if isinstance(validated, tuple) else (validated,),
                    plain if isinstance(plain, tuple) else (plain,)):
        assert torch.equal(x, y)


@pytest.mark.parametrize("act", ["swiglu", "geglu", "swiglu_clamped"])
@pytest.mark.parametrize("layout", ["halves", "interleaved32"])
@pytest.mark.parametrize("device", DEVICES)
def test_grouped_gemm_dglu_alpha_beta_and_options_against_float64(act, layout, device):
    """grouped_gemm_dglu with alpha, beta and prob (and, for swiglu_clamped, limit, act_alpha and linear_offset other
    than the defaults): gate and up are read from beta[g] * C and dC is the gradient with respect to that scaled
    pre-activation, with no further factor of beta; dH = alpha[g] * dY @ B_g^T, alpha applied once (docs/ops.md
    section 3). dC (f32), dprob, dbias and amax against torch autograd of the float64 activation."""
    sizes = [7, 0, 20, 5]
    m, k, i = sum(sizes) + 2, 32, 64
    offsets = offsets_of(sizes, device)
    dy = randn(m, k, seed=40, device=device)
    w_down = weights(len(sizes), k, i, "nk", seed=41).to(device)  # (E, I, K): dH = dy @ w_down[g]^T
    c = randn(m, 2 * i, seed=42, scale=1.5, device=device)
    alpha = randn(len(sizes), dtype=torch.float32, seed=43, device=device).abs() + 0.5
    beta = randn(len(sizes), dtype=torch.float32, seed=44, device=device).abs() + 0.5
    prob = randn(m, dtype=torch.float32, seed=45, device=device).abs()
    options = dict(limit=1.25, act_alpha=0.8, linear_offset=-0.5) if act == "swiglu_clamped" else {}
    dc, dprob, dbias, amax = ops.grouped_gemm_dglu(dy, w_down, c, offsets, alpha=alpha, beta=beta, prob=prob,
                                                   activation=act, glu_layout=layout, compute_dprob=True,
                                                   compute_dbias=True, compute_amax=True, dc_dtype=torch.float32,
                                                   **options)
    e_rows = ranges(offsets, m)
    end = end_row(offsets, m)
    dh = ref_linear(dy, w_down, offsets, "nk", alpha=alpha.cpu())[:end]
    row_beta = torch.cat([beta[g].double().cpu().expand(e - s) for g, s, e in e_rows])
    scaled = (c[:end].double().cpu() * row_beta[:, None]).requires_grad_(True)
    gate, up = glu_halves(scaled, layout)
    if options:
        assert (gate > options["limit"]).any() and (up.abs() > options["limit"]).any()  # the clamps act
    h = activation(gate, up, act, **options)
    p = prob[:end].double().cpu()
    (p[:, None] * h * dh).sum().backward()
    ref_dc = scaled.grad
    assert dc.dtype == torch.float32
    assert_close(dc[:end], ref_dc, bf16=False)
    assert_close(dprob[:end], (h * dh).sum(1).detach(), bf16=False)
    assert_close(dbias, torch.stack([ref_dc[s:e].sum(0) for _, s, e in e_rows]), bf16=False)
    d_gate, d_up = glu_halves(ref_dc, layout)
    assert_close(amax, torch.stack([d_gate.abs().max(), d_up.abs().max()]), bf16=False)


@pytest.mark.parametrize("zero_tail", [False, True])
def test_garbage_offsets_without_validate_stay_in_bounds(zero_tail):
    """Decreasing, negative and past-M offsets without validate: the op clamps each end into [previous end, M]
    (docs/ops.md section 0.1) and computes exactly those ranges, so d matches the float64 reference on them
    (torch_helpers.ranges clamps the same way); rows past the last clamped end are 0 with zero_tail and
    otherwise keep the poison of the allocator (M_PERTURB: every CPU allocation starts as 0x7F bytes)."""
    a, b = randn(8, 16), weights(3, 16, 8, "nk")
    for offs in ([5, 3, 100], [-4, 2, 8], [9, 9, 9], [6, -1, 3], [3, 1, 5]):  # the last two: tail rows 6-7, 5-7
        offsets = torch.tensor(offs, dtype=torch.int32)
        end = end_row(offsets, 8)
        with poisoned_allocations([8 * 8 * 2], "cpu"):
            d, _ = ops.grouped_gemm(a, b, offsets, zero_tail=zero_tail)
        assert d.shape == (8, 8)
        assert_close(d, ref_linear(a, b, offsets), rows=slice(0, end))
        tail = d[end:].contiguous().view(torch.uint8)
        assert (d[end:] == 0).all() if zero_tail else (tail == PERTURB_FILL).all(), (offs, d[end:])


@pytest.mark.parametrize("op", ["grouped_gemm", "grouped_gemm_dglu", "grouped_gemm_wgrad"])
@pytest.mark.parametrize("device", DEVICES)
def test_8bit_inputs_are_unsupported_on_every_backend(device, op):
    """FP8 inputs stay unsupported (docs/ops.md section 0.2 rule 2), forward and backward ops alike, on the
    CPU backend and on CUDA."""
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    if e4m3 is None:
        pytest.skip("this torch has no float8_e4m3fn")
    m, k, n = 16, 32, 32
    offsets = offsets_of([9, 0, 7], device)
    a = randn(m, k, device=device).to(e4m3)
    calls = {
        "grouped_gemm": lambda: ops.grouped_gemm(a, randn(3, n, k, device=device).to(e4m3), offsets,
                                                 out_dtype=torch.bfloat16),
        "grouped_gemm_dglu": lambda: ops.grouped_gemm_dglu(a, randn(3, n, k, device=device).to(e4m3),
                                                           randn(m, 2 * n, device=device), offsets),
        "grouped_gemm_wgrad": lambda: ops.grouped_gemm_wgrad(a, randn(m, n, device=device).to(e4m3), offsets),
    }
    with pytest.raises(NotImplementedError, match=op + r": .*8-bit inputs are not supported"):
        calls[op]()


def _bad_shape_calls():
    """(id, call(device) -> None): calls whose ranks or shared dims (M, K, E, N) do not agree, or whose option
    strings are not among the choices."""
    bf = torch.bfloat16

    def t(*shape, dtype=bf):
        return lambda dev: torch.ones(*shape, dtype=dtype, device=dev)

    a, off = t(32, 64), (lambda dev: torch.tensor([8, 16, 24, 32], dtype=torch.int32, device=dev))
    cases = {
        "grouped_a_1d": lambda d: ops.grouped_gemm(t(64)(d), t(4, 48, 64)(d), off(d)),
        "grouped_b_2d": lambda d: ops.grouped_gemm(a(d), t(48, 64)(d), off(d), b_layout="kn"),
        "grouped_k": lambda d: ops.grouped_gemm(a(d), t(4, 48, 32)(d), off(d)),
        "grouped_k_kn": lambda d: ops.grouped_gemm_srelu(a(d), t(4, 32, 48)(d), off(d), b_layout="kn"),
        "grouped_e": lambda d: ops.grouped_gemm_glu(a(d), t(4, 48, 64)(d), off(d)[:3]),
        "grouped_offsets_2d": lambda d: ops.grouped_gemm(a(d), t(4, 48, 64)(d), off(d).reshape(2, 2)),
        "grouped_offsets_0d": lambda d: ops.grouped_gemm_glu(a(d), t(4, 48, 64)(d), off(d)[0]),
        "grouped_offsets_5d": lambda d: ops.grouped_gemm(a(d), t(4, 48, 64)(d), off(d).reshape(1, 1, 1, 1, 4)),
        "dglu_c_columns": lambda d: ops.grouped_gemm_dglu(t(32, 48)(d), t(4, 48, 48)(d), t(32, 64)(d), off(d)),
        "dglu_c_1d": lambda d: ops.grouped_gemm_dglu(t(32, 48)(d), t(4, 48, 48)(d), t(96)(d), off(d)),
        "dsrelu_c_rows": lambda d: ops.grouped_gemm_dsrelu(t(32, 48)(d), t(4, 48, 48)(d), t(31, 48)(d), off(d)),
        "dglu_offsets_2d": lambda d: ops.grouped_gemm_dglu(t(32, 48)(d), t(4, 48, 48)(d), t(32, 96)(d),
                                                           off(d).reshape(1, 4)),
        "dsrelu_offsets_0d": lambda d: ops.grouped_gemm_dsrelu(t(32, 48)(d), t(4, 48, 48)(d), t(32, 48)(d),
                                                               off(d)[0]),
        "dense_k": lambda d: ops.gemm_amax(a(d), t(48, 32)(d)),
        "dense_k_kn": lambda d: ops.gemm_swiglu(a(d), t(32, 48)(d), b_layout="kn"),
        "dense_b_3d": lambda d: ops.gemm_srelu(a(d), t(4, 32, 48)(d)),
        "dense_c_rows": lambda d: ops.gemm_dsrelu(t(32, 48)(d), t(48, 48)(d), t(31, 48)(d)),
        "wgrad_x_1d": lambda d: ops.grouped_gemm_wgrad(t(64)(d), t(32, 48)(d), off(d)),
        "wgrad_dy_rows": lambda d: ops.grouped_gemm_wgrad(a(d), t(31, 48)(d), off(d)),
        "wgrad_offsets_2d": lambda d: ops.grouped_gemm_wgrad(a(d), t(32, 48)(d), off(d)[None]),
        "wgrad_offsets_0d": lambda d: ops.grouped_gemm_wgrad(a(d), t(32, 48)(d), off(d)[0]),
        "wgrad_w_2d": lambda d: ops.grouped_gemm_wgrad.accumulate(a(d), t(32, 48)(d), off(d),
                                                                  t(4, 64, dtype=torch.float32)(d)),
        "wgrad_w_shape": lambda d: ops.grouped_gemm_wgrad.accumulate(a(d), t(32, 48)(d), off(d),
                                                                     t(4, 64, 47, dtype=torch.float32)(d)),
        "wgrad_acc_x_1d": lambda d: ops.grouped_gemm_wgrad.accumulate(t(64)(d), t(32, 48)(d), off(d),
                                                                      t(4, 64, 48, dtype=torch.float32)(d)),
        "wgrad_acc_dy_rows": lambda d: ops.grouped_gemm_wgrad.accumulate(a(d), t(31, 48)(d), off(d),
                                                                         t(4, 64, 48, dtype=torch.float32)(d)),
        "wgrad_w_transposed": lambda d: ops.grouped_gemm_wgrad.accumulate(
            a(d), t(32, 48)(d), off(d), t(4, 64, 48, dtype=torch.float32)(d), transpose_output=True),
        # Option strings (the grouped and the dense ops name their weights' shapes differently).
        "grouped_b_layout": lambda d: ops.grouped_gemm(a(d), t(4, 48, 64)(d), off(d), b_layout="x"),
        "dense_b_layout": lambda d: ops.gemm_amax(a(d), t(48, 64)(d), b_layout="x"),
        "glu_activation": lambda d: ops.grouped_gemm_glu(a(d), t(4, 48, 64)(d), off(d), activation="relu"),
        "dglu_glu_layout": lambda d: ops.grouped_gemm_dglu(t(32, 48)(d), t(4, 48, 48)(d), t(32, 96)(d), off(d),
                                                           glu_layout="x"),
        "dense_glu_layout": lambda d: ops.gemm_swiglu(a(d), t(48, 64)(d), glu_layout="x"),
    }
    return list(cases.items())


@pytest.mark.parametrize("case, call", _bad_shape_calls(), ids=[c for c, _ in _bad_shape_calls()])
def test_fake_kernels_refuse_bad_shapes_as_the_ops_do(case, call):
    """On meta tensors (and under torch.compile) the fake kernel runs instead of the C++ op: it raises the
    op's ValueError, word for word, for ranks, shared dims and option strings, rather than an IndexError or
    outputs of a made-up shape."""
    with pytest.raises(ValueError) as eager:
        call("cpu")
    with pytest.raises(ValueError) as fake:
        call("meta")
    assert str(fake.value) == str(eager.value).split("\n")[0]
