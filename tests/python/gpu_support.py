"""Which ops have an sm_90a kernel, and whether this process can run them: the one place the JAX and torch
tests consult to decide where an op's test runs and what it expects on a GPU.

Policy: a test whose ops all have a GPU kernel runs them on the GPU when one is present (CPU otherwise); a
test that needs an op without a GPU kernel (every gradient: the backward passes use grouped_gemm_dglu and
grouped_gemm_wgrad) runs on the CPU backend on every machine. The GPU-marked tests assert that each op
outside GPU_KERNEL_OPS raises the "no sm_90a kernel" error on device operands, so the day a kernel lands
they fail until its name is added here (which then moves every test of that op onto the GPU).
"""

from __future__ import annotations

import functools

ALL_OPS = ("grouped_gemm", "grouped_gemm_glu", "grouped_gemm_dglu", "grouped_gemm_srelu", "grouped_gemm_dsrelu",
           "grouped_gemm_wgrad", "gemm_swiglu", "gemm_amax", "gemm_srelu", "gemm_dsrelu")

# Ops the sm_90a backend runs (src/sm90/backend.cu); every other op raises Error(unsupported).
GPU_KERNEL_OPS = frozenset({"grouped_gemm", "grouped_gemm_glu", "gemm_swiglu"})
NO_GPU_KERNEL_OPS = tuple(op for op in ALL_OPS if op not in GPU_KERNEL_OPS)

# Input dtypes the sm_90a kernels take (other inputs raise unsupported on the device).
GPU_INPUT_DTYPES = frozenset({"bfloat16"})

# The ops of the composite entry points.
RAGGED_DOT_FORWARD = ("grouped_gemm",)
RAGGED_DOT_BACKWARD = ("grouped_gemm", "grouped_gemm_wgrad")
MOE_MLP_FORWARD = ("grouped_gemm_glu", "grouped_gemm")
MOE_MLP_BACKWARD = ("grouped_gemm_dglu", "grouped_gemm", "grouped_gemm_wgrad")

NO_KERNEL_MESSAGE = "no sm_90a kernel for this op yet"


def no_kernel_pattern(*ops) -> str:
    """Regex of the error of an op without a GPU kernel (any of `ops`, or any such op)."""
    names = ops or NO_GPU_KERNEL_OPS
    return "(" + "|".join(names) + "): " + NO_KERNEL_MESSAGE


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
def jax_gpu_present() -> bool:
    """JAX sees a GPU, and the moegemm JAX binding can run the sm_90a kernels in this process."""
    try:
        import jax
        if not any(d.platform == "gpu" for d in jax.devices()):
            return False
        import moegemm.jax as mj
        return bool(mj.device_kernels_available())
    except Exception:  # no jax, no backend, no binding: no GPU for these tests
        return False


@functools.lru_cache(maxsize=None)
def torch_gpu_present() -> bool:
    """torch sees an sm_90 GPU (the CUDA dispatch key of the ops runs the sm_90a kernels there)."""
    try:
        import torch
        return bool(torch.cuda.is_available()) and torch.cuda.get_device_capability() == (9, 0)
    except Exception:
        return False
