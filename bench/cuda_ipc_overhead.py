#!/usr/bin/env python3
"""Where a CUDA IPC call's time goes: a float32 add of two torch.cuda tensors into a third
(out=) through the Python client, against the same region request sent straight through the
native library (no Python around it) and through grpcio, with and without the client's own
torch.cuda.synchronize, and PyTorch's add in this process. Milliseconds, median of --reps.

    python3 bench/cuda_ipc_overhead.py --server_binary=build/server/tensorcompute-server

Needs PyTorch with a GPU and the native library (the installed package's, or
TENSORCOMPUTE_NATIVE_LIB)."""
import argparse
import os
import statistics
import sys
import time

from python_bench import start_server


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server_binary", required=True)
    ap.add_argument("--elements", default="7,67108864")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    import torch
    import tensorcompute_client as tcc
    from tensorcompute_client.v1 import tensor_service_pb2 as pb

    # Quiet: the server cannot hold this script's output open.
    proc, target = start_server(args.server_binary, "cuda", [], quiet=True)
    try:
        c = tcc.Client(target, native=True)
        state = c._shm()
        native = c._native()

        def med(fn):
            for _ in range(3):
                fn()
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times) * 1e3

        print("| elements | Client.compute | without the client's sync | native library, "
              "request alone | grpcio, request alone | PyTorch add + sync |")
        print("|---:|---:|---:|---:|---:|---:|")
        for n in [int(e) for e in args.elements.split(",")]:
            a = torch.randn(n, device="cuda")
            b = torch.randn(n, device="cuda")
            out = torch.empty_like(a)
            full = med(lambda: c.compute("add", a, b, out=out))
            sync = torch.cuda.synchronize
            torch.cuda.synchronize = lambda *x, **k: None
            try:
                unsynced = med(lambda: c.compute("add", a, b, out=out))
            finally:
                torch.cuda.synchronize = sync
            req = pb.ComputeRequest(op="add", inputs=[c._cuda_input(state, a),
                                                      c._cuda_input(state, b)])
            o = c._cuda_input(state, out)
            req.output_region, req.output_region_offset = o.region, o.region_offset
            raw = med(lambda: native.compute(req, [(0, 0), (0, 0)]))
            grpcio = med(lambda: c.stub.Compute(req, metadata=c.metadata))
            torch_add = med(lambda: (torch.add(a, b, out=out), torch.cuda.synchronize()))
            torch.testing.assert_close(out, a + b)
            print(f"| {n} | {full:.3f} | {unsynced:.3f} | {raw:.3f} | {grpcio:.3f} | "
                  f"{torch_add:.3f} |", flush=True)
        c.close()
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
