"""Autograd of moe_mlp / MoEMLP and grouped_mm: gradcheck in float64 on CPU, values against a plain torch
implementation (bf16 on CPU and CUDA against torch.autograd of the float32 implementation), case C05 (two
iterations, dirtied allocator) and C12 (empty experts stay connected)."""

import warnings

import numpy as np
import pytest
import torch
import torch.utils.checkpoint

import moegemm.torch as mt
from torch_helpers import (DEVICES, activation, assert_close, clamp_edge_inputs, end_row, expect_refused_dtype,
                           glu_halves, offsets_of, poison, poisoned_allocations, randn, ranges)


def torch_moe_mlp(x, w_up, w_down, offsets, prob=None, act="swiglu", layout="halves", **clamp):
    """The same MLP in plain torch (rows past offsets[-1] give zero); `clamp`: swiglu_clamped's parameters."""
    out = x.new_zeros(x.shape[0], w_down.shape[2])
    pieces = []
    for g, s, e in ranges(offsets, x.shape[0]):
        gate, up = glu_halves(x[s:e] @ w_up[g], layout)
        h = activation(gate, up, act, **clamp)
        if prob is not None:
            h = h * prob[s:e, None]
        pieces.append((s, e, h @ w_down[g]))
    for s, e, y in pieces:
        out = out.index_copy(0, torch.arange(s, e), y) if e > s else out
    return out


@pytest.mark.parametrize("act", ["swiglu", "geglu", "swiglu_clamped"])
@pytest.mark.parametrize("layout", ["halves", "interleaved32"])
def test_gradcheck_moe_mlp_f64(act, layout):
    sizes = [3, 0, 4, 2]
    m, h, i = 9, 8, 32
    x = randn(m, h, dtype=torch.float64, seed=1).requires_grad_(True)
    w_up = randn(4, h, 2 * i, dtype=torch.float64, seed=2, scale=0.5).requires_grad_(True)
    w_down = randn(4, i, h, dtype=torch.float64, seed=3, scale=0.5).requires_grad_(True)
    offsets = offsets_of(sizes)
    fn = lambda x, u, d: mt.moe_mlp(x, u, d, offsets, None, act, layout)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w_up, w_down), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_gradcheck_moe_mlp_f64_with_tail_and_zero_tail():
    sizes = [3, 4, 0]
    m, h, i = 10, 8, 16
    x = randn(m, h, dtype=torch.float64, seed=4).requires_grad_(True)
    w_up = randn(3, h, 2 * i, dtype=torch.float64, seed=5, scale=0.5).requires_grad_(True)
    w_down = randn(3, i, h, dtype=torch.float64, seed=6, scale=0.5).requires_grad_(True)
    offsets = offsets_of(sizes)
    fn = lambda x, u, d: mt.moe_mlp(x, u, d, offsets, zero_tail=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w_up, w_down), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_gradcheck_grouped_mm_f64_both_weight_layouts():
    sizes = [2, 0, 5]
    m, k, n = 7, 8, 8
    a = randn(m, k, dtype=torch.float64, seed=7).requires_grad_(True)
    offsets = offsets_of(sizes)
    b_kn = randn(3, k, n, dtype=torch.float64, seed=8).requires_grad_(True)
    b_nk = randn(3, n, k, dtype=torch.float64, seed=9).requires_grad_(True)
    bias = randn(3, n, dtype=torch.float64, seed=10).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b, c: mt.grouped_mm(a, b, offsets, bias=c), (a, b_kn, bias))
    assert torch.autograd.gradcheck(lambda a, b: mt.grouped_mm(a, b.mT, offsets), (a, b_nk))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_mlp_values_and_grads_vs_plain_torch(dtype):
    """moe_mlp's y and the gradients of x, w_up, w_down and prob against torch.autograd of the plain float64
    implementation, at the tolerance of the dtype (assert_close): bf16's for bf16, f32's 1e-5 for f32, whose
    intermediates the ops keep in f32 (a bf16 rounding anywhere is ~1e-3 off)."""
    sizes = [6, 0, 11, 3]
    m, h, i = 20, 32, 64
    offsets = offsets_of(sizes)
    base = [randn(m, h, dtype=torch.float64, seed=11), randn(4, h, 2 * i, dtype=torch.float64, seed=12, scale=0.2),
            randn(4, i, h, dtype=torch.float64, seed=13, scale=0.2), randn(m, dtype=torch.float64, seed=14).abs()]
    ours = [t.to(dtype).requires_grad_(True) for t in base[:3]] + [base[3].float().requires_grad_(True)]
    ref = [t.clone().requires_grad_(True) for t in base]
    dy = randn(m, h, dtype=torch.float64, seed=15)
    y = mt.moe_mlp(*ours[:3], offsets, ours[3])
    y.backward(dy.to(dtype))
    y_ref = torch_moe_mlp(*ref[:3], offsets, ref[3])
    y_ref.backward(dy)
    bf16 = dtype == torch.bfloat16  # f32: every intermediate (h, C, dC) is f32, so f32's 1e-5 holds
    assert_close(y, y_ref, bf16)
    for mine, theirs in zip(ours, ref):
        assert mine.grad.dtype == mine.dtype and mine.grad.shape == mine.shape
        assert_close(mine.grad, theirs.grad, bf16)


# name -> (M, H, I, group sizes): empty experts (first, middle, last), sizes that are no multiple of any tile,
# rows past the last expert.
MOE_SHAPES = {
    "small": (40, 64, 64, [6, 0, 11, 3, 0]),
    "unaligned": (1000, 256, 128, [0, 500, 0, 1, 243, 0, 0, 7]),
}
MOE_CASES = [("small", "swiglu", "halves", False), ("small", "geglu", "interleaved32", True),
             ("small", "swiglu_clamped", "halves", True), ("unaligned", "swiglu", "halves", True),
             ("unaligned", "geglu", "interleaved32", False)]


def _expect_grads_match_f32_autograd(x, w_up, w_down, prob, dy, sizes, act, layout, zero_tail, **clamp):
    """moe_mlp forward and backward (moegemm's autograd: grouped_gemm_dglu, grouped_gemm, grouped_gemm_wgrad)
    on the inputs' device, against torch.autograd of the plain float32 implementation on float32 copies of
    the same inputs and output gradient, to the spec's bf16 tolerances (docs/ops.md section 9)."""
    device = x.device.type
    e, end = len(sizes), sum(sizes)
    offsets = offsets_of(sizes, device)
    ours = [t.clone().requires_grad_(True) for t in (x, w_up, w_down, prob)]
    ref = [t.detach().float().cpu().requires_grad_(True) for t in (x, w_up, w_down, prob)]
    y = mt.moe_mlp(*ours[:3], offsets, ours[3], act, layout, zero_tail=zero_tail, **clamp)
    y.backward(dy)
    y_ref = torch_moe_mlp(*ref[:3], offsets.cpu(), ref[3], act, layout, **clamp)
    y_ref.backward(dy.float().cpu())
    rows = slice(0, end)  # rows past the last expert: zero with zero_tail, unspecified without
    assert y.device.type == device and y.dtype == torch.bfloat16
    assert_close(y, y_ref, True, rows)
    for name, mine, theirs in zip(("x", "w_up", "w_down", "prob"), ours, ref):
        g = mine.grad
        assert g.device.type == device and g.dtype == mine.dtype and g.shape == mine.shape, name
        assert_close(g, theirs.grad, True, rows if name in ("x", "prob") else None)
    for g, s in enumerate(sizes):
        if s == 0:  # exact zeros written by grouped_gemm_wgrad
            assert (ours[1].grad[g] == 0).all() and (ours[2].grad[g] == 0).all(), g
    if zero_tail:
        assert (y[end:] == 0).all() and (ours[0].grad[end:] == 0).all() and (ours[3].grad[end:] == 0).all()


@pytest.mark.parametrize("shape,act,layout,zero_tail", MOE_CASES)
@pytest.mark.parametrize("device", DEVICES)
def test_moe_mlp_grads_match_f32_autograd(device, shape, act, layout, zero_tail):
    """The whole MoE MLP (fused GLU up-projection, down grouped GEMM) on bf16 random inputs."""
    m, h, i, sizes = MOE_SHAPES[shape]
    e = len(sizes)
    x = randn(m, h, seed=31, device=device)
    w_up = randn(e, h, 2 * i, seed=32, scale=1.5 / h ** 0.5, device=device)
    w_down = randn(e, i, h, seed=33, scale=1 / i ** 0.5, device=device)
    prob = randn(m, dtype=torch.float32, seed=34, device=device).abs()
    dy = randn(m, h, seed=35, device=device)
    _expect_grads_match_f32_autograd(x, w_up, w_down, prob, dy, sizes, act, layout, zero_tail)


