"""The peers side by side on the MoE workloads, in one run on one GPU.

Systems (each reported, "not available: <why>" when it cannot run here):
  cublas_dense_same_flops  torch.matmul of (M, K) x (K, N): the dense rate a grouped GEMM should approach
  torch_grouped_mm         torch._grouped_mm(a, b, offs) with b as (E, K, N)
  jax_ragged_dot           jax.lax.ragged_dot(a, b, group_sizes) under jax.jit
  moegemm_cpp              the `moegemm gemm` program (C++ API, no Python on the launch path)
  moegemm_torch            moegemm.torch.grouped_mm(a, b, offs)
  moegemm_jax              moegemm.jax.grouped_gemm(a, b, offsets, b_layout="kn") under jax.jit

Every workload of bench/workloads/moe_workloads.json ("gemms") runs with uniform and zipf routing; group sizes
come from numpy.random.default_rng(seed) and are unaligned. Time: median of --iters (>= 30) calls after warm-up;
CUDA events for torch and the C++ program, host wall time of synchronised calls for JAX (it has no event API).
Inputs rotate over copies that together exceed twice the L2 cache. TFLOP/s = 2*M*N*K / time.
Writes a JSON of the results and a PNG (bench/plot.py). --dispatch also runs the front ends' own benchmarks
(bench/jax_dispatch.py and bench/torch_bench.py for dispatch overhead, bench/jax_ragged_dot.py) when present,
so that one command reproduces every number.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
QUICK_WORKLOADS = ("seed-2k", "seed-16k", "qwen3-up", "dsv3-down")
FRONT_END_BENCHMARKS = ("jax_dispatch.py", "torch_bench.py", "jax_ragged_dot.py")
SYSTEMS = ("cublas_dense_same_flops", "torch_grouped_mm", "jax_ragged_dot", "moegemm_cpp", "moegemm_torch",
           "moegemm_jax")


def group_sizes(routing: str, m: int, e: int, seed: int) -> np.ndarray:
    """Rows per expert (int64, sums to m): uniform, or zipf with p ~ 1/rank^1.2 over randomly permuted ranks."""
    rng = np.random.default_rng(seed)
    if routing == "uniform":
        experts = rng.integers(0, e, size=m)
    else:
        ranks = rng.permutation(e) + 1
        p = 1.0 / ranks.astype(np.float64) ** 1.2
        experts = rng.choice(e, size=m, p=p / p.sum())
    return np.bincount(experts, minlength=e).astype(np.int64)


def rotation(bytes_per_set: int, l2_bytes: int, cap: int = 8) -> int:
    """How many input copies to rotate over so that they exceed twice the L2 cache (at least 1, at most cap)."""
    return int(min(cap, max(1, math.ceil(2 * l2_bytes / max(bytes_per_set, 1)))))


def median_us(samples_us: list[float]) -> float:
    return float(statistics.median(samples_us))


class Torch:
    """The torch-side systems; `why` says why they cannot run when torch or its GPU is missing."""

    def __init__(self):
        self.why = None
        try:
            self.torch = importlib.import_module("torch")
        except ImportError as e:
            self.torch, self.why = None, f"not available: torch not importable ({e})"
            return
        if not self.torch.cuda.is_available():
            self.why = "not available: torch sees no CUDA GPU"

    def gpu(self) -> tuple[str, int] | None:
        if self.why:
            return None
        props = self.torch.cuda.get_device_properties(0)
        return props.name, int(getattr(props, "L2_cache_size", 50 << 20))

    def time_us(self, calls, warmup: int, iters: int) -> float:
        torch = self.torch
        for i in range(warmup):
            calls[i % len(calls)]()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for i, (start, end) in enumerate(events):
            start.record()
            calls[i % len(calls)]()
            end.record()
        torch.cuda.synchronize()
        return median_us([1e3 * s.elapsed_time(e) for s, e in events])

    def operands(self, m, n, k, e, copies, b_layout="kn"):
        torch = self.torch
        shape = (e, k, n) if b_layout == "kn" else (e, n, k)
        return [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                 torch.randn(*shape, device="cuda", dtype=torch.bfloat16).div_(math.sqrt(k))) for _ in range(copies)]


def measure_torch_systems(tw: Torch, wl, sizes, copies, args) -> dict:
    out = {}
    if tw.why:
        return {name: tw.why for name in ("cublas_dense_same_flops", "torch_grouped_mm", "moegemm_torch")}
    torch = tw.torch
    m, n, k, e = wl["M"], wl["N"], wl["K"], wl["E"]
    offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    ops = tw.operands(m, n, k, e, copies)
    dense_b = [b.reshape(-1)[: k * n].view(k, n) for _, b in ops]
    out["cublas_dense_same_flops"] = tw.time_us(
        [lambda a=a, b=b: torch.matmul(a, b) for (a, _), b in zip(ops, dense_b)], args.warmup, args.iters)
    if hasattr(torch, "_grouped_mm"):
        out["torch_grouped_mm"] = tw.time_us(
            [lambda a=a, b=b: torch._grouped_mm(a, b, offs=offs) for a, b in ops], args.warmup, args.iters)
    else:
        out["torch_grouped_mm"] = f"not available: torch {torch.__version__} has no _grouped_mm"
    try:
        mt = importlib.import_module("moegemm.torch")
        out["moegemm_torch"] = tw.time_us(
            [lambda a=a, b=b: mt.grouped_mm(a, b, offs=offs) for a, b in ops], args.warmup, args.iters)
    except ImportError as err:
        out["moegemm_torch"] = f"not available: moegemm.torch not importable ({err})"
    except Exception as err:  # a kernel that does not exist yet, or a failure: report it in the row
        out["moegemm_torch"] = f"failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    del ops, dense_b
    torch.cuda.empty_cache()
    return out


def is_oom(err: Exception) -> bool:
    text = str(err).lower()
    return "resource_exhausted" in text or "out of memory" in text


def measure_jax_systems(wl, sizes, copies, args) -> dict:
    try:
        jax = importlib.import_module("jax")
        jnp = importlib.import_module("jax.numpy")
        gpus = jax.devices("gpu")
    except Exception as err:
        why = f"not available: jax with a GPU not importable ({type(err).__name__})"
        return {"jax_ragged_dot": why, "moegemm_jax": why}
    if not gpus:
        return {"jax_ragged_dot": "not available: jax sees no GPU", "moegemm_jax": "not available: jax sees no GPU"}
    m, n, k, e = wl["M"], wl["N"], wl["K"], wl["E"]
    out = {}
    key = jax.random.PRNGKey(0)
    gs = jnp.asarray(sizes, dtype=jnp.int32)
    offsets = jnp.asarray(np.cumsum(sizes), dtype=jnp.int32)

    def timed(fn, operands):
        for i in range(args.warmup):
            fn(*operands[i % len(operands)]).block_until_ready()
        samples = []
        for i in range(args.iters):
            t0 = time.perf_counter()
            fn(*operands[i % len(operands)]).block_until_ready()
            samples.append(1e6 * (time.perf_counter() - t0))
        return median_us(samples)

    operands = None
    try:
        operands = []
        for c in range(copies):
            ka, kb = jax.random.split(jax.random.fold_in(key, c))
            operands.append((jax.random.normal(ka, (m, k), jnp.bfloat16),
                             jax.random.normal(kb, (e, k, n), jnp.bfloat16) * jnp.bfloat16(1 / math.sqrt(k))))
        ragged = jax.jit(lambda a, b: jax.lax.ragged_dot(a, b, gs))
        out["jax_ragged_dot"] = timed(ragged, operands)
    except Exception as err:
        out["jax_ragged_dot"] = "failed: out of memory" if is_oom(err) else f"failed: {type(err).__name__}"
    try:
        mj = importlib.import_module("moegemm.jax")
        if operands is None or len(operands) < copies:
            raise MemoryError("inputs could not be allocated")
        fn = jax.jit(lambda a, b: mj.grouped_gemm(a, b, offsets, b_layout="kn"))
        out["moegemm_jax"] = timed(fn, operands)
    except ImportError as err:
        out["moegemm_jax"] = f"not available: moegemm.jax not importable ({err})"
    except Exception as err:
        out["moegemm_jax"] = "failed: out of memory" if is_oom(err) else \
            f"failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    del operands
    return out


def find_moegemm_binary(given: str | None) -> str | None:
    for candidate in (given, os.environ.get("MOEGEMM_BIN"), shutil.which("moegemm"),
                      str(HERE.parent / "build" / "tools" / "moegemm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def measure_moegemm_cpp(binary: str | None, wl, sizes, args):
    if binary is None:
        return "not available: moegemm program not found (build it, or pass --moegemm-bin)"
    cmd = [binary, "gemm", "--m", str(wl["M"]), "--n", str(wl["N"]), "--k", str(wl["K"]), "--e", str(wl["E"]),
           "--group-sizes", ",".join(str(int(s)) for s in sizes), "--layout", "kn", "--iters", str(args.iters),
           "--warmup", str(args.warmup), "--json", "-"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return f"failed: moegemm gemm exited {proc.returncode}: {proc.stderr.strip()[:200]}"
    if doc.get("status") == "ok":
        return float(doc["time_us"])
    return f"{doc.get('status', 'failed')}: {doc.get('error', '')}"[:300]


def run_front_end_benchmarks(quick: bool, out_dir: Path) -> dict:
    """Runs the front ends' own benchmarks that sit next to this file (dispatch overhead, JAX paths); each prints
    its own table and writes its JSON into out_dir. Returns {script: "ok" | "failed" | "not present"}."""
    results = {}
    for script in FRONT_END_BENCHMARKS:
        path = HERE / script
        if not path.is_file():
            results[script] = "not present"
            continue
        source = path.read_text()
        cmd = [sys.executable, str(path)]
        if quick and '"--quick"' in source:
            cmd.append("--quick")
        if '"--json"' in source:
            cmd += ["--json", str(out_dir / f"{path.stem}.json")]
        print(f"\n== {' '.join(cmd[1:])} ==", flush=True)
        results[script] = "ok" if subprocess.run(cmd).returncode == 0 else "failed"
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=str(HERE / "workloads" / "moe_workloads.json"))
    p.add_argument("--only", nargs="*", help="workload names to run (default: all, or a subset with --quick)")
    p.add_argument("--routing", nargs="*", default=["uniform", "zipf"], choices=["uniform", "zipf"])
    p.add_argument("--seed", type=int, default=0, help="numpy default_rng seed of the group sizes")
    p.add_argument("--iters", type=int, default=50, help="timed calls per system (>= 30)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--quick", action="store_true", help=f"a fast subset: {', '.join(QUICK_WORKLOADS)}, uniform")
    p.add_argument("--dispatch", action="store_true",
                   help=f"also run the front ends' benchmarks next to this file: {', '.join(FRONT_END_BENCHMARKS)}")
    p.add_argument("--moegemm-bin", help="the moegemm program (default: $MOEGEMM_BIN, PATH, build/tools/moegemm)")
    p.add_argument("--out", default="peers.json", help="results JSON; the plot goes next to it as .png")
    args = p.parse_args(argv)
    if args.iters < 30:
        p.error("--iters must be at least 30")

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch
    workloads = json.loads(Path(args.workloads).read_text())["gemms"]
    names = args.only or (QUICK_WORKLOADS if args.quick else None)
    if names:
        workloads = [w for w in workloads if w["name"] in names]
    routings = ["uniform"] if args.quick and args.routing == ["uniform", "zipf"] else args.routing

    tw = Torch()
    gpu = tw.gpu()
    if gpu is None:
        print(f"no CUDA GPU found through torch ({tw.why}): the peer benchmark measures GPUs only; nothing was "
              "measured. `moegemm run` checks the library on the CPU backend.", file=sys.stderr)
        return 1
    gpu_name, l2_bytes = gpu
    binary = find_moegemm_binary(args.moegemm_bin)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"peers on {gpu_name}, {date}; median of {args.iters} calls after {args.warmup} warm-up, seed {args.seed}")

    rows = []
    total = len(workloads) * len(routings)
    for idx, (wl, routing) in enumerate(((w, r) for w in workloads for r in routings), start=1):
        m, n, k, e = wl["M"], wl["N"], wl["K"], wl["E"]
        print(f"[{idx}/{total}] {wl['name']} {routing}: M={m} N={n} K={k} E={e} ...", file=sys.stderr, flush=True)
        sizes = group_sizes(routing, m, e, args.seed)
        copies = rotation(2 * (m * k + e * k * n), l2_bytes)
        times = {}
        times.update(measure_torch_systems(tw, wl, sizes, copies, args))
        times["moegemm_cpp"] = measure_moegemm_cpp(binary, wl, sizes, args)
        times.update(measure_jax_systems(wl, sizes, copies, args))
        flops = 2.0 * m * n * k
        systems = {}
        for name in SYSTEMS:
            t = times.get(name, "not available")
            systems[name] = ({"time_us": t, "tflops": flops / t * 1e-6} if isinstance(t, float) else {"status": t})
        rows.append({"workload": wl["name"], "routing": routing, "M": m, "N": n, "K": k, "E": e,
                     "rotating_copies": copies, "group_sizes": sizes.tolist(), "systems": systems})
        cells = "  ".join(f"{s}={v['tflops']:.0f}" if "tflops" in v else f"{s}: {v['status']}"
                          for s, v in systems.items())
        print(f"{wl['name']:>13} {routing:>7}  TFLOP/s  {cells}", flush=True)

    doc = {"schema": "moegemm-peers/1", "gpu": gpu_name, "date": date, "seed": args.seed, "iters": args.iters,
           "warmup": args.warmup, "timing": {"torch": "median of CUDA-event-timed calls",
                                             "moegemm_cpp": "median of CUDA-event-timed calls",
                                             "jax": "median host wall time of synchronised jitted calls"},
           "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.dispatch:
        doc["front_end_benchmarks"] = run_front_end_benchmarks(args.quick, out.parent)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results: {out}")
    try:
        from plot import plot  # bench/plot.py, next to this file
        png = plot(doc, out.with_suffix(".png"))
        print(f"plot: {png}")
    except ImportError as err:
        print(f"no plot: {err} (pip install matplotlib)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
