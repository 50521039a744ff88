"""Every op of moegemm.jax against an f32 oracle on random data, jit vs eager, trace-time errors.

The value tests run on device_for(their ops): the GPU when one is present (every op has an sm_90a kernel
for bf16 inputs, gpu_support), the CPU backend otherwise. jit vs eager runs on both platforms
(jax_helpers.PLATFORMS)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from jax_helpers import (PLATFORMS, assert_close, expert_of_rows, f32, glu_join, glu_pair, grouped_matmul_ref,
                         offsets_of, on_cpu, on_device_for, platform_device, rand, running_on, silu, jax, jnp, mj)

SIZES = [37, 0, 80, 5, 0, 61]  # empty middle experts, sizes not multiples of any tile; tail rows below
M, K, N, E = 200, 64, 48, len(SIZES)


def _inputs(rng, b_layout="nk", n=N):
    a = rand(rng, (M, K))
    b = rand(rng, (E, n, K) if b_layout == "nk" else (E, K, n), scale=0.2)
    return a, b, offsets_of(SIZES)


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
@pytest.mark.parametrize("extras", [False, True])
@on_device_for("grouped_gemm")
def test_grouped_gemm_values(b_layout, extras):
    rng = np.random.default_rng(1)
    a, b, off = _inputs(rng, b_layout)
    kw = {}
    alpha = prob = bias = None
    if extras:
        alpha = jnp.asarray(rng.uniform(0.5, 2, E), jnp.float32)
        prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
        bias = rand(rng, (E, N), jnp.float32)
        kw = dict(alpha=alpha, prob=prob, bias=bias)
    d, c = mj.grouped_gemm(a, b, off, b_layout=b_layout, generate_c=True, zero_tail=True, **kw)
    g = grouped_matmul_ref(a, b, SIZES, b_layout)
    owner = expert_of_rows(SIZES, M)
    if extras:
        g = g * f32(alpha)[owner][:, None] + f32(bias)[owner] * (owner >= 0)[:, None]
    ref_d = g * (f32(prob)[:, None] if extras else 1.0)
    assert_close(d, ref_d, "d")
    assert_close(c, g, "c")


@pytest.mark.parametrize("glu_layout", ["halves", "interleaved32"])
@on_device_for("grouped_gemm_glu")
def test_grouped_gemm_glu_values(glu_layout):
    rng = np.random.default_rng(2)
    a, b, off = _inputs(rng, "kn", n=128)
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    d, c = mj.grouped_gemm_glu(a, b, off, prob=prob, b_layout="kn", glu_layout=glu_layout,
                               generate_c=True, zero_tail=True)
    g = grouped_matmul_ref(a, b, SIZES, "kn")
    gate, up = glu_pair(g, glu_layout)
    assert_close(c, g, "c")
    assert_close(d, f32(prob)[:, None] * silu(gate) * up, "d")


@on_device_for("grouped_gemm_srelu")
def test_grouped_gemm_srelu_values():
    rng = np.random.default_rng(3)
    a, b, off = _inputs(rng)
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    d = mj.grouped_gemm_srelu(a, b, off, prob=prob, zero_tail=True)
    g = grouped_matmul_ref(a, b, SIZES)
    assert_close(d, f32(prob)[:, None] * np.maximum(g, 0) ** 2, "d")


@on_device_for("grouped_gemm_dglu")
def test_grouped_gemm_dglu_matches_autodiff_of_forward():
    rng = np.random.default_rng(4)
    i, h = 64, K
    dy = rand(rng, (M, h))
    w = rand(rng, (E, i, h), scale=0.2)  # nk: (E, N = I, K = H)
    c = rand(rng, (M, 2 * i))
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    off = offsets_of(SIZES)
    out = mj.grouped_gemm_dglu(dy, w, c, off, prob=prob, compute_dprob=True, compute_dbias=True,
                               compute_amax=True, dc_dtype=jnp.float32, zero_tail=True)
    dh = grouped_matmul_ref(dy, w, SIZES, "nk")
    act = lambda cc: jax.nn.silu(cc[:, :i]) * cc[:, i:]  # noqa: E731
    _, vjp = jax.vjp(lambda cc: act(cc) * f32(prob)[:, None], jnp.asarray(f32(c)))
    (dc_ref,) = vjp(jnp.asarray(dh))
    dc_ref = np.asarray(dc_ref)
    # f32 outputs (dc by dc_dtype): the f32 tolerance
    assert_close(out.dc, dc_ref, "dc", f32_tolerance=True)
    assert_close(out.dprob, (np.asarray(act(jnp.asarray(f32(c)))) * dh).sum(1), "dprob", f32_tolerance=True)
    owner = expert_of_rows(SIZES, M)
    dbias_ref = np.stack([dc_ref[owner == g].sum(0) for g in range(E)])
    assert_close(out.dbias, dbias_ref, "dbias", f32_tolerance=True)
    assert_close(out.amax, [np.abs(dc_ref[:, :i]).max(), np.abs(dc_ref[:, i:]).max()], "amax", f32_tolerance=True)
    # dbias_dtype=None is the f32 default, as in the torch op
    again = mj.grouped_gemm_dglu(dy, w, c, off, prob=prob, compute_dbias=True, dbias_dtype=None)
    assert again.dbias.dtype == jnp.float32
    assert_close(again.dbias, dbias_ref, "dbias (dbias_dtype=None)", f32_tolerance=True)


@on_device_for("grouped_gemm_dsrelu")
def test_grouped_gemm_dsrelu_values():
    rng = np.random.default_rng(5)
    dy = rand(rng, (M, K))
    w = rand(rng, (E, N, K), scale=0.2)
    c = rand(rng, (M, N))
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    out = mj.grouped_gemm_dsrelu(dy, w, c, offsets_of(SIZES), prob=prob, compute_dprob=True,
                                 compute_amax=True, dc_dtype=jnp.float32, zero_tail=True)
    dh = grouped_matmul_ref(dy, w, SIZES)
    dc_ref = 2 * np.maximum(f32(c), 0) * dh * f32(prob)[:, None]
    assert_close(out.dc, dc_ref, "dc", f32_tolerance=True)
    assert_close(out.dprob, (np.maximum(f32(c), 0) ** 2 * dh).sum(1), "dprob", f32_tolerance=True)
    assert_close(out.amax, np.abs(dc_ref).max(), "amax", f32_tolerance=True)


# swiglu_clamped with options other than the defaults (limit 7, act_alpha 1.702, linear_offset 1): a limit that the
# unit-variance pre-activations cross often, on both sides of both bounds.
CLAMP_OPTIONS = [dict(limit=1.25, act_alpha=0.8, linear_offset=-0.5), dict(limit=2.5, act_alpha=2.25, linear_offset=0.375)]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _clamped_swiglu(gate, up, limit, act_alpha, linear_offset):
    """h and its partial derivatives in float64 (docs/ops.md §2, §3): g' = min(gate, limit), u' = clip(up, -limit,
    limit), h = (u' + linear_offset) g' sigmoid(act_alpha g'); the gradient passes each clamp where it is inactive,
    inclusive at the bound."""
    g = np.minimum(gate, limit)
    u = np.clip(up, -limit, limit)
    s = _sigmoid(act_alpha * g)
    h = (u + linear_offset) * g * s
    dh_dgate = np.where(gate <= limit, (u + linear_offset) * (s + act_alpha * g * s * (1 - s)), 0.0)
    dh_dup = np.where(np.abs(up) <= limit, g * s, 0.0)
    return h, dh_dgate, dh_dup


@pytest.mark.parametrize("options", CLAMP_OPTIONS, ids=["limit1.25", "limit2.5"])
@pytest.mark.parametrize("glu_layout", ["halves", "interleaved32"])
@on_device_for("grouped_gemm_glu")
def test_grouped_gemm_glu_clamp_options_against_a_float64_oracle(glu_layout, options):
    """grouped_gemm_glu with swiglu_clamped's limit, act_alpha and linear_offset given (and alpha, prob): D (f32)
    and C against the float64 formula of docs/ops.md §2 at f32's tolerance."""
    rng = np.random.default_rng(21)
    a, b, off = _inputs(rng, "kn", n=128)
    alpha = jnp.asarray(rng.uniform(0.5, 1.5, E), jnp.float32)
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    d, c = mj.grouped_gemm_glu(a, b, off, alpha=alpha, prob=prob, b_layout="kn", activation="swiglu_clamped",
                               glu_layout=glu_layout, generate_c=True, d_dtype=jnp.float32,
                               c_dtype=jnp.float32, zero_tail=True, **options)
    owner = expert_of_rows(SIZES, M)
    g = grouped_matmul_ref(a, b, SIZES, "kn", dtype=np.float64) * np.asarray(alpha, np.float64)[owner][:, None]
    gate, up = glu_pair(g, glu_layout)
    limit = options["limit"]
    assert (gate > limit).mean() > 0.01 and (np.abs(up) > limit).mean() > 0.01  # both clamps act
    h, _, _ = _clamped_swiglu(gate, up, **options)
    assert_close(c, g, "c", f32_tolerance=True)
    assert_close(d, np.asarray(prob, np.float64)[:, None] * h, "d", f32_tolerance=True)


@pytest.mark.parametrize("options", CLAMP_OPTIONS, ids=["limit1.25", "limit2.5"])
@pytest.mark.parametrize("glu_layout", ["halves", "interleaved32_up_first"])
@on_device_for("grouped_gemm_dglu")
def test_grouped_gemm_dglu_clamp_options_against_a_float64_oracle(glu_layout, options):
    """grouped_gemm_dglu with swiglu_clamped's options, alpha, beta and prob: dC (f32), dprob, dbias and amax
    against the float64 derivatives of docs/ops.md §3 at the saved C scaled by beta, dH = alpha dY B^T."""
    rng = np.random.default_rng(22)
    i = 64
    dy = rand(rng, (M, K))
    w = rand(rng, (E, i, K), scale=0.2)
    c = rand(rng, (M, 2 * i), scale=1.5)
    alpha = jnp.asarray(rng.uniform(0.5, 1.5, E), jnp.float32)
    beta = jnp.asarray(rng.uniform(0.5, 1.5, E), jnp.float32)
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    out = mj.grouped_gemm_dglu(dy, w, c, offsets_of(SIZES), alpha=alpha, beta=beta, prob=prob,
                               activation="swiglu_clamped", glu_layout=glu_layout, compute_dprob=True,
                               compute_dbias=True, compute_amax=True, dc_dtype=jnp.float32, zero_tail=True,
                               **options)
    owner = expert_of_rows(SIZES, M)
    dh = grouped_matmul_ref(dy, w, SIZES, "nk", dtype=np.float64) * np.asarray(alpha, np.float64)[owner][:, None]
    scaled = np.asarray(f32(c), np.float64) * np.asarray(beta, np.float64)[owner][:, None]
    gate, up = glu_pair(scaled, glu_layout)
    limit = options["limit"]
    assert (gate > limit).mean() > 0.01 and (np.abs(up) > limit).mean() > 0.01  # both clamps act
    h, dh_dgate, dh_dup = _clamped_swiglu(gate, up, **options)
    p = np.asarray(prob, np.float64)[:, None]
    d_gate, d_up = dh * p * dh_dgate, dh * p * dh_dup
    dc_ref = glu_join(d_gate, d_up, glu_layout)
    assert_close(out.dc, dc_ref, "dc", f32_tolerance=True)
    assert_close(out.dprob, (h * dh).sum(1), "dprob", f32_tolerance=True)
    assert_close(out.dbias, np.stack([dc_ref[owner == g].sum(0) for g in range(E)]), "dbias", f32_tolerance=True)
    assert_close(out.amax, [np.abs(d_gate).max(), np.abs(d_up).max()], "amax", f32_tolerance=True)


def _unsupported_input_dtypes():
    """(dtype name, the contract's reason) of the 8-bit and FP4 dtypes this jax has (docs/ops.md §0.2 rule 2)."""
    eight = "8-bit inputs are not supported yet: the FP8 path with per-block scales is a later milestone"
    four = "FP4 has no tensor-core path on sm_90: Hopper has no block-scaled or 4-bit MMA"
    names = [("float8_e4m3fn", eight), ("float8_e5m2", eight), ("float8_e4m3fnuz", eight), ("float4_e2m1fn", four)]
    return [pytest.param(n, r, id=n) for n, r in names if hasattr(jnp, n)]


@pytest.mark.parametrize("dtype_name,reason", _unsupported_input_dtypes())
def test_8bit_and_fp4_inputs_are_refused_with_the_contracts_reason(dtype_name, reason):
    """An 8-bit or FP4 input of any op, of ragged_dot, ragged_dot_general and moe_mlp, is refused at trace time with
    the reason the C++ API and the torch ops give: first operand (a, dy, x, lhs) or second (b, rhs, w_up) in
    that dtype. Other wrong dtypes keep the plain message."""
    low = getattr(jnp, dtype_name)
    rng = np.random.default_rng(23)
    a, b, off = _inputs(rng)
    dy, c128, c48, dense = rand(rng, (M, K)), rand(rng, (M, 128)), rand(rng, (M, N)), rand(rng, (128, K), scale=0.2)
    w64 = rand(rng, (E, 64, K), scale=0.2)
    w_up, w_down = rand(rng, (E, K, 128), scale=0.2), rand(rng, (E, 64, K), scale=0.2)
    sizes = jnp.asarray(SIZES, jnp.int32)
    dims = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([1], [1]), ([], [])),
                                             lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])
    q = lambda x: x.astype(low)  # noqa: E731
    # (op, the operand in low precision, call with the first operand low, call with the second operand low)
    calls = [
        ("grouped_gemm", ("a", "b"), lambda x, y: mj.grouped_gemm(x, y, off)),
        ("grouped_gemm_glu", ("a", "b"), lambda x, y: mj.grouped_gemm_glu(x, y, off), (a, rand(rng, (E, 128, K)))),
        ("grouped_gemm_dglu", ("dy", "b"), lambda x, y: mj.grouped_gemm_dglu(x, y, c128, off), (dy, w64)),
        ("grouped_gemm_srelu", ("a", "b"), lambda x, y: mj.grouped_gemm_srelu(x, y, off)),
        ("grouped_gemm_dsrelu", ("dy", "b"), lambda x, y: mj.grouped_gemm_dsrelu(x, y, c48, off), (dy, b)),
        ("grouped_gemm_wgrad", ("x", "dy"), lambda x, y: mj.grouped_gemm_wgrad(x, y, off), (a, c48)),
        ("gemm_swiglu", ("a", "b"), lambda x, y: mj.gemm_swiglu(x, y), (a, dense)),
        ("gemm_amax", ("a", "b"), lambda x, y: mj.gemm_amax(x, y), (a, dense)),
        ("gemm_srelu", ("a", "b"), lambda x, y: mj.gemm_srelu(x, y), (a, dense)),
        ("gemm_dsrelu", ("dy", "b"), lambda x, y: mj.gemm_dsrelu(x, y, c128), (dy, dense)),
        ("ragged_dot", ("lhs", "rhs"), lambda x, y: mj.ragged_dot(x, y, sizes), (a, b.transpose(0, 2, 1))),
        ("ragged_dot_general", ("lhs", "rhs"), lambda x, y: mj.ragged_dot_general(x, y, sizes, dims),
         (a, b.transpose(0, 2, 1))),
        ("moe_mlp", ("x", "w_up"), lambda x, y: mj.moe_mlp(x, y, w_down, group_sizes=sizes), (a, w_up)),
    ]
    for op, names, call, *operands in calls:
        x, y = operands[0] if operands else (a, b)
        for index, name in enumerate(names):
            allowed = "bfloat16, float16" if index == 0 else "bfloat16"
            pattern = (rf"^moegemm\.jax\.{op}: {name}: expected dtype {allowed}, got {dtype_name} "
                       rf"\({re.escape(reason)}\)$")
            with pytest.raises(TypeError, match=pattern):
                call(q(x), y) if index == 0 else call(x, q(y))
    # Another dtype that the ops refuse is named without a reason of its own.
    with pytest.raises(TypeError, match=r"^moegemm\.jax\.grouped_gemm: a: expected dtype bfloat16, float16, "
                                        r"got float32$"):
        mj.grouped_gemm(a.astype(jnp.float32), b.astype(jnp.float32), off)


