"""What ``help(torch.ops.moegemm.<op>)`` prints: one docstring per op, attached to its overload packet and each
overload by ``_torch_ops`` (ops registered in C++ carry none). Formulas: docs/ops.md, by section."""

from __future__ import annotations

_OFFSETS = """

Shapes: M rows, E experts, ``offsets`` (E,) int32, the cumulative end row of each expert (any alignment;
ends are clamped into [previous end, M] on the device, so no value reads out of bounds)."""

_OPERANDS = """ ``b_layout="nk"``:
weights (E, N, K), K contiguous; ``"kn"``: (E, K, N), N contiguous. ``alpha`` (E,) and ``beta`` (E,)
float32 per expert, ``prob`` (M,) float32 per row, ``bias`` (E, N) bfloat16 or float32."""

_RULES = """
dtypes: CUDA takes bfloat16 operands (the sm_90a kernels), the CPU backend also float16, float32 and
float64. Outputs are new uninitialised tensors; the rows of (M, ...) outputs at or past ``offsets[-1]`` are
left unwritten unless ``zero_tail=True``; an output not requested is a (0,) tensor. ``validate=True`` reads
the offsets on the host first (a sync) and refuses decreasing, negative or past-M ends.
Raises: ValueError naming the operand (shape, dtype, stride, 16-byte alignment, option, aliasing);
NotImplementedError for what the backend cannot run (f16/f32/f64 on CUDA, a GPU other than sm_90);
RuntimeError for a failed CUDA call, and for a backward through the op, which has no autograd formula (use
``moegemm.torch.grouped_mm``, ``moe_mlp`` or ``MoEMLP`` for gradients)."""

_COMMON = _OFFSETS + _OPERANDS + _RULES

_DENSE = """

Shapes: ``b_layout="nk"``: b (N, K), K contiguous; ``"kn"``: (K, N). ``alpha`` is a Python float, ``prob``
(M,) float32. dtypes: CUDA takes bfloat16 operands, the CPU backend also float16, float32 and float64.
Outputs are new uninitialised tensors, every row written; an output not requested is a (0,) tensor.
Raises: ValueError naming the operand; NotImplementedError for what the backend cannot run; RuntimeError
for a failed CUDA call, and for a backward through the op (no autograd formula)."""

