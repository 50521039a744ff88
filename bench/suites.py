"""The training-side suites of bench/peers.py: weight gradients, the fused dGLU backward, the whole MoE MLP
forward+backward, and the fused-versus-unfused GLU forward. PyTorch only (the moegemm ops through
torch.ops.moegemm, the peers through torch._grouped_mm, torch.mm and torch elementwise ops).

Suites (each row: one case x one routing, every system of the row measured in the same process, on the same
group sizes, interleaved: bench/timing.py):

  wgrad  W_g = X_g^T dY_g per expert (ragged K = the expert's rows), for every GEMM of the workloads file:
         X (M, K), dY (M, N) -> (E, K, N).
           moegemm_wgrad           torch.ops.moegemm.grouped_gemm_wgrad(x, dy, offs, out_dtype=bf16)
           moegemm_wgrad_f32       the same with the op's default float32 output
           torch_grouped_mm        torch._grouped_mm(x.t(), dy, offs=offs) (its 2-D x 2-D mode, bf16 out)
           cublas_dense_same_flops torch.mm(x.t(), dy): one (K, M) x (M, N) GEMM of the same FLOPs
         ratio speedup_vs_torch = t(torch) / t(moegemm_wgrad), target >= 1.2.
  dglu   the backward through SwiGLU of the up projection, fused into the down projection's dgrad GEMM:
         dH = dY @ w_down[g]^T (M x I x H), then dC = [d_gate, d_up] (M, 2I) and dprob (M,) from the saved
         pre-activation C (M, 2I) and prob. Cases: the "-down" GEMMs of the models, and the seed GEMMs
         (read as M x N x K = rows x H x I).
           moegemm_dglu      torch.ops.moegemm.grouped_gemm_dglu(dy, w_down, c, offs, prob=, compute_dprob=True)
           moegemm_dgrad     torch.ops.moegemm.grouped_gemm(dy, w_down, offs): the plain dgrad GEMM, same shape
           moegemm_unfused   moegemm_dgrad + the SwiGLU backward as torch elementwise ops
           torch_grouped_mm  torch._grouped_mm(dy, w_down.mT, offs=offs): torch's dgrad GEMM alone
           torch_unfused     torch_grouped_mm + the SwiGLU backward as torch elementwise ops (eager: 14 kernels)
           torch_compiled_unfused   torch_grouped_mm + the same backward under torch.compile (fused by inductor;
                                    GPU only)
         ratios fused_over_plain = t(dglu) / t(dgrad), target <= 1.08; speedup_vs_torch = t(torch_unfused) /
         t(dglu); speedup_vs_torch_compiled = t(torch_compiled_unfused) / t(dglu).
  mlp    one MoE expert MLP (SwiGLU, router prob), forward + backward with autograd, per model preset:
           moegemm_moe_mlp            moegemm.torch.moe_mlp(x, w_up, w_down, offs, prob) and autograd.grad
           torch_grouped_mm_autograd  the same layer from torch._grouped_mm, F.silu and products, autograd.grad
           torch_compiled_autograd    that layer under torch.compile (dynamic shapes; inductor fuses the
                                      elementwise ops of the forward and of the backward), GPU only
           moegemm_forward, torch_forward   the forward alone (no autograd graph)
         gradients of x, w_up, w_down and prob; TFLOP/s = 18*M*H*I / time (the six GEMMs);
         ratios speedup_vs_torch = t(torch) / t(moegemm), target >= 1.3;
         speedup_vs_torch_compiled = t(torch_compiled_autograd) / t(moegemm).
  glu    the up projection with SwiGLU, fused into the GEMM's epilogue versus a separate elementwise SwiGLU;
         cases: the "-up" GEMMs of the models and the seed GEMMs (N = 2I).
           moegemm_glu         torch.ops.moegemm.grouped_gemm_glu(x, w, offs): D (M, I) only
           moegemm_glu_c_prob  the same with prob and generate_c=True (what moe_mlp's forward runs)
           moegemm_gemm        torch.ops.moegemm.grouped_gemm(x, w, offs): the plain GEMM, 2I columns
           moegemm_unfused     moegemm_gemm + silu(gate) * up in torch
           torch_grouped_mm    torch._grouped_mm(x, w, offs=offs)
           torch_unfused       torch_grouped_mm + silu(gate) * up in torch
           torch_compiled_unfused   torch_grouped_mm + silu(gate) * up under torch.compile (GPU only)
         ratios fused_over_plain = t(glu) / t(gemm), target <= 1.05 (also for the C + prob variant);
         fused_over_unfused = t(glu) / t(moegemm_unfused); speedup_vs_torch = t(torch_unfused) / t(glu);
         speedup_vs_torch_compiled = t(torch_compiled_unfused) / t(glu).

  ksweep the plain grouped GEMM at K/4, K/2 and K for every GEMM of the workloads file (M, N, E fixed):
           moegemm_k_quarter, moegemm_k_half, moegemm_k   torch.ops.moegemm.grouped_gemm(x, w, offs)
           torch_k_quarter, torch_k_half, torch_k         torch._grouped_mm(x, w, offs=offs)
         a least-squares line time = fixed + K * per_k through each system's three points gives the time that
         does not scale with K (epilogue, pipeline fill, launch: what is not hidden under the MMA) and the
         marginal rate 2*M*N / per_k; reported per row as "derived" (fixed_us, fixed_share = fixed / time at K,
         marginal_tflops). ratio speedup_vs_torch = t(torch_k) / t(moegemm_k), target >= 1.2.

Weights are stored (E, K, N) ("kn", the layout of torch._grouped_mm and of MoEMLP's parameters); the dgrad
reads w_down (E, I, H) as "nk". bf16 data, f32 router probabilities. A system that raises records its error
as its status ("no kernel yet: ..." for a moegemm NotImplementedError) and the run continues.
"""

