"""PyTorch front end of moegemm: ``torch.ops.moegemm.*`` custom ops, their fake kernels, autograd.

Importing this module loads ``libmoegemm_torch.so`` (the C++ ops, registered with ``TORCH_LIBRARY`` for
the CPU and CUDA dispatch keys) and registers a fake kernel for every op, so the ops trace under
``torch.compile(fullgraph=True)`` and pass ``torch.library.opcheck``.

Ops (contracts: docs/ops.md; schemas and conventions: docs/torch.md). The grouped ones take ``offsets`` (E,)
int32, the cumulative end row of each expert, on the device of the other operands; CPU tensors run the CPU
reference backend (bf16/f16, also f32/f64 inputs), CUDA tensors the sm_90a kernels (every op, forward and
backward; bf16 inputs):

- ``grouped_gemm(a, b, offsets, *, b_layout, alpha, prob, bias, generate_c, out_dtype, zero_tail,
  validate) -> (d, c)``
- ``grouped_gemm_glu(... , activation, glu_layout, limit, act_alpha, linear_offset, ...) -> (d, c)``
- ``grouped_gemm_dglu(a, b, c, offsets, *, ..., compute_dprob, compute_dbias, compute_amax, ...)
  -> (dc, dprob, dbias, amax)``
- ``grouped_gemm_srelu -> (d, c)``, ``grouped_gemm_dsrelu -> (dc, dprob, dbias, amax)``
- ``grouped_gemm_wgrad(x, dy, offsets, *, transpose_output, out_dtype, validate) -> w`` and
  ``grouped_gemm_wgrad.accumulate(x, dy, offsets, w, ...)`` (adds into ``w`` in place)
- ``gemm_swiglu -> (ab12, c)``, ``gemm_amax -> (c, amax)``, ``gemm_srelu -> (d, c)``,
  ``gemm_dsrelu -> (dc, dprob, dbias, amax)``

Conventions: ``b_layout="nk"`` means weights stored (E, N, K) with K contiguous, ``"kn"`` (E, K, N) with
N contiguous. An optional output is requested with its flag (``generate_c``, ``compute_dprob``, ...);
one not requested comes back as an empty tensor of shape (0,). Outputs are uninitialised allocations
of the caching allocator on the current stream; rows at or past ``offsets[-1]`` are left unwritten
unless ``zero_tail=True``. Bad operands raise ``ValueError`` naming the operand; requests the backend
cannot serve (f16, f32 or f64 inputs on CUDA, 8-bit and FP4 inputs, a GPU other than compute capability 9.0;
docs/ops.md §0.2) raise ``NotImplementedError``; a failed CUDA call ``RuntimeError``. Device workspace, where an op
needs one, is sized by the C++ ``X_workspace_bytes`` and allocated (uninitialised) by the caching allocator.

Higher level: :func:`grouped_mm` (``torch._grouped_mm`` drop-in), :func:`moe_mlp` and :class:`MoEMLP`
(a differentiable MoE MLP on the fused GLU ops).
"""

from __future__ import annotations

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError("moegemm.torch needs torch (pip install torch); `import moegemm` works without it") from exc

from . import _torch_ops  # noqa: E402,F401  (loads the C++ ops and registers their fake kernels)
from ._torch_grouped_mm import grouped_mm  # noqa: E402
from ._torch_moe import MoEMLP, moe_mlp  # noqa: E402

ops = torch.ops.moegemm
"""The op namespace, ``torch.ops.moegemm``."""

__all__ = ["MoEMLP", "grouped_mm", "moe_mlp", "ops"]
