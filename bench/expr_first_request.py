#!/usr/bin/env python3
"""The first request for a new expression, through the server, as a client sees it: each of a
set of expressions over two float32 inputs is sent twice (the first request meets no compiled
kernel, the second finds it or still not), timed from the call to the result in a NumPy array,
and checked against NumPy. Starts its own server (--server_binary) for each
--expression_steps mode asked for, with kernels kept in memory only (every expression new),
and prints a Markdown table with the server's own counts from /metrics."""

import argparse
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

import numpy as np

EXPRESSIONS = [
    ("sigmoid(a * b + 1) * a", lambda a, b: a / (1 + np.exp(-(a * b + 1)))),
    ("tanh(a) * b - 2", lambda a, b: np.tanh(a) * b - 2),
    ("exp(-a * a) + b", lambda a, b: np.exp(-a * a) + b),
    ("where(a > b, a, b * 0.5)", lambda a, b: np.where(a > b, a, b * np.float32(0.5))),
    ("clamp(a * b, min=0, max=6)", lambda a, b: np.clip(a * b, 0, 6)),
    ("log1p(abs(a)) / (b * b + 1)", lambda a, b: np.log1p(np.abs(a)) / (b * b + 1)),
    ("a * 3 + b", lambda a, b: a * 3 + b),
    ("sqrt(abs(a - b)) * 0.5", lambda a, b: np.sqrt(np.abs(a - b)) * np.float32(0.5)),
    ("maximum(a, b) - minimum(a, b)", lambda a, b: np.maximum(a, b) - np.minimum(a, b)),
    ("cos(a) * sin(b) + a", lambda a, b: np.cos(a) * np.sin(b) + a),
]


def start_server(binary, flags):
    port_file = os.path.join(tempfile.mkdtemp(prefix="tc-first-"), "port")
    with socket.socket() as s:  # a free port for /metrics
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--address=127.0.0.1", "--port=0", f"--port_file={port_file}",
                             f"--metrics_port={metrics_port}", "--kernel_cache_dir=", *flags])
    deadline = time.time() + 120
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("server did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        port = int(f.read())
    return proc, f"127.0.0.1:{port}", metrics_port


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server_binary", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--modes", default="never,while_compiling")
    ap.add_argument("--elements", type=int, default=1 << 16)
    args = ap.parse_args()
    import tensorcompute_client as tcc

    rng = np.random.default_rng(7)
    a = rng.standard_normal(args.elements, dtype=np.float32)
    b = rng.standard_normal(args.elements, dtype=np.float32)
    print(f"{len(EXPRESSIONS)} expressions over two float32 inputs of {args.elements} elements, "
          "each sent twice to a server started fresh (kernels in memory only):\n")
    print("| --expression_steps | first request median ms | min | max | second request median ms "
          "| compiles | answered by steps | worst error vs NumPy |")
    print("|---|---|---|---|---|---|---|---|")
    rows, each = [], []
    for mode in args.modes.split(","):
        proc, target, metrics_port = start_server(
            args.server_binary, [f"--backend={args.backend}", f"--expression_steps={mode}"])
        try:
            c = tcc.Client(target, shared_memory=False, native=False, timeout=120)
            c.eval("a + b", a, b)  # the connection and the server's first request
            first, second, worst = [], [], 0.0
            for text, ref in EXPRESSIONS:
                expected = ref(a.astype(np.float64), b.astype(np.float64))
                for times in (first, second):
                    t0 = time.perf_counter()
                    got = c.eval(text, a, b)
                    times.append(1e3 * (time.perf_counter() - t0))
                    err = np.max(np.abs(got.astype(np.float64) - expected) / (1 + np.abs(expected)))
                    worst = max(worst, float(err))
            time.sleep(2)  # compilations started behind the steps finish
            compiles = metric(metrics_port, "tensorcompute_expression_compiles_total")
            stepwise = metric(metrics_port, "tensorcompute_expression_stepwise_total")
            rows.append(f"| {mode} | {statistics.median(first):.2f} | {min(first):.2f} | "
                        f"{max(first):.2f} | {statistics.median(second):.2f} | {compiles:.0f} | "
                        f"{stepwise:.0f} | {worst:.1e} |")
            print(rows[-1])
            each.append(f"- {mode}: " + ", ".join(
                f"`{text}` {ms:.1f}" for (text, _), ms in zip(EXPRESSIONS, first)))
            if worst > 1e-5:
                raise SystemExit(f"results differ from NumPy by {worst}")
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    print("\nEach first request, ms:\n")
    print("\n".join(each))


if __name__ == "__main__":
    main()
