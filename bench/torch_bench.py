"""Benchmarks of the PyTorch front end on an sm_90 GPU.

1. Dispatch overhead at the seed shapes (8 experts, uniform groups; M x N x K = 2048^3, 4096x2048x2048,
   8192x4096x2048, 16384x4096x4096), for moegemm's fused grouped GLU (torch.ops.moegemm.grouped_gemm_glu)
   and moegemm.torch.grouped_mm, with torch._grouped_mm's own eager overhead as the bar:
     host   : wall time of `call(); torch.cuda.synchronize()` (median over the runs)
     graph  : the same for a CUDA-graph replay of the call
     kernel : CUDA-event time of the call on the stream (median; the calls queue behind a sleep kernel, so the
              host's time to issue them is not in it)
     +host  : host - kernel, the overhead a user sees beyond the kernel (same for graph).
     enqueue: host time per call of 30 calls issued back to back without synchronisation: the CPU cost of a
              call, which a GPU busy with earlier work hides (same for graph: the cost of one replay)
     b2b    : wall time per call of those 30 calls until the last has finished; b2b - kernel is the gap per
              call on the GPU (launch latency, or the host not keeping up with short kernels)
   A one-element in-place add, measured the same way, is the floor: what a call and a replay cost the host
   for a kernel that does next to nothing.
2. Throughput on the workloads file (default bench/workloads/moe_workloads.json): for every GEMM and for
   uniform and zipf routing (numpy default_rng(0), unaligned group sizes), the median of >= 30 CUDA-event
   timed calls after warm-up, rotating through copies of the inputs whose total exceeds the L2 cache:
     mm     : moegemm.torch.grouped_mm vs torch._grouped_mm (weights as (E, N, K).mT, nn.Linear style)
     glu    : moegemm grouped_gemm_glu (fused SwiGLU, N = 2I) vs torch._grouped_mm + a separate SwiGLU.
--parts picks 1, 2 or both (default). A call that raises (an op without a kernel yet, moegemm not importable)
gets an "error" entry in its row and the run goes on. Prints tables and writes JSON to --json.
Usage: python bench/torch_bench.py [workloads.json] [--json out.json] [--quick] [--iters 30]
                                   [--parts dispatch workloads]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import timing  # next to this file

try:
    import moegemm.torch as mt
    MT_ERROR = None
except (ImportError, OSError) as _err:  # torch._grouped_mm's numbers are still measured
    mt, MT_ERROR = None, f"moegemm.torch not importable ({_err})"

SEED_SHAPES = [(2048, 2048, 2048), (4096, 2048, 2048), (8192, 4096, 2048), (16384, 4096, 4096)]  # M, N, K
SEED_EXPERTS = 8
L2_BYTES = 50 * 2**20  # H200
# A graph of one kernel that does next to nothing: what any replay costs the host, whatever it holds.
FLOOR_CALL = "one-element add_ (floor)"


def group_sizes(m: int, e: int, routing: str, rng: np.random.Generator) -> list[int]:
    """Rows per expert: uniform or zipf (p ~ 1/rank^1.2 over a random permutation), unaligned."""
    if routing == "uniform":
        p = np.full(e, 1.0 / e)
    else:
        p = 1.0 / np.arange(1, e + 1) ** 1.2
        p = p[rng.permutation(e)]
        p /= p.sum()
    return np.bincount(rng.choice(e, size=m, p=p), minlength=e).tolist()


def offsets_of(sizes) -> torch.Tensor:
    return torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")


def event_times(fn, iters: int, warmup: int = 5) -> list[float]:
    """Device time of each of `iters` calls, in microseconds (CUDA events around each call). The calls queue
    behind a sleep kernel sized from the host time the warm-up calls took to issue (timing.hold_for),
    so that the events time the GPU's work, not the host's time to issue a call."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn(0)
    per_call = (time.perf_counter() - t0) / max(warmup, 1)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    torch.cuda.synchronize()
    timing.gpu_hold(torch, timing.hold_for(per_call * iters))
    for i in range(iters):
        starts[i].record()
        fn(i)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def host_times(fn, iters: int, warmup: int = 5) -> list[float]:
    """Wall time of `fn(); synchronize()` per call, in microseconds."""
    for _ in range(warmup):
        fn(0)
    torch.cuda.synchronize()
    out = []
    for i in range(iters):
        t0 = time.perf_counter()
        fn(i)
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def enqueue_times(fn, calls: int = 30, repeats: int = 5, warmup: int = 5) -> tuple[float, float]:
    """(median host µs per call to issue `calls` calls back to back, median wall µs per call until they have
    all finished), over `repeats` batches; the GPU is idle at the start of each batch."""
    for _ in range(warmup):
        fn(0)
    issue, total = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        issue.append((t1 - t0) * 1e6 / calls)
        total.append((t2 - t0) * 1e6 / calls)
    return statistics.median(issue), statistics.median(total)


