"""Markdown tables from the JSON written by bench/peers.py and `moegemm run --json`.

    python3 bench/tables.py peers.json [run.json]
    python3 bench/tables.py mlp_profile.json

Prints, for peers.json, one table per suite it holds (docs/benchmarks.md is made of these):
  peers     TFLOP/s per workload and system plus moegemm's ratios to torch._grouped_mm and to cuBLAS dense, and
            1.2x torch as a share of cuBLAS dense's rate (above 1: the target asks for more than the dense GEMM)
  glu       fused GLU vs the plain GEMM of the same shape and the unfused peers (µs, ratios, target <= 1.05)
  wgrad     weight-gradient TFLOP/s vs torch._grouped_mm (2-D x 2-D) and cuBLAS dense (target >= 1.2x torch), and
            1.2x torch as a share of cuBLAS dense's rate, as for peers
  dglu      fused dGLU vs the plain dgrad GEMM and the unfused peers (µs, ratios, target <= 1.08)
  mlp       MoE MLP forward + backward time vs the same layer in torch (ms, speedup, target >= 1.3)
  ksweep    plain grouped GEMM at K/4, K/2, K: the part of the time that does not scale with K, both systems
  dispatch  host overhead of eager calls and CUDA-graph replays (torch_bench.py, jax_dispatch.py)
  frontends torch_bench.py's throughput rows and jax_ragged_dot.py, when that suite ran
each followed by how many rows meet the target. For run.json: time (µs), TFLOP/s and fraction of the measured
dense rate per op of each model preset. For the JSON of bench/mlp_profile.py: per model and routing, each
system's profiled step (span and idle, ms and µs), torch's GEMM and other kernels, and what 1.3x asks of
moegemm's kernels as a share of torch's GEMM time; with --sustain, the time per step, SM clock (MHz), board
power (W) and energy per step (J = W x s) of each system run back to back.
"""

from __future__ import annotations

import json
import sys


def _tflops(systems: dict, name: str):
    entry = systems.get(name, {})
    return entry.get("tflops")


def _cell(value) -> str:
    return "—" if value is None else tflops_text(value)


def _ratio(a, b) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def _status_cell(entry: dict) -> str:
    """A short cell for a system without a number."""
    status = entry.get("status", "")
    if "memory" in status:
        return "OOM"
    if status.startswith("no kernel yet"):
        return "no kernel"
    if status.startswith("failed"):
        return "failed"
    return "—"


def _value(entry: dict, key: str, fmt) -> str:
    return fmt(entry[key]) if key in entry else _status_cell(entry)


def _us(t: float) -> str:
    return f"{t:.0f}" if t >= 100 else f"{t:.1f}"


def _ms(t_us: float) -> str:
    return f"{t_us / 1e3:.2f}"


def tflops_text(t: float) -> str:
    """A rate in TFLOP/s as the tables and bench/peers.py print it: whole numbers from 10 up, two significant
    digits below (a CPU run's rates lie far below 1)."""
    return f"{t:.0f}" if t >= 10 else f"{t:.2g}"


def _met(ratio: dict) -> str:
    return "—" if ratio.get("met") is None else ("yes" if ratio["met"] else "no")


def _rv(ratio: dict) -> str:
    return "—" if ratio.get("value") is None else f"{ratio['value']:.2f}"


def _summary(rows: list[dict], key: str, label: str) -> str:
    judged = [r for r in rows if r.get("ratios", {}).get(key, {}).get("met") is not None]
    met = sum(1 for r in judged if r["ratios"][key]["met"])
    target = next((r["ratios"][key]["target"] for r in rows if r.get("ratios", {}).get(key, {}).get("target")), "")
    return (f"{label} {target}: met on {met} of {len(judged)} measured rows "
            f"({len(rows) - len(judged)} without a number).")


def _dense_share(torch_tflops, dense_tflops, factor: float = 1.2):
    """The rate `factor` x torch asks for as a share of cuBLAS dense's rate on the same FLOPs (None where
    either is missing): above 1, meeting the target means beating the dense GEMM."""
    if torch_tflops is None or not dense_tflops:
        return None
    return factor * torch_tflops / dense_tflops


