#!/usr/bin/env python3
"""An element-wise chain over a Dask array, summed: Dask alone (NumPy in its threads) against
the same graph with the chain sent to 1 and 2 tensorcompute servers (tensorcompute_client.dask,
one expression per chunk). The array is made by Dask (random numbers, chunk by chunk) and never
held whole, so it may be larger than memory.

    bench/dask_bench.py --server_binary build/server/tensorcompute-server [--backend cpu]
        [--gib 4] [--chunk_mib 64] [--servers 0,1,2] [--reps 2] [--json out.json]
"""
import argparse
import json
import os
import time

import numpy as np

from python_bench import start_server, stop_servers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server_binary", required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--devices", default="", help="cuda: comma-separated, one server each")
    p.add_argument("--gib", type=float, default=4)
    p.add_argument("--chunk_mib", type=int, default=64)
    p.add_argument("--servers", default="0,1,2")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--json", default="")
    args = p.parse_args()
    import dask
    import dask.array as da
    from tensorcompute_client.dask import Pool, on_servers

    cols = 1 << 14
    rows_per_chunk = max(1, (args.chunk_mib << 20) // (4 * cols))
    rows = int(args.gib * (1 << 30)) // (4 * cols) // rows_per_chunk * rows_per_chunk
    gib = rows * cols * 4 / (1 << 30)
    dask.config.set(scheduler="threads")
    x = da.random.RandomState(7).random_sample((rows, cols), chunks=(rows_per_chunk, cols))
    x = x.astype(np.float32)
    chain = da.sqrt(x * x + 1) - 0.5
    print(f"# dask: sum(sqrt(x * x + 1) - 0.5), x float32[{rows}, {cols}] ({gib:.2f} GiB, "
          f"{x.npartitions} chunks of {args.chunk_mib} MiB) made by Dask; threads scheduler, "
          f"{os.cpu_count()} cores; best of {args.reps}")
    print("| computed by | s | GiB/s of x | sum |")
    print("|---|---:|---:|---:|")
    rows_out, reference = [], None
    for n in [int(s) for s in args.servers.split(",")]:
        servers = []
        try:
            if n > 0:
                devices = [d for d in args.devices.split(",") if d]
                for i in range(n):
                    flags = [f"--devices={devices[i % len(devices)]}"] if devices else []
                    servers.append(start_server(args.server_binary, args.backend, flags,
                                                quiet=True))
                y = on_servers(Pool([t for _, t in servers]), chain)
                assert y is not chain
                name = f"{n} server{'s' if n > 1 else ''} ({args.backend})"
            else:
                y = chain
                name = "Dask alone (NumPy)"
            best, total = None, None
            for _ in range(args.reps):
                start = time.perf_counter()
                total = float(y.sum(dtype=np.float64).compute())
                t = time.perf_counter() - start
                best = t if best is None else min(best, t)
            if reference is None:
                reference = total
            elif abs(total - reference) > 1e-5 * abs(reference):
                raise SystemExit(f"{name}: sum {total} differs from {reference}")
            print(f"| {name} | {best:.2f} | {gib / best:.2f} | {total:.6g} |", flush=True)
            rows_out.append({"by": name, "seconds": best, "gib_per_s": gib / best, "sum": total})
        finally:
            stop_servers(servers)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gib": gib, "chunk_mib": args.chunk_mib, "cores": os.cpu_count(),
                       "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main()