from __future__ import annotations

import importlib
import math

import timing

SUITES = ("wgrad", "dglu", "mlp", "glu", "ksweep")

# Cases run by --quick (every case without it); names of the workloads file (GEMMs, or models for mlp).
QUICK_CASES = {
    "wgrad": ("seed-16k", "mixtral-down", "qwen3-up", "dsv3-down"),
    "dglu": ("mixtral-down", "qwen3-down", "dsv3-down"),
    "mlp": ("qwen3-30b-a3b", "deepseek-v3"),
    "glu": ("seed-16k", "mixtral-up", "qwen3-up"),
    "ksweep": ("seed-16k", "qwen3-down", "dsv3-down"),
}

KSWEEP_SYSTEMS = {"moegemm": ("moegemm_k_quarter", "moegemm_k_half", "moegemm_k"),
                  "torch": ("torch_k_quarter", "torch_k_half", "torch_k")}

SYSTEMS = {
    "wgrad": ("moegemm_wgrad", "moegemm_wgrad_f32", "torch_grouped_mm", "cublas_dense_same_flops"),
    "dglu": ("moegemm_dglu", "moegemm_dgrad", "moegemm_unfused", "torch_grouped_mm", "torch_unfused",
             "torch_compiled_unfused"),
    "mlp": ("moegemm_moe_mlp", "torch_grouped_mm_autograd", "torch_compiled_autograd", "moegemm_forward",
            "torch_forward"),
    "glu": ("moegemm_glu", "moegemm_glu_c_prob", "moegemm_gemm", "moegemm_unfused", "torch_grouped_mm",
            "torch_unfused", "torch_compiled_unfused"),
    "ksweep": (*KSWEEP_SYSTEMS["moegemm"], *KSWEEP_SYSTEMS["torch"]),
}

# name: (numerator system, denominator system, target) with ratio = time(numerator) / time(denominator);
# a target is (">=" or "<=", value) or None.
RATIOS = {
    "wgrad": {
        "speedup_vs_torch": ("torch_grouped_mm", "moegemm_wgrad", (">=", 1.2)),
        "speedup_vs_cublas": ("cublas_dense_same_flops", "moegemm_wgrad", None),
        "f32_out_over_bf16_out": ("moegemm_wgrad_f32", "moegemm_wgrad", None),
    },
    "dglu": {
        "fused_over_plain": ("moegemm_dglu", "moegemm_dgrad", ("<=", 1.08)),
        "fused_over_unfused": ("moegemm_dglu", "moegemm_unfused", None),
        "speedup_vs_torch": ("torch_unfused", "moegemm_dglu", None),
        "speedup_vs_torch_compiled": ("torch_compiled_unfused", "moegemm_dglu", None),
    },
    "mlp": {
        "speedup_vs_torch": ("torch_grouped_mm_autograd", "moegemm_moe_mlp", (">=", 1.3)),
        "speedup_vs_torch_compiled": ("torch_compiled_autograd", "moegemm_moe_mlp", None),
        "forward_speedup_vs_torch": ("torch_forward", "moegemm_forward", None),
    },
    "glu": {
        "fused_over_plain": ("moegemm_glu", "moegemm_gemm", ("<=", 1.05)),
        "fused_c_prob_over_plain": ("moegemm_glu_c_prob", "moegemm_gemm", ("<=", 1.05)),
        "fused_over_unfused": ("moegemm_glu", "moegemm_unfused", None),
        "speedup_vs_torch": ("torch_unfused", "moegemm_glu", None),
        "speedup_vs_torch_compiled": ("torch_compiled_unfused", "moegemm_glu", None),
    },
    "ksweep": {
        "speedup_vs_torch": ("torch_k", "moegemm_k", (">=", 1.2)),
    },
}


# ---- cases -----------------------------------------------------------------------------------------