def _beyond_dense(pairs: list[tuple], factor: float = 1.2) -> str:
    """How many rows miss `>= factor` x torch, and on how many of those misses the target lies above cuBLAS
    dense; `pairs`: (moegemm / torch, torch TFLOP/s, cuBLAS TFLOP/s) per row."""
    judged = [(r, t, d) for r, t, d in pairs if r is not None and _dense_share(t, d, factor) is not None]
    misses = [(r, t, d) for r, t, d in judged if r < factor]
    beyond = sum(1 for _, t, d in misses if _dense_share(t, d, factor) > 1.0)
    return (f"Of the {len(misses)} rows below {factor}x, {beyond} would need more than cuBLAS dense's rate on the "
            f"same FLOPs ({factor} x torch / cuBLAS > 1).")


def _errors(rows: list[dict]) -> str:
    """The distinct statuses of systems without a number, so a table's "no kernel" cells have their reason."""
    seen = {}
    for r in rows:
        for name, entry in r["systems"].items():
            if "status" in entry:
                seen.setdefault(entry["status"], set()).add(name)
    return "\n".join(f"- {', '.join(sorted(names))}: {status}" for status, names in seen.items())


def peers_table(doc: dict) -> str:
    """The peers suite. The torch front end is timed interleaved with cuBLAS and torch._grouped_mm in one process
    (bench/timing.py): its ratios are the comparison. The C++ program runs afterwards in a process of its own,
    its calls back to back (bench/peers.py), so its column is not interleaved with the peers'. `JAX / torch
    front end, host clock`: moegemm.torch's time over moegemm.jax's, both timed by the host clock in
    alternation (the row's front_ends_host_clock; the JAX column's own clock), where the torch column's CUDA
    events read faster for the same kernel."""
    head = ("| workload | routing | M×N×K, E | cuBLAS dense | torch._grouped_mm | jax.lax.ragged_dot | moegemm torch "
            "| moegemm C++ (own process) | moegemm JAX | torch front end / torch | ≥ 1.2 | torch front end / cuBLAS "
            "| C++ (own process) / torch | JAX / torch front end, host clock | 1.2× torch / cuBLAS |")
    lines = [head, "|" + " --- |" * 15]
    cpp, front = [], []
    for row in doc["rows"]:
        s = row["systems"]
        mc, tg, cb = _tflops(s, "moegemm_cpp"), _tflops(s, "torch_grouped_mm"), _tflops(s, "cublas_dense_same_flops")
        mt = _tflops(s, "moegemm_torch")
        rd = s.get("jax_ragged_dot", {})
        rd_cell = _cell(rd.get("tflops")) if "tflops" in rd else ("OOM" if "memory" in rd.get("status", "") else "—")
        host = row.get("front_ends_host_clock", {})
        met = "—" if not (mt and tg) else ("yes" if mt / tg >= 1.2 else "no")
        lines.append(
            f"| {row['workload']} | {row['routing']} | {row['M']}×{row['N']}×{row['K']}, {row['E']} | {_cell(cb)} "
            f"| {_cell(tg)} | {rd_cell} | {_cell(mt)} | {_cell(mc)} | {_cell(_tflops(s, 'moegemm_jax'))} "
            f"| {_ratio(mt, tg)} | {met} | {_ratio(mt, cb)} | {_ratio(mc, tg)} "
            f"| {_ratio(host.get('moegemm_torch_us'), host.get('moegemm_jax_us'))} "
            f"| {_ratio(_dense_share(tg, cb), 1)} |")
        cpp.append((mc / tg if mc and tg else None, tg, cb))
        front.append((mt / tg if mt and tg else None, tg, cb))
    summary = []
    for label, pairs in (("moegemm torch front end", front), ("moegemm C++ (own process)", cpp)):
        judged = [r for r, _, _ in pairs if r is not None]
        summary.append(f"{label} / torch._grouped_mm >= 1.2: met on {sum(r >= 1.2 for r in judged)} of "
                       f"{len(judged)} measured rows. {_beyond_dense(pairs)}")
    return "\n".join([*lines, "", *summary])


def _compiled_columns(rows: list[dict], system: str = "torch_compiled_unfused") -> bool:
    """Whether a result has a compiled baseline (glu and dglu: `torch_compiled_unfused`, since 2026-12-04;
    mlp: `torch_compiled_autograd`, since 2026-12-05): results from before render as they were."""
    return any(system in r["systems"] for r in rows)


def _compiled_cells(r: dict, system: str = "torch_compiled_unfused", unit=_us) -> str:
    """The compiled baseline's time and its time over moegemm's."""
    entry = r["systems"].get(system, {"status": "not run"})
    return f" {_value(entry, 'time_us', unit)} | {_rv(r['ratios'].get('speedup_vs_torch_compiled', {}))} |"


