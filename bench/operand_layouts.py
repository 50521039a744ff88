"""`moegemm.torch.grouped_mm` and `torch._grouped_mm` on both orders of each 2-D operand.

`torch._grouped_mm` takes each 2-D operand row-major or column-major. The moegemm kernels read the 2-D x 3-D
mode's `a` in either order (a column-major `a` through M-major A tiles), but the 2-D x 2-D mode's operands
token-major only: `grouped_mm` copies a row-major `a` or column-major `b` there first (docs/torch.md,
"Layouts"). For each selected GEMM of the workloads file (uniform routing, bench/peers.py's group sizes
rounded down to multiples of 16 rows, for torch) this checks that moegemm's output on the other layout is
bitwise its output on the first one, then times both systems on both layouts interleaved, per mode:
- rows (2-D x 3-D, the forward): `a` (M, K) row-major and column-major (read in place);
- rows_any_start: the same with bench/peers.py's group sizes as they are (experts starting at any row, where
  a column-major `a`'s tiles start 8-row aligned), moegemm on both layouts, torch on the row-major one only
  (torch._grouped_mm refuses such groups on a column-major `a`);
- ragged_k (2-D x 2-D, the weight gradient X^T dY): `a` = X.t() and `b` = dY token-major (native), and
  `a` row-major with `b` column-major (both copied).
--rounds rounds of --calls calls each, every round behind a sleep kernel (bench/timing.py's interleaved_us),
median µs per call. Ratios: other layout / native for each system (what the other order costs: M-major
tiles or a copy for moegemm), torch / moegemm per layout.

Usage: PYTHONPATH=build/python python3 bench/operand_layouts.py [--only qwen3-down dsv3-down | --only all]
                                                               [--rounds 7] [--calls 6] [--json out.json]
Needs torch with a CUDA GPU and the moegemm torch ops; exits 2 without them, 1 when an output differs from
the native layout's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from peers import group_sizes
from power import grouped_mm_variants, parse_interleaved, torch_on_cuda

DEFAULT_ONLY = ("seed-8k", "dsv3-down", "qwen3-up", "qwen3-down", "gptoss-up")


def operands(torch, m: int, n: int, k: int, e: int) -> dict:
    """{mode: {layout: (a, b)}}: the same values in each layout of a mode."""
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, k, **bf16)
    w = torch.randn(e, k, n, **bf16) * 0.05
    dy = torch.randn(m, n, **bf16)
    return {
        "rows": {"native": (x, w), "a column-major": (x.t().contiguous().t(), w)},
        "ragged_k": {"native": (x.t(), dy), "a row-major, b column-major": (x.t().contiguous(),
                                                                            dy.t().contiguous().t())},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args, gemms = parse_interleaved(ap, argv, DEFAULT_ONLY)
    torch = torch_on_cuda("operand_layouts.py")
    if torch is None:
        return 2

    rows, status = [], 0
    print(f"{'workload':>13} {'mode':>14} {'layout':>28} {'equal':>5} {'torch us':>9} {'moegemm us':>10} "
          f"{'torch/moegemm':>13} {'moegemm/native':>14} {'torch/native':>12}")
    for name in args.only:
        g = gemms[name]
        m, n, k, e = g["M"], g["N"], g["K"], g["E"]
        # Groups in whole multiples of 16 rows (the remainder to the last group): on a column-major a or a
        # ragged K, torch._grouped_mm checks each group's extent on the device (16-byte multiples), and a
        # refused group is a device-side assert that ends the process.
        any_sizes = group_sizes("uniform", m, e, 0)
        sizes = any_sizes // 16 * 16
        sizes[-1] += m - sizes.sum()
        offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
        any_offs = torch.tensor(any_sizes, device="cuda").cumsum(0).to(torch.int32)
        modes = operands(torch, m, n, k, e)
        modes["rows_any_start"] = modes["rows"]
        for mode, layouts in modes.items():
            any_start = mode == "rows_any_start"
            equal, us = grouped_mm_variants(torch, layouts, any_offs if any_start else offs, args,
                                            torch_variants=("native",) if any_start else None)
            status |= 0 if all(equal.values()) else 1
            for lay in layouts:
                torch_us = us.get(f"torch {lay}")
                row = {"workload": name, "mode": mode, "layout": lay, "M": m, "N": n, "K": k, "E": e,
                       "bitwise_equal_to_native": equal[lay], "torch_us": torch_us,
                       "moegemm_us": us[f"moegemm {lay}"],
                       "torch_over_moegemm": torch_us and torch_us / us[f"moegemm {lay}"],
                       "moegemm_over_native": us[f"moegemm {lay}"] / us["moegemm native"],
                       "torch_over_native": torch_us and torch_us / us["torch native"]}
                rows.append(row)
                fmt = lambda v, w, d: f"{v:{w}.{d}f}" if v is not None else f"{'-':>{w}}"
                print(f"{name:>13} {mode:>14} {lay:>28} {str(equal[lay]):>5} {fmt(torch_us, 9, 1)} "
                      f"{row['moegemm_us']:10.1f} {fmt(row['torch_over_moegemm'], 13, 3)} "
                      f"{row['moegemm_over_native']:14.3f} {fmt(row['torch_over_native'], 12, 3)}", flush=True)
            del layouts
        torch.cuda.empty_cache()
    if args.json:
        out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": args.rounds,
               "calls": args.calls, "rows": rows}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