def models_of(doc: dict) -> list[dict]:
    """The model presets of the workloads file as MoE MLP shapes: M = tokens * top_k rows, H, I, E."""
    return [{"name": name, "M": m["tokens"] * m["top_k"], "H": m["hidden"], "I": m["intermediate"],
             "E": m["experts"]} for name, m in doc.get("models", {}).items()]


def gemm_roles(doc: dict) -> dict:
    """GEMM name -> (role, model name): ("up", model) when the GEMM is M x 2I x H of a model, ("down", model)
    when it is M x H x I, (None, None) otherwise (the seed GEMMs)."""
    roles = {}
    for g in doc["gemms"]:
        shape, role = (g["M"], g["N"], g["K"], g["E"]), (None, None)
        for m in models_of(doc):
            if shape == (m["M"], 2 * m["I"], m["H"], m["E"]):
                role = ("up", m["name"])
            elif shape == (m["M"], m["H"], m["I"], m["E"]):
                role = ("down", m["name"])
        roles[g["name"]] = role
    return roles


def cases(doc: dict, suite: str) -> list[dict]:
    """Every case of a suite, before --only/--quick selection. Each case has its name, the names that select
    it (`aliases`: its GEMM, its model) and its shape."""
    roles = gemm_roles(doc)
    out = []
    if suite == "mlp":
        for m in models_of(doc):
            gemms = [name for name, (_, model) in roles.items() if model == m["name"]]
            out.append({**m, "aliases": [m["name"], *gemms]})
        return out
    for g in doc["gemms"]:
        role, model = roles[g["name"]]
        aliases = [g["name"]] + ([model] if model else [])
        if suite == "wgrad":  # X (M, K), dY (M, N) -> (E, K, N)
            out.append({"name": g["name"], "M": g["M"], "N": g["N"], "K": g["K"], "E": g["E"], "aliases": aliases})
        elif suite == "glu" and role in ("up", None) and g["N"] % 16 == 0:  # N = 2I
            out.append({"name": g["name"], "M": g["M"], "N": g["N"], "K": g["K"], "E": g["E"], "aliases": aliases})
        elif suite == "ksweep":
            out.append({"name": g["name"], "M": g["M"], "N": g["N"], "K": g["K"], "E": g["E"], "aliases": aliases})
        elif suite == "dglu" and role in ("down", None) and g["K"] % 8 == 0:  # the down GEMM M x H x I
            out.append({"name": g["name"], "M": g["M"], "I": g["K"], "H": g["N"], "E": g["E"], "aliases": aliases})
    return out


def select(all_cases: list[dict], suite: str, only, quick: bool) -> list[dict]:
    if only:
        return [c for c in all_cases if set(c["aliases"]) & set(only)]
    if quick:
        return [c for c in all_cases if c["name"] in QUICK_CASES[suite]]
    return all_cases