@pytest.mark.parametrize("device", DEVICES)
def test_clamped_moe_mlp_with_its_own_limit_alpha_and_offset(device):
    """moe_mlp and MoEMLP pass swiglu_clamped's limit, act_alpha and linear_offset to the forward and the
    backward ops: values and gradients against torch.autograd of the f32 layer with the same parameters, on
    data that often passes the limit 3.3 (no bf16 value)."""
    m, h, i, sizes = 96, 64, 64, [30, 0, 50, 10]
    e = len(sizes)
    clamp = dict(limit=3.3, act_alpha=1.2, linear_offset=0.5)
    x = randn(m, h, seed=41, device=device)
    w_up = randn(e, h, 2 * i, seed=42, scale=3 / h ** 0.5, device=device)
    w_down = randn(e, i, h, seed=43, scale=1 / i ** 0.5, device=device)
    prob = randn(m, dtype=torch.float32, seed=44, device=device).abs()
    dy = randn(m, h, seed=45, device=device)
    _expect_grads_match_f32_autograd(x, w_up, w_down, prob, dy, sizes, "swiglu_clamped", "halves", True, **clamp)
    module = mt.MoEMLP(e, h, i, activation="swiglu_clamped", dtype=torch.bfloat16, device=device, **clamp)
    with torch.no_grad():
        module.w_up.copy_(w_up)
        module.w_down.copy_(w_down)
    assert torch.equal(module(x, offsets_of(sizes, device), prob),
                       mt.moe_mlp(x, w_up, w_down, offsets_of(sizes, device), prob, "swiglu_clamped", **clamp))


@pytest.mark.parametrize("layout", ["halves", "interleaved32"])
@pytest.mark.parametrize("device", DEVICES)
def test_clamped_moe_mlp_grads_match_f32_autograd_at_the_limit(device, layout):
    """swiglu_clamped with pre-activations that crowd around +-7 (clamp_edge_inputs): where rounding the saved
    pre-activation to bf16 would cross the limit, the backward still cuts off exactly the gradients the
    forward's clamps cut off (docs/ops.md section 2), as autodiff of the f32 forward does."""
    m, h, i, sizes = 160, 16, 64, [50, 0, 70, 20]
    x, w_up = (t.to(device) for t in clamp_edge_inputs(m, h, i, len(sizes), layout, seed=36))
    w_down = randn(len(sizes), i, h, seed=37, scale=1 / i ** 0.5, device=device)
    prob = randn(m, dtype=torch.float32, seed=38, device=device).abs()
    dy = randn(m, h, seed=39, device=device)
    _expect_grads_match_f32_autograd(x, w_up, w_down, prob, dy, sizes, "swiglu_clamped", layout, True)


def test_moe_mlp_weight_grads_keep_the_weight_stride_order():
    m, h, i = 12, 16, 32
    offsets = offsets_of([5, 7])
    w_up = randn(2, 2 * i, h, seed=16, scale=0.2).mT.requires_grad_(True)  # (E, H, 2I) view of (E, 2I, H)
    w_down = randn(2, i, h, seed=17, scale=0.2).requires_grad_(True)
    x = randn(m, h, seed=18).requires_grad_(True)
    mt.moe_mlp(x, w_up, w_down, offsets).float().sum().backward()
    assert w_up.grad.stride() == w_up.stride()
    y_ref = torch_moe_mlp(x.double(), w_up.double(), w_down.double(), offsets)
    assert_close(mt.moe_mlp(x, w_up, w_down, offsets), y_ref)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_mlp_and_module_under_autocast_cast_as_linear_does(device):
    """Inside torch.autocast(bf16) f32 x and weights (w_up a transposed view) reach the ops as bf16: y is bf16
    and equals moe_mlp on bf16 copies bitwise; the f32 leaves get f32 gradients equal to that run's, and the
    weight gradient keeps its stride order. Outside autocast nothing is cast; f64 is never cast."""
    m, h, i, e = 48, 32, 32, 3
    on = dict(device=device)
    offsets = offsets_of([20, 0, 28], device)
    w_up = randn(e, 2 * i, h, dtype=torch.float32, seed=70, scale=0.2, **on).mT  # (E, H, 2I)
    w_down = randn(e, i, h, dtype=torch.float32, seed=71, scale=0.2, **on)
    x, dy = randn(m, h, dtype=torch.float32, seed=72, **on), randn(m, h, seed=73, **on)
    prob = randn(m, dtype=torch.float32, seed=74, **on).abs()
    leaves = [t.detach().requires_grad_() for t in (x, w_up, w_down, prob)]
    with torch.autocast(device, dtype=torch.bfloat16):
        y = mt.moe_mlp(leaves[0], leaves[1], leaves[2], offsets, leaves[3])
    y.backward(dy)
    bf16 = [t.detach().to(torch.bfloat16).requires_grad_() for t in leaves[:3]] + [leaves[3].detach().requires_grad_()]
    y_bf16 = mt.moe_mlp(bf16[0], bf16[1], bf16[2], offsets, bf16[3])
    y_bf16.backward(dy)
    assert y.dtype == torch.bfloat16 and torch.equal(y, y_bf16)
    for leaf, ref in zip(leaves, bf16):
        assert leaf.grad.dtype == torch.float32 and torch.equal(leaf.grad, ref.grad.float())
    assert leaves[1].grad.stride() == leaves[1].stride()

    module = mt.MoEMLP(e, h, i, **on)  # f32 parameters, f32 x
    with torch.autocast(device, dtype=torch.bfloat16):
        y_module = module(x, offsets)
    y_module.float().sum().backward()
    expected = mt.moe_mlp(x.bfloat16(), module.w_up.detach().bfloat16(), module.w_down.detach().bfloat16(), offsets)
    assert y_module.dtype == torch.bfloat16 and torch.equal(y_module, expected)
    assert module.w_up.grad.dtype == torch.float32 and module.w_up.grad.abs().sum() > 0
    if device == "cpu":
        assert module(x, offsets).dtype == torch.float32  # no autocast, no cast
        meta = mt.MoEMLP(e, h, i, device="meta")  # a device autocast does not know: shapes only, no cast
        assert meta(x.to("meta"), offsets.to("meta")).shape == (m, h)
        with torch.autocast(device, dtype=torch.bfloat16):  # f64 is kept, as for linear
            assert mt.moe_mlp(x.double(), w_up.double(), w_down.double(), offsets).dtype == torch.float64
            # with an f64 operand nothing is cast: the error names the dtypes passed
            with pytest.raises(ValueError, match=r"MoEMLP: x: expected dtype torch.float32 .* got torch.float64"):
                module(x.double(), offsets)
            with pytest.raises(ValueError, match=r"moe_mlp: x: expected dtype torch.float32 \(the dtype of w_up and "
                                                 r"w_down\), got torch.float64"):
                mt.moe_mlp(x.double(), w_up, w_down, offsets)
    else:  # the kernels take bf16 only: f32 outside autocast and autocast's default f16 are refused
        for context in (torch.autocast(device, enabled=False), torch.autocast(device)):
            with context, expect_refused_dtype("MoEMLP"):
                module(x, offsets)


def test_autocast_16_bit_rule_error_says_autocast_cast_the_operands():
    """An f32 layer with H a multiple of 4 (not 8) is taken outside autocast; under bf16 autocast its operands
    are cast to bf16 and the 16-bit rule refuses H = 36: the message says that the dtype is autocast's."""
    module = mt.MoEMLP(4, 36, 16)
    x, offsets = randn(10, 36, dtype=torch.float32, seed=86), offsets_of([2, 2, 2, 4])
    assert module(x, offsets).shape == (10, 36)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(ValueError, match=r"^MoEMLP: x: expected H a multiple of 8 .*got H = 36 .*dtype "
                                             r"torch.bfloat16, the dtype torch.autocast casts the operands to"):
            module(x, offsets)


def test_torch_func_transforms_are_refused_naming_the_operand():
    """grad, jacrev and vmap wrap the operands (no data pointer, no setup_context): NotImplementedError naming
    the entry point and the first wrapped operand, where torch's errors named none. grouped_mm without grad
    runs under vmap (torch's per-sample fallback)."""
    x, offsets = randn(16, 32, dtype=torch.float32, seed=80), offsets_of([8, 8])
    w_up, w_down = randn(2, 32, 64, dtype=torch.float32, seed=81), randn(2, 32, 32, dtype=torch.float32, seed=82)
    module = mt.MoEMLP(2, 32, 32)
    calls = [
        ("moe_mlp: w_up", lambda: torch.func.grad(lambda w: mt.moe_mlp(x, w, w_down, offsets).sum())(w_up)),
        ("moe_mlp: x", lambda: torch.func.jacrev(lambda t: mt.moe_mlp(t, w_up, w_down, offsets).sum())(x)),
        ("moe_mlp: x", lambda: torch.func.vmap(lambda t: mt.moe_mlp(t, w_up, w_down, offsets))(x.expand(2, 16, 32))),
        ("MoEMLP: w_up", lambda: torch.func.grad(
            lambda p: torch.func.functional_call(module, p, (x, offsets)).sum())(dict(module.named_parameters()))),
        ("grouped_mm: b", lambda: torch.func.grad(lambda b: mt.grouped_mm(x, b, offs=offsets).sum())(w_down)),
    ]
    for prefix, call in calls:
        with pytest.raises(NotImplementedError, match=f"^{prefix}: expected a tensor outside torch.func"):
            call()
    with warnings.catch_warnings():  # torch's "not yet implemented the batching rule" (some versions only)
        warnings.simplefilter("ignore")
        batched = torch.func.vmap(lambda b: mt.grouped_mm(x, b, offs=offsets))(w_down.expand(2, 2, 32, 32))
    assert torch.equal(batched[1], mt.grouped_mm(x, w_down, offs=offsets))


