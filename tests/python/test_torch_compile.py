"""opcheck of every op (CPU), torch.compile(fullgraph=True) equals eager, bitwise-identical repeats."""

import re

import pytest
import torch

import moegemm.torch as mt
from torch_helpers import offsets_of, randn

ops = torch.ops.moegemm


def op_samples():
    """(op overload, args, kwargs) covering every op and its optional outputs, small random inputs.
    opcheck compares outputs of repeated calls, so every row is addressed (offsets[-1] == M) except in
    the zero_tail sample: unaddressed rows are unspecified by contract."""
    sizes = [5, 0, 9, 5]
    m, k, i = 19, 32, 64
    a = randn(m, k)
    offsets = offsets_of(sizes)
    prob = randn(m, dtype=torch.float32, seed=1).abs()
    alpha = randn(4, dtype=torch.float32, seed=2)
    w_up = randn(4, 2 * i, k, seed=3, scale=0.2)
    w_kn = randn(4, k, i, seed=4, scale=0.2)
    c = randn(m, 2 * i, seed=5)
    dy = randn(m, k, seed=6)
    w_down_nk = randn(4, i, k, seed=7, scale=0.2)
    dense_b = randn(128, k, seed=8, scale=0.2)
    yield ops.grouped_gemm.default, (a, w_kn, offsets), dict(b_layout="kn", alpha=alpha, prob=prob, generate_c=True)
    yield ops.grouped_gemm.default, (a, w_up, offsets_of([5, 0, 9, 2])), dict(out_dtype=torch.float32,
                                                                              zero_tail=True)
    yield ops.grouped_gemm_glu.default, (a, w_up, offsets), dict(prob=prob, generate_c=True)
    yield ops.grouped_gemm_glu.default, (a, w_up, offsets), dict(activation="swiglu_clamped",
                                                                 glu_layout="interleaved32")
    yield ops.grouped_gemm_dglu.default, (dy, w_down_nk, c, offsets), dict(
        prob=prob, compute_dprob=True, compute_dbias=True, compute_amax=True)
    yield ops.grouped_gemm_dglu.default, (dy, w_down_nk, c, offsets), dict(activation="geglu", dc_dtype=torch.float32)
    yield ops.grouped_gemm_srelu.default, (a, w_kn, offsets), dict(b_layout="kn", prob=prob, generate_c=True)
    yield ops.grouped_gemm_dsrelu.default, (dy, w_down_nk, randn(m, i, seed=9), offsets), dict(
        prob=prob, compute_dprob=True, compute_dbias=True, compute_amax=True)
    yield ops.grouped_gemm_wgrad.default, (a, randn(m, i, seed=10), offsets), dict()
    yield ops.grouped_gemm_wgrad.default, (a, randn(m, i, seed=10), offsets), dict(transpose_output=True,
                                                                                   out_dtype=torch.bfloat16)
    yield ops.grouped_gemm_wgrad.accumulate, (a, randn(m, i, seed=11), offsets,
                                              randn(4, k, i, dtype=torch.float32, seed=12)), dict()
    yield ops.gemm_swiglu.default, (a, dense_b), dict(alpha=0.5)
    yield ops.gemm_amax.default, (a, dense_b), dict()
    yield ops.gemm_srelu.default, (a, dense_b), dict(prob=prob, generate_c=True)
    yield ops.gemm_srelu.default, (a, dense_b), dict(bias=randn(128, dtype=torch.float32, seed=14))
    yield ops.gemm_dsrelu.default, (a, dense_b, randn(m, 128, seed=13)), dict(prob=prob, compute_dprob=True)
    yield ops.gemm_dsrelu.default, (a, dense_b, randn(m, 128, seed=13)), dict(
        compute_dbias=True, compute_amax=True, dbias_dtype=torch.bfloat16)
    yield ops.gemm_dsrelu.default, (a, dense_b, randn(m, 128, seed=13)), dict(dc_dtype=torch.float32)


SAMPLES = list(op_samples())
IDS = [f"{s[0]._name}.{s[0]._overloadname}-{n}" for n, s in enumerate(SAMPLES)]


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_opcheck(sample):
    op, args, kwargs = sample
    torch.library.opcheck(op, args, kwargs)