def glu_table(rows: list[dict]) -> str:
    compiled = _compiled_columns(rows)
    lines = ["| workload | routing | M×2I×H, E | moegemm GEMM 2I cols | moegemm GLU fused | fused + C + prob "
             "| moegemm GEMM + torch SwiGLU | torch._grouped_mm | torch._grouped_mm + SwiGLU | fused / plain "
             "| ≤ 1.05 | fused(C, prob) / plain | ≤ 1.05 | fused / unfused | torch / fused |"
             + (" torch._grouped_mm + compiled SwiGLU | torch compiled / fused |" if compiled else ""),
             "|" + " --- |" * (17 if compiled else 15)]
    for r in rows:
        s, q = r["systems"], r["ratios"]
        t = [_value(s[name], "time_us", _us) for name in ("moegemm_gemm", "moegemm_glu", "moegemm_glu_c_prob",
                                                           "moegemm_unfused", "torch_grouped_mm", "torch_unfused")]
        lines.append(f"| {r['workload']} | {r['routing']} | {r['M']}×{r['N']}×{r['K']}, {r['E']} | {' | '.join(t)} "
                     f"| {_rv(q['fused_over_plain'])} | {_met(q['fused_over_plain'])} "
                     f"| {_rv(q['fused_c_prob_over_plain'])} | {_met(q['fused_c_prob_over_plain'])} "
                     f"| {_rv(q['fused_over_unfused'])} | {_rv(q['speedup_vs_torch'])} |"
                     + (_compiled_cells(r) if compiled else ""))
    return "\n".join([*lines, "", _summary(rows, "fused_over_plain", "fused / plain"),
                      _summary(rows, "fused_c_prob_over_plain", "fused (C, prob) / plain")])


def wgrad_table(rows: list[dict]) -> str:
    lines = ["| workload | routing | X (M×K), dY (M×N), E | cuBLAS dense | torch._grouped_mm 2-D×2-D "
             "| moegemm wgrad bf16 | moegemm wgrad f32 | moegemm / torch | ≥ 1.2 | moegemm / cuBLAS "
             "| 1.2× torch / cuBLAS |", "|" + " --- |" * 11]
    pairs = []
    for r in rows:
        s, q = r["systems"], r["ratios"]
        t = [_value(s[name], "tflops", tflops_text)
             for name in ("cublas_dense_same_flops", "torch_grouped_mm", "moegemm_wgrad", "moegemm_wgrad_f32")]
        tg, cb = _tflops(s, "torch_grouped_mm"), _tflops(s, "cublas_dense_same_flops")
        lines.append(f"| {r['workload']} | {r['routing']} | {r['M']}×{r['K']}, {r['M']}×{r['N']}, {r['E']} "
                     f"| {' | '.join(t)} | {_rv(q['speedup_vs_torch'])} | {_met(q['speedup_vs_torch'])} "
                     f"| {_rv(q['speedup_vs_cublas'])} | {_ratio(_dense_share(tg, cb), 1)} |")
        pairs.append((q["speedup_vs_torch"].get("value"), tg, cb))
    return "\n".join([*lines, "", _summary(rows, "speedup_vs_torch", "moegemm / torch._grouped_mm") + " "
                      + _beyond_dense(pairs)])


def dglu_table(rows: list[dict]) -> str:
    compiled = _compiled_columns(rows)
    lines = ["| workload | routing | M×I×H, E | moegemm dgrad (plain) | moegemm dGLU (fused) "
             "| moegemm dgrad + torch SwiGLU bwd | torch._grouped_mm dgrad | torch._grouped_mm + SwiGLU bwd "
             "| fused / plain | ≤ 1.08 | fused / unfused | torch / fused |"
             + (" torch._grouped_mm + compiled SwiGLU bwd | torch compiled / fused |" if compiled else ""),
             "|" + " --- |" * (14 if compiled else 12)]
    for r in rows:
        s, q = r["systems"], r["ratios"]
        t = [_value(s[name], "time_us", _us) for name in ("moegemm_dgrad", "moegemm_dglu", "moegemm_unfused",
                                                           "torch_grouped_mm", "torch_unfused")]
        lines.append(f"| {r['workload']} | {r['routing']} | {r['M']}×{r['I']}×{r['H']}, {r['E']} | {' | '.join(t)} "
                     f"| {_rv(q['fused_over_plain'])} | {_met(q['fused_over_plain'])} "
                     f"| {_rv(q['fused_over_unfused'])} | {_rv(q['speedup_vs_torch'])} |"
                     + (_compiled_cells(r) if compiled else ""))
    return "\n".join([*lines, "", _summary(rows, "fused_over_plain", "fused / plain")])