def test_batched_incoming_gradients_are_refused_naming_the_entry_point():
    """autograd.grad(..., is_grads_batched=True) and jacobian(..., vectorize=True) run the backward under vmap:
    NotImplementedError naming the entry point and the batched gradient, where the ops failed on the wrapped
    tensor with an error that named nothing. The gradients one at a time give the Jacobian."""
    x, offsets = randn(16, 32, dtype=torch.float32, seed=83), offsets_of([8, 8])
    w_up, w_down = randn(2, 32, 64, dtype=torch.float32, seed=84), randn(2, 32, 32, dtype=torch.float32, seed=85)
    module = mt.MoEMLP(2, 32, 32)
    a = x.clone().requires_grad_()
    basis = torch.eye(4).reshape(4, 4, 1).expand(4, 4, 32)  # (batch, rows 0..3 of the output, 32 columns)
    calls = [
        ("grouped_mm", lambda: mt.grouped_mm(a, w_down, offs=offsets)),
        ("moe_mlp", lambda: mt.moe_mlp(a, w_up, w_down, offsets)),
        ("MoEMLP", lambda: module(a, offsets)),
    ]
    for op, call in calls:
        y = call()[:4]
        with pytest.raises(NotImplementedError, match=f"^{op}: backward: expected an incoming gradient outside "
                                                      f"torch.func transforms, got a batched one"):
            torch.autograd.grad(y, a, basis, is_grads_batched=True, retain_graph=True)
        rows = [torch.autograd.grad(y, a, basis[i], retain_graph=True)[0] for i in range(2)]
        assert rows[0].abs().sum() > 0 and not torch.equal(rows[0], rows[1])
    with pytest.raises(NotImplementedError, match="^grouped_mm: backward: expected an incoming gradient"):
        torch.autograd.functional.jacobian(lambda t: mt.grouped_mm(t, w_down, offs=offsets)[:2], x, vectorize=True)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_mlp_reads_strided_weight_stacks_in_place(device):
    # every other expert of a wider stack (w_up, as a transposed view) and padded rows (w_down): outputs and
    # gradients equal those of packed copies, bitwise, on both backends
    m, h, i, e = 96, 32, 32, 4
    offsets = offsets_of([30, 0, 40, 20], device)
    w_up = randn(2 * e, 2 * i, h, seed=60, scale=0.2, device=device)[::2].mT  # (E, H, 2I), experts 2 apart
    w_down = randn(e, i, h + 16, seed=61, scale=0.2, device=device)[:, :, :h]  # (E, I, H), rows of H + 16
    x, dy = randn(m, h, seed=62, device=device), randn(m, h, seed=63, device=device)
    results = []
    for up, down in ((w_up, w_down), (w_up.mT.contiguous().mT, w_down.contiguous())):
        leaves = [t.detach().requires_grad_() for t in (x, up, down)]
        y = mt.moe_mlp(*leaves, offsets)
        y.backward(dy)
        results.append([y.detach()] + [t.grad for t in leaves])
    for got, packed in zip(*results):
        assert torch.equal(got, packed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("module", [False, True])
def test_moe_mlp_backward_takes_an_incoming_gradient_off_the_16_byte_grid(device, module):
    """The gradient of y reaches moe_mlp's backward as a contiguous view 2 bytes off the 16-byte grid (y
    flattened behind 3 other elements): the gradients equal those of the same values aligned, bitwise."""
    m, h, i, e = 64, 32, 32, 4
    offsets = offsets_of([20, 0, 30, 14], device)
    x = randn(m, h, seed=64, device=device)
    w_up, w_down = randn(e, h, 2 * i, seed=65, scale=0.2, device=device), randn(e, i, h, seed=66, scale=0.2,
                                                                                  device=device)
    results = []
    for pad in (0, 3):
        leaves = [t.detach().requires_grad_() for t in (x, w_up, w_down)]
        if module:
            mlp = mt.MoEMLP(e, h, i, device=device, dtype=torch.bfloat16)
            with torch.no_grad():
                mlp.w_up.copy_(w_up)
                mlp.w_down.copy_(w_down)
            y = mlp(leaves[0], offsets)
            grads = lambda: [leaves[0].grad, mlp.w_up.grad, mlp.w_down.grad]  # noqa: E731
        else:
            y = mt.moe_mlp(*leaves, offsets)
            grads = lambda: [t.grad for t in leaves]  # noqa: E731
        flat = torch.cat([torch.zeros(pad, device=device, dtype=y.dtype), y.flatten()])
        weight = torch.cat([torch.zeros(pad, device=device), torch.linspace(-1, 1, y.numel(), device=device)])
        (flat.float() * weight).sum().backward()  # y's gradient: a view of flat's, pad elements in
        results.append(grads())
    for aligned, off_grid in zip(*results):
        assert torch.equal(aligned, off_grid)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ["swiglu", "swiglu_clamped"])
def test_moe_mlp_without_grad_keeps_no_pre_activation(device, act):
    """Where nothing will be differentiated (no_grad, inference_mode, no input requiring grad), moe_mlp and
    MoEMLP run the GLU without C, which only the backward reads, and give the values of the differentiable
    forward (bitwise: the default clamp limit is a 16-bit value, docs/ops.md §2)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class GluCalls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.generate_c = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.moegemm.grouped_gemm_glu.default:
                self.generate_c.append((kwargs or {}).get("generate_c", False))
            return func(*args, **(kwargs or {}))

    on = dict(device=device)
    module = mt.MoEMLP(4, 32, 16, activation=act, dtype=torch.bfloat16, **on)
    x, offsets, prob = randn(40, 32, seed=3, **on), offsets_of([9, 0, 20, 8], device), randn(40, seed=4, **on).abs()
    trained = module(x, offsets, prob)  # the parameters require grad: C is kept
    plain = [t.detach() for t in (module.w_up, module.w_down)]
    for context in (torch.no_grad, torch.inference_mode, torch.enable_grad):  # the last: no input requires grad
        with context(), GluCalls() as calls:
            values = [module(x, offsets, prob) if context is not torch.enable_grad else None,
                      mt.moe_mlp(x, *plain, offsets, prob, activation=act)]
        assert calls.generate_c == [False] * (len(values) - values.count(None)), context
        for y in values:
            assert y is None or torch.equal(y, trained.detach())
    with GluCalls() as calls:
        module(x, offsets, prob)
    assert calls.generate_c == [True]


@pytest.mark.parametrize("device", DEVICES)
def test_c05_two_iterations_with_dirty_allocator(device):
    """C05 through MoEMLP (zero_tail) with prob: the C04 layout (offsets[-1] = 744 of M = 1000, experts 1 and 5
    empty), forward and backward twice, NaN blocks of the activations' sizes freed before each iteration.
    Both iterations give bitwise the same gradients, with x's and prob's tail rows 0; their valid rows and the
    weight gradients match torch.autograd of the same layer in float64 (torch_moe_mlp) at the spec's bf16
    tolerances (so no NaN leaks in), and the empty experts' weight gradients are exactly 0."""
    sizes = [100, 0, 144, 200, 50, 0, 150, 100]  # offsets[-1] = 744 of M = 1000
    m, h, i, end = 1000, 64, 64, 744
    offsets = offsets_of(sizes, device)
    mlp = mt.MoEMLP(8, h, i, zero_tail=True, dtype=torch.bfloat16, device=device)
    with torch.no_grad():  # seeded weights, not the global generator's
        mlp.w_up.copy_(randn(8, h, 2 * i, seed=21, scale=1.5 / h ** 0.5))
        mlp.w_down.copy_(randn(8, i, h, seed=22, scale=1 / i ** 0.5))
    x = randn(m, h, seed=19, device=device).requires_grad_(True)
    prob = randn(m, dtype=torch.float32, seed=23, device=device).abs().requires_grad_(True)
    dy = randn(m, h, seed=24, device=device)
    leaves = (x, prob, mlp.w_up, mlp.w_down)
    grads = []
    for _ in range(2):
        poison([m * h * 2, m * 2 * i * 2, m * i * 2], device)
        x.grad = prob.grad = None
        mlp.zero_grad(set_to_none=True)
        mlp(x, offsets, prob).backward(dy)
        grads.append([t.grad.clone() for t in leaves])
    for first, second in zip(*grads):
        assert torch.equal(first, second)
    g_x, g_prob, g_up, g_down = grads[0]
    assert (g_x[end:] == 0).all() and (g_prob[end:] == 0).all()
    ref = [t.detach().double().cpu().requires_grad_(True) for t in leaves]
    torch_moe_mlp(ref[0], ref[2], ref[3], offsets.cpu(), ref[1]).backward(dy.double().cpu())
    assert_close(g_x, ref[0].grad, rows=slice(0, end))
    assert_close(g_prob, ref[1].grad, rows=slice(0, end))
    assert_close(g_up, ref[2].grad)
    assert_close(g_down, ref[3].grad)
    assert (g_up[1] == 0).all() and (g_up[5] == 0).all() and (g_down[1] == 0).all() and (g_down[5] == 0).all()


