"""`moegemm.torch.grouped_mm` and `torch._grouped_mm` on expert weights stored at other strides.

A model may hand a grouped GEMM a weight it does not own as a packed stack: every other expert of a deeper
stack (`w[::2]`), or a slice of wider rows (`w[:, :, :N]`, e.g. one half of a fused gate/up weight). Both
systems read such a weight in place (moegemm through its tensor map's strides, docs/ops.md §0.2 rule 5). For
each selected GEMM of the workloads file (uniform routing, bench/peers.py's group sizes) this checks that
moegemm's output on each strided weight is bitwise that of its packed copy, then times six systems
interleaved (moegemm and torch on the packed, the every-other-expert and the padded-rows weight): --rounds
rounds of --calls calls each, every round behind a sleep kernel (bench/timing.py's interleaved_us), median µs
per call.
Ratios: strided / packed for each system (1.0: the strides cost nothing) and torch / moegemm per weight.

Usage: PYTHONPATH=build/python python3 bench/strided_weights.py [--only qwen3-up dsv3-down | --only all]
                                                                [--rounds 7] [--calls 6] [--json out.json]
Needs torch with a CUDA GPU and the moegemm torch ops; exits 2 without them, 1 when an output differs from
its packed copy's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from peers import group_sizes
from power import grouped_mm_variants, parse_interleaved, torch_on_cuda

DEFAULT_ONLY = ("seed-8k", "mixtral-down", "dsv3-down", "qwen3-up", "qwen3-down", "gptoss-up")
PAD = 64  # elements past each row of the padded weight (128 bytes)


def weights(torch, e: int, k: int, n: int) -> dict:
    """{storage: (E, K, N) bf16 view}: packed, every other expert of a (2E, K, N) stack, rows padded by PAD;
    the same values in each."""
    packed = torch.randn(e, k, n, device="cuda", dtype=torch.bfloat16) * 0.05
    apart = torch.empty(2 * e, k, n, device="cuda", dtype=torch.bfloat16)[::2]
    apart.copy_(packed)
    padded = torch.empty(e, k, n + PAD, device="cuda", dtype=torch.bfloat16)[:, :, :n]
    padded.copy_(packed)
    return {"packed": packed, "experts_apart": apart, "padded_rows": padded}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args, gemms = parse_interleaved(ap, argv, DEFAULT_ONLY)
    torch = torch_on_cuda("strided_weights.py")
    if torch is None:
        return 2

    rows, status = [], 0
    print(f"{'workload':>13} {'weight':>14} {'equal':>5} {'torch us':>9} {'moegemm us':>10} {'torch/moegemm':>13} "
          f"{'moegemm/packed':>14} {'torch/packed':>12}")
    for name in args.only:
        g = gemms[name]
        m, n, k, e = g["M"], g["N"], g["K"], g["E"]
        offs = torch.tensor(group_sizes("uniform", m, e, 0), device="cuda").cumsum(0).to(torch.int32)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ws = weights(torch, e, k, n)
        equal, us = grouped_mm_variants(torch, {w: (a, b) for w, b in ws.items()}, offs, args)
        status |= 0 if all(equal.values()) else 1
        for w in ws:
            row = {"workload": name, "weight": w, "M": m, "N": n, "K": k, "E": e, "bitwise_equal_to_packed": equal[w],
                   "torch_us": us[f"torch {w}"], "moegemm_us": us[f"moegemm {w}"],
                   "torch_over_moegemm": us[f"torch {w}"] / us[f"moegemm {w}"],
                   "moegemm_over_packed": us[f"moegemm {w}"] / us["moegemm packed"],
                   "torch_over_packed": us[f"torch {w}"] / us["torch packed"]}
            rows.append(row)
            print(f"{name:>13} {w:>14} {str(equal[w]):>5} {row['torch_us']:9.1f} {row['moegemm_us']:10.1f} "
                  f"{row['torch_over_moegemm']:13.3f} {row['moegemm_over_packed']:14.3f} "
                  f"{row['torch_over_packed']:12.3f}", flush=True)
        del a, ws
        torch.cuda.empty_cache()
    if args.json:
        out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": args.rounds,
               "calls": args.calls, "rows": rows}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