def mlp_table(rows: list[dict]) -> str:
    compiled = _compiled_columns(rows, "torch_compiled_autograd")
    lines = ["| model | routing | M, H, I, E | moegemm fwd+bwd ms | torch fwd+bwd ms | moegemm TFLOP/s "
             "| torch TFLOP/s | torch / moegemm | ≥ 1.3 | moegemm fwd ms | torch fwd ms | fwd: torch / moegemm |"
             + (" torch compiled fwd+bwd ms | torch compiled / moegemm |" if compiled else ""),
             "|" + " --- |" * (14 if compiled else 12)]
    for r in rows:
        s, q = r["systems"], r["ratios"]
        m, t = s["moegemm_moe_mlp"], s["torch_grouped_mm_autograd"]
        lines.append(f"| {r['workload']} | {r['routing']} | {r['M']}, {r['H']}, {r['I']}, {r['E']} "
                     f"| {_value(m, 'time_us', _ms)} | {_value(t, 'time_us', _ms)} "
                     f"| {_value(m, 'tflops', tflops_text)} | {_value(t, 'tflops', tflops_text)} "
                     f"| {_rv(q['speedup_vs_torch'])} | {_met(q['speedup_vs_torch'])} "
                     f"| {_value(s['moegemm_forward'], 'time_us', _ms)} | {_value(s['torch_forward'], 'time_us', _ms)} "
                     f"| {_rv(q['forward_speedup_vs_torch'])} |"
                     + (_compiled_cells(r, "torch_compiled_autograd", _ms) if compiled else ""))
    return "\n".join([*lines, "", _summary(rows, "speedup_vs_torch", "torch / moegemm (forward + backward)")])


def ksweep_table(rows: list[dict]) -> str:
    lines = ["| workload | routing | M×N, E | K/4, K/2, K | moegemm µs | torch._grouped_mm µs | moegemm fixed µs "
             "(share at K) | torch fixed µs (share at K) | moegemm marginal TFLOP/s | torch marginal TFLOP/s "
             "| torch / moegemm at K | ≥ 1.2 |", "|" + " --- |" * 12]

    def fixed(d: dict) -> str:
        return "—" if d["fixed_us"] is None else f"{d['fixed_us']:.0f} ({d['fixed_share']:.0%})"

    for r in rows:
        s, q, d = r["systems"], r["ratios"], r["derived"]
        times = {fam: ", ".join(_value(s[n], "time_us", _us) for n in names)
                 for fam, names in (("moegemm", ("moegemm_k_quarter", "moegemm_k_half", "moegemm_k")),
                                    ("torch", ("torch_k_quarter", "torch_k_half", "torch_k")))}
        lines.append(f"| {r['workload']} | {r['routing']} | {r['M']}×{r['N']}, {r['E']} "
                     f"| {', '.join(str(k) for k in d['ks'])} | {times['moegemm']} | {times['torch']} "
                     f"| {fixed(d['moegemm'])} | {fixed(d['torch'])} | {_cell(d['moegemm']['marginal_tflops'])} "
                     f"| {_cell(d['torch']['marginal_tflops'])} | {_rv(q['speedup_vs_torch'])} "
                     f"| {_met(q['speedup_vs_torch'])} |")
    return "\n".join([*lines, "", _summary(rows, "speedup_vs_torch", "torch / moegemm at the full K")])


