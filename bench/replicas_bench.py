#!/usr/bin/env python3
"""Throughput of 1, 2 and 3 replicas on one machine: small unary Computes (a float32 add of
two 1024-element vectors) driven by h2load (Debian's nghttp2-client), through nginx in front
(deploy/nginx/tensorcompute.conf) and straight to the replicas (one h2load per replica, the
connections split evenly: what a client that balances per call gets). Every call's gRPC status
is read back from the servers' /metrics (h2load sees only HTTP statuses): a run with a call
that did not end OK fails. (A fixed count of calls, not a duration: at a deadline h2load cuts
the requests it is sending, which the servers rightly refuse.)

    bench/replicas_bench.py --server_binary build/server/tensorcompute-server \
        [--replicas 1,2,3] [--calls 150000] [--connections 16] [--streams 8] [--json out.json]
"""
import argparse
import json
import os
import platform
import re
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc
import numpy as np

from python_bench import start_server, stop_servers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "deploy", "nginx"))
import balancer  # noqa: E402  deploy/nginx/balancer.py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def metrics_port(target, pb, pb_grpc):
    with grpc.insecure_channel(target) as ch:
        return pb_grpc.TensorServiceStub(ch).ServerInfo(pb.ServerInfoRequest(), timeout=10).metrics_port


def compute_counts(port):
    """{code: finished Compute calls} from a server's /metrics."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for m in re.finditer(r'tensorcompute_requests_total\{method="([^"]*)",op="[^"]*",'
                         r'code="([^"]*)"\} (\d+)', body):
        if m.group(1).endswith("Compute"):
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(3))
    return out


def h2load(target, body_file, calls, connections, streams):
    cmd = ["h2load", "-n", str(calls), "-c", str(connections), "-m", str(streams),
           "-d", body_file, "-H", "content-type: application/grpc", "-H", "te: trailers",
           f"http://{target}/tensorcompute.v1.TensorService/Compute"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def parse_h2load(out):
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
    if m is None:
        raise RuntimeError("h2load output not understood:\n" + out[-2000:])
    return int(m.group(2)), int(m.group(3))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server_binary", required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--server_flags", default="", help="comma-separated")
    p.add_argument("--replicas", default="1,2,3")
    p.add_argument("--calls", type=int, default=150000, help="per run, over all replicas")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--streams", type=int, default=8, help="concurrent calls per connection")
    p.add_argument("--elements", type=int, default=1024)
    p.add_argument("--nginx", default=balancer.find_nginx())
    p.add_argument("--json", default="")
    args = p.parse_args()
    # The client package's stubs (pip install client/python).
    from tensorcompute_client.v1 import tensor_service_pb2 as pb
    from tensorcompute_client.v1 import tensor_service_pb2_grpc as pb_grpc

    rng = np.random.default_rng(1)
    a = rng.standard_normal(args.elements).astype(np.float32)
    b = rng.standard_normal(args.elements).astype(np.float32)
    req = pb.ComputeRequest(op="add", inputs=[
        pb.Tensor(dtype=pb.float32, shape=[args.elements], data=a.tobytes()),
        pb.Tensor(dtype=pb.float32, shape=[args.elements], data=b.tobytes())])
    msg = req.SerializeToString()
    body = tempfile.NamedTemporaryFile(prefix="tc-body-", delete=False)
    body.write(b"\0" + struct.pack(">I", len(msg)) + msg)
    body.close()
    extra = [f for f in args.server_flags.split(",") if f]
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print(f"# replicas: {os.cpu_count()} cores ({cpu}), {platform.node()}; h2load "
          f"-c {args.connections} -m {args.streams}, {args.calls} calls a run; "
          f"add float32[{args.elements}] x2, backend {args.backend}", flush=True)
    print("| replicas | way | calls/s | calls | s | h2load failed | not OK at the servers |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    rows = []
    for n in [int(x) for x in args.replicas.split(",")]:
        servers = [start_server(args.server_binary, args.backend, extra, quiet=True, metrics=True)
                   for _ in range(n)]
        try:
            targets = [t for _, t in servers]
            ports = [metrics_port(t, pb, pb_grpc) for t in targets]
            # The answer is right before anything is timed.
            with grpc.insecure_channel(targets[0]) as ch:
                out = pb_grpc.TensorServiceStub(ch).Compute(req, timeout=10).output
            assert np.array_equal(np.frombuffer(out.data, np.float32), a + b)
            ways = [("direct", None)]
            if args.nginx is not None:
                ways.append(("nginx", "nginx"))
            for way, _ in ways:
                before = [compute_counts(port) for port in ports]
                nginx = None
                if way == "nginx":
                    nginx, front, prefix = balancer.start(args.nginx, targets)
                    runs = [h2load(front, body.name, args.calls, args.connections, args.streams)]
                else:
                    share = [args.connections // n + (1 if i < args.connections % n else 0)
                             for i in range(n)]
                    runs = [h2load(t, body.name, args.calls * c // args.connections, c,
                                   args.streams) for t, c in zip(targets, share) if c > 0]
                start = time.monotonic()
                outs = [r.communicate()[0] for r in runs]
                seconds = time.monotonic() - start
                if nginx is not None:
                    balancer.stop(nginx, prefix)
                done = [parse_h2load(o) for o in outs]
                calls = sum(d[0] for d in done)
                failed = sum(d[1] for d in done)
                after = [compute_counts(port) for port in ports]
                codes = {}
                for bf, af in zip(before, after):
                    for code, v in af.items():
                        if code != "OK" and v > bf.get(code, 0):
                            codes[code] = codes.get(code, 0) + v - bf.get(code, 0)
                not_ok = sum(codes.values())
                ok = sum(af.get("OK", 0) - bf.get("OK", 0) for bf, af in zip(before, after))
                rate = calls / seconds
                print(f"| {n} | {way} | {rate:.0f} | {calls} | {seconds:.2f} | {failed} | "
                      f"{not_ok} |", flush=True)
                rows.append({"replicas": n, "way": way, "calls_per_s": rate, "calls": calls,
                             "seconds": seconds, "h2load_failed": failed, "not_ok": not_ok,
                             "ok_at_servers": ok})
                if failed or not_ok:
                    raise SystemExit(f"calls failed: h2load {failed}, servers {codes}")
        finally:
            stop_servers(servers)
    os.unlink(body.name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "cores": os.cpu_count(), "connections": args.connections,
                       "streams": args.streams, "calls": args.calls,
                       "elements": args.elements, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