def test_every_op_has_a_sample():
    covered = {s[0]._schema.name for s in SAMPLES}
    expected = {f"moegemm::{n}" for n in ("grouped_gemm", "grouped_gemm_glu", "grouped_gemm_dglu",
                                          "grouped_gemm_srelu", "grouped_gemm_dsrelu", "grouped_gemm_wgrad",
                                          "gemm_swiglu", "gemm_amax", "gemm_srelu", "gemm_dsrelu")}
    assert covered == expected


def _outputs(result):
    return [t for t in (result if isinstance(result, tuple) else (result,)) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s[0]._overloadname != "accumulate"],
                         ids=[i for i, s in zip(IDS, SAMPLES) if s[0]._overloadname != "accumulate"])
def test_repeats_are_bitwise_identical(sample):
    op, args, kwargs = sample
    first = _outputs(op(*args, **kwargs))
    second = _outputs(op(*args, **kwargs))
    for x, y in zip(first, second):
        if x.numel():
            assert torch.equal(x, y)


def test_compile_fullgraph_matches_eager():
    sizes = [5, 0, 9, 2]
    m, k, i = 16, 32, 64
    x = randn(m, k)
    offsets = offsets_of(sizes)
    w_up = randn(4, k, 2 * i, seed=3, scale=0.2)
    w_down = randn(4, i, k, seed=4, scale=0.2)
    prob = randn(m, dtype=torch.float32, seed=5).abs()

    def layer(x, w_up, w_down, offsets, prob):
        h, c = ops.grouped_gemm_glu(x, w_up, offsets, b_layout="kn", prob=prob, generate_c=True)
        y, _ = ops.grouped_gemm(h, w_down, offsets, b_layout="kn")
        dc, dprob, _, _ = ops.grouped_gemm_dglu(y, w_down, c, offsets, prob=prob, compute_dprob=True)
        w = ops.grouped_gemm_wgrad(x, dc, offsets)
        z = mt.grouped_mm(x, w_up, offsets)
        return y, dc, dprob, w, z

    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True)
    for e, c in zip(layer(x, w_up, w_down, offsets, prob), compiled(x, w_up, w_down, offsets, prob)):
        assert torch.equal(e, c)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_compile_fullgraph_of_every_op_matches_eager(sample):
    """Each op on its own (every sample above: every op, forward and backward, and wgrad's accumulate overload)
    compiled with fullgraph=True gives eager's outputs bitwise, with eager's dtypes, shapes and strides; the
    accumulate overload adds into its w as eagerly."""
    op, args, kwargs = sample
    torch._dynamo.reset()
    if op._overloadname == "accumulate":
        def accumulate(x, dy, offsets, w):
            op(x, dy, offsets, w, **kwargs)
            return w

        w_eager, w_compiled = args[3].clone(), args[3].clone()
        accumulate(*args[:3], w_eager)
        torch.compile(accumulate, fullgraph=True)(*args[:3], w_compiled)
        assert not torch.equal(w_eager, args[3]) and torch.equal(w_eager, w_compiled)
        return

    def call(*tensors):
        return op(*tensors, **kwargs)

    eager = _outputs(call(*args))
    compiled = _outputs(torch.compile(call, fullgraph=True)(*args))
    assert len(eager) == len(compiled)
    for n, (e, c) in enumerate(zip(eager, compiled)):
        assert e.dtype == c.dtype and e.shape == c.shape, n
        assert torch.equal(e, c), f"output {n}"
        if e.numel():
            assert e.stride() == c.stride(), n


def test_compile_fullgraph_moe_mlp_forward_and_backward():
    m, k, i = 16, 32, 64
    offsets = offsets_of([5, 0, 9, 2])
    mlp = mt.MoEMLP(4, k, i, dtype=torch.bfloat16)
    x = randn(m, k).requires_grad_(True)

    def forward(x):
        return mlp(x, offsets)

    torch._dynamo.reset()
    y_eager = forward(x)
    y_eager.float().square().sum().backward()
    grads_eager = [p.grad.clone() for p in (x, mlp.w_up, mlp.w_down)]
    for p in (x, mlp.w_up, mlp.w_down):
        p.grad = None
    y_compiled = torch.compile(forward, fullgraph=True)(x)  # the backward graph comes from AOTAutograd
    y_compiled.float().square().sum().backward()
    assert torch.equal(y_eager, y_compiled)
    for g, p in zip(grads_eager, (x, mlp.w_up, mlp.w_down)):
        assert torch.equal(g, p.grad)


