#!/usr/bin/env python3
"""Draws a tensorcompute-gpu-bench JSON result as a bar chart: percent of the copy bandwidth
per case, tensorcompute beside PyTorch (each against the copy measured in its own run), with a
mark where a copy of the case's own bytes lands (where the result records it).
    /usr/bin/python3 bench/plot_gpu_bench.py RESULT.json OUT.png   (needs python3-matplotlib)"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    r = json.load(open(src))
    names = list(r["cases"])
    ours = [r["cases"][n]["pct_copy"] for n in names]
    torch = [r["cases"][n].get("torch_pct_copy", 0) for n in names]
    fig, ax = plt.subplots(figsize=(10, 0.34 * len(names) + 1.6))
    y = range(len(names))
    h = 0.4
    ax.barh([i - h / 2 for i in y], ours, h, label="tensorcompute", color="#2b6cb0")
    ax.barh([i + h / 2 for i in y], torch, h, label=f"PyTorch {r.get('torch') or ''}".strip(),
            color="#dd6b20")
    same = [(i, 100.0 * r["cases"][n]["bytes"] / r["cases"][n]["same_size_copy_ms"] / 1e6
             / r["copy_gbs"]) for i, n in enumerate(names) if "same_size_copy_ms" in r["cases"][n]]
    if same:
        ax.scatter([p for _, p in same], [i for i, _ in same], marker="|", s=160, color="black",
                   zorder=3, label="copy of the same bytes")
    ax.axvline(100, color="gray", lw=0.8, ls="--")
    ax.set_yticks(list(y))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("% of device-to-device copy bandwidth (bytes read + written)")
    ax.set_title(f"{r['device']}, {r['date']}: copy {r['copy_gbs']:.0f} GB/s", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
