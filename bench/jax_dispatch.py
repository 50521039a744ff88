"""Host-visible time of one jitted moegemm call against the kernel's device time (GPU).

For grouped_gemm and grouped_gemm_glu at the seed shapes (8 experts, uniform groups):
  host time:   5 warm-up calls, then 30 back-to-back calls and one final block_until_ready; time / 30.
               Median of 5 such invocations, alternating the variants (plain, zero-filled) each round.
  zero-filled: the same call with its output taken from jnp.zeros through input_output_aliases (what a
               framework-side fill costs; moegemm.jax never does this).
  kernel time: one jit holding 30 independent calls of the op (each with its own offsets array, so XLA
               cannot merge them) minus one jit holding 1 call, divided by 29: dispatch happens once per
               executable, so the difference is device time of 29 back-to-back kernels.
Usage: python bench/jax_dispatch.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import moegemm.jax as mj
from moegemm import _jax_native as native

SHAPES = [(2048, 2048, 2048), (4096, 2048, 2048), (8192, 4096, 2048), (16384, 4096, 4096)]  # M, N, K
E = 8


def _operands(m, n, k, glu):
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((m, k)) * 0.1, jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((E, n, k)) * 0.1, jnp.bfloat16)
    off = jnp.asarray(np.cumsum([m // E] * E), jnp.int32)
    return a, b, off


def _plain(op):
    if op == "grouped_gemm":
        return lambda a, b, off: mj.grouped_gemm(a, b, off)
    return lambda a, b, off: mj.grouped_gemm_glu(a, b, off)


def _zero_filled(op):
    """The op with its D output pre-filled by jnp.zeros aliased in (the pattern moegemm avoids)."""
    def fn(a, b, off):
        n = b.shape[1] // (2 if op == "grouped_gemm_glu" else 1)
        d_spec = jax.ShapeDtypeStruct((a.shape[0], n), jnp.bfloat16)
        attrs = dict(b_layout="nk", has_alpha=False, has_prob=False, has_bias=False, generate_c=False,
                     zero_tail=False)
        if op == "grouped_gemm_glu":
            attrs.update(activation="swiglu", glu_layout="halves", limit=7.0, act_alpha=1.702,
                         linear_offset=1.0)
        ws = native.workspace_bytes(op, [a, b, off], [d_spec], attrs)
        zeros = jnp.zeros(d_spec.shape, d_spec.dtype)
        call = jax.ffi.ffi_call(native.target_name(op), [d_spec, jax.ShapeDtypeStruct((ws,), jnp.uint8)],
                                input_output_aliases={3: 0}, vmap_method=native.VMAP_METHOD)
        ffi_attrs = {k: (np.float32(v) if isinstance(v, float) else v) for k, v in attrs.items()}
        return call(a, b, off, zeros, ignored_trailing_inputs=1, **ffi_attrs)[0]
    return fn


def _host_time(fn, args, warmup, calls):
    for _ in range(warmup):
        out = fn(*args)
    jax.block_until_ready(out)
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls * 1e6


def _kernel_time(op, args, calls, reps):
    base = _plain(op)

    def many(count):
        def fn(a, b, off, shifts):
            return tuple(base(a, b, off + shifts[i]) for i in range(count))
        return jax.jit(fn)

    shifts = jnp.zeros((calls, 1), jnp.int32)  # zeros at run time: XLA cannot prove the calls identical
    one, all_ = many(1), many(calls)
    t1, tn = [], []
    for _ in range(reps):
        t1.append(_host_time(one, (*args, shifts), 2, 1))
        tn.append(_host_time(all_, (*args, shifts), 2, 1))
    return (statistics.median(tn) - statistics.median(t1)) / (calls - 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="first two shapes, 2 invocations")
    p.add_argument("--json", default="jax_dispatch.json", help="where to write the results")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    shapes = SHAPES[:2] if args.quick else SHAPES
    repeats = 2 if args.quick else args.repeats
    print(f"backend {jax.default_backend()}, devices {jax.devices()}")
    rows = []
    header = f"{'op':18} {'M x N x K':>20} {'host us':>9} {'zero-filled us':>15} {'kernel us':>10} {'host-kernel':>12}"
    print(header)
    for op in ("grouped_gemm", "grouped_gemm_glu"):
        for m, n, k in shapes:
            operands = _operands(m, n, k, op == "grouped_gemm_glu")
            variants = {"plain": jax.jit(_plain(op)), "zero_filled": jax.jit(_zero_filled(op))}
            times = {name: [] for name in variants}
            for _ in range(repeats):  # alternate the variants each round
                for name, fn in variants.items():
                    times[name].append(_host_time(fn, operands, args.warmup, args.calls))
            kernel = _kernel_time(op, operands, args.calls, repeats)
            host = statistics.median(times["plain"])
            filled = statistics.median(times["zero_filled"])
            rows.append(dict(op=op, M=m, N=n, K=k, E=E, host_us=host, zero_filled_host_us=filled,
                             kernel_us=kernel, overhead_us=host - kernel, samples=times))
            print(f"{op:18} {f'{m}x{n}x{k}':>20} {host:9.1f} {filled:15.1f} {kernel:10.1f} {host - kernel:12.1f}")
    with open(args.json, "w") as f:
        json.dump(dict(backend=jax.default_backend(), jax=jax.__version__, rows=rows), f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
