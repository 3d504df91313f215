#!/usr/bin/env python3
"""What the Python client's failover defaults cost in the calm case: the same calls through
two or more installs of the client package (each a Python interpreter whose
tensorcompute_client is that install, e.g. a venv of the previous release and one of this
tree), and through this tree's client with its pings and per-try deadlines off, interleaved
round by round against the same servers, in one run.

Measured per client, against one server and against a list of three on the same host:
small calls (a float32 add of two 1024-element vectors, 4 KiB each) per second from 1 thread
and from 16, and the throughput of a 64 MiB float32 add (two inputs and the output counted,
GB/s) through the native library.

    bench/client_defaults_bench.py --server build/server/tensorcompute-server \\
        --client old=/tmp/old/bin/python --client new=/tmp/new/bin/python \\
        [--rounds 3] [--seconds 3] [--json out.json]

A client given as NAME=PYTHON:off runs with keepalive=0 and try_timeout=0 (both off).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from python_bench import start_server, stop_servers

# Run inside each client's interpreter: prints one JSON line of figures.
PROBE = r'''
import inspect, json, sys, threading, time
import numpy as np
import tensorcompute_client as tcc
target, seconds, off = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "off"
opts = dict(shared_memory=False)
if off:
    opts.update(keepalive=0, try_timeout=0)
accepted = inspect.signature(tcc.Client).parameters
opts = {k: v for k, v in opts.items() if k in accepted}
c = tcc.Client(target, **opts)
a = np.ones(1024, np.float32)
for _ in range(200):
    c.compute("add", a, a)

def rate(threads):
    count = [0] * threads
    stop = time.monotonic() + seconds
    def run(k):
        n = 0
        while time.monotonic() < stop:
            c.compute("add", a, a)
            n += 1
        count[k] = n
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    start = time.monotonic()
    for t in ts: t.start()
    for t in ts: t.join()
    return sum(count) / (time.monotonic() - start)

out = {"calls_per_s_1": rate(1), "calls_per_s_16": rate(16)}
big = np.ones(16 << 20, np.float32)
c.compute("add", big, big)
best = []
for _ in range(5):
    start = time.monotonic()
    r = c.compute("add", big, big)
    best.append(3 * big.nbytes / (time.monotonic() - start) / 1e9)
assert r[0] == 2
out["add_64mib_gb_per_s"] = max(best)
c.close()
print(json.dumps(out))
'''


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--client", action="append", required=True,
                   help="NAME=PYTHON or NAME=PYTHON:off")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--json", default="")
    args = p.parse_args()
    clients = []
    for spec in args.client:
        name, _, rest = spec.partition("=")
        python, _, mode = rest.partition(":")
        clients.append((name, python, mode or "on"))
    servers = [start_server(args.server, "cpu", [], quiet=True) for _ in range(3)]
    targets = {"one server": servers[0][1], "three listed": ",".join(t for _, t in servers)}
    results = {}
    try:
        for r in range(args.rounds):
            for where, target in targets.items():
                for name, python, mode in clients:
                    out = subprocess.run([python, "-c", PROBE, target, str(args.seconds), mode],
                                         capture_output=True, text=True, timeout=300,
                                         env=dict(os.environ, PYTHONWARNINGS="ignore"))
                    if out.returncode != 0:
                        sys.exit(f"{name}: {out.stderr[-2000:]}")
                    figures = json.loads(out.stdout.strip().splitlines()[-1])
                    for k, v in figures.items():
                        results.setdefault(where, {}).setdefault(name, {}).setdefault(
                            k, []).append(v)
                    print(f"round {r + 1} {where:13s} {name:10s} " +
                          "  ".join(f"{k} {v:.1f}" if v > 10 else f"{k} {v:.2f}"
                                    for k, v in figures.items()), flush=True)
    finally:
        stop_servers(servers)
    print("\nmedians over rounds:")
    for where, by in results.items():
        for name, figures in by.items():
            print(f"{where:13s} {name:10s} " + "  ".join(
                f"{k} {statistics.median(v):.2f}" for k, v in figures.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