def torch_grouped_mm(a, b, offsets):
    """grouped_mm's 2-D x 3-D product in plain torch: a[rows_g] @ b[g], rows past offsets[-1] zero."""
    pieces = [a[s:e] @ b[g] for g, s, e in ranges(offsets, a.shape[0])]
    return torch.cat(pieces + [a.new_zeros(a.shape[0] - end_row(offsets, a.shape[0]), b.shape[2])])


@pytest.mark.parametrize("weights", ["row_major", "transposed_view"])
@pytest.mark.parametrize("device", DEVICES)
def test_c05_grouped_mm_two_iterations_with_dirty_allocator(device, weights):
    """C05 through grouped_mm (2-D x 3-D, zero_tail=True), b row-major (E, K, N) or the view w.mT of an (E, N, K)
    stack: the C04 layout, forward and backward twice, NaN blocks of out's, da's and db's sizes freed before
    each iteration. Both iterations give bitwise the same out, da and db, with the tail rows of out and da 0;
    the valid rows of out and da, and db, match torch.autograd of the plain float64 product at the spec's bf16
    tolerances; db of the empty experts is exactly 0."""
    sizes = [100, 0, 144, 200, 50, 0, 150, 100]  # offsets[-1] = 744 of M = 1000
    m, k, n, end = 1000, 64, 96, 744
    offsets = offsets_of(sizes, device)
    w = randn(8, n, k, seed=26, scale=0.2, device=device)
    b = (w.mT.contiguous() if weights == "row_major" else w.mT).requires_grad_(True)
    a = randn(m, k, seed=25, device=device).requires_grad_(True)
    dy = randn(m, n, seed=27, device=device)
    runs = []
    for _ in range(2):
        poison([m * n * 2, m * k * 2, 8 * k * n * 2], device)
        a.grad = b.grad = None
        out = mt.grouped_mm(a, b, offsets, zero_tail=True)
        out.backward(dy)
        runs.append((out.detach().clone(), a.grad.clone(), b.grad.clone()))
    for first, second in zip(*runs):
        assert torch.equal(first, second)
    out, da, db = runs[0]
    assert (out[end:] == 0).all() and (da[end:] == 0).all()
    a64, b64 = (t.detach().double().cpu().requires_grad_(True) for t in (a, b))
    out64 = torch_grouped_mm(a64, b64, offsets.cpu())
    out64.backward(dy.double().cpu())
    assert_close(out, out64, rows=slice(0, end))
    assert_close(da, a64.grad, rows=slice(0, end))
    assert_close(db, b64.grad)
    assert (db[1] == 0).all() and (db[5] == 0).all()


def test_c12_empty_experts_keep_gradients_connected():
    h, i = 16, 32
    for sizes in ([4, 7, 0], [0, 0, 0]):
        m = max(sum(sizes), 3)
        offsets = offsets_of(sizes)
        mlp = mt.MoEMLP(3, h, i, zero_tail=True, dtype=torch.bfloat16)
        x = randn(m, h, seed=20).requires_grad_(True)
        y = mlp(x, offsets)
        assert y.shape == (m, h) and y.requires_grad
        y.float().sum().backward()
        assert x.grad is not None and mlp.w_up.grad is not None and mlp.w_down.grad is not None
        assert (mlp.w_up.grad[2] == 0).all() and (mlp.w_down.grad[2] == 0).all()
        if sum(sizes) == 0:
            assert (mlp.w_up.grad == 0).all() and (x.grad == 0).all() and (y == 0).all()


def test_ops_refuse_to_drop_gradients():
    a = randn(8, 16).requires_grad_(True)
    d, _ = torch.ops.moegemm.grouped_gemm(a, randn(2, 8, 16, seed=1), offsets_of([3, 5]))
    with pytest.raises(RuntimeError, match="not implemented"):
        d.float().sum().backward()


@pytest.mark.parametrize("case, pattern", [
    # x is named where both weights agree on a dtype it lacks (activations not cast), else the odd weight.
    ("x_f32", r"^moe_mlp: x: expected dtype torch\.bfloat16 \(the dtype of w_up and w_down\), got torch\.float32$"),
    ("w_up_dtype", r"moe_mlp: w_up: expected dtype torch\.bfloat16 \(the dtype of x\), got torch\.float16"),
    ("w_down_dtype", r"moe_mlp: w_down: expected dtype torch\.bfloat16 \(the dtype of x\), got torch\.float16"),
    ("w_up_h", r"moe_mlp: w_up: expected shape \(E, H=32, 2I\) with H from x and 2I even, got \(4, 16, 32\)"),
    ("w_up_odd", r"moe_mlp: w_up: expected shape \(E, H=32, 2I\) .*got \(4, 32, 33\)"),
    ("w_down_i", r"moe_mlp: w_down: expected shape \(E=4, I=16, H=32\) .*got \(4, 8, 32\)"),
    ("w_down_e", r"moe_mlp: w_down: expected shape \(E=4, I=16, H=32\) .*got \(3, 16, 32\)"),
    ("w_down_h", r"moe_mlp: w_down: expected shape \(E=4, I=16, H=32\) .*got \(4, 16, 40\)"),
    ("w_up_e", r"moe_mlp: w_up: expected dim 0 = E=4 \(the experts of offsets and w_down\), got shape "
               r"\(3, 32, 32\)"),
    ("x_rank", r"moe_mlp: x: expected a 2-D \(M, H\) tensor, got shape \(1, 64, 32\)"),
    ("w_up_rank", r"moe_mlp: w_up: expected a 3-D \(E, H, 2I\) tensor, got shape \(32, 32\)"),
    ("offsets_len", r"moe_mlp: offsets: expected an \(E=4,\) torch\.int32 tensor with E from w_up, got shape \(3,\)"),
    ("offsets_i64", r"moe_mlp: offsets: expected an \(E=4,\) torch\.int32 .*got shape \(4,\) and dtype torch\.int64"),
    ("x_h", r"moe_mlp: x: expected H a multiple of 8 .*got H = 12"),
    ("w_up_i", r"moe_mlp: w_up: expected I \(half of its last dim\) a multiple of 8 .*got I = 12"),
    ("x_transposed", r"moe_mlp: x: expected a row-major \(M, H\) tensor \(stride\(1\) == 1\), got strides \(1, 64\)"),
    # Checked before any op runs (a bad w_down must not wait for the up-projection):
    ("x_misaligned", r"moe_mlp: x: expected a 16-byte aligned base address \(16-byte alignment rule\), got "
                     r"0x[0-9a-f]+; pass a copy of the operand, which starts aligned$"),
    ("x_f32_pitch", r"moe_mlp: x: expected a row stride that is a multiple of 16 bytes \(4 torch\.float32 "
                    r"elements: with a contiguous x, H % 4 == 0\), got stride\(0\)=6 with H=6"),
    ("w_up_pitch", r"moe_mlp: w_up: expected a row stride stride\(1\) >= 2I=32 that is a multiple of 16 bytes "
                   r"\(16-byte alignment rule\), got stride\(1\)=36 elements \(72 bytes\), shape \(4, 32, 32\) "
                   r"with strides \(1152, 36, 1\)"),
    ("w_down_expert_stride", r"moe_mlp: w_down: expected a positive expert stride that is a multiple of 16 bytes .*"
                             r"got stride\(0\)=516 elements"),
    # In the caller's dims: w_down (E, I, H) as a transposed view reads rows of I.
    ("w_down_pitch_transposed", r"moe_mlp: w_down: expected a row stride stride\(2\) >= I=16 that is a multiple of "
                                r"16 bytes .*got stride\(2\)=20 elements"),
    ("w_down_experts_innermost", r"moe_mlp: w_down: expected an \(E, I, H\) weight whose H dim is contiguous "
                                 r"\(stride\(-1\) == 1\) or a transposed view of an \(E, H, I\) tensor"),
    ("w_up_device", r"moe_mlp: w_up: expected a tensor on meta \(the device of x\), got one on cpu"),
    # Left to the ops, reported under the caller's names:
    ("too_many_experts", r"moe_mlp: offsets: expected 1 <= E <= 1024 experts, got E=1025 "
                         r"\(checked as grouped_gemm_glu's offsets\)"),
])
def test_moe_mlp_errors_name_its_own_operands(case, pattern):
    """Shape and dtype errors of moe_mlp name x, w_up or w_down (not the a, b, d of the ops it calls),
    for the forward alone and under autograd."""
    x, w_up, w_down = randn(64, 32), randn(4, 32, 32, seed=1), randn(4, 16, 32, seed=2)
    offsets = offsets_of([10, 0, 30, 24])
    bad = {
        "x_f32": dict(x=x.float()),
        "w_down_dtype": dict(w_down=w_down.half()),
        "w_up_dtype": dict(w_up=w_up.half()),
        "w_up_h": dict(w_up=randn(4, 16, 32)),
        "w_up_odd": dict(w_up=randn(4, 32, 33)),
        "w_down_i": dict(w_down=randn(4, 8, 32)),
        "w_down_e": dict(w_down=randn(3, 16, 32)),
        "w_down_h": dict(w_down=randn(4, 16, 40)),
        "w_up_e": dict(w_up=randn(3, 32, 32)),
        "x_rank": dict(x=x[None]),
        "w_up_rank": dict(w_up=w_up[0]),
        "offsets_len": dict(offsets=offsets_of([10, 0, 30])),
        "offsets_i64": dict(offsets=offsets.long()),
        "x_h": dict(x=randn(64, 12), w_up=randn(4, 12, 32), w_down=randn(4, 16, 12)),
        "w_up_i": dict(w_up=randn(4, 32, 24), w_down=randn(4, 12, 32)),
        "x_transposed": dict(x=randn(32, 64).t()),
        "x_misaligned": dict(x=randn(64 * 32 + 1)[1:].view(64, 32)),
        "x_f32_pitch": dict(x=randn(64, 6).float(), w_up=randn(4, 6, 32).float(), w_down=randn(4, 16, 6).float()),
        "w_up_pitch": dict(w_up=randn(4, 32, 36, seed=1)[:, :, :32]),
        "w_down_expert_stride": dict(w_down=torch.as_strided(randn(4 * 516, seed=2), (4, 16, 32), (516, 32, 1))),
        "w_down_pitch_transposed": dict(w_down=randn(4, 32, 20, seed=2)[:, :, :16].mT),
        "w_down_experts_innermost": dict(w_down=randn(16, 32, 4, seed=2).permute(2, 0, 1)),
        "w_up_device": dict(x=x.to("meta")),
        "too_many_experts": dict(w_up=randn(1025, 32, 32, seed=3), w_down=randn(1025, 16, 32, seed=4),
                                 offsets=offsets_of([0] * 1024 + [64])),
    }[case]
    args = dict(x=x, w_up=w_up, w_down=w_down, offsets=offsets) | bad
    with pytest.raises(ValueError, match=pattern):
        mt.moe_mlp(args["x"], args["w_up"], args["w_down"], args["offsets"])
    grad_args = {k: v.detach().requires_grad_() if v.is_floating_point() else v for k, v in args.items()}
    with pytest.raises(ValueError, match=pattern):
        mt.moe_mlp(grad_args["x"], grad_args["w_up"], grad_args["w_down"], grad_args["offsets"])


