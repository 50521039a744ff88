"""Whether the JAX and torch front ends run the same kernel equally fast (GPU).

For seed-16k, qwen3-up and dsv3-down (uniform routing), on the same inputs (torch tensors shared with JAX
through DLPack, so the same data at the same addresses):
  - checks that moegemm.jax.grouped_gemm (under jax.jit, b_layout="kn") and moegemm.torch.grouped_mm give
    bitwise the same output;
  - times both by the host clock: N calls queued back to back and one wait per sample (N = 8 and 32),
    7 samples each, the front ends alternating sample by sample; also 8 torch calls between CUDA events;
  - with --ncu, only issues 3 synchronised calls of each front end, for a kernel profiler to time:
      ncu --clock-control none --cache-control none --kernel-name regex:grouped_gemm \\
          --metrics gpu__time_duration.sum --csv python3 bench/front_end_parity.py --ncu
    (the torch front end's launches are on torch's stream, JAX's on XLA's: the Stream column tells them apart).
Prints one line per workload (µs per call, TFLOP/s = 2*M*N*K / time). --hlo prints the optimised HLO of the
jitted qwen3-up call (no copy or fill around the custom call expected).
Usage: python3 bench/front_end_parity.py [--ncu] [--hlo]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import moegemm.jax as mj  # noqa: E402
import moegemm.torch as mt  # noqa: E402
import timing  # noqa: E402  (bench/timing.py, next to this file)

SHAPES = {"seed-16k": (16384, 4096, 4096, 8), "qwen3-up": (65536, 1536, 2048, 128),
          "dsv3-down": (65536, 7168, 2048, 256)}  # M, N, K, E (bench/workloads/moe_workloads.json)
L2_BYTES = 60e6


def uniform_sizes(m: int, e: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.bincount(rng.integers(0, e, size=m), minlength=e)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ncu", action="store_true", help="only issue 3 synchronised calls of each front end")
    p.add_argument("--hlo", action="store_true", help="print the optimised HLO of the jitted qwen3-up call")
    args = p.parse_args()
    for name, (m, n, k, e) in SHAPES.items():
        sizes = uniform_sizes(m, e)
        copies = 1 if args.ncu else max(1, min(8, math.ceil(2 * L2_BYTES / (2 * (m * k + e * k * n)))))
        offs_t = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
        offs_j = jnp.asarray(np.cumsum(sizes), jnp.int32)
        ops_t = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                  torch.randn(e, k, n, device="cuda", dtype=torch.bfloat16).div_(math.sqrt(k)))
                 for _ in range(copies)]
        torch.cuda.synchronize()
        ops_j = [(jax.dlpack.from_dlpack(a), jax.dlpack.from_dlpack(b)) for a, b in ops_t]
        jfn = jax.jit(lambda a, b: mj.grouped_gemm(a, b, offs_j, b_layout="kn"))
        if args.hlo and name == "qwen3-up":
            print(jfn.lower(*ops_j[0]).compile().as_text())
        tcalls = [lambda a=a, b=b: mt.grouped_mm(a, b, offs=offs_t) for a, b in ops_t]
        jcalls = [lambda a=a, b=b: jfn(a, b) for a, b in ops_j]
        twait = lambda outs: torch.cuda.synchronize()  # noqa: E731
        jwait = jax.block_until_ready
        dt, dj = tcalls[0](), jcalls[0]().block_until_ready()
        torch.cuda.synchronize()
        same = torch.equal(dt, torch.from_dlpack(dj))
        del dt, dj
        if args.ncu:
            for _ in range(3):
                tcalls[0]()
                torch.cuda.synchronize()
            for _ in range(3):
                jcalls[0]().block_until_ready()
            print(f"{name}: calls issued (torch 3, then jax 3), bitwise equal {same}", flush=True)
            continue
        for f in tcalls + jcalls:
            f()
        torch.cuda.synchronize()
        jax.block_until_ready(jcalls[0]())
        tc = [tcalls[i % copies] for i in range(8)]
        res = {}
        for nc in (8, 32):  # both front ends by the host clock, alternating sample by sample
            t = timing.alternating_wall_us({"torch": (tcalls, twait), "jax": (jcalls, jwait)}, 0, 7, nc)
            res[nc] = (t["torch"], t["jax"])
        ev = []
        for _ in range(5):
            s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for i in range(8):
                tc[i]()
            t.record()
            torch.cuda.synchronize()
            ev.append(1e3 * s.elapsed_time(t) / 8)
        flops = 2.0 * m * n * k
        line = f"{name}: copies {copies} bitwise {same} | "
        for nc, (a, b) in res.items():
            line += (f"N={nc}: torch {a:.1f} us ({flops / a * 1e-6:.0f} TF/s) jax {b:.1f} us "
                     f"({flops / b * 1e-6:.0f}) jax/torch {b / a:.3f} | ")
        line += f"torch events 8 calls {statistics.median(ev):.1f} us"
        print(line, flush=True)
        del ops_t, ops_j, tcalls, jcalls, tc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
