#!/usr/bin/env python3
"""The Python client's data path, end to end: a float32 add of two inputs of --mib MiB each,
timed from the call until the result is in the caller's array, in the modes a Python user
meets:

- socket: plain NumPy arrays over gRPC (shared_memory=False), unary or ComputeStream;
- shared memory, copy: plain NumPy arrays, copied by the client into a scratch region, the
  result copied out into a new array (what Client.compute does by itself on the same host);
- shared memory: inputs in shared arrays (Client.shared_array), result into a shared array
  (out=): no tensor byte is copied by the client;
- cuda ipc is not here yet.

GB/s counts 2 inputs + 1 output. Starts its own server (--server_binary) unless --target is
given, and prints a Markdown table (and --json). Every result is checked against NumPy."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def start_server(binary, backend, extra):
    port_file = os.path.join(tempfile.mkdtemp(prefix="tc-bench-"), "port")
    proc = subprocess.Popen([binary, "--address=127.0.0.1", "--port=0", f"--port_file={port_file}",
                             "--metrics_port=-1", f"--backend={backend}", *extra])
    deadline = time.time() + 60
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("server did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, f"127.0.0.1:{int(f.read())}"


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server_binary")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--target")
    ap.add_argument("--mib", default="64,256")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="socket,shared memory copy,shared memory")
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    import tensorcompute_client as tcc

    proc = None
    target = args.target
    if target is None:
        proc, target = start_server(args.server_binary, args.backend,
                                    ["--max_message_bytes=1073741824"])
    rows = []
    try:
        socket_client = tcc.Client(target, shared_memory=False, max_message_bytes=1 << 30,
                                   timeout=600)
        shm_client = tcc.Client(target, shared_memory=True, max_message_bytes=1 << 30,
                                timeout=600)
        info = shm_client.server_info()
        device = info.devices[0].name if info.devices else info.backend
        modes = args.modes.split(",")
        rng = np.random.default_rng()
        for mib in [int(m) for m in args.mib.split(",")]:
            n = mib << 18
            a = rng.standard_normal(n, dtype=np.float32)
            b = rng.standard_normal(n, dtype=np.float32)
            expect = a + b
            runs = {}
            if "socket" in modes:
                runs["socket (gRPC)"] = lambda: socket_client.compute("add", a, b)
            if "shared memory copy" in modes:
                runs["shared memory, copy in and out"] = lambda: shm_client.compute("add", a, b)
            if "shared memory" in modes:
                sa = shm_client.shared_array((n,), np.float32)
                sb = shm_client.shared_array((n,), np.float32)
                so = shm_client.shared_array((n,), np.float32)
                sa[:] = a
                sb[:] = b
                # The first call pins the regions on a GPU: not part of a steady state.
                shm_client.compute("add", sa, sb, out=so)
                runs["shared memory"] = lambda: shm_client.compute("add", sa, sb, out=so)
            for mode, fn in runs.items():
                got = fn()
                if not np.array_equal(got, expect):
                    raise SystemExit(f"{mode} {mib} MiB: wrong result")
                s = timed(fn, args.reps)
                gbps = 3 * n * 4 / s / 1e9
                rows.append({"mib": mib, "mode": mode, "seconds": s, "gbps": gbps})
                print(f"python {mib} MiB {mode}: {s:.4f} s, {gbps:.2f} GB/s", file=sys.stderr)
        socket_client.close()
        shm_client.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    print(f"Python client benchmark: backend {args.backend} ({device}), {args.label}\n")
    print("float32 add of two inputs, from the call until the result is in the caller's array; "
          "GB/s counts 2 inputs + 1 output; median of", args.reps, "\n")
    print("| MiB per input | mode | seconds | GB/s |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['mib']} | {r['mode']} | {r['seconds']:.4f} | {r['gbps']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "device": device, "label": args.label,
                       "python": sys.version.split()[0], "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