@pytest.mark.parametrize("case, error, pattern", [
    ("x_list", TypeError, r"moe_mlp: x: expected a torch\.Tensor, got list"),
    ("activation_none", ValueError,
     r'moe_mlp: activation: expected "swiglu", "geglu" or "swiglu_clamped", got None'),
    ("glu_layout", ValueError, r'moe_mlp: glu_layout: expected "halves", .*got "bogus"'),
    ("prob_int", ValueError, r"moe_mlp: prob: expected a floating dtype, got torch\.int32"),
    ("prob_shape", ValueError, r"moe_mlp: prob: expected shape \(M=64,\) with M from x, got \(63,\)"),
    # x's rank is checked before prob's shape reads M from it.
    ("x_0d_with_prob", ValueError, r"moe_mlp: x: expected a 2-D \(M, H\) tensor, got shape \(\)"),
    ("limit_str", TypeError, r"moe_mlp: limit: expected a real number, got str '7'"),
    # Bools and complex numbers of NumPy and torch too, as moegemm.jax refuses them (1.0 and a dropped
    # imaginary part before).
    ("limit_numpy_bool", TypeError, r"moe_mlp: limit: expected a real number, got bool_? "),  # NumPy 2: bool
    ("act_alpha_tensor_bool", TypeError, r"moe_mlp: act_alpha: expected a real number, got Tensor "),
    ("linear_offset_numpy_complex", TypeError, r"moe_mlp: linear_offset: expected a real number, got complex64 "),
    # Containers, arrays of several elements and other objects: named too, where float() would not name them.
    ("limit_list", TypeError, r"^moe_mlp: limit: expected a real number, got list \[7\.0\]$"),
    ("limit_tensor_two", TypeError, r"^moe_mlp: limit: expected a real number, got Tensor tensor\(\[7\., 1\.\]\)$"),
    ("limit_numpy_two", TypeError, r"^moe_mlp: limit: expected a real number, got ndarray array\(\[1\., 2\.\]\)$"),
    # One element in one or more dims is not one number either (float() of a 1-D NumPy array depends on
    # NumPy's version), but a 0-d array or tensor is.
    ("limit_numpy_1d", TypeError, r"^moe_mlp: limit: expected a real number, got ndarray array\(\[7\.\]\)$"),
    ("limit_tensor_1d", TypeError, r"^moe_mlp: limit: expected a real number, got Tensor tensor\(\[7\.\]\)$"),
    ("act_alpha_tuple", TypeError, r"^moe_mlp: act_alpha: expected a real number, got tuple \(1\.7,\)$"),
    ("linear_offset_object", TypeError, r"^moe_mlp: linear_offset: expected a real number, got object <object "),
    ("linear_offset_tuple_swiglu", TypeError, r"^moe_mlp: linear_offset: expected a real number, got tuple"),
    # The limit is checked as the kernels take it (in f32), before the autograd.Function runs.
    ("limit_zero", ValueError, r"moe_mlp: limit: expected a positive clamp limit for swiglu_clamped \(in f32\), "
                               r"got 0\.0$"),
    ("limit_f32_zero", ValueError,
     r"moe_mlp: limit: expected a positive clamp limit .*got 1e-46, which f32 rounds to 0$"),
    ("limit_nan", ValueError, r"moe_mlp: limit: expected a positive clamp limit .*got nan$"),
    # NaN or infinite slope or offset would make every output NaN: refused where swiglu_clamped uses them.
    ("act_alpha_nan", ValueError,
     r"moe_mlp: act_alpha: expected a finite act_alpha for swiglu_clamped \(in f32\), got nan$"),
    ("linear_offset_inf", ValueError,
     r"moe_mlp: linear_offset: expected a finite linear_offset for swiglu_clamped \(in f32\), got -inf$"),
    # Finite in f64 but not as the kernels take it (the inner op would report inf).
    ("act_alpha_f32_inf", ValueError,
     r"moe_mlp: act_alpha: expected a finite act_alpha for swiglu_clamped \(in f32\), got 1e\+300, which f32 "
     r"rounds to inf$"),
    ("linear_offset_f32_inf", ValueError,
     r"moe_mlp: linear_offset: expected a finite linear_offset .*got -3\.4028235677973366e\+38, which f32 rounds "
     r"to -inf$"),
    ("x_without_columns", ValueError, r"moe_mlp: x: expected H > 0 \(its last dim\), got shape \(64, 0\)$"),
    ("w_up_without_columns", ValueError, r"moe_mlp: w_up: expected 2I > 0 \(its last dim\), got shape \(4, 32, 0\)$"),
    ("x_expanded", ValueError, r"moe_mlp: x: expected a row stride stride\(0\) >= H=32, got stride\(0\)=0$"),
    # x's own dtype is named before the weights are asked for it (they were told to take x's int32).
    ("x_int32", ValueError, r"^moe_mlp: x: expected dtype torch\.bfloat16 \(torch\.float16, torch\.float32 or "
                            r"torch\.float64 on CPU\), got torch\.int32$"),
    ("x_float8", NotImplementedError, r"^moe_mlp: x: expected dtype torch\.bfloat16 .*got torch\.float8_e4m3fn "
                                      r"\(8-bit and FP4 inputs are not supported yet\)$"),
])
def test_moe_mlp_rejects_bad_arguments_by_name(case, error, pattern):
    x, w_up, w_down = randn(64, 32), randn(4, 32, 32, seed=1), randn(4, 16, 32, seed=2)
    args = dict(x=x, w_up=w_up, w_down=w_down, offsets=offsets_of([10, 0, 30, 24]), prob=None,
                activation="swiglu", glu_layout="halves")
    args |= {"x_list": dict(x=[[1.0]]), "activation_none": dict(activation=None),
             "glu_layout": dict(glu_layout="bogus"),
             "prob_int": dict(prob=torch.ones(64, dtype=torch.int32)),
             "prob_shape": dict(prob=torch.ones(63)),
             "x_0d_with_prob": dict(x=torch.tensor(1.0, dtype=torch.bfloat16), prob=torch.ones(1)),
             "limit_str": dict(activation="swiglu_clamped", limit="7"),
             "limit_numpy_bool": dict(activation="swiglu_clamped", limit=np.True_),
             "act_alpha_tensor_bool": dict(activation="swiglu_clamped", act_alpha=torch.tensor(True)),
             "linear_offset_numpy_complex": dict(activation="swiglu_clamped", linear_offset=np.complex64(1 + 5j)),
             "limit_list": dict(activation="swiglu_clamped", limit=[7.0]),
             "limit_tensor_two": dict(activation="swiglu_clamped", limit=torch.tensor([7.0, 1.0])),
             "limit_numpy_two": dict(activation="swiglu_clamped", limit=np.array([1.0, 2.0])),
             "limit_numpy_1d": dict(activation="swiglu_clamped", limit=np.array([7.0])),
             "limit_tensor_1d": dict(activation="swiglu_clamped", limit=torch.tensor([7.0])),
             "act_alpha_tuple": dict(activation="swiglu_clamped", act_alpha=(1.7,)),
             "linear_offset_object": dict(activation="swiglu_clamped", linear_offset=object()),
             "linear_offset_tuple_swiglu": dict(linear_offset=(1.0,)),  # read whatever the activation
             "limit_zero": dict(activation="swiglu_clamped", limit=0.0),
             "limit_f32_zero": dict(activation="swiglu_clamped", limit=1e-46),
             "limit_nan": dict(activation="swiglu_clamped", limit=float("nan")),
             "act_alpha_nan": dict(activation="swiglu_clamped", act_alpha=float("nan")),
             "linear_offset_inf": dict(activation="swiglu_clamped", linear_offset=float("-inf")),
             "act_alpha_f32_inf": dict(activation="swiglu_clamped", act_alpha=1e300),
             "linear_offset_f32_inf": dict(activation="swiglu_clamped", linear_offset=-(2.0 ** 128 - 2.0 ** 103)),
             "x_without_columns": dict(x=randn(64, 0)),
             "w_up_without_columns": dict(w_up=randn(4, 32, 0)),
             "x_expanded": dict(x=randn(1, 32).expand(64, 32)),
             "x_int32": dict(x=torch.ones(64, 32, dtype=torch.int32)),
             "x_float8": dict(x=randn(64, 32).to(torch.float8_e4m3fn))}[case]
    clamp = {k: args.pop(k) for k in ("limit", "act_alpha", "linear_offset") if k in args}
    with pytest.raises(error, match=pattern):
        mt.moe_mlp(*args.values(), **clamp)