def test_compile_fullgraph_of_the_module_under_autocast():
    # f32 parameters and x inside torch.autocast(bf16): the compiled graph casts as eager does (bf16 y, f32 grads)
    offsets = offsets_of([20, 0, 28])
    mlp = mt.MoEMLP(3, 32, 32)
    x = randn(48, 32, dtype=torch.float32).requires_grad_(True)

    def forward(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return mlp(x, offsets)

    torch._dynamo.reset()
    results = []
    for fn in (forward, torch.compile(forward, fullgraph=True)):
        y = fn(x)
        y.float().square().sum().backward()
        results.append([y] + [p.grad for p in (x, mlp.w_up, mlp.w_down)])
        for p in (x, mlp.w_up, mlp.w_down):
            p.grad = None
    assert results[0][0].dtype == torch.bfloat16 and results[0][2].dtype == torch.float32
    for eager, compiled in zip(*results):
        assert torch.equal(eager, compiled)


@pytest.mark.parametrize("zero_tail", [False, True])
def test_compile_fullgraph_grouped_mm_without_groups(zero_tail):
    """2-D x 3-D with no groups (E = 0) traces with fullgraph=True: the base-address check, which a traced
    tensor cannot answer, is left to eager calls. Every row is past the last offset: zeros with zero_tail,
    else uninitialised (only the shape and dtype are defined)."""
    a, w, offs = randn(16, 16), randn(0, 16, 8, seed=1), torch.zeros(0, dtype=torch.int32)
    torch._dynamo.reset()
    out = torch.compile(lambda a, w, o: mt.grouped_mm(a, w, o, zero_tail=zero_tail), fullgraph=True)(a, w, offs)
    assert out.shape == (16, 8) and out.dtype == a.dtype
    if zero_tail:
        assert torch.equal(out, torch.zeros(16, 8, dtype=a.dtype))


def test_compile_fullgraph_grouped_mm_every_mode_and_copied_layout():
    """Each mode of grouped_mm with a layout the kernels read in place and one it copies (a column-major a
    in 2-D x 3-D, a row-major a and column-major b in 2-D x 2-D, a transposed per-group a in 3-D x 3-D, a
    row-major b in 3-D x 2-D) traces with fullgraph=True and gives the eager values and strides."""
    g, m, k, n = 4, 16, 32, 24
    offs_m, offs_k, offs_n = offsets_of([5, 0, 9, 2]), offsets_of([8, 16, 0, 8]), offsets_of([8, 0, 8, 8])
    w = randn(g, k, n, seed=1)
    calls = [  # (a, b, offs): each mode's native layout, then the one it copies
        (randn(g * m, k, seed=2), w, offs_m),
        (randn(k, g * m, seed=3).t(), w, offs_m),
        (randn(32, k, seed=4).t(), randn(32, n, seed=5), offs_k),
        (randn(k, 32, seed=6), randn(n, 32, seed=7).t(), offs_k),
        (randn(g, m, k, seed=8), w, None),
        (randn(g, k, m, seed=9).mT, w, None),
        (randn(g, m, k, seed=10), randn(24, k, seed=11).t(), offs_n),
        (randn(g, m, k, seed=12), randn(k, 24, seed=13), offs_n),
    ]
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b, o: mt.grouped_mm(a, b, o, zero_tail=True), fullgraph=True)
    for a, b, offs in calls:
        eager = mt.grouped_mm(a, b, offs, zero_tail=True)
        traced = compiled(a, b, offs)
        assert torch.equal(eager, traced) and eager.stride() == traced.stride()


def test_compile_reports_a_fake_kernels_error_with_its_message():
    """Under torch.compile the fake kernel meets a bad shape first; Dynamo wraps its ValueError (docs/torch.md)."""
    x, dy, offsets = randn(64), randn(32, 48, seed=1), offsets_of([8, 8, 8, 8])
    compiled = torch.compile(lambda x, dy, o: ops.grouped_gemm_wgrad(x, dy, o), fullgraph=True)
    message = r"grouped_gemm_wgrad: x: expected a 2-D \(M, H\) tensor, got shape \(64,\)"
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match=r"ValueError\('" + message + r"'\)"):
        compiled(x, dy, offsets)
    with pytest.raises(ValueError, match=message):
        ops.grouped_gemm_wgrad(x, dy, offsets)  # the same call, eagerly


