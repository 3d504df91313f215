#!/usr/bin/env python3
"""Replicas that lose no call: three servers on loopback, 64 client threads checking every
result, one replica drained (SIGTERM) and another killed (SIGKILL) while they run. Two ways
in: the Python client given the list of replicas (round_robin, retries on UNAVAILABLE,
client/replicas.h), and nginx in front (deploy/nginx/tensorcompute.conf) with the clients'
retry policy. Stateless calls must all succeed with the right result; a few threads hold a
resident tensor on their home replica, and only those whose home was stopped may fail
(counted and reported: their tensor went with it).

    test_replicas.py --server build/server/tensorcompute-server [--nginx /usr/sbin/nginx]
"""
import argparse
import os
import signal
import sys
import threading
import time
import unittest

import grpc
import numpy as np

import tensorcompute_client as tcc
from harness import start_server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "deploy", "nginx"))
import balancer  # noqa: E402  deploy/nginx/balancer.py

ARGS = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THREADS = 64
STATEFUL = 8      # of THREADS, each with a resident tensor on its home replica
CLIENTS = 16      # Client objects the stateless threads share (a channel each)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.wrong = 0
        self.errors = {}          # code -> count, stateless calls
        self.details = {}         # code -> one error's details
        self.stateful_ok = 0
        self.stateful_errors = {}  # home -> [codes]
        self.homes = []            # each stateful thread's home replica

    def error(self, code, details):
        with self.lock:
            self.errors[code] = self.errors.get(code, 0) + 1
            self.details.setdefault(code, details)


def stateless(client, stop, tally, seed):
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        n = int(rng.integers(1, 4096))
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        try:
            out = client.compute("add", a, b)
        except grpc.RpcError as e:
            tally.error(e.code().name, e.details())
            continue
        with tally.lock:
            if np.array_equal(out, a + b):
                tally.ok += 1
            else:
                tally.wrong += 1


def stateful(client, stop, tally, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(1000).astype(np.float32)
    try:
        resident = client.upload(x)
    except grpc.RpcError as e:
        with tally.lock:
            tally.stateful_errors.setdefault(client.home, []).append(e.code().name)
        return
    # The replica that holds it (the client's home when it was uploaded; a home that fails
    # is replaced for the next stateful call, the tensor stays where it was).
    home = resident.replica
    with tally.lock:
        tally.homes.append(home)
    while not stop.is_set():
        try:
            out = client.compute("mul", resident, np.array(2, dtype=np.float32))
        except grpc.RpcError as e:
            with tally.lock:
                tally.stateful_errors.setdefault(home, []).append(e.code().name)
            return  # its tensor is gone with its replica
        with tally.lock:
            if np.array_equal(out, x * 2):
                tally.stateful_ok += 1
            else:
                tally.wrong += 1
        time.sleep(0.01)


class TargetsTest(unittest.TestCase):
    def test_a_list_names_replicas_and_a_home(self):
        # docs/deployment.md's list (no call is made: nothing connects).
        c = tcc.Client("10.0.0.5:50051,10.0.0.6:50051,10.0.0.7:50051", native=False)
        self.assertEqual(c.replicas, ["10.0.0.5:50051", "10.0.0.6:50051", "10.0.0.7:50051"])
        self.assertIn(c.home, c.replicas)
        c.close()
        one = tcc.Client("127.0.0.1:1", native=False)
        self.assertEqual((one.replicas, one.home), (["127.0.0.1:1"], "127.0.0.1:1"))
        one.close()


class ReplicasTest(unittest.TestCase):
    def start_replicas(self):
        procs, targets = [], []
        for _ in range(3):
            p, t = start_server(ARGS.server, "--shutdown_grace_seconds=10")
            procs.append(p)
            targets.append(t)
        self.addCleanup(lambda: [p.kill() for p in procs if p.poll() is None])
        return procs, targets

    def run_scenario(self, name, target, procs, targets, stateful_target, native=False):
        tally = Tally()
        stop = threading.Event()
        clients = [tcc.Client(target, native=native, shared_memory=False)
                   for _ in range(CLIENTS)]
        homes = [tcc.Client(stateful_target, native=False, shared_memory=False)
                 for _ in range(STATEFUL)]
        threads = [threading.Thread(target=stateless, args=(clients[i % CLIENTS], stop, tally, i),
                                    daemon=True) for i in range(THREADS - STATEFUL)]
        threads += [threading.Thread(target=stateful, args=(homes[i], stop, tally, 1000 + i),
                                     daemon=True) for i in range(STATEFUL)]
        start = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(2)
        before = tally.ok
        procs[0].send_signal(signal.SIGTERM)      # drains, then exits
        time.sleep(2)
        procs[1].kill()                            # gone at once, calls in flight with it
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(60)
        seconds = time.monotonic() - start
        self.assertEqual(procs[0].wait(30), 0)
        for c in clients + homes:
            c.close()
        stopped = {targets[0], targets[1]}
        lost_stateful = {h: codes for h, codes in tally.stateful_errors.items()}
        home_index = [targets.index(h) if h in targets else h for h in tally.homes]
        print(f"{name}: {tally.ok} stateless calls in {seconds:.1f} s by {THREADS - STATEFUL} "
              f"threads ({before} before the first stop), {tally.wrong} wrong, errors "
              f"{tally.errors or 'none'}; stateful: {tally.stateful_ok} calls, threads that "
              f"lost their replica's tensor: "
              f"{sum(len(v) for v in lost_stateful.values())} "
              f"({', '.join(sorted(set(c for v in lost_stateful.values() for c in v))) or '-'}); "
              f"homes: replica {sorted(home_index)} (0 drained, 1 killed), lost on "
              f"{sorted(targets.index(h) if h in targets else h for h in lost_stateful)}",
              flush=True)
        self.assertEqual(tally.wrong, 0)
        self.assertEqual(tally.errors, {}, f"stateless calls were lost: {tally.details}")
        self.assertGreater(tally.ok, before)
        # Only sessions whose home replica stopped lost anything.
        for home in lost_stateful:
            self.assertIn(home, stopped | {stateful_target}, lost_stateful)

    def test_client_side_balancing(self):
        procs, targets = self.start_replicas()
        target = ",".join(targets)
        self.run_scenario("client list (grpcio)", target, procs, targets, target)

    def test_client_side_balancing_native(self):
        if not tcc.Client("127.0.0.1:1").native_available():
            self.skipTest("no native library")
        procs, targets = self.start_replicas()
        target = ",".join(targets)
        # Every compute through the C++ client library (client/replicas.h).
        self.run_scenario("client list (native)", target, procs, targets, target, native=True)

    def test_through_nginx(self):
        if ARGS.nginx is None:
            self.skipTest("nginx is not installed")
        procs, targets = self.start_replicas()
        nginx, target, prefix = balancer.start(ARGS.nginx, targets)
        self.addCleanup(balancer.stop, nginx, prefix)
        # Resident tensors need one replica per session: those clients get the list (and
        # keep to their home), as docs/deployment.md says.
        # The balanced clients see nginx as one replica: their retries go back through it.
        self.run_scenario("nginx", target, procs, targets, ",".join(targets))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--nginx", default=balancer.find_nginx())
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
