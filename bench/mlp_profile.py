"""Where the time of one MoE MLP training step goes: the GPU kernels of a forward + backward step, per kernel,
for moegemm.torch.moe_mlp, for the same layer built from torch._grouped_mm (bench/suites.py's mlp suite,
same inputs and group sizes) and for that layer under torch.compile (dynamic shapes, compiled once; its
first steps, the warm-up, compile it), from torch.profiler's CUDA activity.

For each model preset and routing it prints, per system: the step's span on the GPU (first kernel start to
last kernel end, µs), the time some kernel runs in it (busy) and the rest (idle: launch gaps, host waits),
every kernel's name, count per step and µs per step, longest first, and the µs of each kernel of the last
step in the order they ran, which tells the torch layer's GEMMs apart (they share kernel names; in the JSON
as [index into the kernels, µs]). The steps run back to back, as in training, so that the board works at its
power limit. With --sustain S it then runs each system's steps back to back for S seconds more (after a
second of warm-up; bench/power.py's windows), in --rounds rounds (default 2) whose order rotates, and reports
the medians over its windows of the time per step and of the SM clock (MHz) and board power (W) that
nvidia-smi sampled every 100 ms meanwhile, with the share of samples at the power cap. --json writes the
same as JSON.

  python3 bench/mlp_profile.py [--model deepseek-v3 ...] [--routing uniform zipf] [--steps 5] [--sustain 3]
                               [--rounds 2] [--json F]

Needs an sm_90 GPU and moegemm.torch (PYTHONPATH=build/python); --sustain also needs nvidia-smi.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402
import power  # noqa: E402
import suites  # noqa: E402
import timing  # noqa: E402


def kernel_intervals(prof) -> list[tuple[str, float, float]]:
    """(name, start µs, end µs) of every CUDA kernel (and memcpy/memset) the profiler saw."""
    out = []
    for ev in prof.events():
        if str(ev.device_type).endswith("CUDA") and ev.time_range.elapsed_us() > 0:
            out.append((ev.name, ev.time_range.start, ev.time_range.end))
    return sorted(out, key=lambda x: x[1])


def breakdown(intervals, steps: int) -> dict:
    """Span, busy and idle µs per step, and µs and count per step of each kernel name."""
    span = intervals[-1][2] - intervals[0][1]
    busy, end = 0.0, intervals[0][1]
    for _, s, e in intervals:  # union of the intervals (kernels of one stream do not overlap)
        if e > end:
            busy += e - max(s, end)
            end = e
    per = {}
    for name, s, e in intervals:
        t, n = per.get(name, (0.0, 0))
        per[name] = (t + e - s, n + 1)
    kernels = sorted(({"name": k, "us": t / steps, "count": n / steps} for k, (t, n) in per.items()),
                     key=lambda r: -r["us"])
    return {"span_us": span / steps, "busy_us": busy / steps, "idle_us": (span - busy) / steps, "kernels": kernels}


def last_step(intervals, per_step: int, kernels: list[dict]) -> list[list]:
    """The last `per_step` kernels in the order they started (one step's sequence) as [index into `kernels`
    (breakdown's list, which has the names), µs]."""
    index = {k["name"]: i for i, k in enumerate(kernels)}
    return [[index[n], e - s] for n, s, e in intervals[-per_step:]]


def profile_step(torch, step, steps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    intervals = kernel_intervals(prof)
    out = breakdown(intervals, steps)
    out["sequence"] = last_step(intervals, len(intervals) // steps, out["kernels"])
    return out


def sustain(torch, steps: dict, seconds: float, rounds: int = 2) -> dict:
    """{name: step_us, sm_mhz, watts, capped (medians over its windows), steps, samples (sums), rounds (each
    window's figures)} of each step function run back to back for `seconds` (power.run_window), in `rounds`
    rounds whose order rotates (peers' timing.rotated), so that no system always runs on the warmer board,
    under one nvidia-smi sampler."""
    windows = {name: [] for name in steps}
    sampler = power.Sampler()
    try:
        for r in range(rounds):
            for name in timing.rotated(list(steps), r):
                windows[name].append(power.run_window(torch, [steps[name]], seconds))
    finally:
        samples = sampler.stop()
    out = {}
    for name, runs in windows.items():
        per_round = [{"step_us": ms * 1e3 / n, "steps": n, **power.window_stats(samples, t0, t1)}
                     for t0, t1, ms, n in runs]
        row = power.medians(per_round, ("step_us", "sm_mhz", "watts", "capped"))
        row.update(steps=sum(x["steps"] for x in per_round), samples=sum(x["samples"] for x in per_round),
                   rounds=per_round)
        out[name] = row
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", nargs="*", default=["deepseek-v3", "mixtral-8x7b"])
    p.add_argument("--routing", nargs="*", default=["uniform", "zipf"], choices=["uniform", "zipf"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=12, help="kernels printed per system")
    p.add_argument("--sustain", type=float, default=0.0,
                   help="seconds of steps back to back per system and round, with clock and power sampled (0: none)")
    p.add_argument("--rounds", type=int, default=2, help="--sustain's rounds, in an order that rotates (>= 1)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if not args.sustain >= 0 or (args.sustain and shutil.which("nvidia-smi") is None):  # `not >=`: nan too
        p.error("--sustain: expected seconds >= 0, and nvidia-smi on the PATH to sample the clock and power")
    if args.rounds < 1:
        p.error(f"--rounds: expected at least 1, got {args.rounds}")

    import torch
    import moegemm.torch as mt

    models = json.loads((HERE / "workloads" / "moe_workloads.json").read_text())["models"]
    ctx = suites.Context(torch, "cuda", bench=None)
    compiled_layer = ctx.compiled(suites.torch_moe_mlp_layer)
    results = []
    for model in args.model:
        cfg = models[model]
        m, h, i, e = cfg["tokens"] * cfg["top_k"], cfg["hidden"], cfg["intermediate"], cfg["experts"]
        for routing in args.routing:
            offs = ctx.offsets(peers.group_sizes(routing, m, e, args.seed))
            x, w_up, w_down, prob, dy = suites.mlp_operands(ctx, m, h, i, e)
            layers = {
                "moegemm_moe_mlp": lambda: mt.moe_mlp(x, w_up, w_down, offs, prob, zero_tail=False),
                "torch_grouped_mm_autograd": lambda: suites.torch_moe_mlp_layer(x, w_up, w_down, offs, prob),
                "torch_compiled_autograd": lambda: compiled_layer(x, w_up, w_down, offs, prob),
            }
            row = {"model": model, "routing": routing, "M": m, "H": h, "I": i, "E": e, "systems": {}}
            steps = {name: (lambda layer=layer: torch.autograd.grad(layer(), (x, w_up, w_down, prob), dy))
                     for name, layer in layers.items()}
            for name, step in steps.items():
                r = profile_step(torch, step, args.steps)
                row["systems"][name] = r
                print(f"\n{model} {routing} {name}: span {r['span_us']:.0f} µs, busy {r['busy_us']:.0f}, "
                      f"idle {r['idle_us']:.0f} (per step)")
                for k in r["kernels"][:args.top]:
                    print(f"  {k['us']:9.1f} µs  x{k['count']:<4g} {k['name'][:110]}")
                print("  one step, in order: " + ", ".join(f"{us:.0f}" for _, us in r["sequence"]))
            if args.sustain:
                for name, sustained in sustain(torch, steps, args.sustain, args.rounds).items():
                    row["systems"][name]["sustained"] = sustained
                    clock, watts = (f"{v:.0f}" if v is not None else "—"
                                    for v in (sustained.get("sm_mhz"), sustained.get("watts")))
                    print(f"{model} {routing} {name}, {args.rounds} x {args.sustain:g} s back to back: "
                          f"{sustained['step_us']:.0f} µs per step, SM clock {clock} MHz, {watts} W, capped in {sustained.get('capped') or 0:.0%} "
                          f"of {sustained['samples']} samples")
            results.append(row)
            del x, w_up, w_down, prob, dy, layers, steps
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "steps": args.steps,
                                         "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