_PROB_VIEWS = {"column_bf16": lambda t: t.to(torch.bfloat16)[:, 1],  # a column of the top-2 weights
               "column_f32": lambda t: t[:, 1], "expanded": lambda t: t[:1, 0].expand(64)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", sorted(_PROB_VIEWS))
def test_moe_mlp_takes_prob_at_any_stride(device, kind):
    """A strided prob (a column of the top-k weights, an expanded scalar) gives the values and gradients of its
    contiguous copy, its gradient flowing back through the caller's view."""
    x, w_up, w_down = (randn(64, 32, device=device), randn(4, 32, 32, seed=1, device=device),
                       randn(4, 16, 32, seed=2, device=device))
    offsets = offsets_of([10, 0, 30, 20]).to(device)  # 4 tail rows: their dprob is written as zeros
    base = torch.rand(64, 2, generator=torch.Generator().manual_seed(3)).to(device).requires_grad_(True)
    prob = _PROB_VIEWS[kind](base)
    assert not prob.is_contiguous()
    copy = prob.detach().contiguous().requires_grad_(True)
    want = mt.moe_mlp(x, w_up, w_down, offsets, copy, zero_tail=True)
    got = mt.moe_mlp(x, w_up, w_down, offsets, prob, zero_tail=True)
    assert torch.equal(got, want)
    dy = randn(64, 32, seed=4, device=device)
    got.backward(dy)
    want.backward(dy)
    (expected,) = torch.autograd.grad(_PROB_VIEWS[kind](base), base, copy.grad)  # the view's own backward
    assert torch.equal(base.grad, expected) and base.grad.abs().sum() > 0


def test_clamp_parameters_take_numbers_in_any_0d_form():
    x, w_up, w_down = randn(64, 32), randn(4, 32, 32, seed=1), randn(4, 16, 32, seed=2)
    offsets = offsets_of([10, 0, 30, 24])
    want = mt.moe_mlp(x, w_up, w_down, offsets, activation="swiglu_clamped", limit=0.5, act_alpha=1.5)
    for limit in (np.array(0.5), np.float32(0.5), torch.tensor(0.5), torch.tensor(0.5, dtype=torch.float64)):
        got = mt.moe_mlp(x, w_up, w_down, offsets, activation="swiglu_clamped", limit=limit,
                         act_alpha=np.array(1.5))
        assert torch.equal(got, want)


@pytest.mark.parametrize("name, value, got", [
    ("validate", "no", "str 'no'"), ("validate", [], "list \\[\\]"), ("zero_tail", None, "NoneType None"),
    ("zero_tail", 0, "int 0"),
])
def test_moe_mlp_flags_take_bools_only(name, value, got):
    """zero_tail and validate are bools: read by truth value, validate="no" would validate and zero_tail=None
    would leave the tail unwritten (moegemm.jax refuses the same)."""
    x, w_up, w_down = randn(64, 32), randn(4, 32, 32, seed=1), randn(4, 16, 32, seed=2)
    with pytest.raises(TypeError, match=rf"^moe_mlp: {name}: expected a bool, got {got}$"):
        mt.moe_mlp(x, w_up, w_down, offsets_of([10, 0, 30, 24]), **{name: value})
    if name == "zero_tail":
        with pytest.raises(TypeError, match=rf"^MoEMLP: zero_tail: expected a bool, got {got}$"):
            mt.MoEMLP(4, 32, 16, zero_tail=value)
    # NumPy's bool is a bool.
    y = mt.moe_mlp(x, w_up, w_down, offsets_of([10, 0, 30, 24]), **{name: np.bool_(True)})
    assert y.shape == (64, 32)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_mlp_validate_reports_bad_offsets(device):
    """validate=True (spec §0's opt-in host check) names moe_mlp's offsets; the module passes it through and
    names itself."""
    x = randn(8, 16, device=device)
    module = mt.MoEMLP(2, 16, 16, dtype=torch.bfloat16, device=device)
    for offs, got in (([5, 3], r"offsets\[1\] = 3 < offsets\[0\] = 5"), ([3, 9], r"offsets\[1\] = 9"),
                      ([-1, 8], r"offsets\[0\] = -1")):
        offs = torch.tensor(offs, dtype=torch.int32, device=device)
        pattern = r": offsets: expected non-decreasing expert end rows .*got " + got
        with pytest.raises(ValueError, match="^moe_mlp" + pattern):
            mt.moe_mlp(x, module.w_up, module.w_down, offs, validate=True)
        with pytest.raises(ValueError, match="^MoEMLP" + pattern):
            module(x, offs, validate=True)
        assert module(x, offs).shape == (8, 16)  # clamped on the device without it
    good = offsets_of([3, 5]).to(device)
    assert torch.equal(module(x, good, validate=True), module(x, good))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_moe_mlp_module_checks_its_configuration_when_built():
    with pytest.raises(ValueError, match=r'MoEMLP: activation: expected "swiglu", .*got "bogus"'):
        mt.MoEMLP(2, 16, 8, activation="bogus")
    with pytest.raises(ValueError, match=r'MoEMLP: glu_layout: expected "halves", .*got "bogus"'):
        mt.MoEMLP(2, 16, 8, glu_layout="bogus")
    # A NumPy string array is not a str (`in` would compare it element-wise; the op refused it in forward).
    with pytest.raises(ValueError, match=r'MoEMLP: activation: expected "swiglu", .*got array\(\'swiglu\''):
        mt.MoEMLP(2, 16, 8, activation=np.array("swiglu"))
    with pytest.raises(ValueError, match=r"MoEMLP: intermediate: expected a positive int, got 0"):
        mt.MoEMLP(2, 16, 0)
    # Sizes past the contract's 2^62 bytes of an operand are named before torch.empty would overflow them.
    with pytest.raises(ValueError, match=r"MoEMLP: hidden, intermediate: expected w_up's \(E, H, 2I\) of 32-bit "
                                         r"elements within 4611686018427387904 bytes, got E=2, H=16, "
                                         r"I=1180591620717411303424"):
        mt.MoEMLP(2, 16, 2**70, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"MoEMLP: hidden: expected a positive int, got True"):
        mt.MoEMLP(2, True, 16)
    with pytest.raises(ValueError, match=r"MoEMLP: hidden: expected a multiple of 8 for 16-bit weights"):
        mt.MoEMLP(2, 12, 16, dtype=torch.bfloat16)
    # f32 rows are 16 bytes per 4 elements: refused when built, not at the first forward.
    with pytest.raises(ValueError, match=r"MoEMLP: hidden: expected a multiple of 4 for 32-bit weights .*got 10"):
        mt.MoEMLP(2, 10, 16, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"MoEMLP: intermediate: expected a multiple of 2 for 64-bit weights"):
        mt.MoEMLP(2, 16, 3, dtype=torch.float64)
    mt.MoEMLP(2, 12, 4, dtype=torch.float32)  # multiples of 4 are whole 16-byte rows in f32
    with pytest.raises(ValueError, match=r"MoEMLP: intermediate: expected a multiple of 32 for glu_layout "
                                         r"'interleaved32'"):
        mt.MoEMLP(2, 16, 16, glu_layout="interleaved32", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"MoEMLP: limit: expected a positive clamp limit for swiglu_clamped"):
        mt.MoEMLP(2, 16, 16, activation="swiglu_clamped", limit=-1.0)
    mt.MoEMLP(2, 16, 16, activation="swiglu", limit=0.0)  # the limit is swiglu_clamped's only
    with pytest.raises(TypeError, match=r"^MoEMLP: limit: expected a real number, got list \[7\.0\]$"):
        mt.MoEMLP(2, 16, 16, activation="swiglu_clamped", limit=[7.0])
    with pytest.raises(ValueError, match=r"MoEMLP: act_alpha: expected a finite act_alpha for swiglu_clamped"):
        mt.MoEMLP(2, 16, 16, activation="swiglu_clamped", act_alpha=float("inf"))
    with pytest.raises(ValueError, match=r"MoEMLP: linear_offset: expected a finite linear_offset"):
        mt.MoEMLP(2, 16, 16, activation="swiglu_clamped", linear_offset=float("nan"))
    with pytest.raises(ValueError, match=r"MoEMLP: act_alpha: .*got 1e\+39, which f32 rounds to inf$"):
        mt.MoEMLP(2, 16, 16, activation="swiglu_clamped", act_alpha=1e39)  # refused when built, not at forward
    with pytest.raises(ValueError, match=r"MoEMLP: linear_offset: .*got -1e\+40, which f32 rounds to -inf$"):
        mt.MoEMLP(2, 16, 16, activation="swiglu_clamped", linear_offset=-1e40)
    # The largest double that f32 rounds to its largest finite value is taken.
    mt.MoEMLP(2, 16, 16, activation="swiglu_clamped", act_alpha=2.0 ** 128 - 2.0 ** 103 - 2.0 ** 75)
    mt.MoEMLP(2, 16, 16, activation="geglu", act_alpha=float("nan"))  # as are the slope and the offset
    for bad in (torch.int32, torch.float8_e4m3fn, torch.complex64):
        with pytest.raises(ValueError, match=rf"MoEMLP: dtype: expected None, torch\.bfloat16, .*got {bad}$"):
            mt.MoEMLP(2, 16, 16, dtype=bad)
    with pytest.raises(ValueError, match=r"MoEMLP: num_experts: expected at most 1024"):
        mt.MoEMLP(2000, 16, 16, dtype=torch.bfloat16)
    module = mt.MoEMLP(2, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"MoEMLP: x: expected an \(M, H=16\) tensor .*got shape \(16, 24\)"):
        module(randn(16, 24), offsets_of([8, 8]))
    with pytest.raises(ValueError, match=r"MoEMLP: x: expected dtype torch\.bfloat16 \(the module's parameters' "
                                         r"dtype\), got torch\.float32"):
        module(randn(16, 16).float(), offsets_of([8, 8]))
    with pytest.raises(ValueError, match=r"^MoEMLP: x: expected a tensor on meta \(the module's parameters' "
                                         r"device\), got one on cpu$"):
        mt.MoEMLP(2, 16, 16, dtype=torch.bfloat16, device="meta")(randn(16, 16), offsets_of([8, 8]))
    with pytest.raises(ValueError, match=r"^MoEMLP: x: expected a strided \(dense\) tensor, got layout "
                                         r"torch\.sparse_coo$"):
        module(randn(16, 16).to_sparse(), offsets_of([8, 8]))
    for name in ("w_up", "w_down", "prob"):
        operands = dict(x=randn(16, 16), w_up=randn(2, 16, 32), w_down=randn(2, 16, 16), offsets=offsets_of([8, 8]),
                        prob=torch.rand(16))
        operands[name] = operands[name].to_sparse()
        with pytest.raises(ValueError, match=rf"^moe_mlp: {name}: expected a strided \(dense\) tensor"):
            mt.moe_mlp(**operands)
    # A nested tensor of the strided layout has no sizes to read: torch's "Internal error" came out of the
    # checks' own messages.
    with pytest.raises(ValueError, match=r"^MoEMLP: x: expected a strided \(dense\) tensor, got a nested tensor$"):
        module(torch.nested.nested_tensor([randn(8, 16), randn(8, 16)]), offsets_of([8, 8]))
    for name in ("x", "w_up", "offsets"):
        operands = dict(x=randn(16, 16), w_up=randn(2, 16, 32), w_down=randn(2, 16, 16), offsets=offsets_of([8, 8]))
        operands[name] = torch.nested.nested_tensor([operands[name]])
        with pytest.raises(ValueError, match=rf"^moe_mlp: {name}: expected a strided \(dense\) tensor, got a nested "
                                             r"tensor$"):
            mt.moe_mlp(**operands)
    # The forward's checks of the other operands name the module too.
    with pytest.raises(ValueError, match=r"^MoEMLP: offsets: expected an \(E=2,\) torch\.int32 tensor .*torch\.int64$"):
        module(randn(16, 16), torch.tensor([5, 16]))
    with pytest.raises(ValueError, match=r"^MoEMLP: prob: expected shape \(M=16,\)"):
        module(randn(16, 16), offsets_of([8, 8]), randn(8, dtype=torch.float32))
    # So do the weights' stride checks, made inside the autograd Function (rows of 36 elements here, off the
    # 16-byte rule).
    with torch.no_grad():
        module.w_up = torch.nn.Parameter(randn(2, 16, 36)[:, :, :32])
    with pytest.raises(ValueError, match=r"^MoEMLP: w_up: expected a row stride stride\(1\) >= 2I=32 that is a "
                                         r"multiple of 16 bytes"):
        module(randn(16, 16), offsets_of([8, 8]))
    assert mt.MoEMLP(2, torch.tensor(16).item(), 16).w_up.shape == (2, 16, 32)


def test_empty_batch_backward():
    """M = 0: autograd hands the backward an empty gradient with all-zero strides; the gradients come out
    empty (x, a) and exactly zero (weights: no expert has rows)."""
    offs = offsets_of([0, 0, 0, 0])
    a = torch.zeros(0, 16, dtype=torch.bfloat16, requires_grad=True)
    b = randn(4, 16, 8, seed=3).requires_grad_(True)
    mt.grouped_mm(a, b, offs).float().sum().backward()
    assert a.grad.shape == (0, 16) and b.grad.shape == b.shape and (b.grad == 0).all()
    x = torch.zeros(0, 32, dtype=torch.bfloat16, requires_grad=True)
    w_up, w_down = randn(4, 32, 32, seed=1).requires_grad_(True), randn(4, 16, 32, seed=2).requires_grad_(True)
    prob = torch.zeros(0, requires_grad=True)
    mt.moe_mlp(x, w_up, w_down, offs, prob).float().sum().backward()
    assert x.grad.shape == (0, 32) and prob.grad.shape == (0,)
    assert (w_up.grad == 0).all() and (w_down.grad == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_moe_mlp_zeroes_its_tail_by_default(device):
    """As moegemm.jax.moe_mlp does: the rows past offsets[-1] of y and of x's gradient are zero by default,
    written by the ops over a NaN-poisoned allocator, so that nothing unspecified flows into the layers around
    the MLP; MoEMLP has the same default. (On CUDA the caching allocator hands the NaN blocks back; on the CPU
    every allocation starts poisoned, torch_helpers.poisoned_allocations.)"""
    sizes, m, h, i = [5, 0, 12], 24, 16, 16
    offsets = offsets_of(sizes, device)
    x = randn(m, h, seed=11, device=device).requires_grad_(True)
    w_up = randn(3, h, 2 * i, seed=12, scale=0.25, device=device)
    w_down = randn(3, i, h, seed=13, scale=0.25, device=device)
    with poisoned_allocations([m * h * 2, m * 2 * i * 2, m * i * 2], device):
        y = mt.moe_mlp(x, w_up, w_down, offsets)
        y.float().sum().backward()
    assert (y[17:] == 0).all() and (x.grad[17:] == 0).all()
    assert torch.isfinite(x.grad).all() and (x.grad[:17] != 0).any()
    assert mt.MoEMLP(3, h, i).zero_tail


def test_gradcheck_of_a_slice_of_moe_mlp_by_default():
    """With the default zero_tail, gradcheck of y[:offsets[-1]] passes: x's gradient has no unspecified rows
    (rows 17-19 belong to no expert)."""
    offsets = offsets_of([5, 0, 12])
    x = randn(20, 8, dtype=torch.float64, seed=14).requires_grad_(True)
    w_up = randn(3, 8, 16, dtype=torch.float64, seed=15, scale=0.5)
    w_down = randn(3, 8, 8, dtype=torch.float64, seed=16, scale=0.5)
    with poisoned_allocations([20 * 8 * 8, 20 * 16 * 8], "cpu"):  # dx (M, H) and dC (M, 2I) in float64
        assert torch.autograd.gradcheck(lambda x: mt.moe_mlp(x, w_up, w_down, offsets)[:17], (x,), eps=1e-6,
                                        atol=1e-6, rtol=1e-4)


def _small_f64_layer(requires_grad=True):
    """offsets and f64 x (8, 8), w_up (3, 8, 16), w_down (3, 8, 8) of the second-derivative tests."""
    weights = [randn(8, 8, dtype=torch.float64, seed=17), randn(3, 8, 16, dtype=torch.float64, seed=18),
               randn(3, 8, 8, dtype=torch.float64, seed=19)]
    return (offsets_of([3, 0, 5]), *(w.requires_grad_(requires_grad) for w in weights))


def test_double_backward_is_refused_with_a_clear_error():
    """The backward passes run moegemm ops, which have no derivative of their own: differentiating them again
    fails at once with torch's once_differentiable message, for moe_mlp and grouped_mm alike."""
    offsets, x, w_up, w_down = _small_f64_layer()
    for y in (mt.moe_mlp(x, w_up, w_down, offsets), mt.grouped_mm(x, w_down, offsets)):
        (g,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)  # dy depends on x
        with pytest.raises(RuntimeError, match="differentiate twice"):
            g.sum().backward()


@pytest.mark.parametrize("fn", ["moe_mlp", "grouped_mm", "grouped_mm_3d"])
def test_double_backward_of_a_linear_loss_is_refused_too(fn):
    """With a loss linear in y the incoming gradient is a constant, but dx still depends on the weights: a
    gradient penalty through it must fail, not train on a gradient that lacks those terms (torch's
    once_differentiable returns it as a constant there)."""
    offsets, x, w_up, w_down = _small_f64_layer()
    y = {"moe_mlp": lambda: mt.moe_mlp(x, w_up, w_down, offsets),
         "grouped_mm": lambda: mt.grouped_mm(x, w_down, offsets),
         "grouped_mm_3d": lambda: mt.grouped_mm(torch.stack((x, 2 * x, -x)), w_down)}[fn]()
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="differentiate twice"):
        (y.sum() + (g * g).sum()).backward(retain_graph=True)
    # Asked for one input only, autograd still reaches the error (it must not find "no path" and give None or
    # zeros): dx depends on the weights and on x itself.
    for wrt in (w_down, x):
        with pytest.raises(RuntimeError, match="differentiate twice"):
            torch.autograd.grad((g * g).sum(), wrt, retain_graph=True, allow_unused=True)
        with pytest.raises(RuntimeError, match="differentiate twice"):
            (g * g).sum().backward(inputs=[wrt], retain_graph=True)
    # First-order gradients are unchanged by create_graph: the same values as without it.
    (g_plain,) = torch.autograd.grad(y.sum(), x, retain_graph=True)
    assert torch.equal(g.detach(), g_plain)


def test_double_backward_reaches_transposed_weights_and_prob():
    """A weight passed as a transposed view (w.mT) and a prob that is not float32 are turned into the ops'
    operands inside the forward; a second derivative with respect to the caller's tensors must still raise,
    not come back as None."""
    offsets, x, _, _ = _small_f64_layer()
    w_up_nk = randn(3, 16, 8, dtype=torch.float64, seed=20).requires_grad_(True)  # (E, 2I, H): w_up = .mT
    w_down_nk = randn(3, 8, 8, dtype=torch.float64, seed=21).requires_grad_(True)
    prob = randn(8, dtype=torch.float64, seed=22).requires_grad_(True)
    for y, wrts in ((mt.moe_mlp(x, w_up_nk.mT, w_down_nk.mT, offsets, prob), (w_up_nk, w_down_nk, prob)),
                    (mt.grouped_mm(x, w_down_nk.mT, offsets), (w_down_nk,))):
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        for wrt in wrts:
            with pytest.raises(RuntimeError, match="differentiate twice"):
                torch.autograd.grad((g * g).sum(), wrt, retain_graph=True, allow_unused=True)


def test_hessian_through_moe_mlp_raises():
    """torch.autograd.functional.hessian needs a second derivative: it raises instead of returning zeros."""
    offsets, x, w_up, w_down = _small_f64_layer(requires_grad=False)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        torch.autograd.functional.hessian(lambda v: mt.moe_mlp(v, w_up, w_down, offsets).sum(), x)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        torch.autograd.functional.hessian(lambda v: mt.grouped_mm(v, w_down, offsets).square().sum(), x)


def test_checkpointed_moe_mlp_keeps_its_first_order_gradients():
    """Under non-reentrant checkpointing with create_graph (saved tensors unpack once), the gradients are
    those of the plain call."""
    offsets, x, w_up, w_down = _small_f64_layer()
    plain = torch.autograd.grad(mt.moe_mlp(x, w_up, w_down, offsets).sum(), (x, w_up, w_down))
    y = torch.utils.checkpoint.checkpoint(mt.moe_mlp, x, w_up, w_down, offsets, use_reentrant=False)
    checkpointed = torch.autograd.grad(y.sum(), (x, w_up, w_down), create_graph=True)
    for got, want in zip(checkpointed, plain):
        assert torch.equal(got.detach(), want)


def test_prob_grad_is_zero_past_the_last_offset_without_zero_tail():
    """prob feeds the router: its gradient on rows no expert owns is 0 even with zero_tail=False (where the
    tail rows of y and dx are left unspecified), over a poisoned allocator: M_PERTURB makes every CPU
    allocation, dprob's included, start as 0x7F bytes (3.39e38), so a tail row the op does not write fails
    the check whatever the heap held before."""
    sizes, m, h, i = [10, 0, 30, 24], 96, 32, 16
    offsets = offsets_of(sizes)
    x, w_up, w_down = randn(m, h, seed=4), randn(4, h, 2 * i, seed=5), randn(4, i, h, seed=6)
    prob = torch.rand(m, generator=torch.Generator().manual_seed(7)).requires_grad_(True)
    with poisoned_allocations([m * 4, m * 2 * i * 2, m * h * 2], "cpu"):  # dprob, dC, y
        y = mt.moe_mlp(x, w_up, w_down, offsets, prob, zero_tail=False)
        y[:64].float().sum().backward()
    assert torch.isfinite(prob.grad).all() and (prob.grad[64:] == 0).all()
    assert (prob.grad[:64] != 0).any()


def _contiguous_copies():
    """Saved-tensor hooks that pack each saved tensor into a contiguous copy, as an offloading hook may."""
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(memory_format=torch.contiguous_format),
                                                    lambda t: t)