def torch_dispatch_table(result: dict) -> str:
    """torch_bench.py's dispatch rows; the bar is torch._grouped_mm's eager overhead at the same shape (met:
    moegemm's at most the bar's + 1 µs). The overhead judged is the host's time to issue a call (`enqueue_us`:
    30 calls issued back to back, the GPU busy), where the rows have it: host − kernel subtracts two medians
    taken at different GPU clocks (synchronised single calls against calls queued back to back), which at
    16384×4096×4096 differ by ±100 µs for the same kernel. Results without issue times are judged on
    host − kernel, as they were."""
    rows = result.get("dispatch", [])
    bar = {r["shape"]: r for r in rows if r["call"] == "torch._grouped_mm" and "error" not in r}
    issue = all("enqueue_us" in r for r in rows if "error" not in r)
    key, what = ("enqueue_us", "eager issue") if issue else ("host_overhead_us", "+ host")
    lines = ["| M×N×K | call | kernel µs | eager host µs | + host µs | graph replay µs | + graph µs "
             f"| {what} − torch's | ≤ torch's + 1 µs |", "|" + " --- |" * 9]
    met = judged = 0
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['shape'].replace('x', '×')} | {r['call']} | {r['error'][:80]} |" + " |" * 6)
            continue
        b = bar.get(r["shape"])
        delta, ok = "—", "—"
        if b is not None and r["call"].startswith("moegemm"):
            d = r[key] - b[key]
            delta, ok = f"{d:+.1f}", ("yes" if d <= 1.0 else "no")
            judged += 1
            met += d <= 1.0
        lines.append(f"| {r['shape'].replace('x', '×')} | {r['call']} | {r['kernel_us']:.1f} | {r['host_us']:.1f} "
                     f"| {r['host_overhead_us']:.1f} | {r['graph_us']:.1f} | {r['graph_overhead_us']:.1f} | {delta} "
                     f"| {ok} |")
    judged_on = ("the host's time to issue a call (30 back to back, the GPU busy)" if issue
                 else "host − kernel")
    lines += ["", f"eager overhead at most torch._grouped_mm's + 1 µs, judged on {judged_on}: met on {met} of "
                  f"{judged} rows."]
    return "\n".join(lines)


def torch_enqueue_table(result: dict) -> str:
    """The steady-state columns of torch_bench.py's dispatch rows (30 calls issued without synchronisation):
    host µs to issue one call, eagerly and as a CUDA-graph replay (target: a replay's ≤ 2 µs), and wall µs per
    call of the batch against the kernel's time (the gap per call on the GPU). Empty for results without them."""
    rows = [r for r in result.get("dispatch", []) if "graph_enqueue_us" in r]
    if not rows:
        return ""
    lines = ["| M×N×K | call | kernel µs | eager: issue µs | graph replay: issue µs | ≤ 2 µs | eager back-to-back µs "
             "| − kernel | replays back-to-back µs | − kernel |", "|" + " --- |" * 10]
    met = judged = 0
    for r in rows:
        ok = "—"
        if r["call"].startswith("moegemm"):  # torch._grouped_mm and the floor are bars, not judged
            judged += 1
            met += r["graph_enqueue_us"] <= 2.0
            ok = "yes" if r["graph_enqueue_us"] <= 2.0 else "no"
        lines.append(f"| {r['shape'].replace('x', '×')} | {r['call']} | {r['kernel_us']:.1f} | {r['enqueue_us']:.1f} "
                     f"| {r['graph_enqueue_us']:.1f} | {ok} | {r['back_to_back_us']:.1f} "
                     f"| {r['back_to_back_us'] - r['kernel_us']:+.1f} | {r['graph_back_to_back_us']:.1f} "
                     f"| {r['graph_back_to_back_us'] - r['kernel_us']:+.1f} |")
    lines += ["", f"host time to issue a graph replay at most 2 µs: met on {met} of {judged} moegemm rows."]
    floor = {r["shape"]: r["graph_enqueue_us"] for r in rows if "floor" in r["call"]}
    above = [r["graph_enqueue_us"] - floor[r["shape"]] for r in rows
             if r["call"].startswith("moegemm") and r["shape"] in floor]
    if above:
        lines.append(f"A replay of a graph of one one-element kernel (the floor) costs {min(floor.values()):.1f}–"
                     f"{max(floor.values()):.1f} µs to issue; moegemm's replays cost {min(above):+.1f} to "
                     f"{max(above):+.1f} µs more than the floor at the same shape.")
    return "\n".join(lines)


def jax_dispatch_table(result: dict) -> str:
    lines = ["| op | M×N×K | host µs per call | kernel µs | host − kernel µs | zero-filled output, host µs |",
             "|" + " --- |" * 6]
    for r in result.get("rows", []):
        lines.append(f"| {r['op']} | {r['M']}×{r['N']}×{r['K']} | {r['host_us']:.1f} | {r['kernel_us']:.1f} "
                     f"| {r['overhead_us']:.1f} | {r['zero_filled_host_us']:.1f} |")
    return "\n".join(lines)


