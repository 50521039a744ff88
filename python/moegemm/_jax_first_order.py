"""First-order-only rules for moegemm.jax's custom_vjp functions.

The fwd and bwd rules call moegemm's custom calls, which have no derivative of their own. A second derivative
differentiates those rules (the fwd rule under the outer derivative's tracers, then the bwd rule). Left alone,
it fails inside JAX with a message naming the inner FFI target (``moegemm_grouped_gemm``); wrapped here, it
raises NotImplementedError naming the op the user called.
"""

from __future__ import annotations

import jax


def first_order_only(op: str, static_argnums: tuple[int, ...] = ()):
    """Decorator for a custom_vjp fwd or bwd rule of ``moegemm.jax.<op>``; ``static_argnums`` are its
    non-array arguments (the custom_vjp's nondiff arguments).

    The wrapped rule computes the same values; differentiating it (``jax.grad`` of a gradient, ``jax.hessian``,
    ``jax.jvp`` of a gradient) raises NotImplementedError at trace time.
    """

    def wrap(rule):
        wrapped = jax.custom_jvp(rule, nondiff_argnums=static_argnums)

        @wrapped.defjvp
        def _no_second_derivative(*args):
            raise NotImplementedError(
                f"moegemm.jax.{op}: second derivatives are not supported (its gradient runs moegemm's custom "
                f"calls, which have no derivative); only first-order gradients are")

        return wrapped

    return wrap
