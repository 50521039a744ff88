"""No output is initialised by XLA: the lowered and compiled HLO of every op, forward and backward (and of
ragged_dot and moe_mlp, forward and backward), has no memset, no aliasing into our outputs and no floating
value that the framework builds from zeros or masks (a broadcast of zero, a pad with zero, a select of zero, an
update of a zero buffer, a concatenation with zeros, a multiply by a compare mask: the zeros the contract
needs are written by the op, zero_tail), and every call carries a workspace of the size the trace-time query
gave. Lowered and compiled for each platform of jax_helpers.PLATFORMS: the CPU's HLO everywhere, the GPU's
where JAX has a GPU that runs the sm_90a kernels (every op has one)."""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple, Optional

import numpy as np
import pytest

from jax_helpers import PLATFORMS, platform_device, rand, running_on, jax, jnp, mj
from moegemm import _jax_native as native
from test_jax_ops import _every_op

# A zero constant (scalar or splat) in stablehlo text or HLO text.
_ZERO_CONST = re.compile(
    r"(%[\w.#]+) = (?:stablehlo\.constant dense<(?:0\.0+e\+00|0\.0*|0|false)>|"
    r"\w+\[\] constant\((?:0|-?0\.0*|false)\))")
# One op of either text: StableHLO `%r = stablehlo.op %a, %b ... : types` (or `call @f(...)`, or a generic
# `"stablehlo.op"(...)`), HLO `[ROOT ]%r = type op(%a, %b), attributes`; and the scopes of their names: a
# StableHLO func (`%0` is per func) and an HLO computation (a fusion's body, the entry).
_STABLEHLO_OP = re.compile(r'^\s*(%[\w.#]+)(?::(\d+))? = "?(?:stablehlo\.(\w+)|call @([\w.$-]+))"?(.*)$')
_HLO_OP = re.compile(r"^\s*(ROOT )?(%[\w.-]+) = (\([^)]*\)|\S+) ([\w-]+)\(([^)]*)\)(.*)$")
_FUNC = re.compile(r"^\s*func\.func \w+ @([\w.$-]+)\((.*?)\) (?:->|\{)")
_COMPUTATION = re.compile(r"^(?:ENTRY )?(%[\w.-]+) \(.*\) -> .*\{$")
_TENSOR = r"tensor<((?:[\d?]+x)*)(\w+)>"  # a StableHLO tensor type: its dimensions and element type
_FLOAT = re.compile(r"b?f\d+|f8\w*", re.IGNORECASE)
# Ops that pass a zero or a mask on unchanged in value (HLO's "-" read as "_"), and the boolean ones (masks).
_CARRY = {"convert", "broadcast", "broadcast_in_dim", "reshape", "bitcast", "transpose", "copy", "slice"}
_BOOLEAN = {"and", "or", "not"}
# The fills of a floating value (every output of the ops is one) by what the framework builds from zeros, and
# the operands the zero is looked for in: op -> (what is flagged, operands).
_ZERO_USES = {"broadcast": ("broadcast of zero", slice(0, 1)), "broadcast_in_dim": ("broadcast of zero", slice(0, 1)),
              "pad": ("pad with zero", slice(1, 2)), "select": ("select of zero", slice(1, 3)),
              "dynamic_update_slice": ("update of zeros", slice(0, 1)), "scatter": ("update of zeros", slice(0, 1)),
              "concatenate": ("concatenate with zero", slice(None))}


class _Op(NamedTuple):
    scope: str
    names: list  # its results (StableHLO's `%0:2` are used as %0#0, %0#1)
    op: str  # for a call or a fusion, the callee's scope
    operands: list
    dtype: Optional[str]  # the element type of its (first) result, where the line gives one
    scalar: bool  # a rank-0 result
    line: str


