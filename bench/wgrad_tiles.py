"""moegemm's bf16 weight gradient on each of its kernels against torch._grouped_mm, interleaved in one process.

The kernels (docs/kernels.md): `default` is the launcher's choice; `coop` the cooperative kernel (128 x 256
or 128 x 128 tiles, the heuristic's width, both warpgroups on one tile, the tensor cores idle during its
epilogue); `pingpong` the ping-pong kernel (128 x 128 tiles, each warpgroup its own, its epilogue under the
other's mainloop). They are switched per call through MOEGEMM_WGRAD_SCHEDULE, which the launcher reads at
every launch once it is set at the first. For each selected GEMM of the workloads file (x (M, K), dY (M, N),
E experts) and each routing (bench/peers.py's group sizes) this checks that every kernel gives bitwise the
same weights as `default`, then times the systems interleaved (timing.interleaved_us: --rounds rounds of
--calls calls each, in an order that rotates from round to round, on rotating inputs) and reports each one's
median us per call and TFLOP/s (2 M N K flops).

Usage: PYTHONPATH=build/python python3 bench/wgrad_tiles.py [--only dsv3-up qwen3-up]
                                                            [--routing uniform zipf] [--rounds 7] [--calls 6]
                                                            [--device cpu] [--json out.json]
Needs torch with a CUDA GPU (--device cpu: a smoke run on the CPU backend, timed by the host clock, where
the kernel switch has no effect) and the moegemm torch ops; exits 2 without them, 1 when the outputs differ
or a call fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from peers import group_sizes, rotation
from power import parse_interleaved, torch_with_moegemm
from timing import interleaved_us

# kernel -> MOEGEMM_WGRAD_SCHEDULE; "auto" leaves the launcher's choice
KERNELS = {"default": "auto", "coop": "cooperative", "pingpong": "pingpong"}


def on_kernel(kernel: str, call):
    """Runs call() with the weight gradient forced onto `kernel`."""
    os.environ["MOEGEMM_WGRAD_SCHEDULE"] = KERNELS[kernel]
    try:
        return call()
    finally:
        os.environ["MOEGEMM_WGRAD_SCHEDULE"] = "auto"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--routing", nargs="+", default=["uniform", "zipf"], choices=["uniform", "zipf"])
    ap.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args, gemms = parse_interleaved(ap, argv, ["all"])
    # Set before the first launch, so that the launcher reads it at every launch.
    os.environ["MOEGEMM_WGRAD_SCHEDULE"] = "auto"
    torch = torch_with_moegemm("wgrad_tiles.py")
    if torch is None:
        return 2
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("wgrad_tiles.py: needs a CUDA GPU (or --device cpu)", file=sys.stderr)
        return 2
    bf16, rows, status = torch.bfloat16, [], 0
    l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)) if dev == "cuda" else 0
    names = ["torch_grouped_mm", *args.kernels]
    print(f"{'workload':>13} {'routing':>8} {'equal':>5} " + " ".join(f"{s + ' us':>12}" for s in names)
          + " " + " ".join(f"{s + '/torch':>13}" for s in args.kernels), flush=True)
    for name in args.only:
        g = gemms[name]
        m, n, k, e = g["M"], g["N"], g["K"], g["E"]
        for routing in args.routing:
            sizes = group_sizes(routing, m, e, 0)
            offs = torch.tensor(sizes, device=dev).cumsum(0).to(torch.int32)
            copies = rotation(2 * (m * k + m * n), l2_bytes, cap=4)
            sets = [(torch.randn(m, k, device=dev, dtype=bf16), torch.randn(m, n, device=dev, dtype=bf16) * 0.1)
                    for _ in range(copies)]
            wgrad = torch.ops.moegemm.grouped_gemm_wgrad
            systems = {"torch_grouped_mm": [lambda x=x, dy=dy: torch._grouped_mm(x.t(), dy, offs=offs)
                                            for x, dy in sets]}
            for kern in args.kernels:
                systems[kern] = [lambda x=x, dy=dy, kern=kern: on_kernel(
                    kern, lambda: wgrad(x, dy, offs, out_dtype=bf16)) for x, dy in sets]
            reference = on_kernel("default", lambda: wgrad(*sets[0], offs, out_dtype=bf16))
            equal = all(bool(torch.equal(reference, systems[kern][0]())) for kern in args.kernels)
            status |= 0 if equal else 1
            us = interleaved_us(torch, dev, systems, warmup=2, iters=args.rounds * args.calls, rounds=args.rounds)
            failed = {s: v for s, v in us.items() if not isinstance(v, float)}
            if failed:
                print(f"{name} {routing}: failed: {failed}", file=sys.stderr)
                status = 1
                continue
            flops = 2.0 * m * n * k
            rows.append({"workload": name, "routing": routing, "M": m, "N": n, "K": k, "E": e,
                         "bitwise_equal": equal, "median_us": us,
                         "tflops": {s: flops / (t * 1e-6) / 1e12 for s, t in us.items()},
                         "torch_over": {s: us["torch_grouped_mm"] / us[s] for s in args.kernels}})
            print(f"{name:>13} {routing:>8} {str(equal):>5} " + " ".join(f"{us[s]:12.1f}" for s in names) + " "
                  + " ".join(f"{us['torch_grouped_mm'] / us[s]:13.3f}" for s in args.kernels), flush=True)
            del sets
            if dev == "cuda":
                torch.cuda.empty_cache()
    if args.json:
        out = {"gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "rounds": args.rounds,
               "calls": args.calls, "kernels": {k: {"MOEGEMM_WGRAD_SCHEDULE": KERNELS[k]} for k in args.kernels},
               "rows": rows}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
