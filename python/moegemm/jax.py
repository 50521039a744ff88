"""moegemm.jax: the moegemm ops as XLA FFI custom calls, plus ``ragged_dot``, ``ragged_dot_general`` and
``moe_mlp``.

Every op follows docs/ops.md (the contract); this module documents only what the JAX front end adds.

Conventions of every function here:
- Weights are *dense* (b_ptrs is not offered in JAX: a JAX array cannot carry raw device addresses
  portably). ``b_layout="nk"``: b is (E, N, K) (K contiguous, G = A @ B_g^T); ``"kn"``: b is (E, K, N)
  (the ``jax.lax.ragged_dot`` layout, G = A @ B_g). Dense ops take (N, K) or (K, N).
- ``offsets``: (E,) int32, the cumulative end row of each expert; it stays on the device (no host sync).
- Outputs come from XLA uninitialised and are written by the op alone (grouped_gemm_wgrad's with ``w=`` is
  w's buffer, aliased in, which the op adds into): rows at or past offsets[-1] are
  left unspecified unless ``zero_tail=True`` (then exactly those rows are zeroed by the op itself).
- Shape, dtype and layout errors are raised at trace time (ValueError for shapes and values, TypeError
  for dtypes), naming the operand, what was expected and what was given; the library's own contract
  checks also run at trace time (through the workspace-size query).
- ``jax.vmap`` of any op loops over the batch (ffi_call ``vmap_method="sequential"``).
- Under ``jax.jit``'s automatic partitioning and on Explicit meshes, an op whose activation rows (M) are
  sharded runs on each device's rows: row outputs keep that sharding, per-expert sums (weight gradient,
  dbias) are summed over the shards and amax is their maximum; nothing is gathered (moegemm._jax_partition,
  docs/jax.md).
- Works under ``jax.jit`` and eagerly with bit-identical results; on CPU the CPU reference runs,
  on an sm_90 GPU the sm_90a kernels (every op, forward and backward, so ragged_dot and moe_mlp with
  their gradients run entirely on the GPU). The kernels take bf16 inputs: f16 operands run on the CPU
  backend, and on the GPU the call fails with UNIMPLEMENTED (a JaxRuntimeError naming the op).
Importing this module needs jax (``import moegemm`` does not), loads libmoegemm_jax.so and registers its
FFI targets (ImportError naming the folder where the library is missing).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

try:
    import jax
    import jax.numpy as jnp
    import numpy as np
except ImportError as exc:  # pragma: no cover - exercised only without jax
    raise ImportError("moegemm.jax needs jax (pip install 'jax>=0.10'); `import moegemm` works without it") from exc

from moegemm import _jax_checks as chk
from moegemm import _jax_native as native
from moegemm import _jax_partition as part

# The FFI targets are registered here, not at the first op call: a process that runs only deserialized code
# (jax.export, jax.experimental.serialize_executable) traces no op and needs them all the same.
native.library()

__all__ = [
    "grouped_gemm", "grouped_gemm_glu", "grouped_gemm_dglu", "grouped_gemm_srelu", "grouped_gemm_dsrelu",
    "grouped_gemm_wgrad", "gemm_swiglu", "gemm_amax", "gemm_srelu", "gemm_dsrelu",
    "GroupedBackward", "ragged_dot", "ragged_dot_general", "moe_mlp", "device_kernels_available", "FFI_TARGETS",
    "MOE_MLP_CHECKPOINT_NAMES",
]

FFI_TARGETS = tuple(native.target_name(op) for op in native.OPS)
"""The XLA FFI target names of the ten ops (``moegemm_grouped_gemm``, ...). ``jax.export`` refuses custom
calls without a compatibility guarantee unless told: pass
``disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(t) for t in FFI_TARGETS]``. The targets' ABI is
this build's: run exported code with the moegemm it was exported with (docs/jax.md)."""

ACTIVATIONS = ("swiglu", "geglu", "swiglu_clamped")
GLU_LAYOUTS = ("halves", "interleaved32", "interleaved32_up_first")


def device_kernels_available() -> bool:
    """True when the sm_90a kernels can run in this process on the current CUDA device."""
    return native.device_kernels_available()


class GroupedBackward(NamedTuple):
    """Outputs of grouped_gemm_dglu, grouped_gemm_dsrelu and gemm_dsrelu; fields not requested are None."""
    dc: jax.Array
    dprob: Optional[jax.Array]
    dbias: Optional[jax.Array]
    amax: Optional[jax.Array]


