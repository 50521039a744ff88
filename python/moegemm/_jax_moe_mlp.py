"""``moegemm.jax.moe_mlp``: the expert MLP of a MoE layer (up-projection + gated activation + down
projection) on moegemm's grouped GEMMs, with a hand-written backward (jax.custom_vjp)."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from moegemm import _jax_checks as chk
from moegemm._jax_first_order import first_order_only
from moegemm import _jax_vma as vma
from moegemm._jax_ragged_dot import wgrad_as
from moegemm.jax import ACTIVATIONS, GLU_LAYOUTS, grouped_gemm, grouped_gemm_dglu, grouped_gemm_glu

_OP = "moe_mlp"
# The names of the residuals the backward reads besides the inputs (the GLU output h and the pre-activation C),
# then of the output y, which a backward through a use of y that is not linear (a router weight's combine)
# reads too: a policy that saves h and C but not y would run the whole forward, GLU included, again for it.
RESIDUAL_NAMES = ("moe_mlp_h", "moe_mlp_c", "moe_mlp_y")


class _Glu(NamedTuple):
    """The static GLU configuration (hashable: a nondiff argument of the custom_vjp, and a key of its jit's
    cache): the ops' GLU keywords, and whether the GLU zeroes its tail rows (_debug_checks_on where the layer
    is traced)."""
    activation: str
    glu_layout: str
    limit: float
    act_alpha: float
    linear_offset: float
    zero_tail: bool

    def kwargs(self):
        """The GLU keywords that grouped_gemm_glu and grouped_gemm_dglu share."""
        return {k: v for k, v in self._asdict().items() if k != "zero_tail"}


def _debug_checks_on():
    """Whether jax_debug_nans or jax_debug_infs is on where the layer is traced. Their checks read every
    output of every call, tail rows included, so that h's and C's tail rows, which nothing else reads, would
    raise false alarms (and take the blame for a NaN made elsewhere in a jitted step): under them, the GLU
    zeroes its tails (zero_tail), and only then, as the zeros cost a write of every tail row."""
    return bool(jax.config.jax_debug_nans or jax.config.jax_debug_infs)


def _forward(x, w_up, w_down, offsets, prob, glu):
    h, c = grouped_gemm_glu(x, w_up, offsets, prob=prob, b_layout="kn", generate_c=True,
                            zero_tail=glu.zero_tail, **glu.kwargs())
    y = grouped_gemm(h, w_down, offsets, b_layout="kn", zero_tail=True)
    return y, h, c


@partial(jax.custom_vjp, nondiff_argnums=(5,))
def _moe_mlp(x, w_up, w_down, offsets, prob, glu):
    # Not differentiated (_moe_mlp_fwd runs where it is): no C, which only the backward reads (M x 2I written
    # for nothing in inference).
    h = grouped_gemm_glu(x, w_up, offsets, prob=prob, b_layout="kn", zero_tail=glu.zero_tail, **glu.kwargs())
    return grouped_gemm(h, w_down, offsets, b_layout="kn", zero_tail=True)


_forward_first_order = first_order_only(_OP, static_argnums=(5,))(_forward)


def _moe_mlp_fwd(x, w_up, w_down, offsets, prob, glu):
    y, h, c = _forward_first_order(x, w_up, w_down, offsets, prob, glu)
    # h, C and y named for jax.checkpoint policies: save_only_these_names(*RESIDUAL_NAMES) keeps the
    # up-projection's two outputs and the layer's, so that a rematerialised backward does not run the forward
    # again (the names cost nothing otherwise). Named here, outside the first-order rule's custom_jvp, whose
    # inside the policies do not see; the inputs are the rule's arguments, not its outputs, which a policy
    # would count as more values to recompute.
    h, c, y = (checkpoint_name(t, name) for t, name in zip((h, c, y), RESIDUAL_NAMES))
    return y, (x, w_up, w_down, offsets, prob, h, c)


@first_order_only(_OP, static_argnums=(0,))
def _moe_mlp_bwd(glu, residuals, dy):
    x, w_up, w_down, offsets, prob, h, c = residuals
    dy = dy.astype(x.dtype)
    # dH = dy @ w_down[g]^T: w_down (E, I, H) read as "nk" storage (N' = I, K' = H).
    back = grouped_gemm_dglu(dy, w_down, c, offsets, prob=prob, b_layout="nk",
                             compute_dprob=prob is not None, dc_dtype=x.dtype, zero_tail=True,
                             **glu.kwargs())
    # dx = dC @ w_up[g]^T: w_up (E, H, 2I) read as "nk" storage (N' = H, K' = 2I).
    dx = grouped_gemm(back.dc, w_up, offsets, b_layout="nk", d_dtype=x.dtype, zero_tail=True)
    dw_up = wgrad_as(x, back.dc, offsets, w_up.dtype)
    dw_down = wgrad_as(h, dy, offsets, w_down.dtype)
    return (vma.cotangent_like(dx, x), vma.cotangent_like(dw_up, w_up), vma.cotangent_like(dw_down, w_down),
            None, vma.cotangent_like(back.dprob, prob))


_moe_mlp.defvjp(_moe_mlp_fwd, _moe_mlp_bwd)

# Called through jit, as ragged_dot: an eager custom_vjp call traces the layer anew every time (~0.8 ms of host
# time per call, where jit's dispatch of the traced call costs ~20 us). In a traced caller it is a nested jit
# call, which XLA inlines when it compiles. The GLU's zero_tail, set by jax_debug_nans and jax_debug_infs, is
# part of the key (glu), so that switching them retraces.
_moe_mlp_jit = jax.jit(_moe_mlp, static_argnums=(5,))


def moe_mlp(x, w_up, w_down, group_sizes=None, offsets=None, prob=None, activation="swiglu",
            glu_layout="halves", limit=7.0, act_alpha=1.702, linear_offset=1.0):
    """Expert MLP: ``y[r] = (prob[r] * act(x[r] @ w_up[g])) @ w_down[g]`` for the rows r of expert g
    (docs/ops.md §1-§3).

    Forward: grouped_gemm_glu (saving the pre-activation C) then grouped_gemm; backward:
    grouped_gemm_dglu(dy, w_down as nk, C) -> dC (+ dprob), dx = grouped_gemm(dC, w_up as nk),
    dw_up = wgrad(x, dC), dw_down = wgrad(h, dy). Rows at or past the last offset give y = 0, dx = 0
    and dprob = 0 (zero_tail).

    Args:
      x: (M, H) bf16/f16, rows sorted by expert (f16 on the CPU backend only: the GPU kernels take bf16); H a
        multiple of 8.
      w_up: (E, H, 2I), x's dtype (jax.lax.ragged_dot layout), 1 <= E <= 1024, I a multiple of 8; its 2I
        columns pair gate and up by ``glu_layout`` ("halves": gate = [0, I), up = [I, 2I); "interleaved32":
        32-column blocks gate, up, gate, ...; "interleaved32_up_first": up, gate, ...; the interleaved layouts
        need 2I a multiple of 64).
      w_down: (E, I, H), x's dtype.
      group_sizes: (E,) integer rows per expert, or offsets: (E,) int32 cumulative end rows (exactly one).
      prob: optional (M,) router probabilities of a floating dtype (cast to f32), scaling each row's
        activation; gets a gradient.
      activation, limit, act_alpha, linear_offset: as grouped_gemm_glu.
    Returns:
      y (M, H) in x's dtype. Differentiable in x, w_up, w_down and prob (reverse mode). The backward's
      residuals h and C, and y, are named "moe_mlp_h", "moe_mlp_c" and "moe_mlp_y" for jax.checkpoint
      policies (moegemm.jax.MOE_MLP_CHECKPOINT_NAMES; save_only_these_names of all three keeps them: a
      rematerialised backward then runs no second GLU).
    Raises:
      ValueError / TypeError at trace time for operands that do not fit.
    """
    if (group_sizes is None) == (offsets is None):
        got = "neither" if group_sizes is None else "both"
        raise ValueError(f"moegemm.jax.moe_mlp: group_sizes, offsets: expected exactly one of group_sizes and "
                         f"offsets, got {got}")
    chk.check_rank(_OP, "x", x, 2, "(M, H)")
    chk.check_input_dtype(_OP, "x", x)
    chk.check_rank(_OP, "w_up", w_up, 3, "(E, H, 2I)")
    chk.check_rank(_OP, "w_down", w_down, 3, "(E, I, H)")
    chk.check_input_dtype(_OP, "w_up", w_up, (x.dtype,))
    chk.check_input_dtype(_OP, "w_down", w_down, (x.dtype,))
    e, h = w_up.shape[0], x.shape[1]
    if h == 0:
        raise ValueError(f"moegemm.jax.moe_mlp: x: expected H > 0 (its last dim), got shape {tuple(x.shape)}")
    chk.check_extent(_OP, "w_up", w_up, 1, h, "H from x")
    if not 1 <= e <= chk.MAX_EXPERTS:
        raise ValueError(f"moegemm.jax.moe_mlp: w_up: expected 1 to {chk.MAX_EXPERTS} experts (dim 0), got shape "
                         f"{tuple(w_up.shape)}")
    if w_up.shape[2] == 0:
        raise ValueError(f"moegemm.jax.moe_mlp: w_up: expected 2I > 0 (its last dim), got shape {tuple(w_up.shape)}")
    if w_up.shape[2] % 2:
        raise ValueError(f"moegemm.jax.moe_mlp: w_up: expected an even last dim (2I), got shape "
                         f"{tuple(w_up.shape)}")
    groups = getattr(group_sizes if group_sizes is not None else offsets, "shape", None)
    if w_down.shape[0] != e and groups is not None and len(groups) == 1 and groups[0] == w_down.shape[0]:
        # the groups and w_down agree on E: the odd one out is w_up
        raise ValueError(f"moegemm.jax.moe_mlp: w_up: expected dim 0 = E={w_down.shape[0]} (the experts of "
                         f"{'group_sizes' if group_sizes is not None else 'offsets'} and w_down), got shape "
                         f"{tuple(w_up.shape)}")
    chk.check_extent(_OP, "w_down", w_down, 0, e, "E from w_up")
    chk.check_extent(_OP, "w_down", w_down, 1, w_up.shape[2] // 2, "I from w_up")
    chk.check_extent(_OP, "w_down", w_down, 2, h, "H from x")
    # Alignment of H and I here, so that an error names x or w_up rather than the inner ops' operands.
    chk.check_aligned(_OP, "x", x, 1, "H")
    if glu_layout in ("interleaved32", "interleaved32_up_first") and w_up.shape[2] % 64:
        raise ValueError(f"moegemm.jax.moe_mlp: w_up: expected 2I (its last dim) a multiple of 64, as glu_layout "
                         f"{glu_layout!r} pairs whole 32-column gate/up blocks, got 2I = {w_up.shape[2]}")
    if (w_up.shape[2] // 2) % 8:
        raise ValueError(f"moegemm.jax.moe_mlp: w_up: expected I (half of its last dim) a multiple of 8, as the "
                         f"GLU output's 16-bit rows must be 16-byte aligned, got I = {w_up.shape[2] // 2} "
                         f"(shape {tuple(w_up.shape)})")
    if group_sizes is not None:
        chk.check_group_sizes(_OP, group_sizes, e, "E from w_up", "x", x)
    else:
        chk.check_offsets(_OP, offsets, e, "E from w_up")
    if prob is not None:
        chk.check_float_array(_OP, "prob", prob)
        chk.check_rank(_OP, "prob", prob, 1, "(M,)")
        chk.check_extent(_OP, "prob", prob, 0, x.shape[0], "M from x")
    chk.check_choice(_OP, "activation", activation, ACTIVATIONS)
    chk.check_choice(_OP, "glu_layout", glu_layout, GLU_LAYOUTS)
    glu = _Glu(activation, glu_layout, *chk.clamp_parameters(_OP, activation, limit, act_alpha, linear_offset),
               zero_tail=_debug_checks_on())
    # Every check made: only now anything is computed (the offsets, the cast of prob).
    if group_sizes is not None:
        offsets = chk.offsets_from_sizes(group_sizes, x.shape[0])
    if prob is not None:
        prob = prob.astype(jnp.float32)
    return _moe_mlp_jit(x, w_up, w_down, offsets, prob, glu)