@pytest.mark.parametrize("call", ["grouped_mm", "moe_mlp", "moe_mlp_activation", "MoEMLP"])
def test_compile_reports_a_failed_python_check_with_its_message(call):
    """The checks grouped_mm, moe_mlp and MoEMLP make in Python before any op runs: under torch.compile Dynamo
    reports a failed one with its ValueError and message (docs/torch.md), not a graph break in the code that
    looks for the operand to name."""
    x, offsets = randn(32, 16), offsets_of([1, 2, 29])
    fn, args, message = {
        "grouped_mm": (lambda a, b, o: mt.grouped_mm(a, b, o), (x, randn(3, 8, 24, seed=1), offsets),
                       r"grouped_mm: b: expected shape \(E, K=16, N\)"),
        "moe_mlp": (lambda a, u, d, o: mt.moe_mlp(a, u, d, o),
                    (x, randn(3, 8, 32, seed=1), randn(3, 16, 16, seed=2), offsets), r"moe_mlp: w_up: "),
        "moe_mlp_activation": (lambda a, u, d, o: mt.moe_mlp(a, u, d, o, activation="relu"),
                               (x, randn(3, 16, 32, seed=1), randn(3, 16, 16, seed=2), offsets),
                               r"moe_mlp: activation: expected "),
        "MoEMLP": (mt.MoEMLP(3, 8, 16, dtype=torch.bfloat16), (x, offsets), r"MoEMLP: x: "),
    }[call]
    with pytest.raises(ValueError, match=message):
        fn(*args)  # eagerly
    with pytest.raises(Exception) as caught:
        torch.compile(fn, fullgraph=True)(*args)
    assert "ValueError" in str(caught.value) and re.search(message, str(caught.value)), str(caught.value)[:2000]


def test_fake_tensor_mode_propagates_shapes_without_reading_addresses():
    """Shape propagation under FakeTensorMode (outside torch.compile) runs moe_mlp and every mode of
    grouped_mm without reading a fake tensor's data_ptr(), which torch deprecates (a warning now, an error
    later), and gives eager's shapes, dtypes and strides."""
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    g, m, k, n = 4, 16, 32, 64
    offs_m, offs_k = offsets_of([5, 0, 9, 2]), offsets_of([8, 16, 0, 8])
    calls = [
        (mt.moe_mlp, (randn(m, k), randn(g, k, 2 * n, seed=1), randn(g, n, k, seed=2), offs_m)),
        (mt.grouped_mm, (randn(m, k, seed=3), randn(g, k, n, seed=4), offs_m)),
        (mt.grouped_mm, (randn(k, 32, seed=5).t(), randn(32, n, seed=6), offs_k)),
        (mt.grouped_mm, (randn(g, m, k, seed=7), randn(g, k, n, seed=8), None)),
    ]
    for fn, args in calls:
        eager = fn(*args)
        with FakeTensorMode() as mode, warnings.catch_warnings():
            warnings.simplefilter("error")  # a data_ptr() deprecation warning fails the test
            fake = fn(*(None if t is None else mode.from_tensor(t) for t in args))
        assert (fake.shape, fake.dtype, fake.stride()) == (eager.shape, eager.dtype, eager.stride())


def test_compile_fullgraph_with_a_token_count_known_only_at_run_time():
    """Tokens chosen by a mask (unbacked sizes under torch.compile: only the run knows them) trace with
    fullgraph=True through moe_mlp forward and backward, and through grouped_mm's 2-D x 3-D and 2-D x 2-D
    modes, with eager's values: the Python checks that would guard on the count leave it to the ops."""
    k, i = 32, 16
    w_up, w_down, w = randn(4, k, 2 * i, seed=1, scale=0.2), randn(4, i, k, seed=2, scale=0.2), randn(4, k, i, seed=3)
    x, score = randn(40, k, seed=4), torch.rand(40, generator=torch.Generator().manual_seed(5))

    def layer(x, score, w_up, w_down, w):
        keep = score > 0.3
        xs, prob = x[keep], torch.masked_select(score, keep)  # two counts, equal only when the graph runs
        offsets = (torch.arange(1, 5) * xs.shape[0] // 4).to(torch.int32)
        y = mt.moe_mlp(xs, w_up, w_down, offsets, prob)
        return y, mt.grouped_mm(xs, w, offsets), mt.grouped_mm(xs.t(), y, offsets)

    results = []
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):  # nonzero inside the graph
        for run in (layer, torch.compile(layer, fullgraph=True, backend="aot_eager")):
            leaves = [t.detach().requires_grad_() for t in (x, score, w_up, w_down, w)]
            outs = run(*leaves)
            sum(o.float().square().sum() for o in outs).backward()
            results.append([o.detach() for o in outs] + [t.grad for t in leaves])
    for eager, compiled in zip(*results):
        assert torch.equal(eager, compiled)