def _tiny_dim(value: int, divisor: int, multiple: int, lo: int, hi: int) -> int:
    v = -(-max(value // divisor, 1) // multiple) * multiple
    return int(min(max(v, lo), hi))


def tiny(case: dict) -> dict:
    """A CPU-sized version of a case (smoke runs): at most 128 rows and 8 experts, dims divided by 64 and kept
    multiples of 16 (8 for I), so that every 16-byte and GLU-alignment rule of the ops still holds."""
    out = dict(case, M=min(case["M"], 128), E=min(case["E"], 8))
    for key in ("N", "K", "H"):
        if key in case:
            out[key] = _tiny_dim(case[key], 64, 16, 16, 64)
    if "I" in case:
        out["I"] = _tiny_dim(case["I"], 64, 8, 8, 32)
    return out


def ksweep_ks(k: int) -> tuple[int, int, int]:
    """The K values of the ksweep suite: K/4, K/2 (multiples of 16, at least 16) and K."""
    return max(16, k // 4 // 16 * 16), max(16, k // 2 // 16 * 16), k


def flops(suite: str, c: dict) -> float:
    """FLOPs of the GEMM work of one call (elementwise work is not counted)."""
    if suite in ("wgrad", "glu", "ksweep"):
        return 2.0 * c["M"] * c["N"] * c["K"]
    if suite == "dglu":
        return 2.0 * c["M"] * c["I"] * c["H"]
    return 18.0 * c["M"] * c["H"] * c["I"]  # mlp: up, down forward; dgrad and wgrad of each backward


def input_bytes(suite: str, c: dict) -> int:
    """Bytes of one set of inputs (for the L2 rotation)."""
    if suite == "wgrad":
        return 2 * c["M"] * (c["K"] + c["N"])
    if suite in ("glu", "ksweep"):  # ksweep: the set at the full K
        return 2 * (c["M"] * c["K"] + c["E"] * c["K"] * c["N"])
    if suite == "dglu":
        return 2 * (c["M"] * c["H"] + c["E"] * c["I"] * c["H"] + 2 * c["M"] * c["I"])
    return 2 * (2 * c["M"] * c["H"] + 3 * c["E"] * c["H"] * c["I"])


# ---- timing --------------------------------------------------------------------------------------


class Bench:
    """Times lists of calls on one device: CUDA events around each call on a GPU, the host clock on the CPU
    (smoke runs). Median over `iters` calls after `warmup`, rotating through the calls (one per input copy)."""

    def __init__(self, torch, device: str, warmup: int, iters: int, l2_bytes: int):
        self.torch, self.device, self.warmup, self.iters, self.l2_bytes = torch, device, warmup, iters, l2_bytes

    def copies(self, nbytes: int, cap: int = 8) -> int:
        return int(min(cap, max(1, math.ceil(2 * self.l2_bytes / max(nbytes, 1)))))

    def times_us(self, systems: dict) -> dict:
        """{name: median µs} of {name: calls}, interleaved (bench/timing.py); a system that raises gets its
        status."""
        return timing.interleaved_us(self.torch, self.device, systems, self.warmup, self.iters,
                                     on_error=status_of)

    def release(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()


class Unavailable(Exception):
    """A system that cannot run here (moegemm.torch not importable, a GPU-only system on the CPU)."""


def status_of(system: str, err: BaseException) -> str:
    """The status recorded for a system that raised: its error, first line, kept in the row."""
    if isinstance(err, Unavailable):
        return str(err)
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if "out of memory" in str(err).lower():
        return "failed: out of memory"
    if isinstance(err, NotImplementedError) and system.startswith("moegemm"):
        return f"no kernel yet: {text}"[:400]
    return f"failed: {type(err).__name__}: {text}"[:400]


def measure(bench: Bench, systems: dict) -> dict:
    """{name: time_us or status} for {name: factory returning the list of calls to time}. The systems are
    timed interleaved (bench/timing.py): a few calls of each per round, the order rotating, so that they share
    the GPU's clock states. A factory or call that raises gives its status and the other systems go on."""
    out, calls = {}, {}
    for name, make in systems.items():
        try:
            calls[name] = make()
        except Exception as err:  # noqa: BLE001 - a missing kernel or a failure is reported in the row
            out[name] = status_of(name, err)
    try:
        out.update(bench.times_us(calls))
    except Exception as err:  # noqa: BLE001 - a sticky device error: every system still to be read reports it
        out.update({name: status_of(name, err) for name in calls if name not in out})
    try:
        bench.release()
    except Exception as err:  # noqa: BLE001 - as above
        out.update({name: status_of(name, err) for name in calls if not isinstance(out.get(name), str)})
    return {name: out[name] for name in systems}


def system_flops(suite: str, system: str, c: dict) -> float:
    """FLOPs of one call of a system: the suite's GEMM FLOPs, a third of them for the MLP's forward alone, the
    system's own K for the ksweep suite."""
    if suite == "mlp" and system.endswith("forward"):
        return flops(suite, c) / 3
    if suite == "ksweep":
        for family in KSWEEP_SYSTEMS.values():
            if system in family:
                return 2.0 * c["M"] * c["N"] * ksweep_ks(c["K"])[family.index(system)]
    return flops(suite, c)


def ksweep_fit(c: dict, systems: dict) -> dict:
    """The ksweep row's derived numbers: per family (moegemm, torch) the least-squares line through
    (K, time): fixed_us (intercept), marginal_tflops (2 M N / slope), fixed_share (fixed / time at the full
    K); None where a system has no time or the K values coincide (tiny shapes)."""
    ks = ksweep_ks(c["K"])
    out = {"ks": list(ks)}
    for family, names in KSWEEP_SYSTEMS.items():
        ts = [systems[n].get("time_us") for n in names]
        fixed = marginal = share = None
        if all(t is not None for t in ts) and len(set(ks)) > 1:
            mk, mt = sum(ks) / 3, sum(ts) / 3
            slope = sum((k - mk) * (t - mt) for k, t in zip(ks, ts)) / sum((k - mk) ** 2 for k in ks)
            fixed = mt - slope * mk
            marginal = 2.0 * c["M"] * c["N"] / slope * 1e-6 if slope > 0 else None
            share = fixed / ts[-1]
        out[family] = {"fixed_us": fixed, "marginal_tflops": marginal, "fixed_share": share}
    return out


def summarise(suite: str, c: dict, times: dict) -> tuple[dict, dict]:
    """(systems, ratios) of a row: systems {name: {time_us, tflops} | {status}}, ratios {name: {value, target,
    met}} with value None when either side has no time."""
    systems = {}
    for name in SYSTEMS[suite]:
        t = times.get(name, "not run")
        systems[name] = ({"time_us": t, "tflops": system_flops(suite, name, c) / t * 1e-6}
                         if isinstance(t, float) and t > 0
                         else {"status": t if isinstance(t, str) else "failed: no time"})
    ratios = {}
    for key, (num, den, target) in RATIOS[suite].items():
        a, b = systems[num].get("time_us"), systems[den].get("time_us")
        value = a / b if a is not None and b is not None else None
        met = None
        if target is not None and value is not None:
            met = bool(value >= target[1]) if target[0] == ">=" else bool(value <= target[1])
        ratios[key] = {"value": value, "target": None if target is None else f"{target[0]} {target[1]}",
                       "met": met}
    return systems, ratios


# ---- the torch peers' elementwise SwiGLU -----------------------------------------------------------


def swiglu(g, i: int):
    """silu(gate) * up for halves-layout pre-activations g (M, 2I): torch's unfused forward epilogue."""
    import torch.nn.functional as F

    return F.silu(g[:, :i]) * g[:, i:]


def swiglu_backward(dh, c, prob, i: int):
    """The SwiGLU backward as separate torch elementwise ops (halves layout), what grouped_gemm_dglu fuses:
    d_gate = dH * prob * up * silu'(gate), d_up = dH * prob * silu(gate), dprob = sum_i silu(gate) * up * dH.
    Returns (dc (M, 2I) in c's dtype, dprob (M,) float32)."""
    import torch

    gate, up = c[:, :i], c[:, i:]
    sig = torch.sigmoid(gate)
    silu = gate * sig
    dhp = dh * prob.to(dh.dtype).unsqueeze(1)
    dc = torch.empty_like(c)
    torch.mul(dhp, silu, out=dc[:, i:])
    torch.mul(dhp * up, sig * (1 + gate * (1 - sig)), out=dc[:, :i])
    dprob = (silu * up * dh).sum(dim=1, dtype=torch.float32)
    return dc, dprob


def swiglu_backward_functional(dh, c, prob, i: int):
    """swiglu_backward without its out= writes into views of dc, for torch.compile (the same math, one
    expression per output: inductor fuses each into one kernel)."""
    import torch

    gate, up = c[:, :i], c[:, i:]
    sig = torch.sigmoid(gate)
    silu = gate * sig
    dhp = dh * prob.to(dh.dtype).unsqueeze(1)
    dc = torch.cat([dhp * up * (sig * (1 + gate * (1 - sig))), dhp * silu], dim=1).to(c.dtype)
    dprob = (silu * up * dh).sum(dim=1, dtype=torch.float32)
    return dc, dprob


# ---- the suites ------------------------------------------------------------------------------------


class Context:
    """What every suite needs: torch, the device, the timer, moegemm.torch (or why it is missing)."""

    def __init__(self, torch, device: str, bench: Bench, compile_baselines: bool = True):
        self.torch, self.device, self.bench = torch, device, bench
        self.compile_baselines = compile_baselines
        self.dtype = torch.bfloat16
        self._compiled = {}
        try:
            self.mt = importlib.import_module("moegemm.torch")
            self.mt_why = None
        except Exception as err:  # noqa: BLE001 - ImportError, or an OSError from loading the library
            self.mt, self.mt_why = None, f"not available: moegemm.torch not importable ({err})"

    def randn(self, *shape, scale: float = 1.0, grad: bool = False):
        t = self.torch.randn(*shape, device=self.device, dtype=self.dtype)
        if scale != 1.0:
            t.mul_(scale)
        return t.requires_grad_(grad)

    def prob(self, m: int, grad: bool = False):
        p = self.torch.rand(m, device=self.device, dtype=self.torch.float32).mul_(0.9).add_(0.05)
        return p.requires_grad_(grad)

    def offsets(self, sizes):
        import numpy as np

        return self.torch.tensor(np.cumsum(sizes), dtype=self.torch.int32, device=self.device)

    def compiled(self, fn):
        """`fn` under torch.compile with dynamic shapes (one compilation serves every row), made once per
        function. GPU-only: on the CPU (smoke runs), or with compile_baselines off (peers.py --no-compile), it
        raises Unavailable rather than spend the run compiling."""
        if self.device != "cuda":
            raise Unavailable("skipped: --device cpu (the compiled baselines run on the GPU)")
        if not self.compile_baselines:
            raise Unavailable("skipped: --no-compile")
        if fn not in self._compiled:
            self._compiled[fn] = self.torch.compile(fn, dynamic=True)
        return self._compiled[fn]

    def moegemm(self, factory):
        """A moegemm system's factory, or one that raises why moegemm.torch is missing."""
        if self.mt is None:
            why = self.mt_why

            def missing():
                raise Unavailable(why)
            return missing
        return factory


def run_wgrad(ctx: Context, c: dict, sizes, copies: int) -> dict:
    torch = ctx.torch
    m, n, k = c["M"], c["N"], c["K"]
    offs = ctx.offsets(sizes)
    sets = [(ctx.randn(m, k), ctx.randn(m, n, scale=0.1)) for _ in range(copies)]
    ops = torch.ops.moegemm if ctx.mt is not None else None
    systems = {
        "moegemm_wgrad": ctx.moegemm(lambda: [
            lambda x=x, dy=dy: ops.grouped_gemm_wgrad(x, dy, offs, out_dtype=ctx.dtype) for x, dy in sets]),
        "moegemm_wgrad_f32": ctx.moegemm(lambda: [
            lambda x=x, dy=dy: ops.grouped_gemm_wgrad(x, dy, offs) for x, dy in sets]),
        "torch_grouped_mm": lambda: [lambda x=x, dy=dy: torch._grouped_mm(x.t(), dy, offs=offs) for x, dy in sets],
        "cublas_dense_same_flops": lambda: [lambda x=x, dy=dy: torch.mm(x.t(), dy) for x, dy in sets],
    }
    return measure(ctx.bench, systems)


def run_dglu(ctx: Context, c: dict, sizes, copies: int) -> dict:
    torch = ctx.torch
    m, i, h, e = c["M"], c["I"], c["H"], c["E"]
    offs = ctx.offsets(sizes)
    # dy (M, H), w_down (E, I, H) as the forward stores it, saved pre-activation c (M, 2I), prob (M,)
    sets = [(ctx.randn(m, h, scale=0.1), ctx.randn(e, i, h, scale=1 / math.sqrt(i)), ctx.randn(m, 2 * i),
             ctx.prob(m)) for _ in range(copies)]
    ops = torch.ops.moegemm if ctx.mt is not None else None

    def moegemm_unfused(dy, w, pre, p):
        dh, _ = ops.grouped_gemm(dy, w, offs, b_layout="nk")
        return swiglu_backward(dh, pre, p, i)

    def torch_unfused(dy, w, pre, p):
        return swiglu_backward(torch._grouped_mm(dy, w.mT, offs=offs), pre, p, i)

    systems = {
        "moegemm_dglu": ctx.moegemm(lambda: [
            lambda s=s: ops.grouped_gemm_dglu(s[0], s[1], s[2], offs, b_layout="nk", prob=s[3], compute_dprob=True)
            for s in sets]),
        "moegemm_dgrad": ctx.moegemm(lambda: [
            lambda s=s: ops.grouped_gemm(s[0], s[1], offs, b_layout="nk") for s in sets]),
        "moegemm_unfused": ctx.moegemm(lambda: [lambda s=s: moegemm_unfused(*s) for s in sets]),
        "torch_grouped_mm": lambda: [lambda s=s: torch._grouped_mm(s[0], s[1].mT, offs=offs) for s in sets],
        "torch_unfused": lambda: [lambda s=s: torch_unfused(*s) for s in sets],
        "torch_compiled_unfused": lambda: compiled_calls(ctx, swiglu_backward_functional, sets, lambda s: (
            torch._grouped_mm(s[0], s[1].mT, offs=offs), s[2], s[3], i)),
    }
    return measure(ctx.bench, systems)


def compiled_calls(ctx: Context, fn, sets, operands) -> list:
    """The calls of a baseline whose elementwise part is `fn` under torch.compile (Context.compiled): one per
    input set, each `fn(*operands(set))`, the GEMM inside `operands` run eagerly as torch runs it."""
    compiled = ctx.compiled(fn)
    return [lambda s=s: compiled(*operands(s)) for s in sets]


def run_glu(ctx: Context, c: dict, sizes, copies: int) -> dict:
    torch = ctx.torch
    m, n, k, e = c["M"], c["N"], c["K"], c["E"]
    i = n // 2
    offs = ctx.offsets(sizes)
    sets = [(ctx.randn(m, k), ctx.randn(e, k, n, scale=1 / math.sqrt(k))) for _ in range(copies)]
    prob = ctx.prob(m)
    ops = torch.ops.moegemm if ctx.mt is not None else None

    def moegemm_unfused(x, w):
        g, _ = ops.grouped_gemm(x, w, offs, b_layout="kn")
        return swiglu(g, i)

    systems = {
        "moegemm_glu": ctx.moegemm(lambda: [
            lambda x=x, w=w: ops.grouped_gemm_glu(x, w, offs, b_layout="kn") for x, w in sets]),
        "moegemm_glu_c_prob": ctx.moegemm(lambda: [
            lambda x=x, w=w: ops.grouped_gemm_glu(x, w, offs, b_layout="kn", prob=prob, generate_c=True)
            for x, w in sets]),
        "moegemm_gemm": ctx.moegemm(lambda: [
            lambda x=x, w=w: ops.grouped_gemm(x, w, offs, b_layout="kn") for x, w in sets]),
        "moegemm_unfused": ctx.moegemm(lambda: [lambda x=x, w=w: moegemm_unfused(x, w) for x, w in sets]),
        "torch_grouped_mm": lambda: [lambda x=x, w=w: torch._grouped_mm(x, w, offs=offs) for x, w in sets],
        "torch_unfused": lambda: [lambda x=x, w=w: swiglu(torch._grouped_mm(x, w, offs=offs), i) for x, w in sets],
        "torch_compiled_unfused": lambda: compiled_calls(ctx, swiglu, sets, lambda s: (
            torch._grouped_mm(s[0], s[1], offs=offs), i)),
    }
    return measure(ctx.bench, systems)


def torch_moe_mlp(torch, x, w_up, w_down, offs, prob):
    """The MoE expert MLP from torch._grouped_mm and elementwise ops (differentiable through autograd)."""
    i = w_down.shape[1]
    g = torch._grouped_mm(x, w_up, offs=offs)
    h = swiglu(g, i) * prob.to(x.dtype).unsqueeze(1)
    return torch._grouped_mm(h, w_down, offs=offs)


def torch_moe_mlp_layer(x, w_up, w_down, offs, prob):
    """torch_moe_mlp as a function of its tensors only, the form torch.compile takes (Context.compiled)."""
    import torch

    return torch_moe_mlp(torch, x, w_up, w_down, offs, prob)


def mlp_operands(ctx: Context, m: int, h: int, i: int, e: int) -> tuple:
    """(x (M, H), w_up (E, H, 2I), w_down (E, I, H), prob (M,), dy (M, H)) of one MoE MLP step, the first four
    requiring grad; weights scaled by 1/sqrt(K) so that every GEMM result is O(1)."""
    return (ctx.randn(m, h, grad=True), ctx.randn(e, h, 2 * i, scale=1 / math.sqrt(h), grad=True),
            ctx.randn(e, i, h, scale=1 / math.sqrt(i), grad=True), ctx.prob(m, grad=True), ctx.randn(m, h, scale=0.1))


def run_mlp(ctx: Context, c: dict, sizes, copies: int) -> dict:
    torch = ctx.torch
    m, h, i, e = c["M"], c["H"], c["I"], c["E"]
    offs = ctx.offsets(sizes)
    sets = [mlp_operands(ctx, m, h, i, e) for _ in range(copies)]

    def step(layer, s):
        x, w_up, w_down, p, dy = s
        y = layer(x, w_up, w_down, offs, p)
        return torch.autograd.grad(y, (x, w_up, w_down, p), dy)

    def forward(layer, s):
        with torch.no_grad():
            return layer(s[0], s[1], s[2], offs, s[3])

    def moegemm_layer(x, w_up, w_down, o, p):
        # Rows past the last offset left unwritten, as torch._grouped_mm leaves them in the layer it is timed against.
        return ctx.mt.moe_mlp(x, w_up, w_down, o, p, zero_tail=False)

    systems = {
        "moegemm_moe_mlp": ctx.moegemm(lambda: [lambda s=s: step(moegemm_layer, s) for s in sets]),
        "torch_grouped_mm_autograd": lambda: [lambda s=s: step(torch_moe_mlp_layer, s) for s in sets],
        "torch_compiled_autograd": lambda: [lambda s=s, layer=ctx.compiled(torch_moe_mlp_layer): step(layer, s)
                                            for s in sets],
        "moegemm_forward": ctx.moegemm(lambda: [lambda s=s: forward(moegemm_layer, s) for s in sets]),
        "torch_forward": lambda: [lambda s=s: forward(torch_moe_mlp_layer, s) for s in sets],
    }
    return measure(ctx.bench, systems)


def run_ksweep(ctx: Context, c: dict, sizes, copies: int) -> dict:
    torch = ctx.torch
    m, n, e = c["M"], c["N"], c["E"]
    offs = ctx.offsets(sizes)
    ops = torch.ops.moegemm if ctx.mt is not None else None
    systems = {}
    for idx, k in enumerate(ksweep_ks(c["K"])):
        sets = [(ctx.randn(m, k), ctx.randn(e, k, n, scale=1 / math.sqrt(k))) for _ in range(copies)]
        systems[KSWEEP_SYSTEMS["moegemm"][idx]] = ctx.moegemm(lambda sets=sets: [
            lambda x=x, w=w: ops.grouped_gemm(x, w, offs, b_layout="kn") for x, w in sets])
        systems[KSWEEP_SYSTEMS["torch"][idx]] = (
            lambda sets=sets: [lambda x=x, w=w: torch._grouped_mm(x, w, offs=offs) for x, w in sets])
    return measure(ctx.bench, systems)


RUNNERS = {"wgrad": run_wgrad, "dglu": run_dglu, "mlp": run_mlp, "glu": run_glu, "ksweep": run_ksweep}


def shape_text(suite: str, c: dict) -> str:
    if suite == "mlp":
        return f"M={c['M']} H={c['H']} I={c['I']} E={c['E']}"
    if suite == "dglu":
        return f"M={c['M']} I={c['I']} H={c['H']} E={c['E']}"
    return f"M={c['M']} N={c['N']} K={c['K']} E={c['E']}"


def run_suite(suite: str, ctx: Context, selected: list[dict], routings, group_sizes, seed: int, log) -> list[dict]:
    """Every selected case x routing of one suite; returns the JSON rows."""
    rows = []
    total = len(selected) * len(routings)
    for idx, (c, routing) in enumerate(((c, r) for c in selected for r in routings), start=1):
        log(f"[{suite} {idx}/{total}] {c['name']} {routing}: {shape_text(suite, c)} ...")
        sizes = group_sizes(routing, c["M"], c["E"], seed)
        copies = ctx.bench.copies(input_bytes(suite, c))
        try:
            times = RUNNERS[suite](ctx, c, sizes, copies)
        except Exception as err:  # noqa: BLE001 - inputs could not be built (out of memory): the row says so
            times = {name: status_of("inputs", err) for name in SYSTEMS[suite]}
        ctx.bench.release()
        systems, ratios = summarise(suite, c, times)
        shape = {k: c[k] for k in ("M", "N", "K", "H", "I", "E") if k in c}
        rows.append({"suite": suite, "workload": c["name"], "routing": routing, **shape, "flops": flops(suite, c),
                     "rotating_copies": copies, "group_sizes": [int(s) for s in sizes], "systems": systems,
                     "ratios": ratios})
        if suite == "ksweep":
            rows[-1]["derived"] = ksweep_fit(c, systems)
        cells = "  ".join(f"{s}={v['time_us']:.1f}us" if "time_us" in v else f"{s}: {v['status'][:60]}"
                          for s, v in systems.items())
        rat = "  ".join(f"{k}={v['value']:.2f}" + ("" if v["met"] is None else (" ok" if v["met"] else " MISSED"))
                        for k, v in ratios.items() if v["value"] is not None)
        if suite == "ksweep":
            rat += "".join(f"  {fam}_fixed={d['fixed_us']:.0f}us ({d['fixed_share']:.0%} at K)"
                           for fam, d in rows[-1]["derived"].items() if fam != "ks" and d["fixed_us"] is not None)
        print(f"{suite:>5} {c['name']:>13} {routing:>7}  {cells}\n{'':>28}{rat}", flush=True)
    return rows


# ---- a time plan from the FLOP counts --------------------------------------------------------------


def elementwise_bytes(suite: str, system: str, c: dict) -> float:
    """Rough bytes moved by the elementwise torch ops of a system (the unfused SwiGLU, autograd), per call."""
    if system == "torch_compiled_unfused":  # one fused pass: reads the GEMM's output (and C), writes the result
        return 2.0 * c["M"] * (c["N"] * 1.5 if suite == "glu" else c["I"] * 5)
    if suite == "glu" and system.endswith("unfused"):
        return 2.0 * c["M"] * c["N"] * 2.5  # silu reads gate, writes; product reads both, writes I columns
    if suite == "dglu" and system.endswith("unfused"):
        return 2.0 * c["M"] * c["I"] * 14  # about 14 (M, I) bf16 passes (sigmoid, products, cat, dprob)
    if suite == "mlp" and system == "torch_compiled_autograd":  # fused: about 2 passes forward, 4 backward
        return 2.0 * c["M"] * c["I"] * 12
    if suite == "mlp" and system.startswith("torch"):
        return 2.0 * c["M"] * c["I"] * (6 if system == "torch_forward" else 20)
    return 0.0


COMPILE_S = 40.0  # torch.compile of a suite's compiled torch baseline, once (dynamic shapes); rough


def plan_seconds(suite: str, selected: list[dict], routings: int, calls: int, tflops: float,
                 bandwidth_tbs: float = 3.0, per_system_s: float = 0.15, per_case_s: float = 0.5,
                 compile_baselines: bool = True) -> float:
    """Estimated wall time of a suite on an H200: GEMM FLOPs at `tflops`, elementwise bytes at `bandwidth_tbs`,
    `calls` calls per system (warm-up + timed), plus a fixed cost per system (set-up, empty_cache) and per case
    (allocating and filling the inputs), and a compilation where the suite has a compiled baseline."""
    systems = [name for name in SYSTEMS[suite] if compile_baselines or not name.startswith("torch_compiled")]
    compiles = any(name.startswith("torch_compiled") for name in systems)
    total = COMPILE_S if compiles and selected else 0.0
    for c in selected:
        per_case = per_case_s
        for system in systems:
            t = (system_flops(suite, system, c) / (tflops * 1e12)
                 + elementwise_bytes(suite, system, c) / (bandwidth_tbs * 1e12))
            per_case += t * calls + per_system_s
        total += per_case * routings
    return total