def _spec(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(int(s) for s in shape), np.dtype(dtype))


def _weights(op, a, b, b_layout, e, a_name="a", n_name="N"):
    """(N, K) of the dense expert weights after checking them against a (M, K) and E experts (E from offsets,
    chk.offsets_count: as the contract, docs/ops.md §0, which blames the weights whose first dimension
    differs). ``n_name``: what the op's docstring calls b's N (I for the dGLU)."""
    chk.check_choice(op, "b_layout", b_layout, ("nk", "kn"))
    chk.check_rank(op, "b", b, 3, f"(E, {n_name}, K)" if b_layout == "nk" else f"(E, K, {n_name})")
    chk.check_input_dtype(op, "b", b, (a.dtype,))
    chk.check_extent(op, "b", b, 0, e, "E from offsets")
    n, k = (b.shape[1], b.shape[2]) if b_layout == "nk" else (b.shape[2], b.shape[1])
    chk.check_extent(op, "b", b, 2 if b_layout == "nk" else 1, a.shape[1], f"K from {a_name}")
    chk.check_aligned(op, a_name, a, 1, "K")
    chk.check_aligned(op, "b", b, 1 if b_layout == "nk" else 2, n_name)
    return n, k


def _dense_weights(op, a, b, b_layout, a_name="a"):
    """(N, K) of a single (N, K) / (K, N) weight matrix after checking it against a (M, K)."""
    chk.check_choice(op, "b_layout", b_layout, ("nk", "kn"))
    chk.check_rank(op, "b", b, 2, "(N, K)" if b_layout == "nk" else "(K, N)")
    chk.check_input_dtype(op, "b", b, (a.dtype,))
    n = b.shape[0] if b_layout == "nk" else b.shape[1]
    chk.check_extent(op, "b", b, 1 if b_layout == "nk" else 0, a.shape[1], f"K from {a_name}")
    chk.check_aligned(op, a_name, a, 1, "K")
    chk.check_aligned(op, "b", b, 0 if b_layout == "nk" else 1, "N")
    return n, a.shape[1]


def _activations(op, a, name="a", layout="(M, K)"):
    chk.check_rank(op, name, a, 2, layout)
    chk.check_input_dtype(op, name, a)
    return a.shape[0]


def _optional_vector(op, name, x, n, what, dtypes=(jnp.float32,)):
    if x is None:
        return
    chk.check_rank(op, name, x, 1, f"({what},)")
    chk.check_dtype(op, name, x, dtypes)
    chk.check_extent(op, name, x, 0, n, what)


def _operands(*triples):
    """The operands given (optional ones left out where None), their roles (moegemm._jax_partition) and their
    names, from (name, operand, role) triples."""
    present = [(name, x, role) for name, x, role in triples if x is not None]
    return [x for _, x, _ in present], [role for _, _, role in present], [name for name, _, _ in present]


def _glu_attrs(op, activation, glu_layout, limit, act_alpha, linear_offset):
    attrs = dict(activation=chk.check_choice(op, "activation", activation, ACTIVATIONS),
                 glu_layout=chk.check_choice(op, "glu_layout", glu_layout, GLU_LAYOUTS))
    attrs["limit"], attrs["act_alpha"], attrs["linear_offset"] = chk.clamp_parameters(
        op, activation, limit, act_alpha, linear_offset)
    return attrs