def test_compile_dynamic_moe_mlp_and_module_match_eager():
    """torch.compile(dynamic=True, fullgraph=True) traces moe_mlp and MoEMLP (the clamp parameters' checks
    included, which Dynamo then hands symbolic numbers), forward and backward, with eager's values."""
    k, i = 32, 16
    w_up, w_down = randn(4, k, 2 * i, seed=1, scale=0.2), randn(4, i, k, seed=2, scale=0.2)
    module = mt.MoEMLP(4, k, i, activation="swiglu_clamped", limit=3.0, dtype=torch.bfloat16)

    def layer(x, w_up, w_down, offsets, limit):
        return (mt.moe_mlp(x, w_up, w_down, offsets, activation="swiglu_clamped", limit=limit)
                + module(x, offsets))

    compiled = torch.compile(layer, dynamic=True, fullgraph=True, backend="aot_eager")
    for m, limit in ((40, 2.5), (24, 4.0)):
        x, offsets = randn(m, k, seed=m), offsets_of([m // 4, m // 2, 0, m - 3 * (m // 4)])
        results = []
        for run in (layer, compiled):
            module.zero_grad()
            leaves = [t.detach().requires_grad_() for t in (x, w_up, w_down)]
            out = run(*leaves[:3], offsets, limit)
            out.float().square().sum().backward()
            results.append([out.detach(), *(t.grad for t in leaves), module.w_up.grad, module.w_down.grad])
        for eager, traced in zip(*results):
            assert torch.equal(eager, traced)


def test_compile_dynamic_keeps_the_weights_sizes_symbolic():
    """Under torch.compile(dynamic=True), grouped_mm and moe_mlp keep the weights' sizes symbolic, as
    torch._grouped_mm does: four (E, K, N) sizes take at most two graphs (the first call's, then the dynamic
    one), and a weight dim marked dynamic is not specialised (formatting a symbolic size into an error
    message that is never raised used to pin it: one graph per size)."""
    import torch._dynamo.testing

    def frames(fn, weights):
        counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(fn, backend=counter, fullgraph=True, dynamic=True)
        for sizes, *shapes in weights:
            offsets = offsets_of(sizes)
            args = [randn(*shape, seed=len(shape) + n) for n, shape in enumerate(shapes)]
            eager = fn(args[0], *args[1:], offsets)
            assert torch.equal(compiled(args[0], *args[1:], offsets), eager)
        return counter.frame_count

    # No two sizes of a call are equal, so that torch's duck sizing ties none of them together.
    grouped = [([9] * 4, (36, 32), (4, 32, 16)), ([9] * 3, (27, 48), (3, 48, 24)),
               ([9] * 5, (45, 64), (5, 64, 8)), ([9] * 2, (18, 16), (2, 16, 40))]
    assert frames(lambda a, b, offsets: mt.grouped_mm(a, b, offsets), grouped) <= 2
    mlp = [([24, 32], (56, h), (2, h, 2 * i), (2, i, h)) for h, i in ((32, 8), (48, 16), (64, 40), (16, 24))]
    assert frames(lambda x, w_up, w_down, offsets: mt.moe_mlp(x, w_up, w_down, offsets), mlp) <= 2

    a, b, offsets = randn(32, 32), randn(4, 32, 16, seed=1), offsets_of([8, 8, 8, 8])
    torch._dynamo.mark_dynamic(b, 2)
    compiled = torch.compile(lambda a, b, offsets: mt.grouped_mm(a, b, offsets), backend="aot_eager",
                             fullgraph=True)
    assert torch.equal(compiled(a, b, offsets), mt.grouped_mm(a, b, offsets))


def test_jit_trace_of_grouped_mm_and_moe_mlp_matches_eager(tmp_path):
    """torch.jit.trace (sizes are 0-d tensors while it traces) records the ops grouped_mm and MoEMLP call, with
    its default check run (under no_grad) and parameters that require grad: the traced calls, also after
    torch.jit.save and load, give eager's values for other offsets; a backward through them raises."""
    import warnings
    module = mt.MoEMLP(4, 32, 16, dtype=torch.bfloat16)
    w = randn(4, 32, 24, seed=1).requires_grad_()
    x = randn(20, 32, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit's deprecation and tracer warnings
        traced_mm = torch.jit.trace(lambda x, w, offs: mt.grouped_mm(x, w, offs), (x, w, offsets_of([5, 5, 5, 5])))
        traced_mlp = torch.jit.trace(module, (x, offsets_of([5, 5, 5, 5])))
        torch.jit.save(traced_mlp, tmp_path / "mlp.pt")
        loaded = torch.jit.load(tmp_path / "mlp.pt")
    for sizes in ([5, 5, 5, 5], [0, 12, 1, 7]):
        offs = offsets_of(sizes)
        assert torch.equal(traced_mm(x, w, offs), mt.grouped_mm(x, w, offs).detach())
        assert torch.equal(traced_mlp(x, offs), module(x, offs).detach())
        assert torch.equal(loaded(x, offs), module(x, offs).detach())
    with pytest.raises(RuntimeError, match="derivative for moegemm::"):
        traced_mlp(x, offs).float().sum().backward()


def test_compile_fullgraph_with_offsets_from_bincount():
    """Offsets made with torch.bincount(minlength=E), whose length only the run knows under torch.compile,
    trace with fullgraph=True through moe_mlp forward and backward and grouped_mm's 2-D x 3-D and 3-D x 2-D
    modes, as torch._grouped_mm's do, with eager's values: the Python checks of offsets' length leave it to
    the ops, whose fake kernels assert it when the graph runs."""
    k, i, e = 32, 16, 4
    w_up, w_down, w = randn(e, k, 2 * i, seed=1, scale=0.2), randn(e, i, k, seed=2, scale=0.2), randn(e, k, i, seed=3)
    x, a3 = randn(40, k, seed=4), randn(e, 24, k, seed=5)
    expert = torch.randint(0, e, (40,), generator=torch.Generator().manual_seed(6))

    def layer(x, a3, w_up, w_down, w, expert):
        offsets = torch.bincount(expert, minlength=e).cumsum(0).to(torch.int32)
        xs = x[expert.argsort(stable=True)]
        columns = (torch.bincount(expert[:e * 2], minlength=e) * 2).cumsum(0).to(torch.int32)
        return mt.moe_mlp(xs, w_up, w_down, offsets), mt.grouped_mm(xs, w, offsets), mt.grouped_mm(a3, w[0], columns)

    results = []
    torch._dynamo.reset()
    for run in (layer, torch.compile(layer, fullgraph=True, backend="aot_eager")):
        leaves = [t.detach().requires_grad_() for t in (x, a3, w_up, w_down, w)]
        outs = run(*leaves, expert)
        sum(o.float().square().sum() for o in outs).backward()
        results.append([o.detach() for o in outs] + [t.grad for t in leaves])
    for eager, compiled in zip(*results):
        assert torch.equal(eager, compiled)


def test_export_of_moe_mlp_and_grouped_mm_gives_eager_outputs(tmp_path):
    """torch.export of a module that calls MoEMLP and grouped_mm, with a dynamic token count, gives eager's
    outputs at other token counts, also after torch.export.save and load (docs/torch.md: a forward program)."""

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = mt.MoEMLP(4, 32, 16, dtype=torch.bfloat16)
            self.w = torch.nn.Parameter(randn(4, 32, 24, seed=1))

        def forward(self, x, offsets):
            return self.mlp(x, offsets), mt.grouped_mm(x, self.w, offsets, zero_tail=True)

    layer = Layer()
    tokens = torch.export.Dim("tokens", min=2, max=4096)
    with torch.no_grad():
        program = torch.export.export(layer, (randn(24, 32, seed=2), offsets_of([5, 0, 11, 8])),
                                      dynamic_shapes=({0: tokens}, None))
        torch.export.save(program, tmp_path / "layer.pt2")
        loaded = torch.export.load(tmp_path / "layer.pt2")
        for m, sizes in ((24, [5, 0, 11, 8]), (40, [1, 20, 0, 13])):
            x, offsets = randn(m, 32, seed=m), offsets_of(sizes)
            for exported in (program.module(), loaded.module()):
                for want, got in zip(layer(x, offsets), exported(x, offsets)):
                    assert torch.equal(want, got)
