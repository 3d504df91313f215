#!/usr/bin/env python3
"""The Python client's data path, end to end: a float32 add of two inputs of --mib MiB each,
timed from the call until the result is in the caller's array, in the modes a Python user
meets:

- socket: plain NumPy arrays over gRPC (shared_memory=False) through grpcio alone
  (native=False), unary or ComputeStream;
- native: the same over gRPC through libtensorcompute_native (the C++ client library,
  native=True; TENSORCOMPUTE_NATIVE_LIB names it), spread over --connections connections;
- shared memory, copy: plain NumPy arrays, copied by the client into a scratch region, the
  result copied out into a new array (what Client.compute does by itself on the same host);
- shared memory: inputs in shared arrays (Client.shared_array), result into a shared array
  (out=): no tensor byte is copied by the client;
- cuda ipc: torch.cuda tensors shared with the server through CUDA IPC, computed in place
  (into out=, or a new torch.cuda tensor), beside the same add by PyTorch in this process.

GB/s counts 2 inputs + 1 output. Starts its own server (--server_binary) unless --target is
given, and prints a Markdown table (and --json). Every result is checked against NumPy."""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def wait_port(proc, port_file, what="the server"):
    """The port `proc` wrote to `port_file` once it serves (the other benchmarks use it too)."""
    deadline = time.time() + 60
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return int(f.read())


def start_server(binary, backend, extra, quiet=False, metrics=False, env=None):
    """(process, "127.0.0.1:PORT"). quiet: the server's output goes nowhere and it runs in a
    session of its own (stop it with os.killpg), so it cannot hold the caller's pipes open.
    metrics: /metrics on a port of its own (ServerInfo.metrics_port)."""
    port_file = os.path.join(tempfile.mkdtemp(prefix="tc-bench-"), "port")
    more = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True) if quiet else {}
    proc = subprocess.Popen([binary, "--address=127.0.0.1", "--port=0", f"--port_file={port_file}",
                             f"--metrics_port={0 if metrics else -1}", f"--backend={backend}",
                             *extra], env=env, **more)
    return proc, f"127.0.0.1:{wait_port(proc, port_file)}"


def stop_servers(servers, timeout=60):
    """SIGTERM to every (process, target) of `servers` at once, then waits for each."""
    for proc, _ in servers:
        proc.send_signal(signal.SIGTERM)
    for proc, _ in servers:
        proc.wait(timeout)


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
    ap.add_argument("--server_flags", default="", help="more server flags, comma-separated")
    ap.add_argument("--unix", action="store_true",
                    help="the same-host modes call over a Unix socket (--unix_socket) instead of "
                         "loopback TCP")
    ap.add_argument("--mib", default="64,256")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="socket,native,shared memory copy,shared memory,cuda ipc")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    import tensorcompute_client as tcc

    proc = None
    target = args.target
    local = target
    if target is None:
        flags = ["--max_message_bytes=1073741824"] + [f for f in args.server_flags.split(",") if f]
        if args.unix:
            path = os.path.join(tempfile.mkdtemp(prefix="tc-bench-"), "grpc.sock")
            flags.append(f"--unix_socket={path}")
        proc, target = start_server(args.server_binary, args.backend, flags)
        local = f"unix://{path}" if args.unix else target
    rows = []
    registration = {}
    try:
        socket_client = tcc.Client(target, shared_memory=False, native=False,
                                   max_message_bytes=1 << 30, timeout=600)
        native_client = None
        if "native" in args.modes.split(","):
            native_client = tcc.Client(target, shared_memory=False, native=True,
                                       connections=args.connections,
                                       max_message_bytes=1 << 30, timeout=600)
        shm_client = tcc.Client(local, shared_memory=True, max_message_bytes=1 << 30,
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
                runs["socket, grpcio"] = lambda: socket_client.compute("add", a, b)
            if native_client is not None:
                runs[f"socket, native library, {args.connections} connections"] = (
                    lambda: native_client.compute("add", a, b))
            if "shared memory copy" in modes:
                runs["shared memory, copy in and out"] = lambda: shm_client.compute("add", a, b)
            if "shared memory" in modes:
                # What registering a region of this size costs (memfd, mapping, and on a GPU
                # pinning it), apart from any compute.
                reg = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    r = shm_client.region(n * 4)
                    reg.append(time.perf_counter() - t0)
                    r.close()
                registration[mib] = statistics.median(reg)
                print(f"python {mib} MiB region registration: {registration[mib] * 1e3:.1f} ms",
                      file=sys.stderr)
                sa = shm_client.shared_array((n,), np.float32)
                sb = shm_client.shared_array((n,), np.float32)
                so = shm_client.shared_array((n,), np.float32)
                sa[:] = a
                sb[:] = b
                # The first call pins the regions on a GPU: not part of a steady state.
                shm_client.compute("add", sa, sb, out=so)
                runs["shared memory"] = lambda: shm_client.compute("add", sa, sb, out=so)
            if "cuda ipc" in modes and args.backend == "cuda":
                import torch
                ga = torch.from_numpy(a).cuda()
                gb = torch.from_numpy(b).cuda()
                go = torch.empty_like(ga)
                shm_client.compute("add", ga, gb, out=go)  # Registers the allocations once.
                runs["cuda ipc, out="] = lambda: shm_client.compute("add", ga, gb, out=go)
                runs["cuda ipc, new output"] = lambda: shm_client.compute("add", ga, gb)

                def in_process():
                    torch.add(ga, gb, out=go)
                    torch.cuda.synchronize()
                    return go
                runs["torch in this process (reference)"] = in_process
            for mode, fn in runs.items():
                got = fn()
                if hasattr(got, "is_cuda"):
                    got = got.cpu().numpy()
                if not np.array_equal(got, expect):
                    raise SystemExit(f"{mode} {mib} MiB: wrong result")
                s = timed(fn, args.reps * (10 if "cuda" in mode or "torch" in mode else 1))
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
          "GB/s counts 2 inputs + 1 output; median of", args.reps, "(of", 10 * args.reps,
          "for the GPU-resident modes); the socket mode over loopback TCP, the others over",
          "a Unix socket\n" if args.unix else "loopback TCP\n")
    print("| MiB per input | mode | seconds | GB/s |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['mib']} | {r['mode']} | {r['seconds']:.4f} | {r['gbps']:.2f} |")
    for mib, s in registration.items():
        print(f"\nRegistering a region of {mib} MiB (memfd, mapping, pinning on a GPU): "
              f"{s * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "device": device, "label": args.label,
                       "python": sys.version.split()[0], "rows": rows,
                       "registration_seconds": registration}, f, indent=2)


if __name__ == "__main__":
    main()