def torch_workloads_table(result: dict) -> str:
    lines = ["| gemm | routing | kind | impl | µs | TFLOP/s |", "|" + " --- |" * 6]
    for r in result.get("workloads", []):
        if "error" in r:
            lines.append(f"| {r['gemm']} | {r['routing']} | {r['kind']} | {r['impl']} | {r['error'][:80]} | |")
        else:
            lines.append(f"| {r['gemm']} | {r['routing']} | {r['kind']} | {r['impl']} | {_us(r['us'])} "
                         f"| {r['tflops']:.0f} |")
    return "\n".join(lines)


def ragged_dot_table(result: dict) -> str:
    def cell(v):
        return v if isinstance(v, str) else f"{v['tflops']:.0f}"

    lines = ["| workload | routing | moegemm.jax.ragged_dot TFLOP/s | jax.lax.ragged_dot TFLOP/s |", "|" + " --- |" * 4]
    for r in result.get("rows", []):
        lines.append(f"| {r['name']} | {r['routing']} | {cell(r['moegemm'])} | {cell(r['jax.lax'])} |")
    return "\n".join(lines)


SECTIONS = (
    ("glu", "GLU forward: fused epilogue vs plain GEMM + separate SwiGLU (µs)", glu_table),
    ("wgrad", "Weight gradient, ragged K (TFLOP/s)", wgrad_table),
    ("dglu", "dGLU backward: fused vs plain dgrad GEMM + separate SwiGLU backward (µs)", dglu_table),
    ("mlp", "MoE MLP forward + backward with autograd", mlp_table),
    ("ksweep", "Plain grouped GEMM over K: the time that does not scale with K", ksweep_table),
)


def peers_sections(doc: dict) -> str:
    """Every table a peers.py JSON holds, with a heading each."""
    out = []
    if doc.get("rows"):
        out.append(f"### Grouped GEMM against the peers (TFLOP/s)\n\n{peers_table(doc)}")
    for key, title, render in SECTIONS:
        rows = doc.get(key) if key in ("glu", "ksweep") else doc.get("backward", {}).get(key)
        if rows:
            errors = _errors(rows)
            text = f"### {title}\n\n{render(rows)}"
            out.append(text + (f"\n\nSystems without a number:\n{errors}" if errors else ""))
    results = doc.get("front_end_results", {})
    torch_result = results.get("torch_bench", {})
    if torch_result.get("dispatch"):
        out.append(f"### Dispatch overhead, PyTorch ({torch_result.get('device', '?')}, torch "
                   f"{torch_result.get('torch', '?')})\n\n{torch_dispatch_table(torch_result)}")
        if torch_enqueue_table(torch_result):
            out.append("### Issue cost and back-to-back calls, PyTorch\n\n" + torch_enqueue_table(torch_result))
    if results.get("jax_dispatch", {}).get("rows"):
        out.append(f"### Dispatch overhead, JAX (jax {results['jax_dispatch'].get('jax', '?')})\n\n"
                   f"{jax_dispatch_table(results['jax_dispatch'])}")
    if torch_result.get("workloads"):
        out.append(f"### torch_bench.py throughput\n\n{torch_workloads_table(torch_result)}")
    if results.get("jax_ragged_dot", {}).get("rows"):
        out.append(f"### jax_ragged_dot.py\n\n{ragged_dot_table(results['jax_ragged_dot'])}")
    statuses = {k: v for k, v in doc.get("front_end_benchmarks", {}).items() if v != "ok"}
    if statuses:
        out.append("Front-end scripts that gave no table: "
                   + "; ".join(f"{script}: {status}" for script, status in statuses.items()))
    return "\n\n".join(out)


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


_MLP_SYSTEMS = ("moegemm_moe_mlp", "torch_grouped_mm_autograd")
_MLP_COMPILED = "torch_compiled_autograd"  # bench/mlp_profile.py's compiled torch layer


def _is_gemm(kernel_name: str) -> bool:
    """A grouped GEMM kernel of either system (moegemm's, or the CUTLASS kernels of torch._grouped_mm), not the
    small kernels around them (torch's prepare_grouped_gemm_data, moegemm's tensor maps and finishes)."""
    return "GemmUniversal" in kernel_name or "grouped_gemm_kernel" in kernel_name or \
        "grouped_gemm_pingpong_kernel" in kernel_name