@pytest.mark.parametrize("hooks", [lambda: torch.autograd.graph.save_on_cpu(pin_memory=True), _contiguous_copies],
                         ids=["save_on_cpu", "contiguous_copies"])
@pytest.mark.parametrize("device", DEVICES)
def test_saved_tensor_hooks_that_copy_transposed_weights(device, hooks):
    """torch.autograd.graph.save_on_cpu(pin_memory=True) packs each saved tensor into a contiguous copy, so that
    weights passed as w.mT, and the 2-D x 2-D mode's column-major a, come back to the backward in the other
    layout: moe_mlp and grouped_mm read them as they are then, and give the gradients of the same calls
    without hooks, bitwise and with the same strides."""
    m, h, i = 24, 32, 16
    offsets = offsets_of([5, 0, 11, 8], device)
    x = randn(m, h, seed=80, device=device)
    w_up = randn(4, 2 * i, h, seed=81, scale=0.2, device=device).mT  # (E, H, 2I) views of (E, 2I, H)
    w_down = randn(4, h, i, seed=82, scale=0.2, device=device).mT  # (E, I, H) views of (E, H, I)
    prob = torch.rand(m, generator=torch.Generator().manual_seed(83)).to(device)
    dy = randn(m, h, seed=84, device=device)
    t, offsets_t = 20, offsets_of([5, 0, 7, 8], device)  # 2-D x 2-D: T = 20 rows, 40 bytes a bf16 column
    calls = [(lambda x, up, down, p: mt.moe_mlp(x, up, down, offsets, p), (x, w_up, w_down, prob)),
             (lambda x, down: mt.grouped_mm(x, down.mT, offsets), (x, w_down)),
             (lambda a, b: mt.grouped_mm(a.t(), b, offsets_t).flatten(1), (x[:t], dy[:t, :8]))]
    for fn, args in calls:
        results = []
        for hooked in (False, True):
            leaves = [t.detach().requires_grad_() for t in args]
            if hooked:
                with hooks():
                    y = fn(*leaves)
            else:
                y = fn(*leaves)
            y.backward(randn(*y.shape, seed=85, device=device))
            results.append([t.grad for t in leaves])
        for plain, hooked in zip(*results):
            assert torch.equal(plain, hooked) and hooked.stride() == plain.stride()


