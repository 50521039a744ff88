"""CUDA-only checks of the torch front end (sm_90): values against the CPU backend, opcheck on CUDA, bitwise
repeats, CUDA-graph capture and replay equal to eager, torch.compile on CUDA, current-stream use, MoEMLP
forward and backward on CUDA against the CPU backend, and the inputs that stay off the GPU.

Every op has an sm_90a kernel for bf16 inputs (gpu_support), forward and backward, so every op (and the
autograd of MoEMLP and grouped_mm) runs on CUDA; f16 inputs are refused on CUDA with NotImplementedError
naming the op and bf16, and run on the CPU backend."""

import copy
import re

import pytest
import torch

import moegemm.torch as mt
from gpu_support import ALL_OPS, GPU_INPUT_DTYPES, has_gpu_kernel
from test_torch_compile import SAMPLES, IDS
from torch_helpers import GPU_MARKS, assert_close, expect_refused_dtype, offsets_of, poison, randn

pytestmark = GPU_MARKS
ops = torch.ops.moegemm
NOT_ACCUMULATE = [s for s in SAMPLES if s[0]._overloadname != "accumulate"]
NOT_ACCUMULATE_IDS = [i for i, s in zip(IDS, SAMPLES) if s[0]._overloadname != "accumulate"]


def to_cuda(x, device="cuda"):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _outputs(result):
    return [t for t in (result if isinstance(result, tuple) else (result,)) if isinstance(t, torch.Tensor)]


def _op_name(overload):
    return overload._schema.name.split("::")[-1]


def test_every_op_is_known_to_gpu_support():
    assert {_op_name(s[0]) for s in SAMPLES} == set(ALL_OPS)
    assert has_gpu_kernel(*ALL_OPS, dtypes=[torch.bfloat16])


def _check_against_the_cpu_backend(sample, device):
    """Runs `sample` on `device` and on the CPU backend: the outputs are on `device` and close to the CPU's."""
    op, args, kwargs = sample
    if op._overloadname == "accumulate":
        w_cpu, w_gpu = args[3].clone(), args[3].to(device)
        op(*args[:3], w_cpu, **kwargs)
        op(*[to_cuda(a, device) for a in args[:3]], w_gpu, **kwargs)
        assert_close(w_gpu, w_cpu)
        return
    cuda_args, cuda_kwargs = [to_cuda(a, device) for a in args], {k: to_cuda(v, device) for k, v in kwargs.items()}
    gpu = _outputs(op(*cuda_args, **cuda_kwargs))
    cpu = _outputs(op(*args, **kwargs))
    assert len(gpu) == len(cpu)
    for g, c in zip(gpu, cpu):
        assert g.device == device and g.shape == c.shape and g.dtype == c.dtype
        if c.numel():
            assert_close(g, c)


def _on_every_device_with_the_first_current(check, what):
    """check(device) on each sm_90 device in turn, the first one current throughout; skips the test (naming
    `what`) with fewer than two such devices."""
    devices = [d for d in range(torch.cuda.device_count()) if torch.cuda.get_device_capability(d) == (9, 0)]
    if len(devices) < 2:
        pytest.skip(f"fewer than two sm_90 GPUs: no {what} on a second device was run")
    with torch.cuda.device(devices[0]):
        for d in devices:
            check(torch.device("cuda", d))
            assert torch.cuda.current_device() == devices[0]


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_values_match_the_cpu_backend(sample):
    _check_against_the_cpu_backend(sample, torch.device("cuda", torch.cuda.current_device()))


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_every_device_in_turn_with_the_first_current(sample):
    """Each op on every sm_90 device in turn, the first device current throughout: the op runs on its tensors'
    device (device guard and that device's current stream), and each device's first launch of a kernel comes
    after the first device's (a kernel's launch set-up is per device). Needs two sm_90 GPUs."""
    _on_every_device_with_the_first_current(lambda device: _check_against_the_cpu_backend(sample, device), "op")


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_opcheck_cuda(sample):
    op, args, kwargs = sample
    args = [to_cuda(a) for a in args]
    kwargs = {k: to_cuda(v) for k, v in kwargs.items()}
    torch.library.opcheck(op, args, kwargs)


