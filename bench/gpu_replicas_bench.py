#!/usr/bin/env python3
"""Two GPUs on one host: one server with both against two servers with one GPU each (clients
given both as replicas). The same load for each: --procs client processes, each with the
Python client (native transport) calling for --seconds, in two kinds of call:

- small: a float32 add of two 1024-element vectors, inline (calls/s);
- large: a float32 add of two --mib MiB vectors, inline (GB/s, 2 inputs + 1 output).

Every result is checked against NumPy. Prints a Markdown table (and --json).

    bench/gpu_replicas_bench.py --server_binary build/server/tensorcompute-server [--procs 8]
"""
import argparse
import json
import multiprocessing as mp
import os
import time

import numpy as np

from python_bench import start_server, stop_servers


def client_loop(target, kind, elements, seconds, start_at, out):
    import tensorcompute_client as tcc
    c = tcc.Client(target, native=True, shared_memory=False)
    rng = np.random.default_rng(os.getpid())
    a = rng.standard_normal(elements).astype(np.float32)
    b = rng.standard_normal(elements).astype(np.float32)
    want = a + b
    np.testing.assert_array_equal(c.compute("add", a, b), want)  # warm, and right
    while time.time() < start_at:
        time.sleep(0.001)
    calls = 0
    end = start_at + seconds
    while time.time() < end:
        r = c.compute("add", a, b)
        calls += 1
        if calls % 16 == 1 and not np.array_equal(r, want):
            out.put(("wrong", 0, c.home))
            return
    out.put(("ok", calls, c.home))


def run(target, kind, elements, procs, seconds):
    out = mp.Queue()
    start_at = time.time() + 5
    ps = [mp.Process(target=client_loop, args=(target, kind, elements, seconds, start_at, out))
          for _ in range(procs)]
    for p in ps:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join(30)
    if any(r[0] != "ok" for r in results):
        raise SystemExit(f"wrong results: {results}")
    homes = {}
    for r in results:
        homes[r[2]] = homes.get(r[2], 0) + 1
    return sum(r[1] for r in results) / seconds, sorted(homes.values())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server_binary", required=True)
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--json", default="")
    args = p.parse_args()
    large = (args.mib << 20) // 4
    setups = {
        "one server, both GPUs": [["--devices=all"]],
        "two servers, one GPU each": [["--devices=0"], ["--devices=1"]],
    }
    rows = []
    print(f"# {args.procs} client processes (Python client, native transport), "
          f"{args.seconds:g} s a run")
    # Large adds travel spread over several connections, which keeps them on the client's home
    # replica: the last column says how the processes' homes fell.
    print(f"| setup | small adds, calls/s | {args.mib} MiB adds, GB/s | clients per home |")
    print("|---|---:|---:|---|")
    for name, flag_sets in setups.items():
        servers = [start_server(args.server_binary, "cuda", f, quiet=True) for f in flag_sets]
        try:
            target = ",".join(t for _, t in servers)
            small, _ = run(target, "small", 1024, args.procs, args.seconds)
            big, homes = run(target, "large", large, args.procs, args.seconds)
            gbs = big * 3 * large * 4 / 1e9
            print(f"| {name} | {small:.0f} | {gbs:.2f} | {homes} |", flush=True)
            rows.append({"setup": name, "small_calls_per_s": small, "large_gb_per_s": gbs,
                         "large_calls_per_s": big, "large_clients_per_home": homes})
        finally:
            stop_servers(servers)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"procs": args.procs, "seconds": args.seconds, "mib": args.mib,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