def _grouped_forward(op, a, b, offsets, alpha, prob, bias, b_layout, generate_c, d_dtype, c_dtype,
                     zero_tail, glu, validate):
    generate_c, zero_tail = chk.static_bool(op, "generate_c", generate_c), chk.static_bool(op, "zero_tail", zero_tail)
    validate = chk.static_bool(op, "validate", validate)
    m = _activations(op, a)
    e = chk.offsets_count(op, offsets)
    n, _ = _weights(op, a, b, b_layout, e)
    _optional_vector(op, "alpha", alpha, e, "E")
    _optional_vector(op, "prob", prob, m, "M")
    if bias is not None:
        chk.check_rank(op, "bias", bias, 2, "(E, N)")
        chk.check_dtype(op, "bias", bias, (jnp.bfloat16, jnp.float32))
        chk.check_extent(op, "bias", bias, 0, e, "E from offsets")
        chk.check_extent(op, "bias", bias, 1, n, "N from b")
    d_cols = n
    if glu is not None:
        if n % 2:
            raise ValueError(f"moegemm.jax.{op}: b: N = 2I must be even, got N = {n}")
        d_cols = n // 2
    d_dt = chk.output_dtype(op, "d_dtype", d_dtype, a.dtype)
    c_dt = chk.output_dtype(op, "c_dtype", c_dtype, a.dtype)  # checked also without generate_c
    outputs = [_spec((m, d_cols), d_dt)]
    if generate_c:
        outputs.append(_spec((m, n), c_dt))
    inputs, roles, names = _operands(("a", a, part.ROWS), ("b", b, part.WHOLE), ("offsets", offsets, part.OFFSETS),
                                     ("alpha", alpha, part.WHOLE), ("prob", prob, part.ROWS),
                                     ("bias", bias, part.WHOLE))
    attrs = dict(b_layout=b_layout, has_alpha=alpha is not None, has_prob=prob is not None,
                 has_bias=bias is not None, generate_c=generate_c, zero_tail=zero_tail)
    if glu is not None:
        attrs.update(glu)
    if validate:
        native.validate_offsets(op, offsets, m)
    out = native.call(op, inputs, outputs, attrs, roles, [part.ROWS] * len(outputs), names=names)
    return (out[0], out[1]) if generate_c else out[0]


def grouped_gemm(a, b, offsets, *, alpha=None, prob=None, bias=None, b_layout="nk", generate_c=False,
                 d_dtype=None, c_dtype=None, zero_tail=False, validate=False):
    """Grouped GEMM (docs/ops.md §1): ``G[r] = alpha[g] * a[r] @ B_g^T (+ bias[g])``, ``D = prob[r] * G``.

    Args:
      a: (M, K) bf16/f16, rows sorted by expert.
      b: (E, N, K) with ``b_layout="nk"`` or (E, K, N) with ``"kn"``; a's dtype. K, N multiples of 8.
      offsets: (E,) int32 cumulative end rows, 1 <= E <= 1024.
      alpha: optional (E,) f32 per-expert scale. prob: optional (M,) f32 per-row scale of D only.
      bias: optional (E, N) bf16/f32.
      generate_c: also return C = G (pre-prob). d_dtype, c_dtype: bf16/f16/f32 (default a.dtype).
      zero_tail: write zeros to rows >= offsets[-1] of every output (default: leave them unspecified).
      validate: read offsets to the host first (a sync) and raise ValueError unless each is in [0, M] and
        non-decreasing, as the C++ ops' validate=true (docs/ops.md §0); concrete offsets only (an eager call,
        or offsets a traced function closes over).
        Without it garbage offsets are clamped, never read out of bounds.
    Returns:
      D (M, N), or (D, C) with generate_c.
    Raises:
      At trace time, naming the operand: ValueError for shapes, E, alignment and option values; TypeError for
      dtypes, a non-array operand and a flag that is not a bool. With validate: ValueError naming the first bad
      offset, TypeError for traced offsets. The op has no derivative rule: jax.grad or jax.vjp through it
      raises ValueError (ragged_dot, ragged_dot_general and moe_mlp are differentiable).
    """
    return _grouped_forward("grouped_gemm", a, b, offsets, alpha, prob, bias, b_layout, generate_c,
                            d_dtype, c_dtype, zero_tail, None, validate)


def grouped_gemm_glu(a, b, offsets, *, alpha=None, prob=None, bias=None, b_layout="nk",
                     activation="swiglu", glu_layout="halves", limit=7.0, act_alpha=1.702,
                     linear_offset=1.0, generate_c=False, d_dtype=None, c_dtype=None, zero_tail=False,
                     validate=False):
    """Grouped GEMM + gated activation (docs/ops.md §2): G as in grouped_gemm with N = 2I columns,
    ``D = prob * act(gate, up)``.

    Args: as grouped_gemm, plus
      activation: "swiglu" (silu(gate) * up), "geglu" (gelu_tanh(gate) * up) or "swiglu_clamped"
        (gpt-oss: g' = min(gate, limit), u' = clamp(up, -limit, limit),
        (u' + linear_offset) * g' * sigmoid(act_alpha * g')).
      glu_layout: "halves" (gate = columns [0, I), up = [I, 2I); I a multiple of 8 for 16-bit D and C, of 4
        for f32), "interleaved32" (32-column blocks gate, up, gate, up, ...) or "interleaved32_up_first" (up,
        gate, ...); the interleaved layouts need N = 2I a multiple of 64.
      limit, act_alpha, linear_offset: swiglu_clamped's parameters, real Python numbers baked into the compiled
        call; it needs limit > 0 and a finite act_alpha and linear_offset, in f32. swiglu and geglu ignore them.
    Returns:
      D (M, I), or (D, C) with generate_c, C = G (M, 2I) (the residual of grouped_gemm_dglu).
    Raises:
      As grouped_gemm; ValueError also for a limit, act_alpha or linear_offset that swiglu_clamped refuses,
      TypeError for one that is not a real number or is traced.
    """
    glu = _glu_attrs("grouped_gemm_glu", activation, glu_layout, limit, act_alpha, linear_offset)
    return _grouped_forward("grouped_gemm_glu", a, b, offsets, alpha, prob, bias, b_layout, generate_c,
                            d_dtype, c_dtype, zero_tail, glu, validate)