@pytest.mark.parametrize("sample", NOT_ACCUMULATE, ids=NOT_ACCUMULATE_IDS)
def test_repeats_are_bitwise_identical_cuda(sample):
    """Five calls of each op on CUDA, the caching allocator poisoned (NaN) before each: bitwise equal."""
    op, args, kwargs = sample
    args, kwargs = [to_cuda(a) for a in args], {k: to_cuda(v) for k, v in kwargs.items()}
    first = [t.clone() for t in _outputs(op(*args, **kwargs))]
    sizes = [t.numel() * t.element_size() for t in first if t.numel()]
    for _ in range(4):
        poison(sizes, "cuda")
        again = _outputs(op(*args, **kwargs))
        for x, y in zip(first, again):
            assert x.is_cuda and torch.equal(x, y)


def test_grouped_mm_gradients_with_a_bias_repeat_bitwise_cuda():
    """grouped_mm (2-D x 3-D) with an f32 bias, forward and backward 20 times on CUDA: every gradient bitwise
    equal, the bias's too (per-expert column sums of 1000-2000 rows each, where float atomics would sum in a
    different order from one call to the next); the same step captured in a CUDA graph replays them."""
    offs = offsets_of([1000, 0, 2000, 1000], "cuda")  # 96 tail rows
    a = randn(4096, 256, device="cuda", seed=1).requires_grad_(True)
    b = randn(4, 256, 512, device="cuda", seed=2).requires_grad_(True)
    bias = randn(4, 512, dtype=torch.float32, device="cuda", seed=3).requires_grad_(True)
    dout = randn(4096, 512, dtype=torch.float32, device="cuda", seed=4)
    first = None
    for _ in range(20):
        a.grad = b.grad = bias.grad = None
        out = mt.grouped_mm(a, b, offs, bias, out_dtype=torch.float32, zero_tail=True)
        out.backward(dout)
        grads = [t.grad.clone() for t in (a, b, bias)]
        if first is None:
            first = grads
            ends = [0, 1000, 1000, 3000, 4000]
            want = torch.stack([dout[lo:hi].double().sum(0) for lo, hi in zip(ends, ends[1:])]).float()
            assert_close(grads[2], want)
            assert (grads[2][1] == 0).all()  # the empty expert's
        for name, x, y in zip(("a", "b", "bias"), first, grads):
            assert torch.equal(x, y), name

    # The captured step takes leaves of its own. The last eager graph (`out`) keeps the leaves above tied to
    # gradient accumulators made on the default stream, and a captured backward into them fails with
    # cudaErrorStreamCaptureImplicit, for torch's own matmul as much as for grouped_mm (torch 2.11).
    leaves = [t.detach().requires_grad_(True) for t in (a, b, bias)]

    def clear():
        for t in leaves:
            t.grad = None

    def step():
        mt.grouped_mm(leaves[0], leaves[1], offs, leaves[2], out_dtype=torch.float32, zero_tail=True).backward(dout)

    graph, _ = _capture(step, before_each=clear)
    graph.replay()
    torch.cuda.synchronize()
    for name, x, t in zip(("a", "b", "bias"), first, leaves):
        assert torch.equal(x, t.grad), f"{name} (graph replay)"


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_f16_inputs_are_refused_on_cuda(sample):
    """The kernels take bf16 inputs (gpu_support.GPU_INPUT_DTYPES): f16 operands run on the CPU backend and
    raise NotImplementedError naming the op and bf16 on CUDA, before touching an accumulator."""
    op, args, kwargs = sample
    name = _op_name(op)
    assert "float16" not in GPU_INPUT_DTYPES and not has_gpu_kernel(name, dtypes=[torch.float16])

    def f16(x):
        return x.half() if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 else x

    args, kwargs = [f16(a) for a in args], {k: f16(v) for k, v in kwargs.items()}
    if op._overloadname == "accumulate":
        op(*args[:3], args[3].clone(), **kwargs)
    else:
        assert all(torch.isfinite(t).all() for t in _outputs(op(*args, **kwargs)))
    cuda_args, cuda_kwargs = [to_cuda(a) for a in args], {k: to_cuda(v) for k, v in kwargs.items()}
    before = [a.clone() for a in cuda_args if isinstance(a, torch.Tensor)]
    # The error names the overload called (grouped_gemm_wgrad.accumulate: ...), as every error of that overload.
    called = name if op._overloadname == "default" else f"{name}.{op._overloadname}"
    with expect_refused_dtype(re.escape(called)):
        op(*cuda_args, **cuda_kwargs)
    torch.cuda.synchronize()
    after = [a for a in cuda_args if isinstance(a, torch.Tensor)]
    assert all(torch.equal(x, y) for x, y in zip(before, after)), "a refused call must not write its operands"