def test_a_module_unpickled_in_a_new_process_finds_the_ops(tmp_path):
    """torch.save of a whole MoEMLP pickles its class, moegemm._torch_moe: torch.load in a process that never
    imported moegemm.torch imports only that module, which loads the ops itself."""
    import subprocess
    import sys

    mlp = mt.MoEMLP(4, 32, 16, dtype=torch.float32)
    x, offsets = randn(8, 32, dtype=torch.float32, seed=85), offsets_of([2, 2, 2, 2])
    torch.save((mlp, x, offsets, mlp(x, offsets).detach()), tmp_path / "mlp.pt")
    script = ("import sys, torch\n"
              f"mlp, x, offsets, y = torch.load({str(tmp_path / 'mlp.pt')!r}, weights_only=False)\n"
              "assert 'moegemm.torch' not in sys.modules\n"
              "assert torch.equal(mlp(x, offsets), y)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("kwargs", [dict(), dict(activation="geglu", glu_layout="interleaved32", zero_tail=False),
                                    dict(activation="swiglu_clamped", limit=5.0, act_alpha=1.5, linear_offset=0.5),
                                    dict(activation="swiglu_clamped", limit=float("inf"))])
def test_module_repr_gives_its_constructor_arguments(kwargs):
    """MoEMLP's repr names every argument it was built with (the clamp's with swiglu_clamped): those arguments
    build a module of the same configuration."""
    mlp = mt.MoEMLP(4, 32, 32, **kwargs)
    rebuilt = eval(f"mt.MoEMLP({mlp.extra_repr()})")
    assert (rebuilt.activation, rebuilt.glu_layout, rebuilt.zero_tail, rebuilt.clamp, rebuilt.w_up.shape,
            rebuilt.w_down.shape) == (mlp.activation, mlp.glu_layout, mlp.zero_tail, mlp.clamp, mlp.w_up.shape,
                                      mlp.w_down.shape)
    assert ("limit=" in repr(mlp)) == (kwargs.get("activation") == "swiglu_clamped")
