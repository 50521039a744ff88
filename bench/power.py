"""Steady-state throughput, SM clock and board power of each system, one system at a time (CUDA GPU, nvidia-smi).

Under a long run of GEMMs an H200 reaches its board power limit, and its SM clock then falls until the power
fits. The TFLOP/s a kernel sustains therefore also depends on the energy it spends per FLOP (tensor cores,
shared-memory, L2 and HBM traffic), not only on how well it hides latency. For each selected GEMM of the
workloads file (uniform routing, the group sizes of bench/peers.py) this runs every system alone, back to back
on rotating inputs, for --seconds after a one-second warm-up, and reports:

  tflops        FLOPs of the calls / their CUDA-event time;
  sm_mhz, watts medians of the SM clock and board power nvidia-smi sampled every 100 ms meanwhile;
  gflop_per_j   tflops / watts * 1000: the work the system does per joule at that clock;
  capped        the share of samples whose clock event reasons include the software power cap (bit 0x4).

--routing balanced gives every expert M / E rows instead. --pairs adds the system moegemm_pairs to the forward:
moegemm's linear kernel in cluster pairs that share B by TMA multicast (MOEGEMM_PAIRS=1, set around its calls).

Ops (--ops): `forward` (2-D x 3-D, ragged M): cublas_dense_same_flops = torch.mm (M, K) x (K, N),
torch_grouped_mm = torch._grouped_mm(a, w, offs=offs) with w (E, K, N), moegemm =
torch.ops.moegemm.grouped_gemm(a, w, offs, b_layout="kn"); `wgrad` (ragged K, bf16 output):
cublas_dense_same_flops = torch.mm(x.t(), dy), torch_grouped_mm = torch._grouped_mm(x.t(), dy, offs=offs),
moegemm = torch.ops.moegemm.grouped_gemm_wgrad(x, dy, offs, out_dtype=bf16). Systems run in --rounds rounds,
in an order that rotates from round to round; a row reports each system's median over its rounds.

Usage: PYTHONPATH=build/python python3 bench/power.py [--only seed-16k dsv3-up | --only all] [--ops forward wgrad]
                                                      [--seconds 3] [--rounds 2] [--routing balanced] [--pairs]
                                                      [--json out.json]
Needs torch with a CUDA GPU, the moegemm torch ops and nvidia-smi; exits 2 without them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from peers import group_sizes, rotation
from timing import interleaved_us, rotated

HERE = Path(__file__).resolve().parent
DEFAULT_ONLY = ("seed-16k", "qwen3-down", "dsv3-up")
POWER_CAP_BIT = 0x4  # nvidia-smi clocks_event_reasons: SW power cap


class Sampler:
    """nvidia-smi sampling the SM clock, power and clock event reasons into a file while it runs."""

    QUERY = "timestamp,clocks.sm,power.draw,clocks_event_reasons.active"

    def __init__(self):
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
        self.proc = subprocess.Popen(["nvidia-smi", "-i", "0", f"--query-gpu={self.QUERY}",
                                      "--format=csv,noheader,nounits", "-lms", "100"],
                                     stdout=self.file, stderr=subprocess.DEVNULL)

    def stop(self) -> list[tuple[float, float, float, int]]:
        """(epoch seconds, SM MHz, W, reasons) of every sample taken."""
        self.proc.terminate()
        self.proc.wait()
        self.file.seek(0)
        out = []
        for line in self.file:
            f = [x.strip() for x in line.split(",")]
            try:
                t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                out.append((t, float(f[1]), float(f[2]), int(f[3], 16)))
            except (ValueError, IndexError):
                continue
        self.file.close()
        Path(self.file.name).unlink(missing_ok=True)
        return out


def window_stats(samples, t0: float, t1: float) -> dict:
    """Medians of the SM clock (MHz) and board power (W), and the share of power-capped samples, over the
    samples of Sampler.stop() taken in [t0 + 0.2 s, t1] (epoch seconds: a window of run_window); None where
    no sample fell inside."""
    inside = [s for s in samples if t0 + 0.2 <= s[0] <= t1]
    return {"sm_mhz": statistics.median(s[1] for s in inside) if inside else None,
            "watts": statistics.median(s[2] for s in inside) if inside else None,
            "capped": sum(bool(s[3] & POWER_CAP_BIT) for s in inside) / len(inside) if inside else None,
            "samples": len(inside)}


def medians(per_round: list[dict], keys) -> dict:
    """{key: median over the rounds that have a value for it} of each key that some round has a value for."""
    return {key: statistics.median(x[key] for x in per_round if x[key] is not None)
            for key in keys if any(x[key] is not None for x in per_round)}


def run_window(torch, calls, seconds: float) -> tuple[float, float, float, int]:
    """Calls `calls` (rotating) for one second, then for `seconds`; (epoch start, epoch end, event ms, calls)."""
    def batch(n: int, i0: int) -> int:
        for i in range(n):
            calls[(i0 + i) % len(calls)]()
        return i0 + n
    i, end = 0, time.perf_counter() + 1.0
    while time.perf_counter() < end:
        i = batch(4, i)
        torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    start.record()
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        i = batch(4, i)
        n += 4
        torch.cuda.synchronize()
    stop.record()
    torch.cuda.synchronize()
    return t0, time.time(), start.elapsed_time(stop), n


def watch_pairs_switch() -> None:
    """Sets MOEGEMM_PAIRS=0 before moegemm's first launch, so that the launcher reads it at every launch."""
    os.environ.setdefault("MOEGEMM_PAIRS", "0")