def grouped_gemm_srelu(a, b, offsets, *, alpha=None, prob=None, bias=None, b_layout="nk",
                       generate_c=False, d_dtype=None, c_dtype=None, zero_tail=False, validate=False):
    """Grouped GEMM + squared ReLU (docs/ops.md §4): ``C = G``, ``D = prob * relu(G)^2``.

    Args and Raises: as grouped_gemm. Returns D (M, N), or (D, C) with generate_c.
    """
    return _grouped_forward("grouped_gemm_srelu", a, b, offsets, alpha, prob, bias, b_layout,
                            generate_c, d_dtype, c_dtype, zero_tail, None, validate)


def _grouped_backward(op, dy, b, c, offsets, alpha, beta, prob, b_layout, c_cols_per_n,
                      compute_dprob, compute_dbias, compute_amax, amax_len, dc_dtype, dbias_dtype,
                      zero_tail, glu, validate):
    compute_dprob, compute_dbias, compute_amax, zero_tail = (
        chk.static_bool(op, name, flag) for name, flag in (("compute_dprob", compute_dprob),
                                                           ("compute_dbias", compute_dbias),
                                                           ("compute_amax", compute_amax), ("zero_tail", zero_tail)))
    validate = chk.static_bool(op, "validate", validate)
    m = _activations(op, dy, "dy")
    e = chk.offsets_count(op, offsets)
    n, _ = _weights(op, dy, b, b_layout, e, a_name="dy", n_name="I" if c_cols_per_n == 2 else "N")
    chk.check_rank(op, "c", c, 2, "(M, C)")
    chk.check_dtype(op, "c", c, chk.OUTPUT_FLOATS)
    chk.check_extent(op, "c", c, 0, m, "M from dy")
    chk.check_extent(op, "c", c, 1, c_cols_per_n * n, "2I from b" if c_cols_per_n == 2 else "N from b")
    _optional_vector(op, "alpha", alpha, e, "E")
    _optional_vector(op, "beta", beta, e, "E")
    _optional_vector(op, "prob", prob, m, "M")
    cols = c.shape[1]
    dbias_dt = chk.output_dtype(op, "dbias_dtype", dbias_dtype, jnp.float32,  # checked also without dbias
                                (jnp.float32, jnp.bfloat16))
    outputs = [_spec((m, cols), chk.output_dtype(op, "dc_dtype", dc_dtype, c.dtype))]
    if compute_dprob:
        outputs.append(_spec((m,), jnp.float32))
    if compute_dbias:
        outputs.append(_spec((e, cols), dbias_dt))
    if compute_amax:
        outputs.append(_spec((amax_len,), jnp.float32))
    inputs, roles, names = _operands(("dy", dy, part.ROWS), ("b", b, part.WHOLE), ("c", c, part.ROWS),
                                     ("offsets", offsets, part.OFFSETS), ("alpha", alpha, part.WHOLE),
                                     ("beta", beta, part.WHOLE), ("prob", prob, part.ROWS))
    output_roles = ([part.ROWS] + [part.ROWS] * compute_dprob + [part.SUM] * compute_dbias
                    + [part.MAX] * compute_amax)
    attrs = dict(b_layout=b_layout, has_alpha=alpha is not None, has_prob=prob is not None,
                 compute_dprob=compute_dprob, compute_dbias=compute_dbias,
                 compute_amax=compute_amax, zero_tail=zero_tail)
    if glu is not None:
        attrs.update(glu, has_beta=beta is not None)
    if validate:
        native.validate_offsets(op, offsets, m)
    out = iter(native.call(op, inputs, outputs, attrs, roles, output_roles, names=names))
    dc = next(out)
    dprob = next(out) if compute_dprob else None
    dbias = next(out) if compute_dbias else None
    amax = next(out) if compute_amax else None
    return dc, dprob, dbias, amax