def _parse(text):
    """The ops of lowered (StableHLO) or compiled (HLO) text, each scope's parameters (name, element type) in
    order, and the names each scope returns."""
    ops, params, returns, scope = [], {}, {}, None
    for line in text.splitlines():
        if m := _FUNC.match(line):
            scope = m.group(1)
            params[scope] = [(n, t) for n, _, t in re.findall(r"(%arg\d+): " + _TENSOR, m.group(2))]
        elif m := _COMPUTATION.match(line):
            scope, params[scope] = m.group(1), []
        elif m := re.match(r"^\s*(?:func\.)?return (.*?) :", line):
            returns[scope] = re.findall(r"%[\w.#]+", m.group(1))
        elif m := _STABLEHLO_OP.match(line):
            name, count, op, callee, rest = m.groups()
            dims, dtype = (re.findall(_TENSOR, rest) or [("?", None)])[-1]
            ops.append(_Op(scope, [f"{name}#{i}" for i in range(int(count))] if count else [name], op or callee,
                           re.findall(r"%[\w.#]+", rest.split(" : ")[0]), dtype, not dims, line))
        elif m := _HLO_OP.match(line):
            root, name, typ, op, operands, attrs = m.groups()
            callee = re.search(r"\bcalls=(%[\w.-]+)", attrs) if op in ("fusion", "call") else None
            dtype = re.match(r"\(?(\w+)", typ).group(1)
            if op == "parameter":  # HLO text lists a computation's parameter(i) in the order of i
                params[scope].append((name, dtype))
            if root:
                returns[scope] = [name]
            ops.append(_Op(scope, [name], callee.group(1) if callee else op.replace("-", "_"),
                           re.findall(r"%[\w.-]+", operands), dtype, typ.startswith(f"{dtype}[]"), line))
    return ops, params, returns


def _derived(ops, params, returns, seeds, carry):
    """(scope, name) of the values made from ``seeds`` by ``carry`` ops (from their first operand, any operand
    of the boolean ones), calls and fusions (into the callee's parameters, and back out of what it returns)."""
    found = set(seeds)
    while True:
        size = len(found)
        for op in ops:
            if op.op in params:
                found.update((op.op, p) for (p, _), o in zip(params[op.op], op.operands) if (op.scope, o) in found)
                found.update((op.scope, n) for n, r in zip(op.names, returns.get(op.op, ())) if (op.op, r) in found)
            elif op.op in carry and any((op.scope, o) in found
                                        for o in (op.operands if op.op in _BOOLEAN else op.operands[:1])):
                found.update((op.scope, n) for n in op.names)
        if len(found) == size:
            return found


def _fills(text):
    """(what, line) of every fill or masking of a floating value by the framework in lowered or compiled text:
    a non-scalar broadcast of zero, a pad with a zero padding value, a select of a zero, a (dynamic) update of
    or scatter into a zero buffer, a concatenation with zeros, a multiply by a mask made by a compare (e.g. of
    a row iota with the last offset). A zero is a zero constant, or one broadcast, converted or passed into a
    call or fusion. Integer values are not checked: ragged_dot's offsets are clipped at a broadcast 0 and
    summed with zero pads (jax.lax.associative_scan), which fill no output."""
    ops, params, returns = _parse(text)
    dtypes = {(op.scope, n): op.dtype for op in ops for n in op.names}
    dtypes.update({(scope, p): t for scope, ps in params.items() for p, t in ps})
    zeros = _derived(ops, params, returns, {(op.scope, n) for op in ops if _ZERO_CONST.match(op.line.strip())
                                            for n in op.names}, _CARRY)
    masks = _derived(ops, params, returns, {(op.scope, n) for op in ops if op.op == "compare" for n in op.names},
                     _CARRY | _BOOLEAN)
    found = []
    for op in ops:
        what, args = _ZERO_USES.get(op.op, (None, slice(0)))
        # a rank-0 "broadcast" of a scalar (e.g. the init value of cumsum's reduce_window) fills nothing
        if what and not (op.scalar and what == "broadcast of zero") and any(
                (op.scope, o) in zeros and _FLOAT.fullmatch(dtypes.get((op.scope, o)) or "")
                for o in op.operands[args]):
            found.append((what, op.line.strip()))
        if op.op == "multiply" and _FLOAT.fullmatch(op.dtype or "") and any((op.scope, o) in masks
                                                                            for o in op.operands):
            found.append(("multiply by a compare mask", op.line.strip()))
    return found


def _assert_no_fill(text, where):
    lowered = text.lower()
    assert "memset" not in lowered, f"{where}: memset"
    assert "input_output_alias" not in lowered and "output_operand_alias" not in lowered \
        and "output_to_operand_aliasing" not in lowered, f"{where}: aliasing"
    fills = _fills(text)
    assert not fills, f"{where}: " + "\n".join(f"{what}: {line[:300]}" for what, line in fills)
    assert "moegemm_" in text, f"{where}: no moegemm custom call"