def _capture(fn, warmups=2, before_each=None):
    """fn() captured into a CUDA graph after `warmups` runs on a side stream (as torch.cuda.graph requires);
    returns the graph and what the captured call returned."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            if before_each:
                before_each()
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    if before_each:
        before_each()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn()
    return graph, captured


def test_cuda_graph_replay_equals_eager():
    """Every op in one captured graph, forward and backward (dglu's and dsrelu's workspaces and every output come
    from the graph's pool; wgrad's accumulate overload adds into a tensor from outside, reset by a copy in the
    graph): the captured outputs are poisoned (NaN), then three replays are bitwise equal to the eager calls."""
    sizes = [100, 0, 300, 57]  # 457 of 512 rows
    m, h, i = 512, 256, 256
    offsets = offsets_of(sizes, "cuda")
    x = randn(m, h, device="cuda")
    w_up = randn(4, h, 2 * i, device="cuda", seed=1, scale=0.05)
    w_down = randn(4, i, h, device="cuda", seed=2, scale=0.05)
    dy = randn(m, h, device="cuda", seed=3)
    prob = randn(m, dtype=torch.float32, device="cuda", seed=4).abs()
    w_srelu = randn(4, 128, h, device="cuda", seed=5, scale=0.05)  # (E, N, K)
    bias = randn(4, 128, dtype=torch.float32, device="cuda", seed=6, scale=0.1)
    dense = randn(256, h, device="cuda", seed=7, scale=0.05)  # (N, K)
    dense_bias = randn(256, dtype=torch.float32, device="cuda", seed=9, scale=0.1)
    w_init = randn(4, h, h, dtype=torch.float32, device="cuda", seed=8)
    w_acc = torch.empty_like(w_init)

    def other_ops():
        sd, sc = ops.grouped_gemm_srelu(x, w_srelu, offsets, prob=prob, bias=bias, generate_c=True, zero_tail=True)
        sdc, sdprob, sdbias, samax = ops.grouped_gemm_dsrelu(dy, w_srelu, sc, offsets, prob=prob, compute_dprob=True,
                                                             compute_dbias=True, compute_amax=True, zero_tail=True)
        ab12, swc = ops.gemm_swiglu(x, dense, alpha=0.5)
        ac, amax = ops.gemm_amax(x, dense)
        gd, gc = ops.gemm_srelu(x, dense, alpha=0.75, prob=prob, bias=dense_bias, generate_c=True)
        gdc, gdprob, gdbias, gamax = ops.gemm_dsrelu(dy, dense, gc, alpha=0.75, prob=prob, compute_dprob=True,
                                                     compute_dbias=True, compute_amax=True)
        w_acc.copy_(w_init)
        ops.grouped_gemm_wgrad.accumulate(x, dy, offsets, w_acc)
        return sd, sc, sdc, sdprob, sdbias, samax, ab12, swc, ac, amax, gd, gc, gdc, gdprob, gdbias, gamax, w_acc

    def layer():
        hh, c = ops.grouped_gemm_glu(x, w_up, offsets, b_layout="kn", prob=prob, generate_c=True, zero_tail=True)
        y, _ = ops.grouped_gemm(hh, w_down, offsets, b_layout="kn", zero_tail=True)
        z = mt.grouped_mm(y, w_up, offsets, zero_tail=True)  # 2-D x 3-D
        # w_down (E, I, H) read as "nk" gives dH = dy @ w_down[g]^T
        dc, dprob, dbias, amax = ops.grouped_gemm_dglu(dy, w_down, c, offsets, prob=prob, compute_dprob=True,
                                                       compute_dbias=True, compute_amax=True, zero_tail=True)
        dx, _ = ops.grouped_gemm(dc, w_up, offsets, b_layout="nk", zero_tail=True)
        dw_up = ops.grouped_gemm_wgrad(x, dc, offsets)
        dw_down = ops.grouped_gemm_wgrad(hh, dy, offsets, transpose_output=True, out_dtype=torch.bfloat16)
        ragged_k = mt.grouped_mm(x.t(), dy, offsets)  # 2-D x 2-D: grouped_gemm_wgrad in bf16
        return (hh, c, y, z, dc, dprob, dbias, amax, dx, dw_up, dw_down, ragged_k) + other_ops()

    eager = [t.clone() for t in layer()]
    graph, captured = _capture(layer)
    assert len(eager) == len(captured) == 29
    for t in captured:
        t.fill_(float("nan"))
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    for n, (e, c) in enumerate(zip(eager, captured)):
        assert torch.equal(e, c), f"output {n}"
    assert (eager[2][457:] == 0).all() and (eager[5][457:] == 0).all() and (eager[8][457:] == 0).all()
    assert (eager[9][1] == 0).all() and (eager[10][1] == 0).all() and (eager[11][1] == 0).all()
    # srelu's d and c, dsrelu's dc and dprob: zero tails; dsrelu's dbias: 0 for the empty expert
    assert all((eager[n][457:] == 0).all() for n in (12, 13, 14, 15)) and (eager[16][1] == 0).all()
    assert torch.equal(eager[28][1], w_init[1]) and not torch.equal(eager[28][0], w_init[0])  # accumulate
    assert not torch.equal(eager[28], w_init)


def test_cuda_graph_moe_mlp_forward_and_backward_equals_eager():
    """A whole training step of MoEMLP (forward, autograd backward through grouped_gemm_dglu, grouped_gemm
    and grouped_gemm_wgrad) captured with the gradients set to None: replays reproduce the eager
    gradients bitwise."""
    sizes = [37, 0, 91, 100]  # 228 of 256 rows
    m, h, i = 256, 128, 128
    offsets = offsets_of(sizes, "cuda")
    mlp = mt.MoEMLP(4, h, i, zero_tail=True, device="cuda", dtype=torch.bfloat16)
    x = randn(m, h, device="cuda").requires_grad_(True)
    prob = randn(m, dtype=torch.float32, device="cuda", seed=5).abs().requires_grad_(True)
    dy = randn(m, h, device="cuda", seed=6)
    leaves = (x, prob, mlp.w_up, mlp.w_down)

    def clear():
        for t in leaves:
            t.grad = None

    def step():
        y = mlp(x, offsets, prob)
        y.backward(dy)
        return y

    clear()
    y_eager = step().detach().clone()
    grads_eager = [t.grad.clone() for t in leaves]
    graph, y_static = _capture(step, before_each=clear)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_static, y_eager)
    for name, t, g in zip(("x", "prob", "w_up", "w_down"), leaves, grads_eager):
        assert t.grad is not None and torch.equal(t.grad, g), name
    assert (grads_eager[0][228:] == 0).all() and (grads_eager[1][228:] == 0).all()
    assert (grads_eager[2][1] == 0).all() and (grads_eager[3][1] == 0).all()


def test_compile_fullgraph_matches_eager_cuda():
    """Forward and backward ops (grouped_gemm_glu, grouped_gemm, grouped_gemm_dglu, grouped_gemm_wgrad,
    grouped_mm 2-D x 3-D and 2-D x 2-D) compiled with fullgraph=True equal eager bitwise; so do MoEMLP's
    forward and its AOTAutograd backward."""
    m, h, i = 256, 128, 128
    offsets = offsets_of([50, 0, 150, 56], "cuda")
    x = randn(m, h, device="cuda")
    w_up = randn(4, h, 2 * i, device="cuda", seed=1, scale=0.05)
    w_down = randn(4, i, h, device="cuda", seed=2, scale=0.05)
    prob = randn(m, dtype=torch.float32, device="cuda", seed=3).abs()

    def layer(x, w_up, w_down, offsets, prob):
        hh, c = ops.grouped_gemm_glu(x, w_up, offsets, b_layout="kn", prob=prob, generate_c=True)
        y, _ = ops.grouped_gemm(hh, w_down, offsets, b_layout="kn")
        z = mt.grouped_mm(x, w_up, offsets)
        dc, dprob, dbias, amax = ops.grouped_gemm_dglu(y, w_down, c, offsets, prob=prob, compute_dprob=True,
                                                       compute_dbias=True, compute_amax=True)
        w = ops.grouped_gemm_wgrad(x, dc, offsets)
        wt = ops.grouped_gemm_wgrad(hh, y, offsets, transpose_output=True, out_dtype=torch.bfloat16)
        k = mt.grouped_mm(x.t(), y, offsets)
        return hh, c, y, z, dc, dprob, dbias, amax, w, wt, k

    torch._dynamo.reset()
    eager = layer(x, w_up, w_down, offsets, prob)
    compiled = torch.compile(layer, fullgraph=True)(x, w_up, w_down, offsets, prob)
    assert len(eager) == len(compiled)
    for n, (e, c) in enumerate(zip(eager, compiled)):
        assert torch.equal(e, c), f"output {n}"

    mlp = mt.MoEMLP(4, h, i, device="cuda", dtype=torch.bfloat16, zero_tail=True)
    xg = x.clone().requires_grad_(True)
    params = (xg, mlp.w_up, mlp.w_down)

    def forward(x):
        return mlp(x, offsets, prob)

    torch._dynamo.reset()
    y_eager = forward(xg)
    y_eager.float().square().sum().backward()
    grads_eager = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    y_compiled = torch.compile(forward, fullgraph=True)(xg)  # the backward graph comes from AOTAutograd
    y_compiled.float().square().sum().backward()
    assert torch.equal(y_eager, y_compiled)
    for name, g, p in zip(("x", "w_up", "w_down"), grads_eager, params):
        assert torch.equal(g, p.grad), name


def test_runs_on_the_current_stream():
    """The op runs on the current stream: with the default stream held up by a sleep kernel (~0.5 s), a call
    on a side stream is complete once the side stream is; a launch on the default stream would still be queued
    behind the sleep, and d read on the side stream would not hold the product."""
    a, b = randn(256, 128, device="cuda"), randn(4, 64, 128, device="cuda", seed=1)
    offsets = offsets_of([64] * 4, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda._sleep(1 << 30)  # on the default stream, after the side stream's wait
    with torch.cuda.stream(side):
        d, _ = ops.grouped_gemm(a, b, offsets)
        got = d.cpu()  # synchronises the side stream only
    torch.cuda.synchronize()
    assert_close(got, ops.grouped_gemm(a.cpu(), b.cpu(), offsets.cpu())[0])


def _check_moe_mlp_against_the_cpu_backend(device):
    """MoEMLP forward and backward on `device` against the CPU backend on the same bf16 inputs: y and the
    gradients of x, prob, w_up and w_down, tail rows and empty experts exactly zero."""
    sizes = [37, 0, 91, 100]  # 228 of 256 rows: the tail is zero (zero_tail)
    m, h, i = 256, 128, 128
    mlp = mt.MoEMLP(4, h, i, zero_tail=True, dtype=torch.bfloat16)
    mlp_gpu = copy.deepcopy(mlp).to(device)
    x = randn(m, h).requires_grad_(True)
    prob = randn(m, dtype=torch.float32, seed=7).abs().requires_grad_(True)
    dy = randn(m, h, seed=8)
    offsets = offsets_of(sizes)
    y = mlp(x, offsets, prob)
    y.backward(dy)
    xg, pg = x.detach().to(device).requires_grad_(True), prob.detach().to(device).requires_grad_(True)
    yg = mlp_gpu(xg, offsets.to(device), pg)
    assert yg.device == device and yg.requires_grad
    yg.backward(dy.to(device))
    assert_close(yg, y)
    assert (yg[228:] == 0).all()
    for name, g, c in (("x", xg.grad, x.grad), ("prob", pg.grad, prob.grad), ("w_up", mlp_gpu.w_up.grad,
                       mlp.w_up.grad), ("w_down", mlp_gpu.w_down.grad, mlp.w_down.grad)):
        assert g.device == device and g.dtype == c.dtype and g.shape == c.shape, name
        assert_close(g, c)
    assert (xg.grad[228:] == 0).all() and (pg.grad[228:] == 0).all()
    assert (mlp_gpu.w_up.grad[1] == 0).all() and (mlp_gpu.w_down.grad[1] == 0).all()


def test_moe_mlp_cuda_vs_cpu_backend():
    _check_moe_mlp_against_the_cpu_backend(torch.device("cuda", torch.cuda.current_device()))


def test_moe_mlp_on_every_device_in_turn_with_the_first_current():
    """MoEMLP's forward and backward (the backward on autograd's worker thread of each device) on every sm_90
    device in turn, the first current throughout. Needs two sm_90 GPUs."""
    _on_every_device_with_the_first_current(_check_moe_mlp_against_the_cpu_backend, "MoE MLP step")


def test_f32_inputs_on_cuda_raise_not_implemented():
    a, b = randn(16, 32, dtype=torch.float32, device="cuda"), randn(2, 16, 32, dtype=torch.float32, device="cuda")
    with pytest.raises(NotImplementedError, match="grouped_gemm: a"):
        ops.grouped_gemm(a, b, offsets_of([8, 8], "cuda"))


def test_moe_mlp_step_without_tokens_cuda():
    """A rank that receives no tokens (T = 0; torch's empty CUDA tensors have no storage, a null address):
    MoEMLP forward and backward run, y is (0, H), the weight gradients are exactly zero; the wgrad op with
    accumulate leaves w bitwise unchanged, and grouped_mm's 2-D x 2-D mode gives zeros."""
    h, i, e = 128, 64, 4
    mlp = mt.MoEMLP(e, h, i, dtype=torch.bfloat16).cuda()
    x = torch.empty(0, h, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    prob = torch.empty(0, dtype=torch.float32, device="cuda", requires_grad=True)
    offsets = offsets_of([0] * e, "cuda")
    y = mlp(x, offsets, prob)
    assert y.shape == (0, h)
    y.backward(torch.empty_like(y))
    torch.cuda.synchronize()
    assert x.grad.shape == (0, h) and prob.grad.shape == (0,)
    assert (mlp.w_up.grad == 0).all() and (mlp.w_down.grad == 0).all()
    dy = torch.empty(0, 2 * i, dtype=torch.bfloat16, device="cuda")
    poison([e * h * 2 * i * 4], "cuda")
    assert (ops.grouped_gemm_wgrad(x.detach(), dy, offsets) == 0).all()
    w = randn(e, h, 2 * i, dtype=torch.float32, device="cuda", seed=3)
    before = w.clone()
    ops.grouped_gemm_wgrad.accumulate(x.detach(), dy, offsets, w)
    assert torch.equal(w.view(torch.int32), before.view(torch.int32))
    assert (mt.grouped_mm(x.detach().t(), dy, offsets) == 0).all()


def test_compiled_reduce_overhead_step_with_f32_parameters_under_autocast_equals_eager():
    """torch.compile(mode="reduce-overhead") (CUDA graph trees, forward and AOTAutograd backward) of MoEMLP with
    f32 parameters inside torch.autocast("cuda", dtype=torch.bfloat16): y is bf16, the parameters' gradients
    f32, and three compiled steps give eager's y and gradients bitwise."""
    sizes = [37, 0, 91, 100]  # 228 of 256 rows
    m, h, i = 256, 128, 128
    offsets = offsets_of(sizes, "cuda")
    mlp = mt.MoEMLP(4, h, i, device="cuda")
    x = randn(m, h, dtype=torch.float32, device="cuda", seed=7).requires_grad_(True)
    prob = randn(m, dtype=torch.float32, device="cuda", seed=8).abs().requires_grad_(True)
    leaves = (x, prob, mlp.w_up, mlp.w_down)

    def forward(x, prob):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return mlp(x, offsets, prob)

    torch._dynamo.reset()
    compiled = torch.compile(forward, mode="reduce-overhead")
    results = []
    for fn in (forward, compiled, compiled, compiled):
        torch.compiler.cudagraph_mark_step_begin()
        y = fn(x, prob)
        y.float().square().sum().backward()
        results.append([y.detach().clone()] + [t.grad.clone() for t in leaves])
        for t in leaves:
            t.grad = None
    eager = results[0]
    assert eager[0].dtype == torch.bfloat16 and all(g.dtype == torch.float32 for g in eager[1:])
    assert (eager[0][228:] == 0).all() and (eager[3][1] == 0).all()
    for step in results[1:]:
        for name, e, c in zip(("y", "x", "prob", "w_up", "w_down"), eager, step):
            assert torch.equal(e, c), name


def test_grouped_mm_on_dtensors_of_a_one_rank_cuda_mesh(tmp_path):
    """grouped_mm on CUDA DTensors (NCCL, one rank: the mesh's shards are whole tensors), N split and a bias,
    forward and backward: a DTensor result with the strategy's placements, bitwise equal to the local call,
    gradients too. Two-rank values are tested on CPU (test_torch_dtensor.py)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("torch.distributed with NCCL is not available: grouped_mm on CUDA DTensors was not run")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            device_id=torch.device("cuda", torch.cuda.current_device()))
    try:
        mesh = init_device_mesh("cuda", (1,))
        a, b = randn(200, 64, device="cuda", seed=1), randn(4, 64, 96, device="cuda", seed=2)
        bias = randn(4, 96, dtype=torch.float32, device="cuda", seed=3)
        offs = offsets_of([50, 0, 90, 40], device="cuda")  # 20 tail rows
        da, db, dbias = (distribute_tensor(x, mesh, [p]).requires_grad_()
                         for x, p in ((a, Replicate()), (b, Shard(2)), (bias, Shard(1))))
        out = mt.grouped_mm(da, db, distribute_tensor(offs, mesh, [Replicate()]), dbias, zero_tail=True)
        assert isinstance(out, DTensor) and tuple(out.placements) == (Shard(1),) and out.device.type == "cuda"
        ra, rb, rbias = (x.clone().requires_grad_() for x in (a, b, bias))
        want = mt.grouped_mm(ra, rb, offs, rbias, zero_tail=True)
        assert torch.equal(out.to_local(), want)
        t = randn(200, 96, dtype=torch.float32, device="cuda", seed=4)
        (out.to_local().float() * t).sum().backward()
        (want.float() * t).sum().backward()
        for d, r in ((da, ra), (db, rb), (dbias, rbias)):
            assert torch.equal(d.grad.to_local(), r.grad)
    finally:
        dist.destroy_process_group()
