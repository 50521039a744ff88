"""moegemm's forward on its cluster-pair kernel (MOEGEMM_PAIRS=1) against its default kernel and torch._grouped_mm.

The pair kernel runs two CTAs per cluster on two m-tiles of one expert and n-tile: each loads half of the B tile
and multicasts it into both, so B crosses L2 once per pair instead of once per CTA (docs/kernels.md). Its tiles
are 256 rows, so an expert whose rows end in the first half of a pair tile leaves the second CTA computing
rows it does not store. For each selected GEMM of the workloads file and each routing (`balanced`: M / E rows
per expert; `uniform`: bench/peers.py's group sizes) this checks that both kernels give bitwise the same
output, then times the three systems interleaved: --rounds rounds of --calls calls each on rotating inputs
(CUDA events), and reports each one's median us per call and the ratio default / pair (> 1: the pair kernel is
faster). Launches the heuristic puts on the ping-pong kernel (gpt-oss, seed-2k, seed-4k) run it in both
columns.

Usage: PYTHONPATH=build/python python3 bench/pairs.py [--only seed-16k dsv3-up | --only all] [--rounds 7] [--calls 6]
                                                      [--json out.json]
Needs torch with a CUDA GPU and the moegemm torch ops; exits 2 without them, 1 when the outputs differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from peers import group_sizes, rotation
from power import moegemm_pairs, parse_interleaved, torch_on_cuda, watch_pairs_switch

DEFAULT_ONLY = ("seed-16k", "mixtral-up", "mixtral-down", "dsv3-up", "dsv3-down", "qwen3-up", "qwen3-down")


def first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args, gemms = parse_interleaved(ap, argv, DEFAULT_ONLY)
    watch_pairs_switch()
    torch = torch_on_cuda("pairs.py")
    if torch is None:
        return 2
    bf16, rows, status = torch.bfloat16, [], 0
    l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
    print(f"{'workload':>13} {'routing':>8} {'equal':>5} {'torch us':>9} {'moegemm us':>10} {'pairs us':>9} "
          f"{'moegemm/pairs':>13}")
    for name in args.only:
        g = gemms[name]
        m, n, k, e = g["M"], g["N"], g["K"], g["E"]
        for routing in ("balanced", "uniform"):
            sizes = ([m // e + (1 if i < m % e else 0) for i in range(e)] if routing == "balanced"
                     else group_sizes("uniform", m, e, 0))
            offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
            copies = rotation(2 * (m * k + e * k * n), l2_bytes, cap=4)
            sets = [(torch.randn(m, k, device="cuda", dtype=bf16),
                     torch.randn(e, k, n, device="cuda", dtype=bf16) * 0.05) for _ in range(copies)]
            systems = {
                "torch_grouped_mm": lambda a, w: torch._grouped_mm(a, w, offs=offs),
                "moegemm": lambda a, w: first(torch.ops.moegemm.grouped_gemm(a, w, offs, b_layout="kn")),
                "moegemm_pairs": lambda a, w: first(moegemm_pairs(torch, a, w, offs)),
            }
            equal = bool(torch.equal(systems["moegemm"](*sets[0]), systems["moegemm_pairs"](*sets[0])))
            status |= 0 if equal else 1
            times = {s: [] for s in systems}
            for _ in range(args.rounds):
                for s, f in systems.items():
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for i in range(args.calls):
                        f(*sets[i % copies])
                    stop.record()
                    torch.cuda.synchronize()
                    times[s].append(start.elapsed_time(stop) * 1000 / args.calls)
            us = {s: statistics.median(v) for s, v in times.items()}
            rows.append({"workload": name, "routing": routing, "M": m, "N": n, "K": k, "E": e,
                         "bitwise_equal": equal, "median_us": us,
                         "moegemm_over_pairs": us["moegemm"] / us["moegemm_pairs"]})
            print(f"{name:>13} {routing:>8} {str(equal):>5} {us['torch_grouped_mm']:9.1f} {us['moegemm']:10.1f} "
                  f"{us['moegemm_pairs']:9.1f} {us['moegemm'] / us['moegemm_pairs']:13.3f}", flush=True)
            del sets
            torch.cuda.empty_cache()
    if args.json:
        out = {"gpu": torch.cuda.get_device_name(0), "rounds": args.rounds, "calls": args.calls, "rows": rows}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