def moegemm_pairs(torch, a, w, offs):
    """moegemm's forward on its cluster-pair kernel (MOEGEMM_PAIRS=1 around the call; needs
    watch_pairs_switch() before the process's first launch)."""
    os.environ["MOEGEMM_PAIRS"] = "1"
    try:
        return torch.ops.moegemm.grouped_gemm(a, w, offs, b_layout="kn")
    finally:
        os.environ["MOEGEMM_PAIRS"] = "0"


def systems_of(torch, op: str, g: dict, offs, copies: int, pairs: bool = False) -> tuple[float, dict]:
    m, n, k, e = g["M"], g["N"], g["K"], g["E"]
    bf16 = torch.bfloat16
    if op == "forward":
        sets = [(torch.randn(m, k, device="cuda", dtype=bf16), torch.randn(e, k, n, device="cuda", dtype=bf16) * 0.05)
                for _ in range(copies)]
        # cuBLAS reads one (K, N) weight per set, the first expert's: a weight shared by every set would stay in L2
        systems = {
            "cublas_dense_same_flops": [lambda a=a, w=w: torch.mm(a, w[0]) for a, w in sets],
            "torch_grouped_mm": [lambda a=a, w=w: torch._grouped_mm(a, w, offs=offs) for a, w in sets],
            "moegemm": [lambda a=a, w=w: torch.ops.moegemm.grouped_gemm(a, w, offs, b_layout="kn") for a, w in sets],
        }
        if pairs:
            systems["moegemm_pairs"] = [lambda a=a, w=w: moegemm_pairs(torch, a, w, offs) for a, w in sets]
        return 2.0 * m * n * k, systems
    sets = [(torch.randn(m, k, device="cuda", dtype=bf16), torch.randn(m, n, device="cuda", dtype=bf16) * 0.1)
            for _ in range(copies)]
    return 2.0 * m * n * k, {
        "cublas_dense_same_flops": [lambda x=x, dy=dy: torch.mm(x.t(), dy) for x, dy in sets],
        "torch_grouped_mm": [lambda x=x, dy=dy: torch._grouped_mm(x.t(), dy, offs=offs) for x, dy in sets],
        "moegemm": [lambda x=x, dy=dy: torch.ops.moegemm.grouped_gemm_wgrad(x, dy, offs, out_dtype=bf16)
                    for x, dy in sets],
    }


