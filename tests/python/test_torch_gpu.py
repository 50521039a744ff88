"""CUDA-only checks of the torch front end (sm_90): values against the CPU backend, opcheck on CUDA,
CUDA-graph capture and replay equal to eager, torch.compile on CUDA, current-stream use."""

import pytest
import torch

import moegemm.torch as mt
from test_torch_compile import SAMPLES, IDS
from torch_helpers import GPU, assert_close, offsets_of, randn

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="needs an sm_90 GPU")]
ops = torch.ops.moegemm


def to_cuda(x):
    return x.cuda() if isinstance(x, torch.Tensor) else x


def _outputs(result):
    return [t for t in (result if isinstance(result, tuple) else (result,)) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_values_match_the_cpu_backend(sample):
    op, args, kwargs = sample
    if op._overloadname == "accumulate":
        w_cpu, w_gpu = args[3].clone(), args[3].cuda()
        op(*args[:3], w_cpu, **kwargs)
        op(*[to_cuda(a) for a in args[:3]], w_gpu, **kwargs)
        assert_close(w_gpu, w_cpu)
        return
    try:
        gpu = _outputs(op(*[to_cuda(a) for a in args], **{k: to_cuda(v) for k, v in kwargs.items()}))
    except NotImplementedError as e:
        pytest.skip(f"no sm_90a kernel for this op yet: {e}")
    for g, c in zip(gpu, _outputs(op(*args, **kwargs))):
        assert g.is_cuda and g.shape == c.shape and g.dtype == c.dtype
        if c.numel():
            assert_close(g, c)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_opcheck_cuda(sample):
    op, args, kwargs = sample
    args = [to_cuda(a) for a in args]
    kwargs = {k: to_cuda(v) for k, v in kwargs.items()}
    try:
        op(*args, **kwargs)
    except NotImplementedError as e:
        pytest.skip(f"no sm_90a kernel for this op yet: {e}")
    torch.library.opcheck(op, args, kwargs)


def test_cuda_graph_replay_equals_eager():
    sizes = [100, 0, 300, 57]
    m, h, i = 512, 256, 256
    offsets = offsets_of(sizes, "cuda")
    x = randn(m, h, device="cuda")
    w_up = randn(4, h, 2 * i, device="cuda", seed=1, scale=0.05)
    w_down = randn(4, i, h, device="cuda", seed=2, scale=0.05)

    def layer():
        hh, c = ops.grouped_gemm_glu(x, w_up, offsets, b_layout="kn", generate_c=True, zero_tail=True)
        y, _ = ops.grouped_gemm(hh, w_down, offsets, b_layout="kn", zero_tail=True)
        w = ops.grouped_gemm_wgrad(x, c, offsets)
        return y, w

    eager = layer()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer()  # warm-up on the side stream, as torch.cuda.graph requires
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = layer()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    for e, c in zip(eager, captured):
        assert torch.equal(e, c)


def test_compile_fullgraph_matches_eager_cuda():
    m, h, i = 256, 128, 128
    offsets = offsets_of([50, 0, 150, 56], "cuda")
    mlp = mt.MoEMLP(4, h, i, device="cuda", dtype=torch.bfloat16)
    x = randn(m, h, device="cuda")
    torch._dynamo.reset()
    assert torch.equal(mlp(x, offsets), torch.compile(mlp, fullgraph=True)(x, offsets))


def test_runs_on_the_current_stream():
    a, b = randn(256, 128, device="cuda"), randn(4, 64, 128, device="cuda", seed=1)
    offsets = offsets_of([64] * 4, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        d, _ = ops.grouped_gemm(a, b, offsets)
    side.synchronize()
    assert_close(d, ops.grouped_gemm(a.cpu(), b.cpu(), offsets.cpu())[0])


def test_moe_mlp_cuda_vs_cpu_backend():
    sizes = [37, 0, 91, 128]
    m, h, i = 256, 128, 128
    mlp = mt.MoEMLP(4, h, i, zero_tail=True, dtype=torch.bfloat16)
    x = randn(m, h).requires_grad_(True)
    offsets = offsets_of(sizes)
    y = mlp(x, offsets)
    y.float().sum().backward()
    ref = [y.detach(), x.grad, mlp.w_up.grad, mlp.w_down.grad]
    mlp_gpu = mlp.cuda()
    mlp_gpu.zero_grad()
    xg = x.detach().cuda().requires_grad_(True)
    yg = mlp_gpu(xg, offsets.cuda())
    yg.float().sum().backward()
    for g, c in zip([yg, xg.grad, mlp_gpu.w_up.grad, mlp_gpu.w_down.grad], ref):
        assert_close(g, c)


def test_f32_inputs_on_cuda_raise_not_implemented():
    a, b = randn(16, 32, dtype=torch.float32, device="cuda"), randn(2, 16, 32, dtype=torch.float32, device="cuda")
    with pytest.raises(NotImplementedError, match="grouped_gemm: a"):
        ops.grouped_gemm(a, b, offsets_of([8, 8], "cuda"))