def grouped_gemm_dglu(dy, b, c, offsets, *, alpha=None, beta=None, prob=None, b_layout="nk",
                      activation="swiglu", glu_layout="halves", limit=7.0, act_alpha=1.702,
                      linear_offset=1.0, compute_dprob=False, compute_dbias=False, compute_amax=False,
                      dc_dtype=None, dbias_dtype=jnp.float32, zero_tail=False, validate=False):
    """Backward through the gated activation (docs/ops.md §3).

    ``dH = alpha[g] * dy @ B_g^T`` (M, I) (alpha applied once); with h = act(gate, up) of ``beta[g] * c``:
    ``d_gate = dH * prob * dact/dgate``, ``d_up = dH * prob * dact/dup`` in c's column layout;
    ``dprob[r] = sum_cols h * dH``; ``dbias[g] = sum over expert rows of dC``;
    ``amax = [max|d_gate|, max|d_up|]``.

    Args:
      dy: (M, K) bf16/f16 incoming gradient of D's consumer (e.g. the down projection's output).
      b: (E, I, K) ("nk") or (E, K, I) ("kn"), dy's dtype: the weights that map h to dy's space.
      c: (M, 2I) bf16/f16/f32 saved pre-activation (grouped_gemm_glu with generate_c).
      offsets, alpha, prob: as grouped_gemm. beta: optional (E,) f32 scale of c.
      activation, glu_layout, limit, act_alpha, linear_offset: as in the forward.
      compute_dprob / compute_dbias / compute_amax: also return dprob (M,) f32, dbias (E, 2I)
        (dbias_dtype f32/bf16; None means f32, as in the torch ops), amax (2,) f32.
      dc_dtype: bf16/f16/f32 (default c.dtype). zero_tail: zero dC and dprob rows >= offsets[-1].
      validate: as grouped_gemm.
    Returns:
      GroupedBackward(dc, dprob, dbias, amax) with None for what was not requested.
    Raises:
      As grouped_gemm_glu, at trace time.
    """
    glu = _glu_attrs("grouped_gemm_dglu", activation, glu_layout, limit, act_alpha, linear_offset)
    return GroupedBackward(*_grouped_backward(
        "grouped_gemm_dglu", dy, b, c, offsets, alpha, beta, prob, b_layout, 2, compute_dprob,
        compute_dbias, compute_amax, 2, dc_dtype, dbias_dtype, zero_tail, glu, validate))


def grouped_gemm_dsrelu(dy, b, c, offsets, *, alpha=None, prob=None, b_layout="nk", compute_dprob=False,
                        compute_dbias=False, compute_amax=False, dc_dtype=None, dbias_dtype=jnp.float32,
                        zero_tail=False, validate=False):
    """Backward of grouped_gemm_srelu (docs/ops.md §4): ``dH = alpha[g] * dy @ B_g^T`` (M, N);
    ``dC = 2 relu(c) dH prob``; ``dprob = sum_cols relu(c)^2 dH``; dbias = per-expert column sums of
    dC; amax = max|dC| (returned as a scalar).

    Args: dy (M, K) bf16/f16; b (E, N, K) / (E, K, N), dy's dtype; c (M, N) bf16/f16/f32 saved
    pre-activation; offsets, alpha, prob, b_layout as grouped_gemm; compute_dprob (dprob (M,) f32),
    compute_dbias (dbias (E, N), dbias_dtype f32/bf16), compute_amax (amax () f32), dc_dtype and zero_tail as
    grouped_gemm_dglu, validate as grouped_gemm. Returns GroupedBackward(dc, dprob, dbias, amax). Raises as
    grouped_gemm.
    """
    dc, dprob, dbias, amax = _grouped_backward(
        "grouped_gemm_dsrelu", dy, b, c, offsets, alpha, None, prob, b_layout, 1, compute_dprob,
        compute_dbias, compute_amax, 1, dc_dtype, dbias_dtype, zero_tail, None, validate)
    return GroupedBackward(dc, dprob, dbias, None if amax is None else amax.reshape(()))


