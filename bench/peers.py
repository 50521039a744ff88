"""The peers side by side on the MoE workloads, in one run on one GPU.

Suites (--suite; default: all of them but "frontends"):
  peers     single grouped GEMMs (forward), the systems below
  glu       the up projection's SwiGLU fused into the GEMM epilogue vs the plain GEMM + a separate SwiGLU
  wgrad     per-expert weight gradients (ragged K) vs torch._grouped_mm's 2-D x 2-D mode and cuBLAS dense
  dglu      the fused dgrad + SwiGLU backward (grouped_gemm_dglu) vs the plain dgrad GEMM and the unfused peers
  mlp       a whole MoE expert MLP, forward + backward with autograd: moegemm.torch.moe_mlp vs torch
  ksweep    the plain grouped GEMM at K/4, K/2, K against torch._grouped_mm: the time that does not scale with
            K (what the epilogue and the pipeline fill cost when not hidden under the MMA)
  dispatch  host overhead of an eager call and of a CUDA-graph replay vs kernel time (torch_bench.py --parts
            dispatch, jax_dispatch.py), torch._grouped_mm's own overhead as the bar
  frontends the front ends' throughput scripts (torch_bench.py --parts workloads, jax_ragged_dot.py)
  "backward" = wgrad dglu mlp; "all" = peers glu wgrad dglu mlp dispatch. glu/wgrad/dglu/mlp/ksweep:
  bench/suites.py.

Systems of the peers suite (each reported, "not available: <why>" when it cannot run here):
  cublas_dense_same_flops  torch.matmul of (M, K) x (K, N): the dense rate a grouped GEMM should approach
  torch_grouped_mm         torch._grouped_mm(a, b, offs) with b as (E, K, N)
  jax_ragged_dot           jax.lax.ragged_dot(a, b, group_sizes) under jax.jit
  moegemm_cpp              the `moegemm gemm` program (C++ API, no Python on the launch path)
  moegemm_torch            moegemm.torch.grouped_mm(a, b, offs)
  moegemm_jax              moegemm.jax.grouped_gemm(a, b, offsets, b_layout="kn") under jax.jit

Every workload of bench/workloads/moe_workloads.json ("gemms", and "models" for mlp) runs with uniform and zipf
routing; group sizes come from numpy.random.default_rng(seed) and are unaligned. Time: median of --iters calls
after warm-up; CUDA events for torch and the C++ program, host wall time for JAX (it has no event API on torch's
stream): for moegemm_jax, JAX_CALLS jitted calls queued back to back and one block_until_ready per sample (as
jax_dispatch.py), so that JAX's own dispatch and wake-up latency, ~90 us per synchronised call on an H200
host, is not charged to each kernel; jax_ragged_dot the same where one call takes less than 20 ms, else one
synchronised call per sample (the latency is then under 0.5% of it; the row's
"jax_ragged_dot_calls_per_sample"). The torch systems are timed interleaved in one process, their calls
queued behind a sleep kernel (bench/timing.py), so that their events time the GPU's work and not the host's
time to issue each call. The C++ program runs afterwards in a process of its own, its calls back to back on
its own inputs: its column is not interleaved with the peers', and read 0.97-1.12x the torch front end's
rate for the same kernel in the run of 2026-12-04 (compare the peers with the torch front end). The
host clock reads slower than those events for the same kernel (the wait's latency, and back-to-back calls
run at the clock of a GPU kept busy), so each row also times moegemm.torch.grouped_mm by the host clock, in
alternation with moegemm_jax on the same inputs (the row's "front_ends_host_clock"): that ratio compares
the front ends. JAX's inputs are torch tensors made as the torch systems' are, shared through DLPack. Inputs
rotate over copies that together exceed twice the L2 cache, cuBLAS dense's over copies of its own (A and one
(K, N) weight) that do. TFLOP/s = 2*M*N*K / time.
Writes a JSON of the results (tables: bench/tables.py) and a PNG of the peers suite (bench/plot.py).
--device cpu --tiny is a smoke run on the CPU (tiny shapes, GPU-only systems skipped with a note); --plan
prints the estimated H200 time of the selected suites and exits.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import importlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # suites.py, tables.py, plot.py next to this file
import suites as training  # noqa: E402
import tables  # noqa: E402
import timing  # noqa: E402

QUICK_WORKLOADS = ("seed-2k", "seed-16k", "qwen3-up", "dsv3-down")
JAX_CALLS = 8  # moegemm_jax calls per timed sample (see the module docstring)
RAGGED_DOT_QUEUED_BELOW_S = 0.02  # jax_ragged_dot takes JAX_CALLS per sample where a call is shorter than this
FRONT_END_BENCHMARKS = ("jax_dispatch.py", "torch_bench.py", "jax_ragged_dot.py")
ALL_SUITES = ("peers", "glu", "wgrad", "dglu", "mlp", "ksweep", "dispatch", "frontends")
SUITE_ALIASES = {"all": ("peers", "glu", "wgrad", "dglu", "mlp", "dispatch"), "backward": ("wgrad", "dglu", "mlp")}
RUN_ORDER = ("glu", "wgrad", "dglu", "mlp", "ksweep", "peers", "dispatch", "frontends")  # torch-only before JAX
FRONT_END_TIMEOUT_S = {True: 240, False: 420}  # per script, quick / full: a hung script cannot eat the budget
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
    """The torch-side systems; `why` says why they cannot run when torch or its GPU is missing. device "cpu"
    (smoke runs) puts every tensor on the host and times with the host clock."""

    def __init__(self, device: str = "cuda"):
        self.why, self.device = None, device
        try:
            self.torch = importlib.import_module("torch")
        except ImportError as e:
            self.torch, self.why = None, f"not available: torch not importable ({e})"
            return
        if device == "cuda" and not self.torch.cuda.is_available():
            self.why = "not available: torch sees no CUDA GPU"

    def gpu(self) -> tuple[str, int] | None:
        if self.why:
            return None
        if self.device == "cpu":
            return f"host CPU ({platform.machine()}, {os.cpu_count()} cores; smoke run, not a measurement)", 0
        props = self.torch.cuda.get_device_properties(0)
        return props.name, int(getattr(props, "L2_cache_size", 50 << 20))

    def operands(self, m, n, k, e, copies, b_layout="kn"):
        torch = self.torch
        shape = (e, k, n) if b_layout == "kn" else (e, n, k)
        return [(torch.randn(m, k, device=self.device, dtype=torch.bfloat16),
                 torch.randn(*shape, device=self.device, dtype=torch.bfloat16).div_(math.sqrt(k)))
                for _ in range(copies)]

    def release(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def measure_torch_systems(tw: Torch, wl, sizes, copies, dense_copies, args) -> dict:
    """The torch-side systems of a peers row, interleaved; cuBLAS dense rotates over `dense_copies` (A, B)
    pairs (its own footprint past twice the L2 cache: one expert's (K, N) weight is far smaller than E of
    them), the first of them the grouped inputs' A with the first expert's slice of their B."""
    out = {}
    if tw.why:
        return {name: tw.why for name in ("cublas_dense_same_flops", "torch_grouped_mm", "moegemm_torch")}
    torch = tw.torch
    m, n, k, e = wl["M"], wl["N"], wl["K"], wl["E"]
    offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device=tw.device)
    ops = tw.operands(m, n, k, e, copies)
    dense = [(a, b.reshape(-1)[: k * n].view(k, n)) for a, b in ops[:dense_copies]]
    dense += [(torch.randn(m, k, device=tw.device, dtype=torch.bfloat16),
               torch.randn(k, n, device=tw.device, dtype=torch.bfloat16).div_(math.sqrt(k)))
              for _ in range(dense_copies - len(dense))]
    calls = {"cublas_dense_same_flops": [lambda a=a, b=b: torch.matmul(a, b) for a, b in dense]}
    if hasattr(torch, "_grouped_mm"):
        calls["torch_grouped_mm"] = [lambda a=a, b=b: torch._grouped_mm(a, b, offs=offs) for a, b in ops]
    else:
        out["torch_grouped_mm"] = f"not available: torch {torch.__version__} has no _grouped_mm"
    try:
        mt = importlib.import_module("moegemm.torch")
        calls["moegemm_torch"] = [lambda a=a, b=b: mt.grouped_mm(a, b, offs=offs) for a, b in ops]
    except ImportError as err:
        out["moegemm_torch"] = f"not available: moegemm.torch not importable ({err})"

    # Interleaved (bench/timing.py): the three share the GPU's clock states instead of running one after the other.
    out.update(timing.interleaved_us(torch, tw.device, calls, args.warmup, args.iters, on_error=training.status_of))
    del ops, dense
    tw.release()
    return out


def is_oom(err: Exception) -> bool:
    text = str(err).lower()
    return "resource_exhausted" in text or "out of memory" in text


def measure_jax_systems(tw: Torch, wl, sizes, copies, args) -> tuple[dict, dict | None, int | None]:
    """JAX's systems on inputs made as the torch systems' are (torch tensors, shared with JAX through DLPack),
    and the front ends side by side: ({system: µs or why not}, {"moegemm_jax_us", "moegemm_torch_us": the two front
    ends' calls timed by the host clock in alternation, JAX_CALLS calls per sample} or None, jax_ragged_dot's
    calls per sample or None).

    JAX has no event API on torch's stream, so its calls are timed by the host clock: a sample queues
    JAX_CALLS calls and waits once. The torch front end timed the same way next to it is the fair comparison;
    its CUDA-event time in the torch rows excludes what the host clock adds (the wait's latency, and the
    clock states of calls run back to back instead of behind a sleep kernel, bench/timing.py)."""
    try:
        jax = importlib.import_module("jax")
        jnp = importlib.import_module("jax.numpy")
        gpus = jax.devices("gpu")
    except Exception as err:
        why = f"not available: jax with a GPU not importable ({type(err).__name__})"
        return {"jax_ragged_dot": why, "moegemm_jax": why}, None, None
    if not gpus:
        why = "not available: jax sees no GPU"
        return {"jax_ragged_dot": why, "moegemm_jax": why}, None, None
    torch = tw.torch
    e = wl["E"]
    out, same_clock, ragged_calls = {}, None, None
    gs = jnp.asarray(sizes, dtype=jnp.int32)
    offsets = jnp.asarray(np.cumsum(sizes), dtype=jnp.int32)

    def timed(fn, operands, calls=1):
        """Median us per call over --iters samples of `calls` calls queued back to back, then one wait."""
        system = {"jax": ([lambda a=a, b=b: fn(a, b) for a, b in operands], jax.block_until_ready)}
        return timing.alternating_wall_us(system, args.warmup, args.iters, calls)["jax"]

    ops = jax_ops = None
    try:
        ops = tw.operands(wl["M"], wl["N"], wl["K"], e, copies)
        torch.cuda.synchronize()
        jax_ops = [(jax.dlpack.from_dlpack(a), jax.dlpack.from_dlpack(b)) for a, b in ops]
        ragged = jax.jit(lambda a, b: jax.lax.ragged_dot(a, b, gs))
        jax.block_until_ready(ragged(*jax_ops[0]))  # compiled, then one call timed to choose the calls per sample
        t0 = time.perf_counter()
        jax.block_until_ready(ragged(*jax_ops[0]))
        ragged_calls = JAX_CALLS if time.perf_counter() - t0 < RAGGED_DOT_QUEUED_BELOW_S else 1
        out["jax_ragged_dot"] = timed(ragged, jax_ops, ragged_calls)
    except Exception as err:
        out["jax_ragged_dot"] = "failed: out of memory" if is_oom(err) else f"failed: {type(err).__name__}"
    try:
        mj = importlib.import_module("moegemm.jax")
        if jax_ops is None:
            raise MemoryError("inputs could not be allocated")
        fn = jax.jit(lambda a, b: mj.grouped_gemm(a, b, offsets, b_layout="kn"))
        systems = {"moegemm_jax": ([lambda a=a, b=b: fn(a, b) for a, b in jax_ops], jax.block_until_ready)}
        try:
            mt = importlib.import_module("moegemm.torch")
            offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device=tw.device)
            systems["moegemm_torch"] = ([lambda a=a, b=b: mt.grouped_mm(a, b, offs=offs) for a, b in ops],
                                        lambda outs: torch.cuda.synchronize())
        except ImportError:
            pass  # the torch row says why
        times = timing.alternating_wall_us(systems, args.warmup, args.iters, JAX_CALLS)
        out["moegemm_jax"] = times["moegemm_jax"]
        if "moegemm_torch" in times:
            same_clock = {"moegemm_jax_us": times["moegemm_jax"], "moegemm_torch_us": times["moegemm_torch"],
                          "calls_per_sample": JAX_CALLS}
    except ImportError as err:
        out["moegemm_jax"] = f"not available: moegemm.jax not importable ({err})"
    except Exception as err:
        out["moegemm_jax"] = "failed: out of memory" if is_oom(err) else \
            f"failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    del ops, jax_ops
    tw.release()
    return out, same_clock, ragged_calls


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


def front_end_commands(suites) -> list[tuple[str, list[str]]]:
    """The front ends' own scripts a run needs: (script, extra arguments), each script at most once."""
    parts = [part for suite, part in (("dispatch", "dispatch"), ("frontends", "workloads")) if suite in suites]
    commands = [("torch_bench.py", ["--parts", *parts])] if parts else []
    if "dispatch" in suites:
        commands.append(("jax_dispatch.py", []))
    if "frontends" in suites:
        commands.append(("jax_ragged_dot.py", []))
    return commands


def run_front_end_benchmarks(commands, quick: bool, out: Path, deadline: float | None = None) -> tuple[dict, dict]:
    """Runs the front ends' own benchmarks that sit next to this file (dispatch overhead, JAX paths); each prints
    its own table and writes its JSON next to `out` (<out stem>.<script stem>.json). Returns
    ({script: "ok" | "failed" | "failed: timed out after N s" | "not present"}, {script stem: its JSON}).
    Each script gets FRONT_END_TIMEOUT_S, less when `deadline` (a time.monotonic() value) comes sooner."""
    statuses, results = {}, {}
    for script, extra in commands:
        path = HERE / script
        if not path.is_file():
            statuses[script] = "not present"
            continue
        source = path.read_text()
        json_path = out.parent / f"{out.stem}.{path.stem}.json"
        json_path.unlink(missing_ok=True)  # never embed a stale result
        cmd = [sys.executable, str(path), *extra]
        if quick and '"--quick"' in source:
            cmd.append("--quick")
        if '"--json"' in source:
            cmd += ["--json", str(json_path)]
        print(f"\n== {' '.join(cmd[1:])} ==", flush=True)
        timeout = FRONT_END_TIMEOUT_S[quick]
        if deadline is not None:
            timeout = max(1, min(timeout, int(deadline - time.monotonic() - 5)))
        try:
            rc = subprocess.run(cmd, timeout=timeout).returncode
            statuses[script] = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            statuses[script] = f"failed: timed out after {timeout} s"
        if json_path.is_file():
            try:
                results[path.stem] = json.loads(json_path.read_text())
            except json.JSONDecodeError:
                pass
    return statuses, results


def run_peers(tw: Torch, workloads, routings, binary, l2_bytes: int, args) -> list[dict]:
    """The peers suite: every workload x routing, every system of SYSTEMS; returns the JSON rows."""
    rows = []
    total = len(workloads) * len(routings)
    gpu_only = "skipped: --device cpu (GPU-only system)"
    for idx, (wl, routing) in enumerate(((w, r) for w in workloads for r in routings), start=1):
        m, n, k, e = wl["M"], wl["N"], wl["K"], wl["E"]
        print(f"[{idx}/{total}] {wl['name']} {routing}: M={m} N={n} K={k} E={e} ...", file=sys.stderr, flush=True)
        sizes = group_sizes(routing, m, e, args.seed)
        copies = rotation(2 * (m * k + e * k * n), l2_bytes)
        dense_copies = rotation(2 * (m * k + k * n), l2_bytes)
        times, same_clock, ragged_calls = {}, None, None
        times.update(measure_torch_systems(tw, wl, sizes, copies, dense_copies, args))
        if tw.device == "cpu":
            times.update({"moegemm_cpp": gpu_only, "jax_ragged_dot": gpu_only, "moegemm_jax": gpu_only})
        else:
            times["moegemm_cpp"] = measure_moegemm_cpp(binary, wl, sizes, args)
            jax_times, same_clock, ragged_calls = measure_jax_systems(tw, wl, sizes, copies, args)
            times.update(jax_times)
        flops = 2.0 * m * n * k
        systems = {}
        for name in SYSTEMS:
            t = times.get(name, "not available")
            systems[name] = ({"time_us": t, "tflops": flops / t * 1e-6} if isinstance(t, float) else {"status": t})
        rows.append({"workload": wl["name"], "routing": routing, "M": m, "N": n, "K": k, "E": e,
                     "rotating_copies": copies, "dense_rotating_copies": dense_copies,
                     "group_sizes": sizes.tolist(), "systems": systems})
        if ragged_calls:
            rows[-1]["jax_ragged_dot_calls_per_sample"] = ragged_calls
        if same_clock:
            rows[-1]["front_ends_host_clock"] = same_clock
        cells = "  ".join(f"{s}={tables.tflops_text(v['tflops'])}" if "tflops" in v
                          else f"{s}: {v['status']}" for s, v in systems.items())
        print(f"{wl['name']:>13} {routing:>7}  TFLOP/s  {cells}", flush=True)
    return rows


# ---- --plan: the wall time of a run on an H200, estimated from the FLOP counts ----------------------

PLAN_JAX_RAGGED_TFLOPS = ((8, 80.0), (128, 6.0))  # jax.lax.ragged_dot by experts (docs/benchmarks.md); more: OOM


def _ragged_dot_seconds(flops: float, e: int) -> float | None:
    for max_e, rate in PLAN_JAX_RAGGED_TFLOPS:
        if e <= max_e:
            return flops / (rate * 1e12)
    return None  # runs out of memory at once


def plan_peers(workloads, routings: int, calls: int, tflops: float) -> float:
    total = 0.0
    for wl in workloads:
        f = 2.0 * wl["M"] * wl["N"] * wl["K"]
        per = 1.0 + 3 * (calls * f / (tflops * 1e12) + 0.15)  # inputs; cuBLAS, torch, moegemm torch
        per += 2.0 + calls * f / (tflops * 1e12)  # the moegemm program: process, CUDA context, its inputs
        ragged = _ragged_dot_seconds(f, wl["E"])
        if ragged is not None:  # jit compile, the call that picks the calls per sample, then the samples
            per += 1.5 + ragged * (1 + calls * (JAX_CALLS if ragged < RAGGED_DOT_QUEUED_BELOW_S else 1))
        else:
            per += 1.5
        per += 1.5 + calls * f / (0.8 * tflops * 1e12)  # moegemm JAX: compile + calls
        total += per * routings
    return total


def plan_frontends(doc: dict, quick: bool, tflops: float) -> float:
    gemms = doc["gemms"]
    if quick:
        gemms = [g for g in gemms if g["name"].startswith("seed")][:2]
    calls, repeats = (5 + 3, 1) if quick else (20 + 3, 3)
    total = 10.0  # imports
    for g in gemms:
        f = 2.0 * g["M"] * g["N"] * g["K"]
        ragged = _ragged_dot_seconds(f, g["E"]) or 0.0
        total += 2 * (3.0 + repeats * calls * (ragged + f / (tflops * 1e12)))  # jax_ragged_dot.py
        total += 2 * (1.0 + 4 * (35 * f / (tflops * 1e12) + 0.2))  # torch_bench.py --parts workloads
    return total


def plan(doc: dict, suites, workloads, routings, args) -> int:
    calls = args.iters + args.warmup
    print(f"estimated H200 wall time: GEMMs at {args.plan_tflops:.0f} TFLOP/s, elementwise torch ops at 3 TB/s, "
          f"{calls} calls per system, {len(routings)} routing(s), plus fixed set-up costs (rough)")
    total = 15.0  # interpreter, torch and JAX imports
    for suite in suites:
        if suite == "peers":
            secs, what = plan_peers(workloads, len(routings), calls, args.plan_tflops), f"{len(workloads)} GEMMs"
        elif suite in training.SUITES:
            selected = training.select(training.cases(doc, suite), suite, args.only, args.quick)
            if args.tiny:
                selected = [training.tiny(c) for c in selected]
            secs = training.plan_seconds(suite, selected, len(routings), calls, args.plan_tflops,
                                         compile_baselines=not args.no_compile)
            gemm_tf = sum(training.flops(suite, c) for c in selected) * 1e-12
            what = f"{len(selected)} cases: {', '.join(c['name'] for c in selected)}; {gemm_tf:.1f} TFLOP per pass"
        elif suite == "dispatch":
            secs, what = (35.0 if args.quick else 60.0), "torch_bench.py --parts dispatch, jax_dispatch.py (fixed)"
        else:
            secs = plan_frontends(doc, args.quick, args.plan_tflops)
            what = "torch_bench.py workloads, jax_ragged_dot.py"
        total += secs
        print(f"  {suite:>9}  {secs:6.0f} s  {what}")
    print(f"  {'total':>9}  {total:6.0f} s  ({total / 60:.1f} min)")
    return 0


# ---- the command line ------------------------------------------------------------------------------


def resolve_suites(names, legacy_dispatch: bool) -> list[str]:
    chosen = set()
    for name in names:
        chosen.update(SUITE_ALIASES.get(name, (name,)))
    if legacy_dispatch:
        chosen.update(("dispatch", "frontends"))
    return [s for s in RUN_ORDER if s in chosen]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", nargs="+", default=["all"], choices=[*ALL_SUITES, *SUITE_ALIASES], metavar="SUITE",
                   help=f"suites to run: {', '.join(ALL_SUITES)}, backward (= wgrad dglu mlp) or all (default: "
                        f"{' '.join(SUITE_ALIASES['all'])})")
    p.add_argument("--workloads", default=str(HERE / "workloads" / "moe_workloads.json"))
    p.add_argument("--only", nargs="*", help="workload (GEMM) or model names to run (default: all, or a subset "
                                             "with --quick); a model name selects its GEMMs too")
    p.add_argument("--routing", nargs="*", default=["uniform", "zipf"], choices=["uniform", "zipf"])
    p.add_argument("--seed", type=int, default=0, help="numpy default_rng seed of the group sizes")
    p.add_argument("--iters", type=int, default=None,
                   help="timed calls per system (default 30, 3 with --tiny; >= 30 unless --tiny)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 5, 1 with --tiny)")
    p.add_argument("--quick", action="store_true",
                   help=f"a fast subset, uniform routing: peers {', '.join(QUICK_WORKLOADS)}; "
                        + "; ".join(f"{k} {', '.join(v)}" for k, v in training.QUICK_CASES.items())
                        + "; the front ends' scripts with --quick")
    p.add_argument("--dispatch", action="store_true",
                   help="also run the suites dispatch and frontends (the front ends' benchmarks next to this file: "
                        f"{', '.join(FRONT_END_BENCHMARKS)})")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: a smoke run of the torch systems on host tensors (implies --tiny); GPU-only systems "
                        "(the C++ program, JAX, the dispatch scripts) are skipped with a note")
    p.add_argument("--no-compile", action="store_true",
                   help="skip the torch.compile baselines (glu, dglu, mlp: a compilation each, about 40 s on an "
                        "H200 host), recorded as skipped")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (at most 128 rows, 8 experts, dims / 64): a smoke "
                                                       "run of every code path, not a measurement")
    p.add_argument("--plan", action="store_true", help="print the estimated H200 wall time of the selected suites "
                                                       "(from the FLOP counts) and exit; runs nothing")
    p.add_argument("--plan-tflops", type=float, default=500.0, help="GEMM rate assumed by --plan (default 500)")
    p.add_argument("--deadline", type=float, default=0,
                   help="seconds: past this the run prints where it was and exits (code 1), keeping the suites "
                        "already finished in the JSON (written after every suite); 0 (default): no deadline. "
                        "Against a hung kernel on a machine lent for a fixed time")
    p.add_argument("--moegemm-bin", help="the moegemm program (default: $MOEGEMM_BIN, PATH, build/tools/moegemm)")
    p.add_argument("--out", default="peers.json", help="results JSON; the plot goes next to it as .png")
    args = p.parse_args(argv)
    if args.device == "cpu":
        args.tiny = True
    defaults = (3, 1) if args.tiny else (30, 5)
    args.iters = defaults[0] if args.iters is None else args.iters
    args.warmup = defaults[1] if args.warmup is None else args.warmup
    if args.iters < 30 and not args.tiny:
        p.error("--iters must be at least 30")
    suites = resolve_suites(args.suite, args.dispatch)

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch
    wdoc = json.loads(Path(args.workloads).read_text())
    roles = training.gemm_roles(wdoc)
    workloads = wdoc["gemms"]
    names = args.only or (QUICK_WORKLOADS if args.quick else None)
    if names:
        workloads = [w for w in workloads if w["name"] in names or roles[w["name"]][1] in names]
    if args.only:
        known = {a for s in training.SUITES for c in training.cases(wdoc, s) for a in c["aliases"]}
        unknown = sorted(set(args.only) - known - {w["name"] for w in wdoc["gemms"]})
        if unknown:
            print(f"warning: --only {' '.join(unknown)}: no such workload or model", file=sys.stderr)
    if args.tiny:
        workloads = [training.tiny(w) for w in workloads]
    routings = ["uniform"] if args.quick and args.routing == ["uniform", "zipf"] else args.routing
    if args.plan:
        return plan(wdoc, suites, workloads, routings, args)

    deadline = None
    if args.deadline > 0:
        deadline = time.monotonic() + args.deadline
        faulthandler.dump_traceback_later(args.deadline, exit=True)  # _exit(1) from a watchdog thread
    tw = Torch(args.device)
    gpu = tw.gpu()
    if gpu is None:
        print(f"no CUDA GPU found through torch ({tw.why}): the peer benchmark measures GPUs only; nothing was "
              "measured. `moegemm run` checks the library on the CPU backend; `--device cpu` is a smoke run of "
              "this script.", file=sys.stderr)
        return 1
    gpu_name, l2_bytes = gpu
    binary = find_moegemm_binary(args.moegemm_bin)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{' '.join(suites)} on {gpu_name}, {date}; median of {args.iters} calls after {args.warmup} warm-up, "
          f"seed {args.seed}" + (" (tiny shapes: a smoke run)" if args.tiny else ""))

    doc = {"schema": "moegemm-peers/1", "gpu": gpu_name, "date": date, "seed": args.seed, "iters": args.iters,
           "warmup": args.warmup, "timing": {"torch": "median of CUDA-event-timed calls, the torch systems of a row "
                                                      "interleaved (at least 5 rounds, a whole number of turns "
                                                      "of the rotating order), each round "
                                                      "queued behind a sleep kernel",
                                             "moegemm_cpp": "median of CUDA-event-timed calls (its own process)",
                                             "jax": f"median host wall time per call: moegemm_jax {JAX_CALLS} "
                                                    "jitted calls back to back then one block_until_ready per "
                                                    f"sample, jax_ragged_dot the same where a call takes under "
                                                    f"{RAGGED_DOT_QUEUED_BELOW_S * 1e3:g} ms, else one "
                                                    "synchronised call (the row's "
                                                    "jax_ragged_dot_calls_per_sample); "
                                                    "front_ends_host_clock: moegemm_jax and moegemm.torch "
                                                    "timed so, sample by sample in alternation",
                                             "suites": "median of CUDA-event-timed calls (torch, one process, the "
                                                       "systems of a row interleaved, each round queued behind "
                                                       "a sleep kernel)"},
           "rows": [], "suites": suites, "quick": args.quick, "tiny": args.tiny, "device": args.device,
           "routings": routings, "suite_seconds": {},
           "targets": {suite: {name: {"ratio": f"time({num}) / time({den})",
                                      "target": None if target is None else f"{target[0]} {target[1]}"}
                               for name, (num, den, target) in ratios.items()}
                       for suite, ratios in training.RATIOS.items()}}
    if args.device == "cpu":
        doc["timing"] = {k: "median host wall time of calls on host tensors (smoke run)" for k in doc["timing"]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ctx = None
    for suite in suites:
        started = time.perf_counter()
        if tw.why is None and (suite == "peers" or suite in training.SUITES):
            timing.raise_clocks(tw.torch, args.device)  # not the first row on an idle GPU's clock
        if suite == "peers":
            doc["rows"] = run_peers(tw, workloads, routings, binary, l2_bytes, args)
        elif suite in training.SUITES:
            if ctx is None:
                bench = training.Bench(tw.torch, args.device, args.warmup, args.iters, l2_bytes)
                ctx = training.Context(tw.torch, args.device, bench, compile_baselines=not args.no_compile)
            selected = training.select(training.cases(wdoc, suite), suite, args.only, args.quick)
            if args.tiny:
                selected = [training.tiny(c) for c in selected]
            rows = training.run_suite(suite, ctx, selected, routings, group_sizes, args.seed,
                                      lambda text: print(text, file=sys.stderr, flush=True))
            if suite in ("glu", "ksweep"):
                doc[suite] = rows
            else:
                doc.setdefault("backward", {})[suite] = rows
        elif suite == "dispatch" or (suite == "frontends" and "dispatch" not in suites):
            commands = front_end_commands(suites)
            if args.device == "cpu":
                doc["front_end_benchmarks"] = {script: "skipped: --device cpu (needs a CUDA GPU)"
                                               for script, _ in commands}
            else:
                tw.release()
                doc["front_end_benchmarks"], doc["front_end_results"] = run_front_end_benchmarks(
                    commands, args.quick, out, deadline)
        doc["suite_seconds"][suite] = round(time.perf_counter() - started, 1)
        out.write_text(json.dumps(doc, indent=1) + "\n")  # after every suite: a cut-short run keeps its results
    print(f"results: {out}  (tables: python3 bench/tables.py {out})")
    print("suite seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in doc["suite_seconds"].items()))
    faulthandler.cancel_dump_traceback_later()
    if doc["rows"]:
        try:
            from plot import plot  # bench/plot.py, next to this file
            png = plot(doc, out.with_suffix(".png"))
            print(f"plot: {png}")
        except ImportError as err:
            print(f"no plot: {err} (pip install matplotlib)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
