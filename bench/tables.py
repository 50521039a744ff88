"""Markdown tables from the JSON written by bench/peers.py and `moegemm run --json`.

    python3 bench/tables.py peers.json [run.json]

Prints, for peers.json, TFLOP/s per workload and system plus moegemm's ratios to torch._grouped_mm and to
cuBLAS dense of the same FLOPs (same run); for run.json, time (µs), TFLOP/s and fraction of the measured dense
rate per op of each model preset.
"""

from __future__ import annotations

import json
import sys


def _tflops(systems: dict, name: str):
    entry = systems.get(name, {})
    return entry.get("tflops")


def _cell(value) -> str:
    return "—" if value is None else f"{value:.0f}"


def peers_table(doc: dict) -> str:
    head = ("| workload | routing | M×N×K, E | cuBLAS dense | torch._grouped_mm | jax.lax.ragged_dot | moegemm C++ "
            "| moegemm torch | moegemm JAX | C++ / torch | C++ / cuBLAS |")
    lines = [head, "|" + " --- |" * 11]
    for row in doc["rows"]:
        s = row["systems"]
        mc, tg, cb = _tflops(s, "moegemm_cpp"), _tflops(s, "torch_grouped_mm"), _tflops(s, "cublas_dense_same_flops")
        rd = s.get("jax_ragged_dot", {})
        rd_cell = _cell(rd.get("tflops")) if "tflops" in rd else ("OOM" if "memory" in rd.get("status", "") else "—")
        lines.append(
            f"| {row['workload']} | {row['routing']} | {row['M']}×{row['N']}×{row['K']}, {row['E']} | {_cell(cb)} "
            f"| {_cell(tg)} | {rd_cell} | {_cell(mc)} | {_cell(_tflops(s, 'moegemm_torch'))} "
            f"| {_cell(_tflops(s, 'moegemm_jax'))} | {mc / tg:.2f} | {mc / cb:.2f} |")
    return "\n".join(lines)


def run_table(doc: dict) -> str:
    lines = ["| model | op | M×N×K | time µs | TFLOP/s | of dense | check |", "|" + " --- |" * 7]
    for model in doc["models"]:
        for op in model["ops"]:
            if op.get("status") != "ok":
                lines.append(f"| {model['name']} | {op['op']} | {op['M']}×{op['N']}×{op['K']} | — | — | — "
                             f"| {op.get('status', '').replace('_', ' ')} |")
                continue
            ver = op.get("verification", {})
            lines.append(f"| {model['name']} | {op['op']} | {op['M']}×{op['N']}×{op['K']} | {op['time_us']:.0f} "
                         f"| {op['tflops']:.0f} | {op['fraction_of_dense']:.2f} "
                         f"| {'passed' if ver.get('passed') else 'FAILED'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    peers = json.load(open(argv[0]))
    print(f"{peers.get('gpu', '?')}, {peers.get('date', '?')}\n")
    print(peers_table(peers))
    if len(argv) > 1:
        run = json.load(open(argv[1]))
        print(f"\n{run.get('device', '?')}, {run.get('date', '?')}\n")
        print(run_table(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