def _gemm_us(system: dict) -> float:
    return sum(k["us"] for k in system["kernels"] if _is_gemm(k["name"]))


def mlp_profile_tables(doc: dict) -> str:
    """bench/mlp_profile.py's JSON: the profiled steps, then (if it ran with --sustain) the sustained ones. The
    compiled torch layer's columns appear where the result has it (since 2026-12-05)."""
    compiled = any(_MLP_COMPILED in row["systems"] for row in doc["rows"])
    lines = ["| model | routing | moegemm step ms | of which idle µs | torch step ms | torch GEMMs ms "
             "| torch other kernels ms | idle µs | torch / moegemm | moegemm GEMMs / torch GEMMs "
             "| 1.3× as a share of torch's GEMM time |"
             + (" torch compiled step ms | torch compiled / moegemm |" if compiled else ""),
             "|" + " --- |" * (13 if compiled else 11)]
    sustained = []
    for row in doc["rows"]:
        ours, theirs = (row["systems"][name] for name in _MLP_SYSTEMS)
        fused = row["systems"].get(_MLP_COMPILED)
        gemm_ours, gemm_theirs = _gemm_us(ours), _gemm_us(theirs)
        lines.append(f"| {row['model']} | {row['routing']} | {_ms(ours['span_us'])} | {ours['idle_us']:.0f} "
                     f"| {_ms(theirs['span_us'])} | {_ms(gemm_theirs)} | {_ms(theirs['busy_us'] - gemm_theirs)} "
                     f"| {theirs['idle_us']:.0f} | {theirs['span_us'] / ours['span_us']:.2f} "
                     f"| {gemm_ours / gemm_theirs:.2f} | {theirs['span_us'] / 1.3 / gemm_theirs:.2f} |"
                     + ("" if not compiled else " — | — |" if fused is None else
                        f" {_ms(fused['span_us'])} | {fused['span_us'] / ours['span_us']:.2f} |"))
        if "sustained" in ours and "sustained" in theirs:
            sustained.append((row, ours["sustained"], theirs["sustained"], (fused or {}).get("sustained")))
    out = "\n".join(lines)
    if sustained:
        rows = ["| model | routing | moegemm ms per step | SM MHz | W | J per step | torch ms per step | SM MHz | W "
                "| J per step | torch / moegemm | ≥ 1.3 |"
                + (" torch compiled ms per step | torch compiled / moegemm |" if compiled else ""),
                "|" + " --- |" * (14 if compiled else 12)]
        met = 0
        for row, a, b, f in sustained:
            cells = []
            for v in (a, b):
                watts = v.get("watts")
                joules = f"{watts * v['step_us'] * 1e-6:.1f}" if watts is not None else "—"
                cells.append(f"{_ms(v['step_us'])} | {_cell(v.get('sm_mhz'))} | {_cell(watts)} | {joules}")
            ratio = b["step_us"] / a["step_us"]
            met += ratio >= 1.3
            rows.append(f"| {row['model']} | {row['routing']} | {cells[0]} | {cells[1]} | {ratio:.2f} "
                        f"| {'yes' if ratio >= 1.3 else 'no'} |"
                        + ("" if not compiled else " — | — |" if f is None else
                           f" {_ms(f['step_us'])} | {f['step_us'] / a['step_us']:.2f} |"))
        out += ("\n\nSustained (each system's steps back to back, clock and power sampled by nvidia-smi):\n\n"
                + "\n".join(rows) + f"\n\ntorch / moegemm >= 1.3 sustained: met on {met} of {len(sustained)} rows.")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    peers = json.load(open(argv[0]))
    if "rows" in peers and "suites" not in peers:  # bench/mlp_profile.py
        print(f"{peers.get('gpu', '?')}; {peers.get('steps', '?')} profiled steps per system\n")
        print(mlp_profile_tables(peers))
        return 0
    suites = " ".join(peers.get("suites", ["peers"]))
    run_kind = " (smoke run on tiny shapes: not a measurement)" if peers.get("tiny") else ""
    print(f"{peers.get('gpu', '?')}, {peers.get('date', '?')}; suites {suites}; median of {peers.get('iters', '?')} "
          f"calls after {peers.get('warmup', '?')} warm-up{run_kind}\n")
    print(peers_sections(peers))
    if len(argv) > 1:
        run = json.load(open(argv[1]))
        print(f"\n{run.get('device', '?')}, {run.get('date', '?')}\n")
        print(run_table(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