def measure(torch, op: str, g: dict, seconds: float, rounds: int, l2_bytes: int, routing: str = "uniform",
            pairs: bool = False) -> dict:
    if routing == "balanced":
        sizes = [g["M"] // g["E"] + (1 if i < g["M"] % g["E"] else 0) for i in range(g["E"])]
    else:
        sizes = group_sizes("uniform", g["M"], g["E"], 0)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    per_set = 2 * (g["M"] * g["K"] + (g["E"] * g["K"] * g["N"] if op == "forward" else g["M"] * g["N"]))
    flops, systems = systems_of(torch, op, g, offs, rotation(per_set, l2_bytes, cap=4), pairs)
    windows = {name: [] for name in systems}
    sampler = Sampler()
    try:
        for r in range(rounds):
            for name in rotated(list(systems), r):
                windows[name].append(run_window(torch, systems[name], seconds))
    finally:
        samples = sampler.stop()
    out = {}
    for name, runs in windows.items():
        per_round = []
        for t0, t1, ms, calls in runs:
            per_round.append({"tflops": calls * flops / (ms * 1e-3) / 1e12, "calls": calls,
                              **window_stats(samples, t0, t1)})
        row = medians(per_round, ("tflops", "sm_mhz", "watts", "capped"))
        if "watts" in row:
            row["gflop_per_j"] = row["tflops"] / row["watts"] * 1000
        row["rounds"] = per_round
        out[name] = row
    return out


def add_gemm_selection(ap: argparse.ArgumentParser, default_only) -> None:
    """The options that pick GEMMs of the workloads file: --workloads (the file) and --only (names, or `all`)."""
    ap.add_argument("--workloads", default=str(HERE / "workloads" / "moe_workloads.json"))
    ap.add_argument("--only", nargs="+", default=list(default_only),
                    help="GEMM names of the workloads file, or `all` (default: %(default)s)")


def parse_interleaved(ap: argparse.ArgumentParser, argv, default_only) -> tuple[argparse.Namespace, dict]:
    """(args, {name: GEMM}) of a benchmark that times systems in interleaved rounds: add_gemm_selection's
    options, --rounds and --calls (each >= 1, through ap.error) and --json, added to `ap`'s own."""
    add_gemm_selection(ap, default_only)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (>= 1)")
    ap.add_argument("--calls", type=int, default=6, help="calls per system and round (>= 1)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        ap.error("--rounds and --calls must be >= 1")
    return args, selected_gemms(ap, args)


def selected_gemms(ap: argparse.ArgumentParser, args) -> dict:
    """The GEMMs of args.workloads by name; args.only (`all` for every one) checked against them, through
    ap.error (exit 2) for an unreadable file or an unknown name."""
    try:
        gemms = {g["name"]: g for g in json.loads(Path(args.workloads).read_text())["gemms"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        ap.error(f"--workloads: cannot read the GEMMs of {args.workloads}: {err!r}")
    if args.only == ["all"]:
        args.only = list(gemms)
    unknown = [name for name in args.only if name not in gemms]
    if unknown:
        ap.error(f"--only: unknown GEMM {', '.join(unknown)} (the file has {', '.join(gemms)})")
    return gemms


def torch_with_moegemm(program: str):
    """torch with torch.ops.moegemm registered, or None (said on stderr) when either does not import."""
    try:
        import torch
        import moegemm.torch  # noqa: F401  (registers torch.ops.moegemm)
    except ImportError as err:
        print(f"{program}: needs torch and the moegemm torch ops: {err}", file=sys.stderr)
        return None
    return torch


def grouped_mm_variants(torch, variants: dict, offs, args, torch_variants=None) -> tuple[dict, dict]:
    """moegemm.torch.grouped_mm and torch._grouped_mm on each operand variant {name: (a, b)}, the first the
    reference: ({name: whether moegemm's output is bitwise its output on the first}, {"moegemm <name>" and
    "torch <name>": median µs per call}), timed interleaved in args.rounds rounds of args.calls calls each
    (timing.interleaved_us, every round behind a sleep kernel). torch runs on the variants named in
    `torch_variants` only (default: all of them)."""
    import moegemm.torch as mt

    outputs = {name: mt.grouped_mm(a, b, offs) for name, (a, b) in variants.items()}
    first = next(iter(outputs.values()))
    equal = {name: bool(torch.equal(out, first)) for name, out in outputs.items()}
    del outputs, first
    systems = {}
    for name, (a, b) in variants.items():
        systems[f"moegemm {name}"] = [lambda a=a, b=b: mt.grouped_mm(a, b, offs)]
        if torch_variants is None or name in torch_variants:
            systems[f"torch {name}"] = [lambda a=a, b=b: torch._grouped_mm(a, b, offs=offs)]
    device = offs.device.type
    return equal, interleaved_us(torch, device, systems, warmup=2, iters=args.rounds * args.calls, rounds=args.rounds)


def torch_on_cuda(program: str):
    """torch_with_moegemm(program) where torch sees a CUDA GPU, else None (said on stderr)."""
    torch = torch_with_moegemm(program)
    if torch is not None and not torch.cuda.is_available():
        print(f"{program}: needs a CUDA GPU", file=sys.stderr)
        return None
    return torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gemm_selection(ap, DEFAULT_ONLY)
    ap.add_argument("--ops", nargs="+", choices=("forward", "wgrad"), default=["forward", "wgrad"])
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per system and round (> 0)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds (>= 1)")
    ap.add_argument("--routing", choices=("uniform", "balanced"), default="uniform",
                    help="group sizes: bench/peers.py's uniform routing, or M / E rows each (default: %(default)s)")
    ap.add_argument("--pairs", action="store_true", help="also time moegemm's cluster-pair kernel (forward)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    if not args.seconds > 0 or args.rounds < 1:  # `not >` also refuses nan
        ap.error("--seconds must be > 0 and --rounds >= 1")
    gemms = selected_gemms(ap, args)
    if args.pairs:
        watch_pairs_switch()
    torch = torch_with_moegemm("power.py")
    if torch is None:
        return 2
    if not torch.cuda.is_available() or shutil.which("nvidia-smi") is None:
        print("power.py: needs a CUDA GPU and nvidia-smi", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    limit = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=power.limit", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True).stdout.strip()
    result = {"gpu": props.name, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "power_limit_w": limit, "seconds": args.seconds, "rounds": args.rounds, "routing": args.routing,
              "rows": []}
    print(f"{props.name}, power limit {limit} W")
    print(f"{'op':>7} {'workload':>13} {'system':>24} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>6} {'GFLOP/J':>8} "
          f"{'capped':>6}")
    for op in args.ops:
        for name in args.only:
            g = gemms[name]
            systems = measure(torch, op, g, args.seconds, args.rounds, int(getattr(props, "L2_cache_size", 50 << 20)),
                              args.routing, args.pairs)
            result["rows"].append({"op": op, "workload": name, "M": g["M"], "N": g["N"], "K": g["K"], "E": g["E"],
                                   "systems": systems})
            for sys_name, s in systems.items():
                print(f"{op:>7} {name:>13} {sys_name:>24} {s['tflops']:8.1f} {s.get('sm_mhz', 0):7.0f} "
                      f"{s.get('watts', 0):6.0f} {s.get('gflop_per_j', 0):8.0f} {s.get('capped', 0):6.2f}", flush=True)
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
