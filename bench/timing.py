"""Interleaved timing of several systems in one process, shared by peers.py and suites.py.

The GPU's clock follows its power and temperature, which a long run of one system changes: timing systems one
after the other lets the first ones run on a cooler, faster GPU than the last (cuBLAS read 371 and 656 TFLOP/s
on one shape on one day). Every system here is therefore timed in `rounds` rounds; each round times a few
calls of every system, in an order that rotates from round to round, so that every system sees the same mix
of clock states. A system's time is the median of all its calls (microseconds).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

ROUNDS = 5
HOLD_FIRST_US = 5000.0  # the first round's hold; later rounds size theirs from the round before
HOLD_MAX_US = 100_000.0
# torch.cuda._sleep spins for a number of GPU clock cycles; 2000 per µs is at or above an H100/H200's
# highest SM clock (1980 MHz), so the hold lasts at least as long as asked.
SLEEP_CYCLES_PER_US = 2000


def raise_clocks(torch, device: str, seconds: float = 0.5) -> None:
    """Runs 4096 x 4096 x 4096 bf16 GEMMs for `seconds` (host wall time) on a CUDA device; nothing elsewhere.

    A suite's first row would otherwise be timed while the GPU's clock ramps up from idle: the glu suite's first
    row (seed-2k, ~45 µs a call) read 58 and 43 µs for the same kernel in two processes.
    """
    if device != "cuda":
        return
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            torch.mm(a, a)
        torch.cuda.synchronize()
    del a


def gpu_hold(torch, us: float) -> None:
    """Queues a kernel that keeps the current stream busy for at least `us` µs (torch.cuda._sleep), so that
    the calls queued behind it in that time start back to back when it ends."""
    torch.cuda._sleep(int(us * SLEEP_CYCLES_PER_US))


def hold_for(issue_seconds: float) -> float:
    """The hold (µs) for calls whose host side took `issue_seconds` to issue before: 1.5x that, plus 200 µs,
    at most HOLD_MAX_US."""
    return min(HOLD_MAX_US, 1.5e6 * issue_seconds + 200.0)


def rotated(names: list[str], r: int) -> list[str]:
    """`names` starting at position r (mod len): round r's order."""
    if not names:
        return []
    r %= len(names)
    return names[r:] + names[:r]


def interleaved_us(torch, device: str, systems: dict[str, list[Callable[[], object]]], warmup: int, iters: int,
                   rounds: int = ROUNDS, on_error: Callable[[str, BaseException], object] | None = None
                   ) -> dict[str, object]:
    """{name: median µs per call} of every system of {name: its calls (one per input copy, rotated)}.

    `warmup` calls of each system first, then `rounds` rounds (raised to a multiple of the number of systems,
    so that each opens as many rounds) of ceil(iters / rounds) calls of each system (at least `iters` calls in
    all), each round in the order `rotated(names, round)`. On a CUDA device each
    call is timed by CUDA events on the current stream and the samples are read after one synchronisation
    per round; elsewhere (CPU smoke runs) by the host clock. A system whose call raises gets
    on_error(name, error) as its value (the error itself without on_error) and drops out of later rounds.

    On CUDA a sleep kernel opens each round (`gpu_hold`), long enough for the host to queue the whole round
    behind it: each call's events then time its work on the GPU alone, not the host's time to issue it.
    Without it, a call whose host side takes about as long as its kernel (a Python front end at a 40 µs
    kernel, with its events) can leave the GPU idle between calls, and the idle time lands between that
    call's events: moegemm's torch front end read 61 µs on seed-2k in one full run, the same kernel 44 µs from
    the C++ program, and side by side (docs/results/timing-hold-ab-h200-2026-12-01.json) per-call events
    read the seed-2k and seed-4k weight gradients 6-11% slower, for moegemm and torch alike. Host cost has
    its own tables (torch_bench.py's dispatch rows).
    """
    out: dict[str, object] = {}
    live = [name for name, calls in systems.items() if calls]
    for name in list(live):
        calls = systems[name]
        try:
            for i in range(warmup):
                calls[i % len(calls)]()
        except Exception as err:  # noqa: BLE001 - reported in the row, the other systems go on
            out[name] = on_error(name, err) if on_error else err
            live.remove(name)
    samples: dict[str, list[float]] = {name: [] for name in live}
    # Whole turns of the rotation, so that every system opens as many rounds as every other.
    rounds = math.ceil(max(rounds, 1) / max(len(live), 1)) * max(len(live), 1)
    per_round = max(1, math.ceil(iters / rounds))
    counters = {name: warmup for name in live}
    hold_us = HOLD_FIRST_US
    for r in range(max(rounds, 1)):
        events: list[tuple[str, object, object]] = []
        if device == "cuda":
            gpu_hold(torch, hold_us)
            queued = time.perf_counter()
            pool = [torch.cuda.Event(enable_timing=True) for _ in range(2 * per_round * len(live))]
        for name in rotated(list(live), r):
            calls = systems[name]
            try:
                for _ in range(per_round):
                    call = calls[counters[name] % len(calls)]
                    counters[name] += 1
                    if device == "cuda":
                        start, end = pool.pop(), pool.pop()
                        start.record()
                        call()
                        end.record()
                        events.append((name, start, end))
                    else:
                        t0 = time.perf_counter()
                        call()
                        samples[name].append(1e6 * (time.perf_counter() - t0))
            except Exception as err:  # noqa: BLE001 - as above
                out[name] = on_error(name, err) if on_error else err
                live.remove(name)
                samples.pop(name, None)
                events = [e for e in events if e[0] != name]
        if device == "cuda":
            hold_us = hold_for(time.perf_counter() - queued)  # the next round's, from this round's issue time
            torch.cuda.synchronize()
            for name, start, end in events:
                if name in samples:
                    samples[name].append(1e3 * start.elapsed_time(end))
    for name, values in samples.items():
        out[name] = float(statistics.median(values))
    return out


def alternating_wall_us(systems: dict[str, tuple[list[Callable[[], object]], Callable[[list], object]]],
                        warmup: int, samples: int, calls: int) -> dict[str, float]:
    """{name: median µs per call} by the host clock, for systems that have no event API on a shared stream
    (JAX next to torch): {name: (its calls, one per input copy, rotated; wait(outputs) that blocks until they
    are done)}.

    `warmup` calls of each system first, one at a time. Then `samples` samples of each system, one system after the other
    and the order rotating from sample to sample, so that all see the same mix of clock states; a sample
    queues `calls` calls back to back, waits once and divides the host time by `calls`, so that the wait's
    own latency is shared by the calls of the sample.
    """
    for name, (fns, wait) in systems.items():
        for i in range(warmup):
            wait([fns[i % len(fns)]()])
    times: dict[str, list[float]] = {name: [] for name in systems}
    counters = dict.fromkeys(systems, warmup)
    for s in range(samples):
        for name in rotated(list(systems), s):
            fns, wait = systems[name]
            first = counters[name]
            counters[name] += calls
            t0 = time.perf_counter()
            wait([fns[(first + j) % len(fns)]() for j in range(calls)])
            times[name].append(1e6 * (time.perf_counter() - t0) / calls)
    return {name: float(statistics.median(values)) for name, values in times.items()}
