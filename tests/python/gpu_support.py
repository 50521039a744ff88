"""Which ops have an sm_90a kernel, for which input dtypes, and whether this process can run them: the one
place the JAX and torch tests consult to decide where an op's test runs and what it expects on a GPU.

Policy:
- Every op has an sm_90a kernel (GPU_KERNEL_OPS is ALL_OPS), forward and backward, for bf16 inputs
  (GPU_INPUT_DTYPES). So the composite entry points run entirely on the GPU: moegemm.jax.ragged_dot and
  moe_mlp with their custom_vjp, moegemm.torch.grouped_mm (every mode) and MoEMLP / moe_mlp with autograd.
- A JAX test that follows the machine (jax_helpers.device_for / on_device_for) runs on the GPU when one is
  present and has_gpu_kernel(its ops, dtypes=its input dtypes), on the CPU backend otherwise: on a GPU
  machine its bf16 cases exercise the kernels, its f16 cases the CPU reference.
- A test that must check both backends on a GPU machine is parametrised over the platform
  (jax_helpers.PLATFORMS, torch_helpers.DEVICES): the CPU variant runs everywhere, the GPU variant is marked
  `gpu` and skipped with its reason where no GPU that runs the kernels is present. Both make the same
  assertions.
- What stays off the GPU, asserted by the GPU tests: f16 inputs (the kernels take bf16; the call raises
  the op's "unsupported" error naming bf16: NotImplementedError in torch, UNIMPLEMENTED in JAX); f32/f64
  inputs (the CPU backend only, by contract); 8-bit and FP4 inputs (unsupported on every backend).
"""

from __future__ import annotations

import functools

ALL_OPS = ("grouped_gemm", "grouped_gemm_glu", "grouped_gemm_dglu", "grouped_gemm_srelu", "grouped_gemm_dsrelu",
           "grouped_gemm_wgrad", "gemm_swiglu", "gemm_amax", "gemm_srelu", "gemm_dsrelu")

# Ops the sm_90a backend runs (src/sm90/backend.cu): all of them.
GPU_KERNEL_OPS = frozenset(ALL_OPS)

# Input dtypes the sm_90a kernels take (other 16-bit inputs raise unsupported on the device).
GPU_INPUT_DTYPES = frozenset({"bfloat16"})

# The ops of the composite entry points.
RAGGED_DOT_FORWARD = ("grouped_gemm",)
RAGGED_DOT_BACKWARD = ("grouped_gemm", "grouped_gemm_wgrad")
MOE_MLP_FORWARD = ("grouped_gemm_glu", "grouped_gemm")
MOE_MLP_BACKWARD = ("grouped_gemm_dglu", "grouped_gemm", "grouped_gemm_wgrad")


def refused_dtype_pattern(op: str) -> str:
    """Regex of the error of `op` on device operands of an input dtype the kernels do not take (f16): the
    message names the op and the dtype the kernels take."""
    return op + r":.*\b(bf16|bfloat16)\b"


def dtype_name(dtype) -> str:
    """'bfloat16' for jnp.bfloat16, np.dtype('bfloat16'), torch.bfloat16 or the string itself."""
    text = str(dtype)
    if text.startswith("torch."):
        return text[len("torch."):]
    import numpy as np
    return np.dtype(dtype).name


def has_gpu_kernel(*ops, dtypes=()) -> bool:
    """Every op of `ops` has an sm_90a kernel and every input dtype of `dtypes` is one the kernels take."""
    unknown = set(ops) - set(ALL_OPS)
    assert not unknown, f"not an op: {sorted(unknown)}"
    return all(op in GPU_KERNEL_OPS for op in ops) and all(dtype_name(d) in GPU_INPUT_DTYPES for d in dtypes)


@functools.lru_cache(maxsize=None)
def jax_gpu_absence() -> str | None:
    """Why JAX cannot run the sm_90a kernels in this process, or None where it can. Where the machine has an
    sm_90 GPU that JAX does not use (a jax without its CUDA plugin, say), the reason says so, so that a GPU
    machine set up wrong does not read as one without a GPU."""
    try:
        import jax
        if not any(d.platform == "gpu" for d in jax.devices()):
            reason = "JAX has no GPU device"
        else:
            import moegemm.jax as mj
            if mj.device_kernels_available():
                return None
            reason = "moegemm's JAX binding cannot run the sm_90a kernels on JAX's GPU"
    except Exception as exc:  # no jax, no backend, no binding
        reason = f"JAX or moegemm.jax failed to load ({type(exc).__name__}: {exc})"
    if torch_gpu_present():
        reason += "; torch sees an sm_90 GPU on this machine: install a jax with its CUDA plugin (a jax[cuda…] extra)"
    return reason


def jax_gpu_present() -> bool:
    """JAX sees a GPU, and the moegemm JAX binding can run the sm_90a kernels in this process."""
    return jax_gpu_absence() is None


@functools.lru_cache(maxsize=None)
def torch_gpu_present() -> bool:
    """torch sees an sm_90 GPU (the CUDA dispatch key of the ops runs the sm_90a kernels there)."""
    try:
        import torch
        return bool(torch.cuda.is_available()) and torch.cuda.get_device_capability() == (9, 0)
    except Exception:
        return False