def _check(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    _assert_no_fill(lowered.as_text(), "lowered")
    _assert_no_fill(lowered.compile().as_text(), "compiled")


@pytest.mark.parametrize("op", list(_every_op(np.random.default_rng(0))))
@pytest.mark.parametrize("platform", PLATFORMS)
def test_op_hlo_has_no_fill(op, platform):
    with running_on(platform_device(platform)):
        _check(_every_op(np.random.default_rng(0))[op])


@pytest.mark.parametrize("platform", PLATFORMS)
def test_ragged_dot_forward_and_backward_hlo_have_no_fill(platform):
    with running_on(platform_device(platform)):
        rng = np.random.default_rng(1)
        lhs, rhs, gs = rand(rng, (64, 32)), rand(rng, (4, 32, 16)), jnp.array([10, 0, 30, 4], jnp.int32)
        ct = rand(rng, (64, 16))
        _check(lambda l, r: mj.ragged_dot(l, r, gs), lhs, rhs)
        _check(lambda l, r, c: jax.vjp(lambda l, r: mj.ragged_dot(l, r, gs), l, r)[1](c), lhs, rhs, ct)
        # group sizes traced, as a router gives them: the integer offsets are computed in the HLO too
        _check(lambda l, r, g, c: jax.vjp(lambda l, r: mj.ragged_dot(l, r, g), l, r)[1](c), lhs, rhs, gs, ct)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_moe_mlp_forward_and_backward_hlo_have_no_fill(platform):
    with running_on(platform_device(platform)):
        rng = np.random.default_rng(2)
        x, wu, wd = rand(rng, (64, 32)), rand(rng, (4, 32, 64)), rand(rng, (4, 32, 32))
        off = jnp.asarray(np.cumsum([10, 0, 30, 4]), jnp.int32)
        p, ct = jnp.ones((64,), jnp.float32) * 0.5, rand(rng, (64, 32))
        _check(lambda x, wu, wd, p: mj.moe_mlp(x, wu, wd, offsets=off, prob=p), x, wu, wd, p)
        _check(lambda x, wu, wd, p, c: jax.vjp(lambda *a: mj.moe_mlp(*a[:3], offsets=off, prob=a[3]),
                                               x, wu, wd, p)[1](c), x, wu, wd, p, ct)
        # the backward's own calls, checked above: grouped_gemm_dglu, grouped_gemm (dx), two grouped_gemm_wgrad
        text = jax.jit(lambda x, wu, wd, p, c: jax.vjp(
            lambda *a: mj.moe_mlp(*a[:3], offsets=off, prob=a[3]), x, wu, wd, p)[1](c)).lower(
            x, wu, wd, p, ct).as_text()
        targets = re.findall(r"@(moegemm_\w+)", text)
        assert targets.count("moegemm_grouped_gemm_dglu") == 1, targets
        assert targets.count("moegemm_grouped_gemm_wgrad") == 2, targets
        assert "moegemm_grouped_gemm" in targets, targets


def _workspace_results(text):
    """The size of the trailing u8 workspace result of every moegemm custom call in lowered text."""
    sizes = []
    for line in text.splitlines():
        if "stablehlo.custom_call @moegemm_" in line:
            found = re.search(r"tensor<(\d+)xui8>\)$", line.strip())
            assert found, f"a moegemm call without a trailing u8 workspace result: {line.strip()[:200]}"
            sizes.append(int(found.group(1)))
    return sizes


def _moe_mlp_backward():
    rng = np.random.default_rng(3)
    x, wu, wd = rand(rng, (64, 32)), rand(rng, (4, 32, 64)), rand(rng, (4, 32, 32))
    off = jnp.asarray(np.cumsum([10, 0, 30, 4]), jnp.int32)
    p, ct = jnp.ones((64,), jnp.float32) * 0.5, rand(rng, (64, 32))
    return jax.vjp(lambda *a: mj.moe_mlp(*a[:3], offsets=off, prob=a[3]), x, wu, wd, p)[1](ct)


@pytest.mark.parametrize("op", list(_every_op(np.random.default_rng(0))) + ["moe_mlp_backward"])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_call_carries_the_queried_workspace(op, platform, monkeypatch):
    """Each custom call's last result is a u8 buffer of exactly the bytes moegemm::X_workspace_bytes gave
    at trace time (device sizes: non-zero where a kernel needs scratch, e.g. the backward ops), which the
    handler passes to the op as its workspace."""
    queried = []

    def spy(*args, **kwargs):
        queried.append(real(*args, **kwargs))
        return queried[-1]

    real = native.workspace_bytes
    monkeypatch.setattr(native, "workspace_bytes", spy)
    jax.clear_caches()  # moe_mlp and ragged_dot run through jit: a trace cached by an earlier test queries nothing
    with running_on(platform_device(platform)):
        fn = _moe_mlp_backward if op == "moe_mlp_backward" else _every_op(np.random.default_rng(0))[op]
        text = jax.jit(fn).lower().as_text()
    found = _workspace_results(text)
    if op == "moe_mlp_backward":  # the forward's down projection (y) is traced, then dropped as unused
        assert len(found) >= 4 and not Counter(found) - Counter(queried), (found, queried)
    else:
        assert found == queried and len(found) == 1, (found, queried)


def test_the_checker_catches_a_zero_filled_aliased_output():
    """The same check on a deliberate jnp.zeros + input_output_aliases call must fail."""
    def filled(a):
        out = jnp.zeros((8, 8), jnp.float32)
        return jax.ffi.ffi_call("moegemm_gemm_amax", jax.ShapeDtypeStruct((8, 8), jnp.float32),
                                input_output_aliases={1: 0}, vmap_method="sequential")(a, out)
    with pytest.raises(AssertionError, match="aliasing"):
        _assert_no_fill(jax.jit(filled).lower(jnp.ones((8, 8), jnp.bfloat16)).as_text(), "lowered")


def _c(a, b):
    """An op's output (16, 16): gemm_amax's C."""
    return mj.gemm_amax(a, b)[0]


def _below(end):
    """The (16, 16) mask of the rows below ``end``, from an iota of rows."""
    return jax.lax.broadcasted_iota(jnp.int32, (16, 16), 0) < end


# One framework-level fill or masking of an op's output each, by what its lowered text is flagged as (``end``
# traced, as the last offset is).
_FRAMEWORK_FILLS = {
    "broadcast of zero": lambda a, b, end: (_c(a, b), jnp.zeros((16, 16), a.dtype)),
    "pad with zero": lambda a, b, end: jnp.pad(_c(a, b), ((0, 8), (0, 0))),
    "select of zero": lambda a, b, end: jnp.where(_below(end), _c(a, b), 0),
    "update of zeros": lambda a, b, end: jax.lax.dynamic_update_slice(jnp.zeros((24, 16), a.dtype), _c(a, b),
                                                                      (end, 0)),
    "concatenate with zero": lambda a, b, end: jnp.concatenate([_c(a, b), jnp.zeros((8, 16), a.dtype)]),
    "multiply by a compare mask": lambda a, b, end: _c(a, b) * _below(end),
}


@pytest.mark.parametrize("what", list(_FRAMEWORK_FILLS) + ["update of zeros (scatter)"])
def test_the_checker_catches_each_framework_fill(what):
    """Each pattern on its own is found in the lowered text, and the compiled text is flagged too (XLA may
    rewrite it: a concatenation with zeros or a scatter into them becomes a pad), by _assert_no_fill as well."""
    fn = _FRAMEWORK_FILLS.get(what) or (lambda a, b, end: jnp.zeros((24, 16), a.dtype).at[:16].set(_c(a, b)))
    rng = np.random.default_rng(4)
    lowered = jax.jit(fn).lower(rand(rng, (16, 16)), rand(rng, (16, 16)), jnp.int32(10))
    texts = {"lowered": lowered.as_text(), "compiled": lowered.compile().as_text()}
    assert what.split(" (")[0] in [found for found, _ in _fills(texts["lowered"])], _fills(texts["lowered"])
    for where, text in texts.items():
        assert _fills(text), where
        with pytest.raises(AssertionError, match=rf"^{where}: (?!no moegemm)"):
            _assert_no_fill(text, where)


def test_the_checker_passes_an_op_and_integer_zeros():
    """An op's output scaled, and ragged_dot with traced group sizes (its offsets are clipped at a broadcast
    int 0 and summed with zero pads), have nothing to flag in either text."""
    rng = np.random.default_rng(5)
    a, b, rhs = rand(rng, (16, 16)), rand(rng, (16, 16)), rand(rng, (2, 16, 16))
    fn = lambda a, b, gs: (2 * _c(a, b), mj.ragged_dot(a, rhs, gs))  # noqa: E731
    lowered = jax.jit(fn).lower(a, b, jnp.array([4, 6], jnp.int32))
    for where, text in (("lowered", lowered.as_text()), ("compiled", lowered.compile().as_text())):
        assert not _fills(text), (where, _fills(text))
        _assert_no_fill(text, where)
