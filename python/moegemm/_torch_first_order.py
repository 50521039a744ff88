"""The backward of moegemm's autograd Functions: first order only, and saying so on a second derivative.

torch's ``once_differentiable`` marks the gradients it returns so that differentiating them again raises, but
only when the incoming gradient requires grad. With a loss linear in the output (``y.sum()``), the incoming
gradient is a constant, yet the returned gradients still depend on the saved inputs (dA on B, dB on A):
``once_differentiable`` then returns them as constants and a double backward (a gradient penalty) silently
drops those terms. ``first_order_only`` marks them whenever the graph is being built (``create_graph=True``).
"""

from __future__ import annotations

import functools

import torch

_MESSAGE = (b"moegemm: trying to differentiate twice: the backward of moe_mlp and grouped_mm runs moegemm ops, "
            b"which have no derivative of their own (first-order gradients only)")


def first_order_only(backward):
    """Decorates an autograd Function's ``backward(ctx, *grads)``: runs it without grad, and when torch builds a
    graph of the backward (``create_graph=True``) returns its gradients through a node that raises
    RuntimeError ("trying to differentiate twice ...") if a second derivative reaches it."""

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with torch.no_grad():
            outputs = backward(ctx, *grads)
        if not torch.is_grad_enabled():  # create_graph=False: nothing differentiates these gradients
            return outputs
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        error = torch._C._functions.DelayedError(_MESSAGE, len(outs))

        def marked(v):  # an alias that requires grad, so that the error node becomes its grad_fn
            if v is None:
                return None
            v = v.detach()
            v.requires_grad_(True)
            return v

        marked_outs = error(*[marked(v) for v in outs])
        return marked_outs if isinstance(outputs, tuple) else marked_outs[0]

    return wrapper
