#!/usr/bin/env python3
"""Every stateless call survives replicas going away, whatever its size and road.

Three servers on loopback, each on a port of its own that it comes back to. 32 client
threads send stateless calls of every kind and size a user sends (small adds with
broadcasting, mixed dtypes, eval expressions, arrays of 1-4 MiB, now and then 16-64 MiB),
each result checked against NumPy, through every road the Python client has (grpcio, the
native library, spread over connections, shared-memory regions), through the C++ client
library given the list itself, and through nginx in front,
while the replicas are restarted the way an operator rolls out a version: one drained
(SIGTERM) and started again on its port, one killed (SIGKILL) and started again, two down at
the same moment for two seconds with one left serving, then one frozen (SIGSTOP) for longer
than the client's bound and let go (SIGCONT). Then the same for a Dask computation over the
three servers, checked against NumPy, computed again and again while they restart one by one.

Held: no stateless call lost or wrong; no raw OS error (every failure is a grpc.RpcError); no
call longer than the documented bound; each restarted replica serving again before the end.

    test_rolling_restart.py --server build/server/tensorcompute-server [--nginx PATH]
                            [--json results.json] [--backend cpu]
"""
import argparse
import inspect
import json
import os
import signal
import sys
import threading
import time
import unittest
import urllib.request

import grpc
import numpy as np

import tensorcompute_client as tcc
from harness import start_server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "deploy", "nginx"))
import balancer  # noqa: E402  deploy/nginx/balancer.py

ARGS = None
MiB = 1 << 20
# The client's defaults (Client's docstring, docs/deployment.md): a frozen replica's calls move
# within keepalive + keepalive_timeout (1 + 2 s); each try ends by its per-try deadline,
# try_timeout (5 s) plus its bytes at 10 MB/s. A call may meet one frozen or dying replica
# and then run in full elsewhere: the bound held below. Through a balancer, which answers
# pings itself and may send a retry to the frozen replica again, a try can take the whole
# per-try deadline: two such tries are allowed there.
KEEPALIVE, KEEPALIVE_TIMEOUT, TRY_TIMEOUT, TRY_RATE = 1.0, 2.0, 5.0, 10e6


def call_bound(nbytes: int, road: str = "") -> float:
    per_try = TRY_TIMEOUT + nbytes / TRY_RATE
    if road == "nginx":
        return KEEPALIVE + KEEPALIVE_TIMEOUT + 2 * per_try + nbytes / TRY_RATE
    return KEEPALIVE + KEEPALIVE_TIMEOUT + per_try + nbytes / TRY_RATE


