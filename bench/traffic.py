"""The bytes a fused epilogue adds to its GEMM, against the time it adds: why a fused / plain target holds or
not on a row.

    python3 bench/traffic.py results.json [--peak-tbs 4.8]

For every dglu and glu row of a bench/peers.py JSON, with bf16 operands and outputs and every byte moved
once (each operand read once from HBM, each output written once: the least traffic, which a perfect L2
would reach):
  dglu   plain dgrad: dY (M, H) + W (E, I, H) in, dH (M, I) out.
         fused: the same in, plus C (M, 2I) and prob (M,) f32 in, dC (M, 2I) and dprob (M,) f32 out, no dH.
  glu    plain GEMM of 2I columns: X (M, H) + W (E, H, 2I) in, (M, 2I) out.
         fused with C and prob (what an MoE MLP's forward runs): the same and prob (M,) f32 in, plus D (M, I)
         out.
For every wgrad row, the operand bytes the weight gradient's 128 x 256 tiles read from L2 (each tile reads its
expert's rows of both token-major operands once: rows_g x (128 + 256) x 2 bytes, over ceil(H / 128) x
ceil(N / 256) tiles per expert) and the bytes of its bf16 weights, each against moegemm's time: whether a row
is bound by L2's throughput (the long-expert rows show what it sustains) or by something else.
Every expert's weights count (the benchmarks' routings leave no expert empty); the dGLU's per-tile dprob
partials (ceil(I / 128) x M f32, written and read back once) are left out, under 1% of any row.
Columns: the least traffic of each (MB), the plain GEMM's time and the rate it moved its traffic at
(TB/s), the byte ratio fused / plain, the measured time ratio, and the rate the fused op would need to move
its traffic within the target time (1.08 x plain for the dGLU, 1.05 x for the GLU), against the HBM peak
(--peak-tbs, TB/s; 4.8 for the H200). Where that rate is above what the plain GEMM reaches, the fused op
must move its extra bytes faster than the GEMM moves its own, while running the same MMA work.
"""

from __future__ import annotations

import argparse
import json

BF16 = 2  # bytes


def dglu_bytes(m: int, i: int, h: int, e: int) -> tuple[int, int]:
    """Least HBM traffic (bytes) of the plain dgrad GEMM and of the fused dGLU."""
    operands = BF16 * (m * h + e * i * h)
    return operands + BF16 * m * i, operands + BF16 * 4 * m * i + 2 * 4 * m


def glu_bytes(m: int, n2: int, h: int, e: int) -> tuple[int, int]:
    """Least HBM traffic (bytes) of the plain GEMM of 2I = n2 columns and of the fused GLU with C (and D)."""
    operands = BF16 * (m * h + e * h * n2)
    return operands + BF16 * m * n2, operands + BF16 * (m * n2 + m * n2 // 2) + 4 * m


def wgrad_l2_bytes(group_sizes: list[int], h: int, n: int) -> int:
    """Operand bytes the 128 x 256 tiles of a bf16 weight gradient (x (T, H), dy (T, N)) read from L2."""
    tiles_per_expert = -(-h // 128) * -(-n // 256)
    return sum(tiles_per_expert * rows * (128 + 256) * BF16 for rows in group_sizes)


def wgrad_table(data: dict) -> str:
    """Markdown table of the wgrad rows' L2 operand traffic and weight bytes against time ("" without rows)."""
    rows = data.get("backward", {}).get("wgrad", [])
    lines = ["| workload | routing | rows per expert | L2 operand GB | weights GB | moegemm µs | operands TB/s "
             "| weights TB/s | TFLOP/s | torch µs / moegemm µs |", "|" + " --- |" * 10]
    for r in rows:
        s = r["systems"]
        us, torch_us = s.get("moegemm_wgrad", {}).get("time_us"), s.get("torch_grouped_mm", {}).get("time_us")
        sizes = r.get("group_sizes")
        if us is None or not sizes:
            continue
        # the weight gradient's x is (M tokens, K = H), dy (M, N): W (E, H, N)
        l2 = wgrad_l2_bytes(sizes, r["K"], r["N"])
        weights = BF16 * r["E"] * r["K"] * r["N"]
        sec = us * 1e-6
        ratio = f"{torch_us / us:.2f}" if torch_us else "—"
        lines.append(f"| {r['workload']} | {r['routing']} | {r['M'] / r['E']:.0f} | {l2 / 1e9:.1f} | {weights / 1e9:.1f} "
                     f"| {us:.0f} | {l2 / sec / 1e12:.2f} | {weights / sec / 1e12:.2f} "
                     f"| {2 * r['M'] * r['N'] * r['K'] / sec / 1e12:.0f} | {ratio} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _rows(data: dict, suite: str) -> list[dict]:
    if suite == "glu":
        return data.get("glu", [])
    return data.get("backward", {}).get(suite, [])


def table(data: dict, suite: str, peak_tbs: float) -> str:
    """Markdown table of one suite's rows (empty string when the JSON has none)."""
    if suite == "dglu":
        plain_key, fused_key, target, what = "moegemm_dgrad", "moegemm_dglu", 1.08, "M×I×H, E"
    else:
        plain_key, fused_key, target, what = "moegemm_gemm", "moegemm_glu_c_prob", 1.05, "M×2I×H, E"
    rows = _rows(data, suite)
    if not rows:
        return ""
    lines = [f"| workload | routing | {what} | plain MB | fused MB | bytes fused / plain | plain µs "
             f"| plain TB/s | time fused / plain | TB/s needed at {target} × plain | ≤ {peak_tbs} |",
             "|" + " --- |" * 11]
    for r in rows:
        s = r["systems"]
        plain_us, fused_us = s.get(plain_key, {}).get("time_us"), s.get(fused_key, {}).get("time_us")
        if suite == "dglu":
            shape = f"{r['M']}×{r['I']}×{r['H']}, {r['E']}"
            plain_b, fused_b = dglu_bytes(r["M"], r["I"], r["H"], r["E"])
        else:
            shape = f"{r['M']}×{r['N']}×{r['K']}, {r['E']}"
            plain_b, fused_b = glu_bytes(r["M"], r["N"], r["K"], r["E"])
        if plain_us is None or fused_us is None:
            cells = ["—"] * 5
        else:
            needed = fused_b / (target * plain_us * 1e-6) / 1e12
            cells = [f"{plain_us:.0f}" if plain_us >= 100 else f"{plain_us:.1f}",
                     f"{plain_b / (plain_us * 1e-6) / 1e12:.2f}", f"{fused_us / plain_us:.2f}", f"{needed:.2f}",
                     "yes" if needed <= peak_tbs else "no"]
        lines.append(f"| {r['workload']} | {r['routing']} | {shape} | {plain_b / 1e6:.0f} | {fused_b / 1e6:.0f} "
                     f"| {fused_b / plain_b:.2f} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="JSON written by bench/peers.py (with a glu, dglu or wgrad suite)")
    parser.add_argument("--peak-tbs", type=float, default=4.8, help="HBM peak in TB/s (H200: 4.8)")
    args = parser.parse_args()
    with open(args.results) as f:
        data = json.load(f)
    for suite in ("glu", "dglu"):
        text = table(data, suite, args.peak_tbs)
        if text:
            print(f"#### {suite}: least HBM traffic against time\n\n{text}\n")
    text = wgrad_table(data)
    if text:
        print(f"#### wgrad: L2 operand traffic and weight bytes against time\n\n{text}\n")


if __name__ == "__main__":
    main()