def grouped_gemm_wgrad(x, dy, offsets, *, transpose_output=False, w_dtype=None, w=None, validate=False):
    """Per-expert weight gradient (docs/ops.md §5): ``W_g = x[rows_g]^T @ dy[rows_g]``, or with ``w``
    ``W_g = w_g + x[rows_g]^T @ dy[rows_g]`` (the C++ ``accumulate`` mode).

    Args:
      x: (M, H) bf16/f16; dy: (M, N), x's dtype; H, N multiples of 8; offsets: (E,) int32 over the M rows,
        1 <= E <= 1024.
      transpose_output: return (E, N, H) (W_g^T) instead of (E, H, N).
      w_dtype: f32 (default; also for None) or bf16. With ``w``: None or w's dtype.
      w: optional (E, H, N) (or (E, N, H) with transpose_output) f32/bf16, the gradient to add into (e.g.
        the sum of earlier micro-batches). The custom call aliases it into its result
        (``input_output_aliases``) and adds in place in f32, a bf16 ``w`` rounded once: under ``jax.jit``
        with ``w`` donated (``donate_argnums``) no copy is made; otherwise XLA copies ``w`` first, and ``w``
        itself is left as it was. With rows sharded over devices, the devices' partial sums are summed and
        ``w`` is added once, after that sum.
      validate: as grouped_gemm (offsets over x's M rows).
    Returns:
      W (E, H, N) or (E, N, H). Experts with no rows are exactly zero (written by the op), or ``w``'s
      values with ``w``.
    Raises:
      ValueError / TypeError at trace time: w's shape (ValueError), dtype (TypeError) and a ``w_dtype``
      other than w's (TypeError) included; with validate as grouped_gemm.
    """
    op = "grouped_gemm_wgrad"
    transpose_output = chk.static_bool(op, "transpose_output", transpose_output)
    validate = chk.static_bool(op, "validate", validate)
    m = _activations(op, x, "x", "(M, H)")
    chk.check_rank(op, "dy", dy, 2, "(M, N)")
    chk.check_input_dtype(op, "dy", dy, (x.dtype,))
    chk.check_extent(op, "dy", dy, 0, m, "M from x")
    chk.check_aligned(op, "x", x, 1, "H")
    chk.check_aligned(op, "dy", dy, 1, "N")
    chk.check_rank(op, "offsets", offsets, 1, "(E,)")
    chk.check_dtype(op, "offsets", offsets, (jnp.int32,))
    e, h, n = offsets.shape[0], x.shape[1], dy.shape[1]
    shape = (e, n, h) if transpose_output else (e, h, n)
    layout = "(E, N, H)" if transpose_output else "(E, H, N)"
    if w is None:
        w_dt = chk.output_dtype(op, "w_dtype", w_dtype, jnp.float32, (jnp.float32, jnp.bfloat16))
    else:
        chk.check_rank(op, "w", w, 3, layout)
        chk.check_dtype(op, "w", w, (jnp.float32, jnp.bfloat16))
        if tuple(w.shape) != shape:
            raise ValueError(f"moegemm.jax.{op}: w: expected shape {shape} {layout} from offsets, x and dy"
                             f"{' with transpose_output' if transpose_output else ''}, got {tuple(w.shape)}")
        w_dt = np.dtype(w.dtype)
        if w_dtype is not None and chk.check_output_dtype(op, "w_dtype", w_dtype, (jnp.float32, jnp.bfloat16)) != w_dt:
            raise TypeError(f"moegemm.jax.{op}: w_dtype: expected None or w's dtype {w_dt.name} with w given, "
                            f"got {np.dtype(w_dtype).name}")
    if validate:
        native.validate_offsets(op, offsets, m)
    inputs, roles, names = _operands(("x", x, part.ROWS), ("dy", dy, part.ROWS), ("offsets", offsets, part.OFFSETS),
                                     ("w", w, part.ACCUMULATOR))
    (result,) = native.call(op, inputs, [_spec(shape, w_dt)],
                            dict(transpose_output=transpose_output, accumulate=w is not None), roles, [part.SUM],
                            aliases=() if w is None else ((names.index("w"), 0),), names=names)
    return result