class Fleet:
    """Three replicas, each started again on its own port when stopped."""

    def __init__(self, n=3):
        self.procs, self.targets, self.ports = [], [], []
        self.restarted = []   # (replica, instance) of each process started after the first
        for _ in range(n):
            p, t = start_server(ARGS.server, *self.flags())
            self.procs.append(p)
            self.targets.append(t)
            self.ports.append(int(t.rsplit(":", 1)[1]))
        self.lock = threading.Lock()
        self.exits = []       # exit codes of drained replicas

    @staticmethod
    def flags():
        return ["--shutdown_grace_seconds=10", f"--backend={ARGS.backend}"]

    def start(self, i):
        p, _ = start_server(ARGS.server, *self.flags(), port=self.ports[i])
        with self.lock:
            self.procs[i] = p

    def drain(self, i):
        self.procs[i].send_signal(signal.SIGTERM)
        self.exits.append(self.procs[i].wait(30))

    def kill(self, i):
        self.procs[i].kill()
        self.procs[i].wait(30)

    def freeze(self, i, seconds):
        os.kill(self.procs[i].pid, signal.SIGSTOP)
        time.sleep(seconds)
        os.kill(self.procs[i].pid, signal.SIGCONT)

    def computes_served(self, i) -> int:
        """Compute calls the process now behind replica i has answered (its metrics)."""
        c = tcc.Client(self.targets[i], native=False, shared_memory=False)
        try:
            port = c.server_info().metrics_port
        finally:
            c.close()
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        total = 0
        for line in text.decode().splitlines():
            if line.startswith("tensorcompute_requests_total{") and 'method="Compute"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()
                p.wait()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = {}       # road -> calls answered right
        self.wrong = []
        self.errors = {}      # (road, code) -> count
        self.details = {}
        self.raw = {}         # exception type -> count (not a grpc.RpcError)
        self.slowest = {}     # road -> (seconds, bytes, kind)
        self.over_bound = []
        self.t0 = time.monotonic()
        self.failed_at = {}   # (road, code) -> seconds since the start, of each failure

    def record(self, road, kind, nbytes, seconds, outcome, detail=""):
        with self.lock:
            if outcome == "ok":
                self.calls[road] = self.calls.get(road, 0) + 1
            elif outcome == "wrong":
                self.wrong.append((road, kind, nbytes))
            elif outcome.startswith("raw:"):
                self.raw[outcome[4:]] = self.raw.get(outcome[4:], 0) + 1
                self.details.setdefault(outcome, detail)
            else:
                key = f"{road}:{outcome}"
                self.errors[key] = self.errors.get(key, 0) + 1
                self.failed_at.setdefault(key, []).append(round(time.monotonic() - self.t0, 2))
                self.details.setdefault(key, detail)
            if seconds > self.slowest.get(road, (0,))[0]:
                self.slowest[road] = (round(seconds, 3), nbytes, kind)
            if seconds > call_bound(nbytes, road):
                self.over_bound.append((road, kind, nbytes, round(seconds, 3)))


class CppClient:
    """compute() and eval() of arrays through the C++ client library itself, given the list
    of replicas (libtensorcompute_native's tcn_compute: client/client.h's Client, its own
    replica choice, retries, keepalive and spread)."""

    def __init__(self, target):
        from tensorcompute_client import client as tcc_client, native
        self._c = tcc_client
        self._native = native.NativeClient(target, 60.0, 256 << 20, 1 << 20, None, 4,
                                           8 * MiB)

    def _run(self, what, inputs):
        from tensorcompute_client.v1 import tensor_service_pb2 as pb
        spans = [self._c._span(x) for x in inputs]
        request = pb.ComputeRequest(**what, inputs=[s.meta(storage_bytes=s.hi - s.lo)
                                                    for s in spans])
        t, raw = self._native.compute(request, [(s.lo, s.hi - s.lo) for s in spans])
        return self._c._array_over(t, raw, False)

    def compute(self, op, *inputs):
        return self._run({"op": op}, inputs)

    def eval(self, expression, *inputs):
        return self._run({"expression": expression}, inputs)

    def close(self):
        self._native.close()