def test_the_8bit_reason_is_the_torch_ops_reason():
    """The JAX front end gives the reason the library gives, as the torch ops pass it on (the C++ contract's text)."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    mt = pytest.importorskip("moegemm.torch")
    a8 = torch.ones(16, 32).to(torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError) as torch_error:
        mt.ops.grouped_gemm(a8, torch.ones(2, 16, 32).to(torch.float8_e4m3fn), torch.tensor([8, 16], dtype=torch.int32),
                            out_dtype=torch.bfloat16)
    with pytest.raises(TypeError) as jax_error:
        mj.grouped_gemm(jnp.ones((16, 32), jnp.float8_e4m3fn), jnp.ones((2, 16, 32), jnp.float8_e4m3fn),
                        offsets_of([8, 8]))
    reason = re.search(r"\(8-bit inputs[^)]*\)", str(torch_error.value))
    assert reason, str(torch_error.value)
    assert str(jax_error.value).endswith(reason.group(0)), (str(jax_error.value), reason.group(0))


@pytest.mark.parametrize("transpose_output", [False, True])
@on_device_for("grouped_gemm_wgrad")
def test_grouped_gemm_wgrad_values_and_exact_zero_experts(transpose_output):
    rng = np.random.default_rng(6)
    x, dy = rand(rng, (M, K)), rand(rng, (M, N))
    w = mj.grouped_gemm_wgrad(x, dy, offsets_of(SIZES), transpose_output=transpose_output)
    owner = expert_of_rows(SIZES, M)
    ref = np.stack([f32(x)[owner == g].T @ f32(dy)[owner == g] for g in range(E)])
    if transpose_output:
        ref = np.swapaxes(ref, 1, 2)
    assert_close(w, ref, "w", f32_tolerance=True)  # f32 W (the default w_dtype)
    for g, s in enumerate(SIZES):
        if s == 0:
            assert (f32(w[g]) == 0).all()


@pytest.mark.parametrize("transpose_output", [False, True])
@pytest.mark.parametrize("w_dtype", [jnp.float32, jnp.bfloat16])
@on_device_for("grouped_gemm_wgrad")
def test_grouped_gemm_wgrad_adds_into_w(transpose_output, w_dtype):
    """w given: W_g = w_g + x_g^T dy_g, experts without rows keep w's bits, w itself is unchanged (the call
    copies it unless donated), and the donated call under jit adds in place with no copy."""
    rng = np.random.default_rng(16)
    x, dy = rand(rng, (M, K)), rand(rng, (M, N))
    shape = (E, N, K) if transpose_output else (E, K, N)
    w_np = rng.uniform(-8, 8, shape).astype(np.float32)
    w_np[:, 0, :3] = [-0.0, 1e-40, -1e-39]  # an expert without rows keeps them bit for bit
    w0 = jnp.asarray(w_np, w_dtype)
    kept = np.asarray(w0).copy()
    owner = expert_of_rows(SIZES, M)
    ref = np.stack([f32(x)[owner == g].T @ f32(dy)[owner == g] for g in range(E)])
    if transpose_output:
        ref = np.swapaxes(ref, 1, 2)
    ref = ref + f32(w0)
    eager = mj.grouped_gemm_wgrad(x, dy, offsets_of(SIZES), transpose_output=transpose_output, w=w0)
    assert eager.dtype == w_dtype and eager.shape == shape
    assert_close(eager, ref, "w + x^T dy", f32_tolerance=w_dtype == jnp.float32)
    empty = [g for g, s in enumerate(SIZES) if s == 0]
    bits = np.uint32 if w_dtype == jnp.float32 else np.uint16
    assert empty and np.array_equal(np.asarray(eager)[empty].view(bits), kept[empty].view(bits)), \
        "experts without rows keep w's bits"
    np.testing.assert_array_equal(np.asarray(w0), kept)  # not donated: w is left as it was

    def step(w, x, dy):
        return mj.grouped_gemm_wgrad(x, dy, offsets_of(SIZES), transpose_output=transpose_output, w=w)

    donated = jax.jit(step, donate_argnums=0)
    hlo = donated.lower(w0, x, dy).compile().as_text()
    assert "moegemm_grouped_gemm_wgrad" in hlo and " copy(" not in hlo, hlo
    got = donated(jnp.asarray(kept), x, dy)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(eager))
    # Under jax.vmap over w: one call per batch element, each adding into its own w.
    negated = jnp.asarray(-f32(w0), w_dtype)
    both = jax.vmap(lambda w: step(w, x, dy))(jnp.stack([w0, negated]))
    np.testing.assert_array_equal(np.asarray(both[0]), np.asarray(eager))
    assert_close(both[1], ref - 2 * f32(w0), "w + x^T dy, second batch element",
                 f32_tolerance=w_dtype == jnp.float32)
    # Layers' gradients stacked, as in a scan over layers: each w a slice of the stack, each result a slice of
    # another (XLA may then hand the call two buffers: it copies w in first), or updated in place in a loop.
    stack = jnp.stack([w0, negated])
    _, scanned = jax.jit(lambda ws: jax.lax.scan(lambda c, w: (c, step(w, x, dy)), 0, ws))(stack)
    np.testing.assert_array_equal(np.asarray(scanned), np.asarray(both))
    looped = jax.jit(lambda ws: jax.lax.fori_loop(0, 2, lambda i, ws: ws.at[i].set(step(ws[i], x, dy)), ws))(stack)
    np.testing.assert_array_equal(np.asarray(looped), np.asarray(both))


def test_grouped_gemm_wgrad_refuses_a_w_that_does_not_fit():
    rng = np.random.default_rng(17)
    x, dy, off = rand(rng, (M, K)), rand(rng, (M, N)), offsets_of(SIZES)
    w = jnp.zeros((E, K, N), jnp.float32)
    with pytest.raises(ValueError, match=re.escape(f"grouped_gemm_wgrad: w: expected shape {(E, K, N)} (E, H, N)")):
        mj.grouped_gemm_wgrad(x, dy, off, w=w[:, :, :-8])
    with pytest.raises(ValueError, match=re.escape(f"w: expected shape {(E, N, K)} (E, N, H) from offsets, x and "
                                                   "dy with transpose_output")):
        mj.grouped_gemm_wgrad(x, dy, off, w=w, transpose_output=True)
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad: w: expected rank 3"):
        mj.grouped_gemm_wgrad(x, dy, off, w=w[0])
    with pytest.raises(ValueError, match=re.escape("grouped_gemm_wgrad: x: expected rank 2 (M, H), got shape")):
        mj.grouped_gemm_wgrad(x[None], dy, off)
    with pytest.raises(TypeError, match=r"grouped_gemm_wgrad: w: expected dtype float32, bfloat16, got float16"):
        mj.grouped_gemm_wgrad(x, dy, off, w=w.astype(jnp.float16))
    with pytest.raises(TypeError, match=r"w_dtype: expected None or w's dtype float32 with w given, got bfloat16"):
        mj.grouped_gemm_wgrad(x, dy, off, w=w, w_dtype=jnp.bfloat16)
    with pytest.raises(TypeError, match=r"grouped_gemm_wgrad: w_dtype: expected one of"):
        mj.grouped_gemm_wgrad(x, dy, off, w=w, w_dtype=jnp.int8)
    assert mj.grouped_gemm_wgrad(x, dy, off, w=w, w_dtype=jnp.float32).dtype == jnp.float32


def _grouped_calls(rng):
    """op name -> call(offsets, **options) of each grouped op, offsets over the M rows."""
    a, b, _ = _inputs(rng)
    bk = rand(rng, (E, 128, K), scale=0.2)
    dy, c128, c48, w64 = rand(rng, (M, K)), rand(rng, (M, 128)), rand(rng, (M, N)), rand(rng, (E, 64, K))
    return {
        "grouped_gemm": lambda o, **kw: mj.grouped_gemm(a, b, o, zero_tail=True, **kw),
        "grouped_gemm_glu": lambda o, **kw: mj.grouped_gemm_glu(a, bk, o, zero_tail=True, **kw),
        "grouped_gemm_dglu": lambda o, **kw: mj.grouped_gemm_dglu(dy, w64, c128, o, compute_dprob=True,
                                                                  compute_dbias=True, zero_tail=True, **kw),
        "grouped_gemm_srelu": lambda o, **kw: mj.grouped_gemm_srelu(a, b, o, zero_tail=True, **kw),
        "grouped_gemm_dsrelu": lambda o, **kw: mj.grouped_gemm_dsrelu(dy, b, c48, o, compute_dprob=True,
                                                                      zero_tail=True, **kw),
        "grouped_gemm_wgrad": lambda o, **kw: mj.grouped_gemm_wgrad(a, c48, o, **kw),
    }


# Offsets the contract refuses under validate, and the end of the C++ ops' message for each.
_BAD_OFFSETS = {
    (37, 20, 122, 200, 200, 200): "each >= the one before it, got offsets[1] = 20 < offsets[0] = 37",
    (-3, 37, 122, 200, 200, 200): "each >= 0, got offsets[0] = -3",
    (37, 37, 117, 122, 122, M + 1): f"each <= M, got offsets[5] = {M + 1}",
}


@pytest.mark.parametrize("op", list(_grouped_calls(np.random.default_rng(0))))
def test_validate_reports_bad_offsets_with_the_cpp_message(op):
    """validate=True reads the offsets on the host and names the first bad one as the C++ ops do; without it
    the same offsets are clamped (no error); good offsets give the unvalidated call's outputs bitwise; traced
    offsets and a non-bool flag are a TypeError naming validate."""
    call = _grouped_calls(np.random.default_rng(24))[op]
    for offsets, tail in _BAD_OFFSETS.items():
        message = f"moegemm.jax.{op}: offsets: expected non-decreasing expert end rows in [0, M={M}], {tail}"
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            call(jnp.asarray(offsets, jnp.int32), validate=True)
        jax.block_until_ready(call(jnp.asarray(offsets, jnp.int32)))
    good = offsets_of(SIZES)
    for x, y in zip(jax.tree_util.tree_leaves(call(good, validate=True)), jax.tree_util.tree_leaves(call(good))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    with pytest.raises(TypeError, match=rf"^moegemm\.jax\.{op}: validate: reads offsets on the host, so it "
                                        r"needs concrete offsets \(an eager call\)"):
        jax.jit(lambda o: call(o, validate=True))(good)
    with pytest.raises(TypeError, match=rf"^moegemm\.jax\.{op}: validate: expected a bool"):
        call(good, validate=1)


def test_validate_message_is_the_torch_ops_message():
    """The JAX front end's validate gives the torch op's message (the C++ contract's text) after "moegemm.jax."."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("moegemm.torch")
    offsets = next(iter(_BAD_OFFSETS))
    a, b, _ = _inputs(np.random.default_rng(25))
    with pytest.raises(ValueError) as torch_error:
        torch.ops.moegemm.grouped_gemm(torch.ones(M, K, dtype=torch.bfloat16),
                                       torch.ones(E, N, K, dtype=torch.bfloat16),
                                       torch.tensor(offsets, dtype=torch.int32), validate=True)
    with pytest.raises(ValueError) as jax_error:
        mj.grouped_gemm(a, b, jnp.asarray(offsets, jnp.int32), validate=True)
    assert str(jax_error.value) == "moegemm.jax." + str(torch_error.value)


def _dense_inputs(b_layout):
    rng = np.random.default_rng(7)
    a = rand(rng, (M, K))
    b = rand(rng, (128, K) if b_layout == "nk" else (K, 128), scale=0.2)
    g = f32(a) @ (f32(b).T if b_layout == "nk" else f32(b))
    return rng, a, b, g


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
@on_device_for("gemm_swiglu")
def test_gemm_swiglu_values(b_layout):
    _, a, b, g = _dense_inputs(b_layout)
    ab12, c = mj.gemm_swiglu(a, b, b_layout=b_layout, alpha=0.5)
    up, gate = glu_pair(0.5 * g, "interleaved32")  # up-first: block 2j up, 2j+1 gate
    assert_close(ab12, 0.5 * g, "ab12", f32_tolerance=True)  # f32 (the default ab12_dtype)
    assert_close(c, up * silu(gate), "c")


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
@on_device_for("gemm_amax", "gemm_srelu", "gemm_dsrelu")
def test_dense_ops_values(b_layout):
    rng, a, b, g = _dense_inputs(b_layout)
    cc, amax = mj.gemm_amax(a, b, b_layout=b_layout, c_dtype=jnp.float32)
    assert_close(cc, g, "gemm_amax c", f32_tolerance=True)
    assert amax.shape == () and abs(float(amax) - np.abs(f32(cc)).max()) <= 1e-6 * abs(float(amax))
    prob = jnp.asarray(rng.uniform(0, 1, M), jnp.float32)
    d, c2 = mj.gemm_srelu(a, b, b_layout=b_layout, alpha=2.0, prob=prob, generate_c=True)
    assert_close(c2, 2 * g, "gemm_srelu c")
    assert_close(d, f32(prob)[:, None] * np.maximum(2 * g, 0) ** 2, "gemm_srelu d")
    bias = jnp.asarray(rng.standard_normal(g.shape[1]), jnp.float32)
    d_bias, c_bias = mj.gemm_srelu(a, b, b_layout=b_layout, alpha=2.0, prob=prob, bias=bias, generate_c=True)
    assert_close(c_bias, 2 * g + f32(bias), "gemm_srelu c with bias")
    assert_close(d_bias, f32(prob)[:, None] * np.maximum(2 * g + f32(bias), 0) ** 2, "gemm_srelu d with bias")
    dy = rand(rng, (M, K))
    dc, dprob, dbias, amax = mj.gemm_dsrelu(dy, b, c2, b_layout=b_layout, prob=prob, compute_dprob=True,
                                            dc_dtype=jnp.float32)
    assert dbias is None and amax is None
    dh = f32(dy) @ (f32(b).T if b_layout == "nk" else f32(b))
    dc_ref = 2 * np.maximum(f32(c2), 0) * dh * f32(prob)[:, None]
    assert_close(dc, dc_ref, "gemm_dsrelu dc", f32_tolerance=True)
    assert_close(dprob, (np.maximum(f32(c2), 0) ** 2 * dh).sum(1), "gemm_dsrelu dprob", f32_tolerance=True)
    for dbias_dtype in (jnp.float32, jnp.bfloat16):
        out = mj.gemm_dsrelu(dy, b, c2, b_layout=b_layout, prob=prob, compute_dbias=True, compute_amax=True,
                             dc_dtype=jnp.float32, dbias_dtype=dbias_dtype)
        assert out.dprob is None and out.dbias.shape == (g.shape[1],) and out.dbias.dtype == dbias_dtype
        assert_close(out.dbias, dc_ref.sum(0), "gemm_dsrelu dbias", f32_tolerance=dbias_dtype == jnp.float32)
        assert out.amax.shape == () and float(out.amax) == np.abs(f32(out.dc)).max()


def _every_op(rng, dtype=jnp.bfloat16):
    """op name -> a call of it (every output defined on every row: zero_tail), inputs in `dtype`."""
    a, b, off = _inputs(rng)
    bk = rand(rng, (E, 128, K), scale=0.2)
    dy, c128, c48 = rand(rng, (M, K)), rand(rng, (M, 128)), rand(rng, (M, N))
    dense = rand(rng, (128, K), scale=0.2)
    w64 = rand(np.random.default_rng(0), (E, 64, K))
    if dtype != jnp.bfloat16:
        a, b, bk, dy, c128, c48, dense, w64 = (x.astype(dtype) for x in (a, b, bk, dy, c128, c48, dense, w64))
    return {
        "grouped_gemm": lambda: mj.grouped_gemm(a, b, off, generate_c=True, zero_tail=True),
        "grouped_gemm_glu": lambda: mj.grouped_gemm_glu(a, bk, off, generate_c=True, zero_tail=True),
        "grouped_gemm_dglu": lambda: mj.grouped_gemm_dglu(dy, w64, c128, off, compute_dprob=True, zero_tail=True),
        "grouped_gemm_srelu": lambda: mj.grouped_gemm_srelu(a, b, off, generate_c=True, zero_tail=True),
        "grouped_gemm_dsrelu": lambda: mj.grouped_gemm_dsrelu(dy, b, c48, off, compute_dprob=True,
                                                                zero_tail=True),
        "grouped_gemm_wgrad": lambda: mj.grouped_gemm_wgrad(a, c48, off),
        "gemm_swiglu": lambda: mj.gemm_swiglu(a, dense),
        "gemm_amax": lambda: mj.gemm_amax(a, dense),
        "gemm_srelu": lambda: mj.gemm_srelu(a, dense, generate_c=True),
        "gemm_dsrelu": lambda: mj.gemm_dsrelu(dy, dense, c128, compute_dbias=True, compute_amax=True),
    }


@pytest.mark.parametrize("op", list(_every_op(np.random.default_rng(0))))
@pytest.mark.parametrize("platform", PLATFORMS)
def test_jit_and_eager_bitwise_identical(op, platform):
    """Whole outputs (zero_tail makes the tail rows defined), eager once, the jitted call twice."""
    with running_on(platform_device(platform)) as device:
        fn = _every_op(np.random.default_rng(8))[op]
        eager = jax.tree_util.tree_leaves(fn())
        jitted = jax.jit(fn)
        first = jax.tree_util.tree_leaves(jitted())
        second = jax.tree_util.tree_leaves(jitted())
    assert all(next(iter(x.devices())).platform == device.platform for x in eager + first)
    for e, j1, j2 in zip(eager, first, second):
        assert np.isfinite(f32(e)).any()
        np.testing.assert_array_equal(np.asarray(e), np.asarray(j1))
        np.testing.assert_array_equal(np.asarray(j1), np.asarray(j2))


@pytest.mark.parametrize("transform", ["grad", "jvp", "linearize"])
def test_an_op_differentiated_raises_naming_its_target(transform):
    """The ops have no derivative of their own (gradients come from ragged_dot and moe_mlp): differentiating
    one raises a ValueError that names the op and its FFI target, at trace time, in either mode."""
    rng = np.random.default_rng(3)
    a, b, off = _inputs(rng)
    loss = lambda a: mj.grouped_gemm(a, b, off, zero_tail=True).astype(jnp.float32).sum()
    run = {"grad": lambda: jax.grad(loss)(a), "jvp": lambda: jax.jvp(loss, (a,), (a,)),
           "linearize": lambda: jax.linearize(loss, a)}[transform]
    with pytest.raises(ValueError, match=r"moegemm\.jax\.grouped_gemm: the FFI call to `moegemm_grouped_gemm` "
                                         r"cannot be differentiated"):
        run()


def test_a_target_called_directly_names_the_op_and_the_buffer():
    """The public targets (moegemm_<op>) decode their buffers before the op runs: a mismatch found there is
    INVALID_ARGUMENT naming the op and the buffer's position, and an attribute of the wrong type is named
    (an i32 ignored_trailing_inputs was ignored and the extra input counted as an operand)."""
    a, b = jnp.ones((64, 64), jnp.bfloat16), jnp.ones((4, 32, 64), jnp.bfloat16)
    off = jnp.array([16, 32, 48, 64], jnp.int32)
    attrs = dict(b_layout="nk", has_alpha=False, has_prob=False, has_bias=False, generate_c=False, zero_tail=False)
    results = [jax.ShapeDtypeStruct((64, 32), jnp.bfloat16), jax.ShapeDtypeStruct((0,), jnp.uint8)]

    def call(*args, **extra):
        fn = jax.ffi.ffi_call("moegemm_grouped_gemm", results, vmap_method="sequential")
        jax.block_until_ready(jax.jit(lambda *x: fn(*x, **attrs, **extra))(*args))

    with pytest.raises(Exception, match=r"INVALID_ARGUMENT: grouped_gemm: input 2: expected rank 1\.\.4, got rank 0"):
        call(a, b, jnp.ones((), jnp.int32))
    with pytest.raises(Exception, match=r"INVALID_ARGUMENT: grouped_gemm: attribute ignored_trailing_inputs: "
                                        r"expected an attribute of type int64"):
        call(a, b, off, a, ignored_trailing_inputs=np.int32(1))


@on_cpu()
def test_float_attributes_keep_eager_and_jit_bitwise_identical():
    """JAX keys its eager executables by their attributes with ==: -0.0 and +0.0 are one key, and a NaN is
    never equal to itself. A float attribute of -0.0 is passed as +0.0, so that eager calls with either (in
    any order) match jit bitwise; swiglu and geglu get the clamp parameters' defaults (they use none of them),
    so a NaN given there compiles the call once, like any other value.
    On the CPU backend, where alpha * product keeps the zero's sign: the sm_90a kernel adds the bias (+0
    without one) in the same fused multiply-add, so its zeros are +0 for either alpha and cannot tell the two
    keys apart."""
    rng = np.random.default_rng(12)
    a, dense = rand(rng, (M, K)), rand(rng, (128, K), scale=0.2)
    c = lambda alpha: mj.gemm_srelu(a, dense, alpha=alpha, generate_c=True)[1]
    first, second = c(-0.0), c(0.0)  # eager, -0.0 first
    jitted = jax.jit(lambda: c(0.0))()
    np.testing.assert_array_equal(np.asarray(first), np.asarray(jitted))
    np.testing.assert_array_equal(np.asarray(second), np.asarray(jitted))
    assert np.signbit(f32(jitted)).any() and not np.signbit(f32(jitted)).all()  # zeros of either sign: a real test
    _, b, off = _inputs(rng)
    bk = rand(rng, (E, 128, K), scale=0.2)
    lowered = lambda **kw: jax.jit(lambda: mj.grouped_gemm_glu(a, bk, off, **kw)).lower().as_text()
    for activation in ("swiglu", "geglu"):
        nan = dict(limit=float("nan"), act_alpha=float("nan"), linear_offset=float("nan"))
        assert lowered(activation=activation, **nan) == lowered(activation=activation)


def test_output_dtype_options_that_are_no_dtype_are_refused():
    """Only None means an output-dtype option's default: a falsy non-dtype (0, "", False, ()) is refused by name
    (as jax.lax.ragged_dot refuses it), and so is a bad option for an output the call does not ask for."""
    rng = np.random.default_rng(11)
    a, b, off = _inputs(rng)
    i = 64
    dy, w, c = rand(rng, (M, K)), rand(rng, (E, i, K)), rand(rng, (M, 2 * i))
    expected = r"expected one of .*got "
    for bad in (0, "", False, (), "bogus", jnp.int32):
        with pytest.raises(TypeError, match=r"grouped_gemm: d_dtype: " + expected):
            mj.grouped_gemm(a, b, off, d_dtype=bad)
        with pytest.raises(TypeError, match=r"grouped_gemm: c_dtype: " + expected):
            mj.grouped_gemm(a, b, off, c_dtype=bad)  # no generate_c
        with pytest.raises(TypeError, match=r"grouped_gemm_glu: c_dtype: " + expected):
            mj.grouped_gemm_glu(a, b, off, c_dtype=bad)
        with pytest.raises(TypeError, match=r"gemm_srelu: c_dtype: " + expected):
            mj.gemm_srelu(a, b[0], c_dtype=bad)
        with pytest.raises(TypeError, match=r"grouped_gemm_dglu: dbias_dtype: " + expected):
            mj.grouped_gemm_dglu(dy, w, c, off, dbias_dtype=bad)  # no compute_dbias
        with pytest.raises(TypeError, match=r"grouped_gemm_dglu: dc_dtype: " + expected):
            mj.grouped_gemm_dglu(dy, w, c, off, dc_dtype=bad)
        with pytest.raises(TypeError, match=r"grouped_gemm_wgrad: w_dtype: " + expected):
            mj.grouped_gemm_wgrad(a, a, off, w_dtype=bad)
        with pytest.raises(TypeError, match=r"gemm_swiglu: ab12_dtype: " + expected):
            mj.gemm_swiglu(a, b[0], ab12_dtype=bad)
        with pytest.raises(TypeError, match=r"ragged_dot: preferred_element_type: " + expected):
            mj.ragged_dot(a, b.transpose(0, 2, 1), jnp.asarray(SIZES, jnp.int32), preferred_element_type=bad)
    # None stays the documented default of each.
    assert mj.grouped_gemm(a, b, off, d_dtype=None, c_dtype=None).dtype == a.dtype
    assert mj.grouped_gemm_wgrad(a, a, off, w_dtype=None).dtype == jnp.float32


def test_dglu_messages_name_its_columns_as_its_docstring_does():
    """b of the dGLU is (E, I, K) and c is (M, 2I): the messages use those names, not the forward's N."""
    rng = np.random.default_rng(12)
    i = 64
    dy, w, c, off = rand(rng, (M, K)), rand(rng, (E, i, K)), rand(rng, (M, 2 * i)), offsets_of(SIZES)
    with pytest.raises(ValueError, match=r"grouped_gemm_dglu: b: expected I a multiple of 8 .*got I = 12"):
        mj.grouped_gemm_dglu(dy, rand(rng, (E, 12, K)), rand(rng, (M, 24)), off)
    with pytest.raises(ValueError, match=r"grouped_gemm_dglu: c: expected dim 1 = 128 \(2I from b\)"):
        mj.grouped_gemm_dglu(dy, w, rand(rng, (M, i)), off)
    with pytest.raises(ValueError, match=r"grouped_gemm_dglu: b: expected rank 3 \(E, I, K\)"):
        mj.grouped_gemm_dglu(dy, w[0], c, off)


def test_trace_time_errors_name_the_operand():
    rng = np.random.default_rng(9)
    a, b, off = _inputs(rng)
    with pytest.raises(ValueError, match=r"grouped_gemm: b: expected dim 2 = 64 \(K from a\)"):
        jax.jit(lambda: mj.grouped_gemm(a, rand(rng, (E, N, 32)), off)).lower()
    with pytest.raises(TypeError, match=r"grouped_gemm: offsets: expected dtype int32, got float32"):
        mj.grouped_gemm(a, b, off.astype(jnp.float32))
    with pytest.raises(TypeError, match=r"grouped_gemm: a: expected dtype bfloat16, float16, got float32"):
        mj.grouped_gemm(a.astype(jnp.float32), b.astype(jnp.float32), off)
    # As the contract (and the torch op) says it: E comes from offsets, and the weights are blamed.
    with pytest.raises(ValueError, match=r"grouped_gemm: b: expected dim 0 = 3 \(E from offsets\)"):
        mj.grouped_gemm(a, b, off[:3])
    with pytest.raises(ValueError, match=r"grouped_gemm_dglu: b: expected dim 0 = 3 \(E from offsets\)"):
        mj.grouped_gemm_dglu(rand(rng, (M, K)), b, rand(rng, (M, 2 * N)), off[:3])
    with pytest.raises(ValueError, match=r"b: expected N a multiple of 8 .*got N = 43"):
        mj.grouped_gemm(a, rand(rng, (E, 43, K)), off)
    # A rule of the library's own checks (run by the workspace query) names dtypes as numpy does too.
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: b: expected I = N/2 with I \* sizeof\(bfloat16\) a "
                                         r"multiple of 16 bytes .*in d of dtype bfloat16.*for bfloat16\), got N=24"):
        mj.grouped_gemm_glu(a, rand(rng, (E, 24, K)), off)
    with pytest.raises(ValueError, match=r"b_layout: expected one of 'nk', 'kn', got 'tn'"):
        mj.grouped_gemm(a, b, off, b_layout="tn")
    # A NumPy string array is not a str (`in` would compare it element-wise and let it through to the lowering).
    with pytest.raises(ValueError, match=r"grouped_gemm: b_layout: expected one of 'nk', 'kn', got array\('nk'"):
        mj.grouped_gemm(a, b, off, b_layout=np.array("nk"))
    with pytest.raises(ValueError, match=r"activation: expected one of"):
        mj.grouped_gemm_glu(a, b, off, activation="relu")
    with pytest.raises(ValueError, match=r"prob: expected dim 0 = 200 \(M\)"):
        mj.grouped_gemm(a, b, off, prob=jnp.ones((7,), jnp.float32))
    # Scalars baked into the compiled call refuse a traced value with a message that names them.
    with pytest.raises(TypeError, match=r"gemm_swiglu: alpha: expected a Python float"):
        jax.jit(lambda s: mj.gemm_swiglu(a, b[0], alpha=s))(jnp.float32(2.0))
    # A NaN alpha, never equal to itself, would be a new key of JAX's cache of compiled calls at every eager call.
    dense_calls = {"gemm_swiglu": lambda alpha: mj.gemm_swiglu(a, b[0], alpha=alpha, glu_layout="halves"),
                   "gemm_srelu": lambda alpha: mj.gemm_srelu(a, b[0], alpha=alpha),
                   "gemm_dsrelu": lambda alpha: mj.gemm_dsrelu(a, b[0], a[:, :b.shape[1]], alpha=alpha)}
    for name, call in dense_calls.items():
        with pytest.raises(ValueError, match=rf"moegemm.jax.{name}: alpha: expected a number that is not NaN, "
                                             rf"got nan$"):
            call(float("nan"))
        assert np.isinf(np.asarray(call(float("inf"))[0], np.float32)).any()  # inf is one key: passed
    with pytest.raises(TypeError, match=r"grouped_gemm_glu: limit: expected a Python float"):
        jax.jit(lambda s: mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=s))(jnp.float32(5.0))
    # So do the flags that decide the call's outputs (a traced bool has no value at trace time).
    flag = r"expected a bool \(it decides the compiled call's outputs\), got a traced value"
    with pytest.raises(TypeError, match=r"grouped_gemm: zero_tail: " + flag):
        jax.jit(lambda z: mj.grouped_gemm(a, b, off, zero_tail=z))(True)
    with pytest.raises(TypeError, match=r"grouped_gemm_glu: generate_c: " + flag):
        jax.jit(lambda g: mj.grouped_gemm_glu(a, b, off, generate_c=g))(True)
    with pytest.raises(TypeError, match=r"gemm_srelu: generate_c: " + flag):
        jax.jit(lambda g: mj.gemm_srelu(a, b[0], generate_c=g))(False)
    with pytest.raises(TypeError, match=r"grouped_gemm_wgrad: transpose_output: " + flag):
        jax.jit(lambda t: mj.grouped_gemm_wgrad(a, a, off, transpose_output=t))(True)
    # A flag is a bool: a string (truthy), None, an int or an array of several values is refused by name, not read
    # as True or False; a concrete 0-d bool array is a bool.
    for bad, got in (("no", "'no'"), (None, "None"), (1, "1"), (0, "0"),
                     (jnp.array([True, False]), r"\w+ of shape \(2,\)")):
        with pytest.raises(TypeError, match=rf"grouped_gemm: zero_tail: expected a bool \(Python, NumPy or a "
                                            rf"concrete 0-d bool array\), got {got}$"):
            mj.grouped_gemm(a, b, off, zero_tail=bad)
    np.testing.assert_array_equal(np.asarray(mj.grouped_gemm(a, b, off, zero_tail=jnp.array(True))),
                                  np.asarray(mj.grouped_gemm(a, b, off, zero_tail=True)))
    # Anything else that is not a real number is refused by name too, and so is a non-positive clamp limit.
    for bad in ("7", None, 1 + 2j, True, np.bool_(True), jnp.array(True)):  # a bool too, as the torch ops say
        with pytest.raises(TypeError, match=r"grouped_gemm_glu: limit: expected a real number"):
            mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=bad)
    # An array of several values is named with its values, not only its type.
    with pytest.raises(TypeError, match=r"grouped_gemm_glu: limit: expected a real number, got \w+ "
                                        r"Array\(\[1\., 2\.\], dtype=float32\)$"):
        mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=jnp.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: limit: expected a positive clamp limit for "
                                         r"swiglu_clamped \(in f32.*\), got 0.0"):
        mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=0)
    for name in ("act_alpha", "linear_offset"):  # NaN or infinity there (in f32) would make every output NaN
        for bad, got in ((float("nan"), "nan"), (float("-inf"), "-inf"), (1e39, "1e\\+39, which f32 rounds to inf"),
                         (-1e39, "-1e\\+39, which f32 rounds to -inf")):
            with pytest.raises(ValueError, match=rf"grouped_gemm_glu: {name}: expected a finite {name} for "
                                                 rf"swiglu_clamped \(in f32\), got {got}$"):
                mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", **{name: bad})
        mj.grouped_gemm_glu(a, b, off, activation="swiglu", **{name: float("nan")})  # swiglu ignores them
    with pytest.raises(TypeError, match=r"grouped_gemm: d_dtype: expected one of .*got 'bogus'"):
        mj.grouped_gemm(a, b, off, d_dtype="bogus")
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: limit: expected a positive clamp limit for "
                                         r"swiglu_clamped \(in f32.*\), got 1e-50"):
        mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=1e-50)
    # A limit that is subnormal in f32 would reach the op as 0 (XLA flushes subnormal attributes).
    with pytest.raises(ValueError, match=r"grouped_gemm_glu: limit: .*at least 1.1754944e-38\), got 1e-40"):
        mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=1e-40)
    assert mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=1.2e-38).shape[0] == a.shape[0]
    # An infinite limit, or one past the f32 range, clamps nothing (docs/ops.md §0), without a NumPy warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unclamped = [np.asarray(mj.grouped_gemm_glu(a, b, off, activation="swiglu_clamped", limit=lim))
                     for lim in (float("inf"), 1e40, 1e30)]
    rows = int(off[-1])  # the tail rows are not written
    np.testing.assert_array_equal(unclamped[0][:rows], unclamped[1][:rows])
    np.testing.assert_array_equal(unclamped[0][:rows], unclamped[2][:rows])
    # None is the documented default of every dtype option (f32 for wgrad's W and gemm_swiglu's ab12).
    x, dy = rand(rng, (32, 16)), rand(rng, (32, 8))
    assert mj.grouped_gemm_wgrad(x, dy, offsets_of([10, 22]), w_dtype=None).dtype == jnp.float32
    assert mj.gemm_swiglu(a, b[0], glu_layout="halves", ab12_dtype=None)[0].dtype == jnp.float32
    # A message of the library's own checks names the op once.
    with pytest.raises(ValueError, match=r"^moegemm\.jax\.grouped_gemm: offsets: expected 1 <= E <= 1024"):
        mj.grouped_gemm(a[:, :8], jnp.ones((1025, 8, 8), jnp.bfloat16), jnp.arange(1025, dtype=jnp.int32) % 200)
