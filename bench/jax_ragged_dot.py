"""moegemm.jax.ragged_dot against jax.lax.ragged_dot: TFLOP/s on the project's MoE workloads (GPU).

Each workload (M, N, K, E) is run with uniform and zipf routing (numpy default_rng(0), as
workloads/moe_workloads.json defines them): lhs (M, K), rhs (E, K, N) bf16, group sizes from the
routing. `--mode contraction` times the weight gradient's form instead, ragged_dot_general's ragged
contraction of lhs (M, K) and rhs (M, N) bf16 into (E, K, N) f32, against jax.lax.ragged_dot_general.
Time per call: warm-up, then `--calls` back-to-back jitted calls and one block_until_ready;
median of `--repeats`, the two implementations alternating. FLOPs = 2 * sum(group sizes) * N * K.
An allocation failure is reported as "failed: out of memory"; with zipf routing an implementation that
failed so with uniform routing (the same shapes, the same program) is not run again. The JSON is rewritten
after each workload ("complete": false until the last), so that a run stopped at a deadline keeps what it
measured.
Usage: python bench/jax_ragged_dot.py [workloads.json] [--mode rows|contraction] [--quick] [--only NAME ...]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import moegemm.jax as mj

DEFAULT_WORKLOADS = Path(__file__).resolve().parent / "workloads" / "moe_workloads.json"


def group_sizes(routing, m, e, rng):
    if routing == "uniform":
        p = np.full(e, 1.0 / e)
    else:  # zipf: popularity 1/rank^1.2 over a random permutation of ranks
        ranks = rng.permutation(e) + 1
        p = 1.0 / ranks ** 1.2
        p /= p.sum()
    return np.bincount(rng.choice(e, size=m, p=p), minlength=e).astype(np.int32)


def _time(fn, args, calls, warmup=3):
    out = None
    for _ in range(warmup):
        out = fn(*args)
    jax.block_until_ready(out)
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls


_SAME_SHAPES_OOM = "failed: out of memory (the same shapes as uniform's, not run again)"


def _is_oom(exc):
    text = str(exc).lower()
    return "out of memory" in text or "resource_exhausted" in text or "resource exhausted" in text


def _write(args, rows, complete: bool) -> None:
    """The rows so far as JSON; `complete` is false until every workload has run."""
    with open(args.json, "w") as f:
        json.dump(dict(backend=jax.default_backend(), device=str(jax.devices()[0].device_kind), jax=jax.__version__,
                       workloads=args.workloads, mode=args.mode, complete=complete, rows=rows), f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workloads", nargs="?", default=str(DEFAULT_WORKLOADS))
    p.add_argument("--quick", action="store_true", help="seed workloads only, 1 repeat, 5 calls")
    p.add_argument("--json", default="jax_ragged_dot.json")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--mode", choices=("rows", "contraction"), default="rows",
                   help="rows: ragged_dot (default); contraction: ragged_dot_general's ragged contraction")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these workloads (names in the file)")
    args = p.parse_args()
    gemms = json.loads(Path(args.workloads).read_text())["gemms"]
    if args.only:
        unknown = sorted(set(args.only) - {g["name"] for g in gemms})
        if unknown:
            p.error(f"--only: no workload named {', '.join(unknown)} in {args.workloads}")
        gemms = [g for g in gemms if g["name"] in args.only]
    if args.quick:
        gemms = [g for g in gemms if g["name"].startswith("seed")][:2]
    calls, repeats = (5, 1) if args.quick else (args.calls, args.repeats)
    if args.mode == "rows":
        impls = {"moegemm": jax.jit(mj.ragged_dot), "jax.lax": jax.jit(jax.lax.ragged_dot)}
    else:
        dims = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([0], [0]), ([], [])),
                                                 lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
        impls = {name: jax.jit(lambda a, b, s, f=f: f(a, b, s, dims, preferred_element_type=jnp.float32))
                 for name, f in (("moegemm", mj.ragged_dot_general), ("jax.lax", jax.lax.ragged_dot_general))}
    print(f"mode {args.mode}")
    print(f"backend {jax.default_backend()}, devices {jax.devices()}")
    print(f"{'workload':14} {'routing':8} {'moegemm TFLOP/s':>16} {'jax.lax TFLOP/s':>16}")
    rows = []
    for g in gemms:
        m, n, k, e = g["M"], g["N"], g["K"], g["E"]
        failed = set()
        for routing in ("uniform", "zipf"):
            rng = np.random.default_rng(0)
            sizes = group_sizes(routing, m, e, rng)
            flops = 2.0 * sizes.sum() * n * k
            row = dict(name=g["name"], M=m, N=n, K=k, E=e, routing=routing)
            try:
                lhs = jnp.asarray(rng.standard_normal((m, k), np.float32) * 0.1, jnp.bfloat16)
                rhs_shape = (e, k, n) if args.mode == "rows" else (m, n)
                rhs = jnp.asarray(rng.standard_normal(rhs_shape, np.float32) * 0.1, jnp.bfloat16)
                operands = (lhs, rhs, jnp.asarray(sizes))
            except Exception as exc:  # noqa: BLE001
                if not _is_oom(exc):
                    raise
                operands = None
            # The operands' shapes, and so each program, are the same for both routings: an implementation out
            # of memory on the first is not compiled again (its autotuning alone takes minutes there).
            results = {name: _SAME_SHAPES_OOM for name in failed}
            samples = {name: [] for name in impls}
            for _ in range(repeats):
                for name, fn in impls.items():  # alternate the implementations
                    if results.get(name) == _SAME_SHAPES_OOM:
                        continue
                    if operands is None or results.get(name) == "failed: out of memory":
                        results[name] = "failed: out of memory"
                        failed.add(name)
                        continue
                    try:
                        samples[name].append(_time(fn, operands, calls))
                    except Exception as exc:  # noqa: BLE001
                        if not _is_oom(exc):
                            raise
                        results[name] = "failed: out of memory"
                        failed.add(name)
            for name in impls:
                if results.get(name) is None:
                    sec = statistics.median(samples[name])
                    results[name] = dict(us=sec * 1e6, tflops=flops / sec / 1e12)
            row.update(results)
            rows.append(row)
            _write(args, rows, complete=False)  # so that a run stopped at a deadline keeps its rows
            cells = [r if isinstance(r, str) else f"{r['tflops']:.1f}" for r in (results["moegemm"], results["jax.lax"])]
            print(f"{g['name']:14} {routing:8} {cells[0]:>16} {cells[1]:>16}")
            operands = None
    _write(args, rows, complete=True)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