def one_call(client, kind, rng):
    """(expected, got, bytes sent) of one stateless call of `kind`."""
    if kind == "small":
        n, m = int(rng.integers(1, 64)), int(rng.integers(1, 64))
        a = rng.standard_normal((n, m)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        return a + b, client.compute("add", a, b), a.nbytes + b.nbytes
    if kind == "mixed":
        n = int(rng.integers(1, 4096))
        a = rng.integers(-1000, 1000, n).astype(np.int16)
        b = rng.standard_normal(n).astype(np.float32)
        return a * b, client.compute("mul", a, b), a.nbytes + b.nbytes
    if kind == "eval":
        n = int(rng.integers(1, 8192))
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        return a * b + np.float32(1.5), client.eval("a * b + 1.5", a, b), a.nbytes + b.nbytes
    if kind in ("mid", "large"):
        lo, hi = (1 * MiB, 4 * MiB) if kind == "mid" else (16 * MiB, 64 * MiB)
        n = int(rng.integers(lo, hi)) // 8  # two float32 inputs
        a = rng.standard_normal(n, dtype=np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        if rng.integers(2):
            return a - b, client.compute("sub", a, b), 2 * a.nbytes
        return a * b + b, client.eval("a * b + b", a, b), 2 * a.nbytes
    raise ValueError(kind)


def worker(client, road, kinds, stop, tally, seed):
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        kind = kinds[int(rng.integers(len(kinds)))]
        start = time.monotonic()
        nbytes = 0
        try:
            expected, got, nbytes = one_call(client, kind, rng)
        except grpc.RpcError as e:
            tally.record(road, kind, nbytes, time.monotonic() - start, e.code().name,
                         e.details())
            continue
        except Exception as e:  # noqa: BLE001 - a raw error is what this test looks for
            tally.record(road, kind, nbytes, time.monotonic() - start,
                         f"raw:{type(e).__name__}", repr(e))
            continue
        seconds = time.monotonic() - start
        right = got.shape == expected.shape and np.array_equal(got, expected)
        tally.record(road, kind, nbytes, seconds, "ok" if right else "wrong")


class RollingRestartTest(unittest.TestCase):
    def setUp(self):
        self.fleet = Fleet()
        self.addCleanup(self.fleet.close)

    def test_stateless_calls_survive_a_rolling_restart(self):
        fleet = self.fleet
        listed = ",".join(fleet.targets)
        common = dict(keepalive=KEEPALIVE, keepalive_timeout=KEEPALIVE_TIMEOUT,
                      try_timeout=TRY_TIMEOUT, try_bytes_per_second=TRY_RATE)
        # (An older client without these runs with its own behaviour: a figure to compare.)
        known = inspect.signature(tcc.Client).parameters
        common = {k: v for k, v in common.items() if k in known}
        roads = {
            "grpcio": (dict(native=False, shared_memory=False), ["small", "mixed", "eval"], 6),
            "native": (dict(native=True, shared_memory=False),
                       ["small", "mixed", "eval", "mid"], 4),
            "shm": (dict(shared_memory=True), ["eval", "mid", "mid"], 6),
            "spread": (dict(native=True, shared_memory=False, spread_bytes=2 * MiB,
                            connections=4), ["mid", "mid", "small"], 4),
            "large": (dict(native=True, shared_memory=False), ["large"], 2),
        }
        clients = {road: tcc.Client(listed, **common, **opts)
                   for road, (opts, _, _) in roads.items()}
        if tcc.native.load() is not None:
            clients["c++"] = CppClient(listed)
            roads["c++"] = (None, ["small", "mixed", "eval", "mid"], 4)
        nginx = None
        if ARGS.nginx is not None:
            nginx, target, prefix = balancer.start(ARGS.nginx, fleet.targets)
            self.addCleanup(balancer.stop, nginx, prefix)
            # One connection: a call spread over several would reach several replicas.
            clients["nginx"] = tcc.Client(target, native=True, shared_memory=False,
                                          connections=1, **common)
            roads["nginx"] = (None, ["small", "mixed", "eval", "mid"], 6)
        for c in clients.values():
            self.addCleanup(c.close)
        tally = Tally()
        stop = threading.Event()
        threads = []
        seed = 0
        for road, (_, kinds, count) in roads.items():
            for _ in range(count):
                seed += 1
                threads.append(threading.Thread(
                    target=worker, args=(clients[road], road, kinds, stop, tally, seed),
                    daemon=True))
        timeline = []
        t0 = tally.t0

        def event(what):
            timeline.append((round(time.monotonic() - t0, 2), what))

        for t in threads:
            t.start()
        time.sleep(3)
        event("replica 0 SIGTERM")
        fleet.drain(0)
        event("replica 0 exited; started again")
        fleet.start(0)
        time.sleep(3)
        event("replica 1 SIGKILL")
        fleet.kill(1)
        fleet.start(1)
        event("replica 1 started again")
        time.sleep(3)
        event("replicas 2 (SIGKILL) and 0 (SIGTERM) at once")
        fleet.procs[0].send_signal(signal.SIGTERM)
        fleet.kill(2)
        time.sleep(2)
        fleet.exits.append(fleet.procs[0].wait(30))
        fleet.start(0)
        fleet.start(2)
        event("replicas 0 and 2 started again")
        time.sleep(3)
        event("replica 1 SIGSTOP for 7 s")
        fleet.freeze(1, 7)
        event("replica 1 SIGCONT")
        time.sleep(4)
        stop.set()
        for t in threads:
            t.join(120)
        event("load stopped")
        served = [fleet.computes_served(i) for i in range(3)]
        report = {
            "threads": len(threads),
            "calls": tally.calls, "total_calls": sum(tally.calls.values()),
            "wrong": len(tally.wrong), "errors": tally.errors, "raw_errors": tally.raw,
            "details": tally.details, "failed_at": tally.failed_at, "slowest": tally.slowest,
            "over_bound": tally.over_bound[:20], "drained_exit_codes": fleet.exits,
            "computes_served_since_last_start": served, "timeline": timeline,
        }
        print(json.dumps(report, indent=1), flush=True)
        if ARGS.json:
            with open(ARGS.json, "w") as f:
                json.dump({"rolling_restart": report}, f, indent=1)
        self.assertEqual(tally.wrong, [])
        self.assertEqual(tally.raw, {}, tally.details)
        self.assertEqual(tally.errors, {}, tally.details)
        self.assertEqual(tally.over_bound, [])
        self.assertEqual(fleet.exits, [0, 0])
        for i, n in enumerate(served):
            self.assertGreater(n, 0, f"replica {i} served nothing after it came back")

    def test_dask_over_the_pool_through_restarts(self):
        try:
            import dask
            import dask.array as da
        except ImportError:
            self.skipTest("no dask")
        from tensorcompute_client.dask import Pool, on_servers
        fleet = self.fleet
        pool = Pool(fleet.targets)
        rng = np.random.default_rng(7)
        x_np = rng.standard_normal((64 * 256, 512)).astype(np.float32)
        expected = np.sqrt(x_np * x_np + 1) - np.float32(0.5)
        x = da.from_array(x_np, chunks=(256, 512))  # 64 chunks
        y = on_servers(pool, da.sqrt(x * x + 1) - 0.5)
        self.assertTrue(hasattr(y, "tensorcompute_expression"))
        done, failed, wrong = [0], [], [0]
        stop = threading.Event()

        def loop():
            while not stop.is_set():
                try:
                    with dask.config.set(scheduler="threads", num_workers=8):
                        got = y.compute()
                except Exception as e:  # noqa: BLE001 - counted and reported
                    failed.append(repr(e)[:300])
                    continue
                if np.allclose(got, expected, rtol=1e-6, atol=1e-6):
                    done[0] += 1
                else:
                    wrong[0] += 1

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        time.sleep(2)
        fleet.drain(0)
        fleet.start(0)
        time.sleep(2)
        fleet.kill(1)
        fleet.start(1)
        time.sleep(2)
        fleet.drain(2)
        fleet.start(2)
        time.sleep(2)
        stop.set()
        t.join(120)
        print(f"dask: {done[0]} computations of 64 chunks right, {wrong[0]} wrong, "
              f"{len(failed)} failed {failed[:3]}", flush=True)
        if ARGS.json and os.path.exists(ARGS.json):
            with open(ARGS.json) as f:
                data = json.load(f)
            data["dask"] = {"computations": done[0], "wrong": wrong[0], "failed": len(failed)}
            with open(ARGS.json, "w") as f:
                json.dump(data, f, indent=1)
        self.assertEqual(failed, [])
        self.assertEqual(wrong[0], 0)
        self.assertGreater(done[0], 2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--nginx", default=balancer.find_nginx())
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--json", default="")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
