"""Bar chart of a peers.py result: TFLOP/s per workload (and routing), one bar per system.

usage: python3 bench/plot.py peers.json [-o peers.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


# The C++ program runs after the interleaved systems, in a process of its own (bench/peers.py).
LEGEND = {"moegemm_cpp": "moegemm_cpp (own process, not interleaved)"}


def plot(doc: dict, out: str | Path) -> Path:
    """Writes the PNG to `out` and returns its path. Systems without a number get no bar (they are in the JSON)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["rows"]
    systems = list(rows[0]["systems"]) if rows else []
    labels = [f"{r['workload']}\n{r['routing']}" for r in rows]
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(rows) + 2), 5))
    for i, name in enumerate(systems):
        xs, ys = [], []
        for j, r in enumerate(rows):
            entry = r["systems"].get(name, {})
            if "tflops" in entry:
                xs.append(j - 0.4 + (i + 0.5) * width)
                ys.append(entry["tflops"])
        ax.bar(xs, ys, width, label=LEGEND.get(name, name))
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("TFLOP/s (2*M*N*K / time)")
    ax.set_title(f"MoE grouped GEMMs, bf16 - {doc.get('gpu', '?')} - {doc.get('date', '')}")
    ax.legend(fontsize=7, ncols=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", help="JSON written by bench/peers.py")
    p.add_argument("-o", "--out", help="PNG path (default: next to the JSON)")
    args = p.parse_args()
    doc = json.loads(Path(args.results).read_text())
    print(plot(doc, args.out or Path(args.results).with_suffix(".png")))


if __name__ == "__main__":
    main()
