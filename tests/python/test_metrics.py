#!/usr/bin/env python3
"""Scrapes the server's /metrics endpoint and parses it with the Prometheus client library's
own text-format parser (Debian's python3-prometheus-client), after real traffic."""
import argparse
import os
import signal
import sys
import time
import unittest
import urllib.request

import grpc
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc
from harness import start_server, stop_server

ARGS = None


def f32(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    return pb.Tensor(dtype=pb.float32, shape=a.shape, data=a.tobytes())


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(ARGS.server)
        cls.channel = grpc.insecure_channel(cls.target)
        cls.stub = pb_grpc.TensorServiceStub(cls.channel)
        cls.metrics_port = cls.stub.ServerInfo(pb.ServerInfoRequest(), timeout=10).metrics_port

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def scrape(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
            text = r.read().decode()
        # Raises on anything that is not valid exposition format.
        return {f.name: f for f in text_string_to_metric_families(text)}

    def test_scrape_after_traffic(self):
        a = np.arange(1024, dtype=np.float32)
        for _ in range(5):
            self.stub.Compute(pb.ComputeRequest(op="add", inputs=[f32(a), f32(a)]), timeout=10)
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.Compute(pb.ComputeRequest(op="no_such_op", inputs=[f32(a)]), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        up = self.stub.Upload(iter([pb.UploadRequest(header=pb.UploadHeader(tensor=f32(a)))]),
                              timeout=10)

        families = self.scrape()
        requests = families["tensorcompute_requests"]
        self.assertEqual(requests.type, "counter")
        counts = {(s.labels["method"], s.labels["op"], s.labels["code"]): s.value
                  for s in requests.samples if s.name.endswith("_total")}
        self.assertEqual(counts[("Compute", "add", "OK")], 5)
        self.assertEqual(counts[("Compute", "no_such_op", "INVALID_ARGUMENT")], 1)
        self.assertEqual(counts[("Upload", "", "OK")], 1)

        latency = families["tensorcompute_request_duration_seconds"]
        self.assertEqual(latency.type, "histogram")
        add = [s for s in latency.samples if s.labels.get("op") == "add"]
        count = [s.value for s in add if s.name.endswith("_count")]
        self.assertEqual(count, [5])
        inf = [s.value for s in add if s.labels.get("le") == "+Inf"]
        self.assertEqual(inf, [5])

        received = {s.labels["method"]: s.value
                    for s in families["tensorcompute_received_bytes"].samples}
        self.assertEqual(received["Compute"], 5 * 2 * 4096 + 4096)
        self.assertEqual(received["Upload"], 4096)

        memory = families["tensorcompute_device_memory_in_use_bytes"].samples
        self.assertEqual(len(memory), 1)
        self.assertEqual(memory[0].labels["kind"], "cpu")
        self.assertGreaterEqual(memory[0].value, 4096)  # The resident tensor.
        budget = families["tensorcompute_device_memory_budget_bytes"].samples[0].value
        self.assertGreater(budget, 0)
        self.assertIn("tensorcompute_device_requests_in_flight", families)
        self.assertEqual(families["tensorcompute_resident_tensors"].samples[0].value, 1)
        self.assertEqual(families["tensorcompute_resident_bytes"].samples[0].value, 4096)
        # The heap as the server's allocator counts it; no samples where it cannot
        # (AddressSanitizer's malloc).
        heap = {s.labels["state"]: s.value for s in families["tensorcompute_heap_bytes"].samples}
        if heap:
            self.assertGreaterEqual(heap["allocated"], 4096)  # At least the resident tensor.
            self.assertGreaterEqual(heap["free"], 0)
        shared = {s.labels["state"]: s.value
                  for s in families["tensorcompute_shared_memory_bytes"].samples}
        self.assertEqual(shared["registered"], 0)
        self.assertGreater(shared["limit"], 0)
        self.assertEqual(families["tensorcompute_region_connections"].samples[0].value, 0)

        self.stub.Release(pb.ReleaseRequest(handles=[up.tensor.handle]), timeout=10)
        families = self.scrape()
        self.assertEqual(families["tensorcompute_resident_tensors"].samples[0].value, 0)
        # Storage goes back when its last reference does, which a request's completion may
        # drop just after its response went out (seen under the sanitizers): wait a little.
        deadline = time.monotonic() + 5
        in_use = families["tensorcompute_device_memory_in_use_bytes"].samples[0].value
        while in_use != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            in_use = self.scrape()["tensorcompute_device_memory_in_use_bytes"].samples[0].value
        self.assertEqual(in_use, 0)

    def test_other_paths_and_methods(self):
        url = f"http://127.0.0.1:{self.metrics_port}/nothing"
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=10)
        self.assertEqual(e.exception.code, 404)
        req = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                     data=b"x", method="POST")
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        self.assertEqual(e.exception.code, 405)


class WorkerMetricsTest(unittest.TestCase):
    """With a worker process per device, a worker that dies is counted: the device's failed
    gauge while it is replaced, its restarts counter once it serves again."""

    def test_a_replaced_worker_is_counted(self):
        proc, target = start_server(ARGS.server, "--device_workers", "--test_cpu_devices=2")
        try:
            with grpc.insecure_channel(target) as channel:
                stub = pb_grpc.TensorServiceStub(channel)
                info = stub.ServerInfo(pb.ServerInfoRequest(), timeout=10)
                self.assertEqual(len(info.devices), 2)
                pids = [d.worker_pid for d in info.devices]
                self.assertTrue(all(p > 0 for p in pids), pids)
                url = f"http://127.0.0.1:{info.metrics_port}/metrics"

                def restarts():
                    with urllib.request.urlopen(url, timeout=10) as r:
                        text = r.read().decode()
                    families = {f.name: f for f in text_string_to_metric_families(text)}
                    family = families["tensorcompute_device_restarts"]
                    self.assertEqual(family.type, "counter")
                    return {s.labels["device"]: s.value for s in family.samples}

                self.assertEqual(restarts(), {"0": 0, "1": 0})
                os.kill(pids[1], signal.SIGKILL)
                deadline = time.monotonic() + 30
                while restarts()["1"] < 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertEqual(restarts(), {"0": 0, "1": 1})
                info = stub.ServerInfo(pb.ServerInfoRequest(), timeout=10)
                self.assertEqual(info.devices[0].worker_pid, pids[0])
                self.assertNotIn(info.devices[1].worker_pid, (0, pids[1]))
                # Both devices compute again.
                a = np.arange(100, dtype=np.float32)
                for device in (0, 1):
                    up = stub.Upload(iter([pb.UploadRequest(header=pb.UploadHeader(
                        tensor=f32(a), device=device))]), timeout=10)
                    self.assertEqual(up.device, device)
                    out = stub.Compute(pb.ComputeRequest(
                        op="add", inputs=[pb.Tensor(handle=up.tensor.handle), f32(a)]), timeout=10)
                    got = np.frombuffer(out.output.data, np.float32)
                    np.testing.assert_array_equal(got, a + a)
        finally:
            stop_server(proc)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
