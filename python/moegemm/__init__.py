"""moegemm: Mixture-of-Experts grouped GEMMs with fused epilogues for Hopper (sm_90a).

Front ends: ``moegemm.jax`` (XLA FFI custom calls) and ``moegemm.torch`` (``torch.ops.moegemm``).
Importing ``moegemm`` itself needs neither framework.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
