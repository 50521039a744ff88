"""The backward of moegemm's autograd Functions: first order only, and saying so on a second derivative.

torch's ``once_differentiable`` marks the gradients it returns so that differentiating them again raises, but
only when the incoming gradient requires grad, and only along the gradients themselves. With a loss linear in
the output (``y.sum()``) the incoming gradient is a constant, yet the returned gradients still depend on the
saved inputs (dA on B, dB on A): a double backward (a gradient penalty) then silently dropped those terms, and
``torch.autograd.grad(g, w)`` or a Hessian found no path from the gradient to ``w`` and gave None or zeros.
``first_order_only`` connects the gradients, whenever torch builds a graph of the backward
(``create_graph=True``), to every saved input and incoming gradient that requires grad, through a node that
raises when a second derivative reaches it.
"""

from __future__ import annotations

import functools

import torch

_MESSAGE = (b"moegemm: trying to differentiate twice: the backward of moe_mlp and grouped_mm runs moegemm ops, "
            b"which have no derivative of their own (first-order gradients only)")


def _batched_gradient_error(op: str, grads) -> NotImplementedError | None:
    """The NotImplementedError naming ``op`` for an incoming gradient that a torch.func transform wraps, or None:
    autograd batches the gradients with vmap for ``torch.autograd.grad(..., is_grads_batched=True)`` and
    ``jacobian(..., vectorize=True)``, and the ops then fail on the wrapped tensor with an error that names
    nothing ("Cannot access data pointer of Tensor that doesn't have storage"). is_grads_batched batches with
    torch's older vmap, whose tensors carry the Batched dispatch key (which torch.func does not report).
    Asked once a backward has failed, so that the usual path pays nothing; None while torch.compile traces
    (Dynamo cannot trace the test; it sees no wrapped tensors there)."""
    if torch.compiler.is_compiling():
        return None
    for g in grads:
        if isinstance(g, torch.Tensor) and (torch._C._functorch.is_functorch_wrapped_tensor(g)
                                            or "Batched" in str(torch._C._dispatch_keys(g))):
            return NotImplementedError(
                f"{op}: backward: expected an incoming gradient outside torch.func transforms, got a batched one "
                f"(torch.autograd.grad(..., is_grads_batched=True), jacobian(..., vectorize=True) or a transform "
                f"over the backward): pass the gradients one at a time")
    return None


def first_order_only(backward):
    """Decorates an autograd Function's ``backward(ctx, saved, *grads)``, where ``saved`` is
    ``ctx.saved_tensors``, unpacked once here (a checkpointed Function may unpack them only once). Runs it
    without grad; when torch builds a graph of the backward (``create_graph=True``), its gradients come out of
    a node whose inputs also include the saved tensors and incoming gradients that require grad, and whose
    backward raises RuntimeError ("trying to differentiate twice ..."), so that any second derivative, with
    respect to any input, raises."""

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        saved = ctx.saved_tensors
        try:
            with torch.no_grad():
                outputs = backward(ctx, saved, *grads)
        except (RuntimeError, ValueError, NotImplementedError):
            batched = _batched_gradient_error(getattr(ctx, "op", "grouped_mm"), grads)
            if batched is None:
                raise
            raise batched from None
        if not torch.is_grad_enabled():  # create_graph=False: nothing differentiates these gradients
            return outputs
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        depends = [t for t in (*saved, *grads) if isinstance(t, torch.Tensor) and t.requires_grad]

        def marked(v):  # an alias that requires grad, so that the error node becomes its grad_fn
            if v is None:
                return None
            v = v.detach()
            v.requires_grad_(True)
            return v

        error = torch._C._functions.DelayedError(_MESSAGE, len(outs) + len(depends))
        marked_outs = tuple(error(*[marked(v) for v in outs], *depends)[:len(outs)])
        return marked_outs if isinstance(outputs, tuple) else marked_outs[0]

    return wrapper