OP_DOCS = {
    "grouped_gemm": """Grouped GEMM over experts' row ranges (docs/ops.md §1, cuDNN grouped/unfused).

For each expert g and row r it owns: G = alpha[g] * a[r] @ B_g^T + bias[g]; d = prob[r] * G, c = G.
a (M, K) row-major or column-major; b (E, N, K) or (E, K, N). Returns (d, c): d (M, N) in ``out_dtype``
(default a's; bfloat16, float16 or float32), c (M, N) with ``generate_c=True``.""" + _COMMON,
    "grouped_gemm_glu": """Grouped GEMM with a fused gated activation (docs/ops.md §2, cuDNN grouped/glu).

G = alpha[g] * a[r] @ B_g^T + bias[g] has N = 2I columns, gate and up paired by ``glu_layout``
("halves": gate [0, I), up [I, 2I); "interleaved32": 32-column blocks gate, up, ...;
"interleaved32_up_first"). d = prob[r] * act(gate, up) with ``activation`` "swiglu" (silu(gate) * up),
"geglu" (gelu_tanh(gate) * up) or "swiglu_clamped" (gpt-oss: (clamp(up, ±limit) + linear_offset) *
g' * sigmoid(act_alpha * g'), g' = min(gate, limit)). a (M, K); b (E, 2I, K) or (E, K, 2I); bias (E, 2I).
Returns (d, c): d (M, I) in ``out_dtype`` (default a's), c = G (M, 2I) with ``generate_c=True``, the
pre-activation that grouped_gemm_dglu takes.""" + _COMMON,
    "grouped_gemm_dglu": """Backward through the gated activation, fused into the dgrad GEMM (docs/ops.md §3).

dH = alpha[g] * a[r] @ B_g^T (a = dY (M, K), b (E, I, K) or (E, K, I)); gate and up read from
beta[g] * c (c: the forward's saved pre-activation (M, 2I), paired by ``glu_layout``); ``activation``,
``limit``, ``act_alpha`` and ``linear_offset`` as in grouped_gemm_glu's forward. Returns
(dc, dprob, dbias, amax): dc = [dH * prob * dact/dgate, dH * prob * dact/dup] (M, 2I) in c's column
layout and ``dc_dtype`` (default c's); with ``compute_dprob``, dprob (M,) float32 = sum_i h * dH; with
``compute_dbias``, dbias (E, 2I) in ``dbias_dtype`` (float32 default, or bfloat16), per-expert column sums
of dc (0 for empty experts); with ``compute_amax``, amax (2,) float32 = [max |d_gate|, max |d_up|].
alpha is applied once (cuDNN applies it twice). The reductions are ordered, bitwise reproducible.""" + _COMMON,
    "grouped_gemm_srelu": """Grouped GEMM with a fused squared ReLU (docs/ops.md §4).

G = alpha[g] * a[r] @ B_g^T + bias[g]; d = prob[r] * relu(G)^2, c = G. a (M, K); b (E, N, K) or
(E, K, N). Returns (d, c), each (M, N): d in ``out_dtype`` (default a's), c with ``generate_c=True``."""
    + _COMMON,
    "grouped_gemm_dsrelu": """Backward through the squared ReLU, fused into the dgrad GEMM (docs/ops.md §4).

dH = alpha[g] * a[r] @ B_g^T (a = dY (M, K), b (E, N, K) or (E, K, N)); c the saved pre-activation
(M, N). Returns (dc, dprob, dbias, amax): dc = 2 * relu(c) * dH * prob (M, N) in ``dc_dtype`` (default
c's); with ``compute_dprob``, dprob (M,) float32 = sum_n relu(c)^2 * dH; with ``compute_dbias``, dbias
(E, N) in ``dbias_dtype`` (float32 default, or bfloat16), 0 for empty experts; with ``compute_amax``, amax
(1,) float32 = max |dc|.""" + _COMMON,
    "grouped_gemm_wgrad": """Per-expert weight gradient, the token dim ragged (docs/ops.md §5, cuDNN grouped/wgrad).

W_g = x[rows_g]^T @ dy[rows_g] for x (M, H) and dy (M, N), both row-major. ``.default`` returns w (E, H, N),
or (E, N, H) with ``transpose_output=True``, in ``out_dtype`` (default float32, float64 for float64
inputs; or a 16-bit type); experts without rows get exact zeros, written by the op.
``.accumulate(x, dy, offsets, w)`` adds into ``w`` in place (declared ``Tensor(a!)``; empty experts are
left as they are) and returns nothing; ``w`` must not overlap x or dy.""" + _OFFSETS + _RULES,
    "gemm_swiglu": """Dense GEMM with SwiGLU (docs/ops.md §6, cuDNN dense/swiglu).

ab12 = alpha * a @ b^T (M, N) in ``ab12_dtype`` (default float32; bfloat16, float16 or float32);
c = up * silu(gate) (M, N/2) in ``out_dtype`` (default a's), gate and up paired by ``glu_layout`` (default
"interleaved32_up_first", the cuDNN dense convention; "halves" and "interleaved32" too). Returns
(ab12, c).""" + _DENSE,
    "gemm_amax": """Dense GEMM with the absolute maximum of its result (docs/ops.md §6).

c = a @ b^T (M, N) in ``out_dtype`` (default a's); amax (1,) float32 = max |c| of the float32 values before
rounding (0 for M = 0). Returns (c, amax).""" + _DENSE,
    "gemm_srelu": """Dense GEMM with a fused squared ReLU (docs/ops.md §6, §4 with one group).

G = alpha * a @ b^T + bias; d = prob * relu(G)^2 (M, N) in ``out_dtype`` (default a's), c = G with
``generate_c=True``; bias optional (N,) bfloat16 or float32. Returns (d, c).""" + _DENSE,
    "gemm_dsrelu": """Backward through a dense squared ReLU (docs/ops.md §6, §4 with one group).

dH = alpha * a @ b^T (a = dY); dc = 2 * relu(c) * dH * prob (M, N) in ``dc_dtype`` (default c's). Returns
(dc, dprob, dbias, amax): with ``compute_dprob``, dprob (M,) float32 = sum_n relu(c)^2 * dH; with
``compute_dbias``, dbias (N,) = the column sums of dc, in ``dbias_dtype`` (float32 default, or bfloat16); with
``compute_amax``, amax (1,) float32 = max |dc|.""" + _DENSE,
}
