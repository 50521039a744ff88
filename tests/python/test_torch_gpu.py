"""CUDA-only checks of the torch front end (sm_90): values against the CPU backend, opcheck on CUDA,
CUDA-graph capture and replay equal to eager, torch.compile on CUDA, current-stream use.

gpu_support decides what each test expects: an op with an sm_90a kernel (GPU_KERNEL_OPS) must match the CPU
backend; an op without one must raise NotImplementedError naming the missing kernel (when a kernel lands,
the test fails until the op is added to GPU_KERNEL_OPS). CUDA graphs and torch.compile use forward ops only."""

import pytest
import torch

import moegemm.torch as mt
from gpu_support import ALL_OPS, MOE_MLP_BACKWARD, has_gpu_kernel
from test_torch_compile import SAMPLES, IDS
from torch_helpers import GPU, assert_close, expect_missing_kernel, offsets_of, randn

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="needs an sm_90 GPU")]
ops = torch.ops.moegemm


def to_cuda(x):
    return x.cuda() if isinstance(x, torch.Tensor) else x


def _outputs(result):
    return [t for t in (result if isinstance(result, tuple) else (result,)) if isinstance(t, torch.Tensor)]


def _op_name(overload):
    return overload._schema.name.split("::")[-1]


def test_every_op_is_known_to_gpu_support():
    assert {_op_name(s[0]) for s in SAMPLES} == set(ALL_OPS)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_values_match_the_cpu_backend(sample):
    op, args, kwargs = sample
    name = _op_name(op)
    if op._overloadname == "accumulate":
        w_cpu, w_gpu = args[3].clone(), args[3].cuda()
        op(*args[:3], w_cpu, **kwargs)
        if not has_gpu_kernel(name):
            before = w_gpu.clone()
            with expect_missing_kernel(name):
                op(*[to_cuda(a) for a in args[:3]], w_gpu, **kwargs)
            assert torch.equal(w_gpu, before), "a refused call must not touch the accumulator"
            return
        op(*[to_cuda(a) for a in args[:3]], w_gpu, **kwargs)
        assert_close(w_gpu, w_cpu)
        return
    cuda_args, cuda_kwargs = [to_cuda(a) for a in args], {k: to_cuda(v) for k, v in kwargs.items()}
    if not has_gpu_kernel(name):
        with expect_missing_kernel(name):
            op(*cuda_args, **cuda_kwargs)
        return
    gpu = _outputs(op(*cuda_args, **cuda_kwargs))
    cpu = _outputs(op(*args, **kwargs))
    assert len(gpu) == len(cpu)
    for g, c in zip(gpu, cpu):
        assert g.is_cuda and g.shape == c.shape and g.dtype == c.dtype
        if c.numel():
            assert_close(g, c)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_opcheck_cuda(sample):
    op, args, kwargs = sample
    args = [to_cuda(a) for a in args]
    kwargs = {k: to_cuda(v) for k, v in kwargs.items()}
    if not has_gpu_kernel(_op_name(op)):
        with expect_missing_kernel(_op_name(op)):
            op(*args, **kwargs)
        return
    torch.library.opcheck(op, args, kwargs)


def test_cuda_graph_replay_equals_eager():
    sizes = [100, 0, 300, 57]
    m, h, i = 512, 256, 256
    offsets = offsets_of(sizes, "cuda")
    x = randn(m, h, device="cuda")
    w_up = randn(4, h, 2 * i, device="cuda", seed=1, scale=0.05)
    w_down = randn(4, i, h, device="cuda", seed=2, scale=0.05)

    def layer():  # forward ops only (gpu_support.GPU_KERNEL_OPS)
        hh, c = ops.grouped_gemm_glu(x, w_up, offsets, b_layout="kn", generate_c=True, zero_tail=True)
        y, _ = ops.grouped_gemm(hh, w_down, offsets, b_layout="kn", zero_tail=True)
        z = mt.grouped_mm(y, w_up, offsets, zero_tail=True)  # 2-D x 3-D
        return hh, c, y, z

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
    assert (eager[2][457:] == 0).all()


def test_compile_fullgraph_matches_eager_cuda():
    """Forward ops only: grouped_gemm_glu, grouped_gemm, grouped_mm 2-D x 3-D, and MoEMLP's forward."""
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
        return hh, c, y, z

    torch._dynamo.reset()
    eager = layer(x, w_up, w_down, offsets, prob)
    compiled = torch.compile(layer, fullgraph=True)(x, w_up, w_down, offsets, prob)
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)

    mlp = mt.MoEMLP(4, h, i, device="cuda", dtype=torch.bfloat16, zero_tail=True)
    torch._dynamo.reset()
    with torch.no_grad():
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
    """Forward on CUDA against the CPU backend; backward on CUDA raises until grouped_gemm_dglu and
    grouped_gemm_wgrad have sm_90a kernels (then this test fails: compare the gradients instead)."""
    sizes = [37, 0, 91, 100]  # 228 of 256 rows: the tail is zero (zero_tail)
    m, h, i = 256, 128, 128
    mlp = mt.MoEMLP(4, h, i, zero_tail=True, dtype=torch.bfloat16)
    x = randn(m, h).requires_grad_(True)
    offsets = offsets_of(sizes)
    y = mlp(x, offsets)
    mlp_gpu = mlp.cuda()
    xg = x.detach().cuda().requires_grad_(True)
    yg = mlp_gpu(xg, offsets.cuda())
    assert yg.is_cuda and yg.requires_grad
    assert_close(yg, y.detach())
    assert (yg[228:] == 0).all()
    missing = [op for op in MOE_MLP_BACKWARD if not has_gpu_kernel(op)]
    assert missing, "every backward op has a GPU kernel: compare the CUDA gradients with the CPU backend's"
    with expect_missing_kernel(*missing):
        yg.float().sum().backward()


def test_f32_inputs_on_cuda_raise_not_implemented():
    a, b = randn(16, 32, dtype=torch.float32, device="cuda"), randn(2, 16, 32, dtype=torch.float32, device="cuda")
    with pytest.raises(NotImplementedError, match="grouped_gemm: a"):
        ops.grouped_gemm(a, b, offsets_of([8, 8], "cuda"))