def gemm_swiglu(a, b, *, b_layout="nk", alpha=1.0, glu_layout="interleaved32_up_first",
                ab12_dtype=jnp.float32, c_dtype=None):
    """Dense GEMM + SwiGLU (docs/ops.md §6): ``ab12 = alpha * a @ B^T`` (M, N),
    ``c = up * silu(gate)`` (M, N/2) with the pairing of ``glu_layout`` (default: 32-column blocks,
    block 2j up and 2j+1 gate, the cuDNN dense convention).

    Args: a (M, K) bf16/f16; b (N, K) ("nk") or (K, N) ("kn"), a's dtype; K, N multiples of 8; N a multiple of
    64 for the interleaved layouts (the default included), N/2 of 8 for "halves" (of 4 where ab12 and c are
    f32); alpha: python float, not NaN (baked into the compiled call); ab12_dtype f32 (default)/bf16/f16;
    c_dtype bf16/f16/f32 (default a.dtype). Returns (ab12, c). Raises as grouped_gemm, ValueError for a NaN
    alpha and TypeError for a traced one.
    """
    op = "gemm_swiglu"
    m = _activations(op, a)
    n, _ = _dense_weights(op, a, b, b_layout)
    if n % 2:
        raise ValueError(f"moegemm.jax.{op}: b: N must be even, got N = {n}")
    outputs = [_spec((m, n), chk.output_dtype(op, "ab12_dtype", ab12_dtype, jnp.float32)),
               _spec((m, n // 2), chk.output_dtype(op, "c_dtype", c_dtype, a.dtype))]
    attrs = dict(b_layout=b_layout, alpha=chk.dense_alpha(op, alpha),
                 glu_layout=chk.check_choice(op, "glu_layout", glu_layout, GLU_LAYOUTS))
    ab12, c = native.call(op, [a, b], outputs, attrs, [part.ROWS, part.WHOLE], [part.ROWS, part.ROWS],
                          names=("a", "b"))
    return ab12, c


def gemm_amax(a, b, *, b_layout="nk", c_dtype=None):
    """Dense GEMM with the absolute maximum (docs/ops.md §6): ``C = a @ B^T``, ``amax = max|C|``.

    Args: a (M, K) bf16/f16; b (N, K) / (K, N), a's dtype; K, N multiples of 8; c_dtype bf16/f16/f32
    (default a.dtype). Returns (C (M, N), amax () f32; 0 when M = 0). Raises as grouped_gemm.
    """
    op = "gemm_amax"
    m = _activations(op, a)
    n, _ = _dense_weights(op, a, b, b_layout)
    outputs = [_spec((m, n), chk.output_dtype(op, "c_dtype", c_dtype, a.dtype)),
               _spec((1,), jnp.float32)]
    c, amax = native.call(op, [a, b], outputs, dict(b_layout=b_layout), [part.ROWS, part.WHOLE],
                          [part.ROWS, part.MAX], names=("a", "b"))
    return c, amax.reshape(())


def gemm_srelu(a, b, *, b_layout="nk", alpha=1.0, prob=None, bias=None, generate_c=False, d_dtype=None,
               c_dtype=None):
    """Dense GEMM + squared ReLU (docs/ops.md §6/§4): ``G = alpha * a @ B^T + bias``,
    ``D = prob * relu(G)^2``.

    Args: a (M, K) bf16/f16; b (N, K) / (K, N), a's dtype; K, N multiples of 8; alpha python float, not NaN;
    prob optional (M,) f32; bias optional (N,) bf16/f32; generate_c returns C = G too; d_dtype, c_dtype
    bf16/f16/f32 (default a.dtype).
    Returns D (M, N) or (D, C). Raises as grouped_gemm, ValueError for a NaN alpha and TypeError for a traced
    one.
    """
    op = "gemm_srelu"
    generate_c = chk.static_bool(op, "generate_c", generate_c)
    m = _activations(op, a)
    n, _ = _dense_weights(op, a, b, b_layout)
    _optional_vector(op, "prob", prob, m, "M")
    _optional_vector(op, "bias", bias, n, "N", (jnp.bfloat16, jnp.float32))
    c_dt = chk.output_dtype(op, "c_dtype", c_dtype, a.dtype)  # checked also without generate_c
    outputs = [_spec((m, n), chk.output_dtype(op, "d_dtype", d_dtype, a.dtype))]
    if generate_c:
        outputs.append(_spec((m, n), c_dt))
    inputs, roles, names = _operands(("a", a, part.ROWS), ("b", b, part.WHOLE), ("prob", prob, part.ROWS),
                                     ("bias", bias, part.WHOLE))
    attrs = dict(b_layout=b_layout, alpha=chk.dense_alpha(op, alpha), has_prob=prob is not None,
                 has_bias=bias is not None, generate_c=generate_c)
    out = native.call(op, inputs, outputs, attrs, roles, [part.ROWS] * len(outputs), names=names)
    return (out[0], out[1]) if generate_c else out[0]


def gemm_dsrelu(dy, b, c, *, b_layout="nk", alpha=1.0, prob=None, compute_dprob=False, compute_dbias=False,
                compute_amax=False, dc_dtype=None, dbias_dtype=jnp.float32):
    """Backward of gemm_srelu (docs/ops.md §6/§4): ``dH = alpha * dy @ B^T``; ``dC = 2 relu(c) dH prob``;
    ``dprob = sum_cols relu(c)^2 dH``; dbias = the column sums of dC; amax = max|dC| (returned as a scalar).

    Args: dy (M, K) bf16/f16; b (N, K) / (K, N), dy's dtype; K, N multiples of 8; c (M, N) bf16/f16/f32 saved
    pre-activation; alpha python float, not NaN; prob optional (M,) f32; compute_dprob (dprob (M,) f32),
    compute_dbias (dbias (N,), dbias_dtype f32/bf16), compute_amax (amax () f32); dc_dtype bf16/f16/f32
    (default c.dtype). Returns GroupedBackward(dc, dprob, dbias, amax), None for what was not asked for.
    Raises as grouped_gemm, ValueError for a NaN alpha and TypeError for a traced one.
    """
    op = "gemm_dsrelu"
    compute_dprob, compute_dbias, compute_amax = (
        chk.static_bool(op, name, flag) for name, flag in (("compute_dprob", compute_dprob),
                                                           ("compute_dbias", compute_dbias),
                                                           ("compute_amax", compute_amax)))
    m = _activations(op, dy, "dy")
    n, _ = _dense_weights(op, dy, b, b_layout, a_name="dy")
    chk.check_rank(op, "c", c, 2, "(M, N)")
    chk.check_dtype(op, "c", c, chk.OUTPUT_FLOATS)
    chk.check_extent(op, "c", c, 0, m, "M from dy")
    chk.check_extent(op, "c", c, 1, n, "N from b")
    _optional_vector(op, "prob", prob, m, "M")
    dbias_dt = chk.output_dtype(op, "dbias_dtype", dbias_dtype, jnp.float32,  # checked also without dbias
                                (jnp.float32, jnp.bfloat16))
    outputs = [_spec((m, n), chk.output_dtype(op, "dc_dtype", dc_dtype, c.dtype))]
    if compute_dprob:
        outputs.append(_spec((m,), jnp.float32))
    if compute_dbias:
        outputs.append(_spec((n,), dbias_dt))
    if compute_amax:
        outputs.append(_spec((1,), jnp.float32))
    inputs, roles, names = _operands(("dy", dy, part.ROWS), ("b", b, part.WHOLE), ("c", c, part.ROWS),
                                     ("prob", prob, part.ROWS))
    output_roles = ([part.ROWS] + [part.ROWS] * compute_dprob + [part.SUM] * compute_dbias
                    + [part.MAX] * compute_amax)
    attrs = dict(b_layout=b_layout, alpha=chk.dense_alpha(op, alpha), has_prob=prob is not None,
                 compute_dprob=compute_dprob, compute_dbias=compute_dbias, compute_amax=compute_amax)
    out = iter(native.call(op, inputs, outputs, attrs, roles, output_roles, names=names))
    dc = next(out)
    dprob = next(out) if compute_dprob else None
    dbias = next(out) if compute_dbias else None
    amax = next(out).reshape(()) if compute_amax else None
    return GroupedBackward(dc, dprob, dbias, amax)


from moegemm._jax_ragged_dot import ragged_dot, ragged_dot_general  # noqa: E402
from moegemm._jax_moe_mlp import RESIDUAL_NAMES as MOE_MLP_CHECKPOINT_NAMES, moe_mlp  # noqa: E402

MOE_MLP_CHECKPOINT_NAMES: tuple[str, ...]
"""The ``checkpoint_name``s of moe_mlp's saved values, ``("moe_mlp_h", "moe_mlp_c", "moe_mlp_y")``: its GLU
output h, pre-activation C and output y. Under ``jax.checkpoint``,
``jax.checkpoint_policies.save_only_these_names(*MOE_MLP_CHECKPOINT_NAMES)`` keeps them, so that the backward
runs no second grouped_gemm_glu, also where the loss is not linear in y (docs/jax.md)."""

# Pickled by reference as moegemm.jax.<name>: unpickling imports this module first, which defines the ops
# that their modules import from it.
ragged_dot.__module__ = ragged_dot_general.__module__ = moe_mlp.__module__ = __name__
