#!/usr/bin/env python3
"""Upload and download of one float32 array from the Python client over the socket: grpcio
alone against the native library (TENSORCOMPUTE_NATIVE_LIB) spread over --connections.
Medians of --reps; every download is checked against the array uploaded.

    TENSORCOMPUTE_NATIVE_LIB=build/client/libtensorcompute_native.so PYTHONPATH=<package> \\
      python3 bench/python_updown.py --server_binary build/server/tensorcompute-server --backend=cuda
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_bench import start_server  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server_binary", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--connections", type=int, default=8)
    args = ap.parse_args()
    import tensorcompute_client as tcc

    proc, target = start_server(args.server_binary, args.backend,
                                ["--max_message_bytes=1073741824"])
    try:
        x = np.random.default_rng().standard_normal(args.mib << 18, dtype=np.float32)
        print(f"| {args.mib} MiB float32 | upload | download |\n|---|---|---|")
        for name, native in (("grpcio", False),
                             (f"native library, {args.connections} connections", True)):
            c = tcc.Client(target, shared_memory=False, native=native,
                           connections=args.connections, max_message_bytes=1 << 30, timeout=600)
            up, down = [], []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                r = c.upload(x)
                up.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                y = c.download(r)
                down.append(time.perf_counter() - t0)
                if not np.array_equal(x, y):
                    raise SystemExit(f"{name}: the download differs from the upload")
                c.release(r)
            u, d = statistics.median(up), statistics.median(down)
            print(f"| {name} | {x.nbytes / u / 1e9:.2f} GB/s ({u:.3f} s) "
                  f"| {x.nbytes / d / 1e9:.2f} GB/s ({d:.3f} s) |")
            c.close()
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
