"""Model of how the weight gradient's tiles end on the persistent grid under each tile order (no GPU).

A k-grouped launch (grouped_gemm_wgrad) has E x ceil(K_out / 128) x ceil(N / 256) output tiles; a tile runs
its expert's ceil(rows / 64) k-blocks, so its cost is modelled as OVERHEAD_US + KBLOCK_US x k-blocks. Each of
the workloads of moe_workloads.json, with bench/peers.py's routings, is scheduled on SMS CTAs:

- static: CTA b takes tiles b, b + SMS, b + 2 SMS, ... (tile order = expert index order);
- dynamic: each tile goes to the CTA that is free first, in expert index order;
- dynamic, longest first: the same, experts sorted by the bit length of their k-block count, descending
  (ties in index order), as src/sm90/scheduler_ragged_k.cuh sorts them.

Printed: the last CTA's end over an even split of the total cost (1.000 = every CTA ends together).

With --fit RESULTS.json (a bench/peers.py result with the wgrad suite), the two cost constants are first
fitted to the measured bf16 times of its uniform rows (least squares of time x SMS = OVERHEAD_US x tiles +
KBLOCK_US x k-blocks summed over the tiles, tiles of 128 x 256), printed with each row's measured and
modelled time and the share of the per-tile overhead in it, and then used for the model.
Usage: python3 bench/tile_order_model.py [--workloads PATH] [--fit RESULTS.json]
"""
from __future__ import annotations

import argparse
import heapq
import json
import pathlib

import numpy as np

from peers import group_sizes

SMS = 132
KBLOCK_US = 0.62  # one 128 x 256 x 64 k-block at ~85% of the H200's dense bf16 peak per SM
OVERHEAD_US = 1.2  # a tile's epilogue and pipeline refill, not hidden by the cooperative kernel


def list_schedule(costs: np.ndarray) -> float:
    """End of the last CTA when each tile, in order, goes to the CTA that is free first."""
    free = [(0.0, b) for b in range(SMS)]
    for c in costs:
        t, b = heapq.heappop(free)
        heapq.heappush(free, (t + float(c), b))
    return max(t for t, _ in free)


def orders(sizes: np.ndarray, tiles_per_expert: int, overhead_us: float = OVERHEAD_US,
           kblock_us: float = KBLOCK_US) -> dict[str, float]:
    k_blocks = (sizes + 63) // 64
    per_expert = overhead_us + kblock_us * k_blocks
    costs = np.repeat(per_expert, tiles_per_expert)
    even = costs.sum() / SMS
    size_class = np.array([int(k).bit_length() for k in k_blocks])
    longest_first = np.repeat(per_expert[np.argsort(-size_class, kind="stable")], tiles_per_expert)
    return {
        "static": max(costs[b::SMS].sum() for b in range(SMS)) / even,
        "dynamic": list_schedule(costs) / even,
        "dynamic, longest first": list_schedule(longest_first) / even,
    }


def tiles_per_expert(k_out: int, n: int) -> int:
    """Output tiles of one expert's weight gradient (K_out x N) in 128 x 256 tiles."""
    return ((k_out + 127) // 128) * ((n + 255) // 256)


def fit_costs(results: dict) -> tuple[float, float]:
    """(OVERHEAD_US, KBLOCK_US) fitted to the bf16 weight-gradient times of the uniform rows of a
    bench/peers.py result; prints each row's measured and modelled time (us) and the overhead's share."""
    rows = [r for r in results["backward"]["wgrad"] if r["routing"] == "uniform"]
    terms, times = [], []
    for r in rows:
        per_expert = tiles_per_expert(r["K"], r["N"])
        k_blocks = sum(per_expert * ((g + 63) // 64) for g in r["group_sizes"])
        terms.append([r["E"] * per_expert / SMS, k_blocks / SMS])
        times.append(r["systems"]["moegemm_wgrad"]["time_us"])
    (overhead, kblock), *_ = np.linalg.lstsq(np.array(terms), np.array(times), rcond=None)
    print(f"fitted to {len(rows)} uniform rows: OVERHEAD_US = {overhead:.2f}, KBLOCK_US = {kblock:.3f}")
    print(f"{'workload':13s} {'tiles/CTA':>9s} {'k-blocks/tile':>13s} {'measured':>9s} {'model':>9s} {'overhead':>8s}")
    for r, (tiles, k_blocks), t in zip(rows, terms, times):
        model = overhead * tiles + kblock * k_blocks
        print(f"{r['workload']:13s} {tiles:9.1f} {k_blocks / tiles:13.1f} {t:9.1f} {model:9.1f} "
              f"{overhead * tiles / model:8.2f}")
    print()
    return float(overhead), float(kblock)


def main() -> None:
    here = pathlib.Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=pathlib.Path, default=here / "workloads" / "moe_workloads.json")
    p.add_argument("--fit", type=pathlib.Path, help="a bench/peers.py result with the wgrad suite")
    args = p.parse_args()
    costs = fit_costs(json.loads(args.fit.read_text())) if args.fit else (OVERHEAD_US, KBLOCK_US)
    gemms = json.loads(args.workloads.read_text())["gemms"]
    print(f"{'workload':13s} {'routing':8s} {'tiles':>7s} {'static':>7s} {'dynamic':>8s} {'longest first':>14s}")
    for w in gemms:
        for routing in ("uniform", "zipf"):
            sizes = group_sizes(routing, w["M"], w["E"], 0)
            per_expert = tiles_per_expert(w["K"], w["N"])
            r = orders(sizes, per_expert, *costs)
            print(f"{w['name']:13s} {routing:8s} {w['E'] * per_expert:7d} {r['static']:7.3f} "
                  f"{r['dynamic']:8.3f} {r['dynamic, longest first']:14.3f}")


if __name__ == "__main__":
    main()