def graph_of(fn):
    """A CUDA graph of fn(0) and a callable replaying it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(0)
    return lambda _i: graph.replay()


def dispatch_rows(iters: int, quick: bool) -> list[dict]:
    rows = []
    for m, n, k in SEED_SHAPES[:2] if quick else SEED_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 0.1
        w = torch.randn(SEED_EXPERTS, n, k, device="cuda", dtype=torch.bfloat16) * 0.1
        offs = offsets_of([m // SEED_EXPERTS] * SEED_EXPERTS)
        one = torch.zeros(1, device="cuda")
        calls = {
            "moegemm.grouped_gemm_glu": lambda _i: torch.ops.moegemm.grouped_gemm_glu(a, w, offs),
            "moegemm.grouped_mm": lambda _i: mt.grouped_mm(a, w.mT, offs),
            "torch._grouped_mm": lambda _i: torch._grouped_mm(a, w.mT, offs=offs),
            FLOOR_CALL: lambda _i: one.add_(1),
        }
        for name, fn in calls.items():
            if mt is None and name.startswith("moegemm"):
                rows.append({"shape": f"{m}x{n}x{k}", "call": name, "error": MT_ERROR})
                continue
            try:
                kernel = statistics.median(event_times(fn, iters))
                host = statistics.median(host_times(fn, iters))
                enqueue, b2b = enqueue_times(fn)
                replay = graph_of(fn)
                graph = statistics.median(host_times(replay, iters))
                graph_enqueue, graph_b2b = enqueue_times(replay)
            except Exception as err:  # noqa: BLE001 - no kernel yet, or a capture failure: the row says so
                torch.cuda.synchronize()
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                rows.append({"shape": f"{m}x{n}x{k}", "call": name, "error": f"{type(err).__name__}: {first}"})
                continue
            rows.append({"shape": f"{m}x{n}x{k}", "call": name, "kernel_us": kernel, "host_us": host,
                         "graph_us": graph, "host_overhead_us": host - kernel, "graph_overhead_us": graph - kernel,
                         "enqueue_us": enqueue, "graph_enqueue_us": graph_enqueue,
                         "back_to_back_us": b2b, "graph_back_to_back_us": graph_b2b})
        del a, w
        torch.cuda.empty_cache()
    return rows


def rotating(make, nbytes: int):
    """Copies of an input set, enough that one pass over them exceeds twice the L2 cache."""
    count = max(2, math.ceil(2 * L2_BYTES / max(nbytes, 1)))
    return [make() for _ in range(min(count, 64))]


def workload_rows(gemms: list[dict], iters: int) -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    for gemm in gemms:
        m, n, k, e = gemm["M"], gemm["N"], gemm["K"], gemm["E"]
        for routing in ("uniform", "zipf"):
            sizes = group_sizes(m, e, routing, rng)
            offs = offsets_of(sizes)
            nbytes = 2 * (m * k + e * n * k)
            sets = rotating(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 0.1,
                                     torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.05), nbytes)
            pick = lambda i: sets[i % len(sets)]  # noqa: E731
            flops = 2.0 * m * n * k
            half = n // 2

            def torch_glu(i):
                g = torch._grouped_mm(pick(i)[0], pick(i)[1].mT, offs=offs)
                return F.silu(g[:, :half]) * g[:, half:]

            variants = {
                ("mm", "moegemm"): lambda i: mt.grouped_mm(pick(i)[0], pick(i)[1].mT, offs),
                ("mm", "torch"): lambda i: torch._grouped_mm(pick(i)[0], pick(i)[1].mT, offs=offs),
                ("glu", "moegemm"): lambda i: torch.ops.moegemm.grouped_gemm_glu(pick(i)[0], pick(i)[1], offs),
                ("glu", "torch"): torch_glu,
            }
            for (kind, impl), fn in variants.items():
                try:
                    if mt is None and impl == "moegemm":
                        raise RuntimeError(MT_ERROR)
                    us = statistics.median(event_times(fn, iters))
                except (NotImplementedError, RuntimeError, ValueError) as err:
                    rows.append({"gemm": gemm["name"], "routing": routing, "kind": kind, "impl": impl,
                                 "error": str(err).splitlines()[0]})
                    continue
                rows.append({"gemm": gemm["name"], "routing": routing, "kind": kind, "impl": impl, "us": us,
                             "tflops": flops / us / 1e6, "M": m, "N": n, "K": k, "E": e,
                             "min_group": min(sizes), "max_group": max(sizes)})
            del sets
            torch.cuda.empty_cache()
    return rows


def print_tables(dispatch: list[dict], workloads: list[dict]) -> None:
    if dispatch:
        print_dispatch(dispatch)
    if workloads:
        print_workloads(workloads)


def print_dispatch(dispatch: list[dict]) -> None:
    print(f"{'shape':>18} {'call':>26} {'kernel':>9} {'host':>9} {'+host':>8} {'graph':>9} {'+graph':>8} "
          f"{'enqueue':>8} {'g.enq':>8} {'b2b':>9} {'g.b2b':>9}  (us)")
    for r in dispatch:
        if "error" in r:
            print(f"{r['shape']:>18} {r['call']:>26}  error: {r['error']}")
            continue
        print(f"{r['shape']:>18} {r['call']:>26} {r['kernel_us']:9.1f} {r['host_us']:9.1f} "
              f"{r['host_overhead_us']:8.1f} {r['graph_us']:9.1f} {r['graph_overhead_us']:8.1f} "
              f"{r['enqueue_us']:8.1f} {r['graph_enqueue_us']:8.1f} {r['back_to_back_us']:9.1f} "
              f"{r['graph_back_to_back_us']:9.1f}")
    print()


def print_workloads(workloads: list[dict]) -> None:
    print(f"{'gemm':>14} {'routing':>8} {'kind':>5} {'impl':>8} {'us':>10} {'TFLOP/s':>8}")
    for r in workloads:
        if "error" in r:
            print(f"{r['gemm']:>14} {r['routing']:>8} {r['kind']:>5} {r['impl']:>8}  error: {r['error']}")
        else:
            print(f"{r['gemm']:>14} {r['routing']:>8} {r['kind']:>5} {r['impl']:>8} {r['us']:10.1f} "
                  f"{r['tflops']:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="?", default=str(Path(__file__).parent / "workloads/moe_workloads.json"))
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--quick", action="store_true", help="two seed shapes and the seed GEMMs only")
    parser.add_argument("--iters", type=int, default=30, help="timed calls per measurement (>= 30)")
    parser.add_argument("--parts", nargs="+", choices=["dispatch", "workloads"], default=["dispatch", "workloads"],
                        help="1. dispatch overhead, 2. throughput on the workloads (default: both)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_bench.py needs a CUDA GPU")
    iters = max(args.iters, 30)
    gemms = json.loads(Path(args.workloads).read_text())["gemms"]
    if args.quick:
        gemms = [g for g in gemms if g["name"].startswith("seed")][:2]
    dispatch = dispatch_rows(iters, args.quick) if "dispatch" in args.parts else []
    workloads = workload_rows(gemms, iters) if "workloads" in args.parts else []
    print_tables(dispatch, workloads)
    if args.json:
        result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "iters": iters,
                  "routing_seed": "numpy.random.default_rng(0)", "parts": args.parts, "dispatch": dispatch,
                  "workloads": workloads}
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
