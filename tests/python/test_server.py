#!/usr/bin/env python3
"""Calls the real server from Python (Debian's python3-grpcio), compared against NumPy."""
import argparse
import os
import subprocess
import sys
import unittest

import grpc
import numpy as np

from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc
from tc_std import health_pb2, health_pb2_grpc, reflection_pb2, reflection_pb2_grpc
from harness import start_server, stop_server

ARGS = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tensor_of(a: np.ndarray) -> pb.Tensor:
    """A float32 view sent as its base storage plus element strides and offset."""
    assert a.dtype == np.float32
    base = a
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    base = np.ascontiguousarray(base)
    offset_bytes = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return pb.Tensor(dtype=pb.float32, shape=a.shape,
                     strides=[s // 4 for s in a.strides], offset=offset_bytes // 4,
                     data=base.tobytes())


def array_of(t: pb.Tensor) -> np.ndarray:
    flat = np.frombuffer(t.data, dtype=np.float32)
    return np.lib.stride_tricks.as_strided(
        flat[t.offset:], shape=tuple(t.shape), strides=tuple(s * 4 for s in t.strides)).copy()


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(ARGS.server)
        cls.channel = grpc.insecure_channel(cls.target)
        cls.stub = pb_grpc.TensorServiceStub(cls.channel)
        cls.health = health_pb2_grpc.HealthStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def assert_serving(self):
        r = self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)

    def compute(self, op, *arrays, **attrs):
        req = pb.ComputeRequest(op=op, inputs=[tensor_of(a) for a in arrays],
                                attributes={k: pb.Attribute(float_value=v) for k, v in attrs.items()})
        return array_of(self.stub.Compute(req, timeout=30).output)

    def test_empty_outputs_send_no_bytes(self):
        empty = pb.Tensor(dtype=pb.float32, shape=[3, 0])
        reply = self.stub.Compute(pb.ComputeRequest(op="neg", inputs=[empty]), timeout=30)
        self.assertEqual((list(reply.output.shape), reply.output.data), ([3, 0], b""))
        # Streamed: a header of no bytes and no chunk after it.
        replies = list(self.stub.ComputeStream(
            iter([pb.ComputeStreamRequest(header=pb.ComputeRequest(op="neg", inputs=[empty]))]),
            timeout=30))
        self.assertEqual(len(replies), 1, replies)
        self.assertEqual(list(replies[0].header.shape), [3, 0])
        self.assertEqual(replies[0].header.storage_bytes, 0)
        self.assert_serving()

    def test_bad_expression_steps_flag_stops_the_server(self):
        r = subprocess.run([ARGS.server, "--backend=cpu", "--port=0", "--metrics_port=-1",
                            "--expression_steps=sometimes"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--expression_steps: 'sometimes' is not while_compiling, never or always",
                      r.stderr)

    def test_grpc_args_flag(self):
        r = subprocess.run([ARGS.server, "--backend=cpu", "--port=0", "--metrics_port=-1",
                            "--grpc_args=grpc.http2.lookahead_bytes=lots"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn('--grpc_args: "grpc.http2.lookahead_bytes=lots" is not NAME=INTEGER',
                      r.stderr)
        # The arguments reach the server's connections: a server whose frames may be 16 MiB
        # and whose windows start at 8 MiB adds 16 MiB arrays right.
        proc, target = start_server(ARGS.server, "--grpc_args=grpc.http2.max_frame_size=16777215,"
                                                 "grpc.http2.lookahead_bytes=8388608")
        try:
            with grpc.insecure_channel(target, options=[
                    ("grpc.max_receive_message_length", 64 << 20),
                    ("grpc.max_send_message_length", 64 << 20)]) as channel:
                a = np.arange(4 << 20, dtype=np.float32)
                req = pb.ComputeRequest(op="add", inputs=[tensor_of(a), tensor_of(a)])
                out = array_of(pb_grpc.TensorServiceStub(channel).Compute(req, timeout=60).output)
                np.testing.assert_array_equal(out, a + a)
        finally:
            stop_server(proc)

    def test_health(self):
        self.assert_serving()
        r = self.health.Check(health_pb2.HealthCheckRequest(
            service="tensorcompute.v1.TensorService"), timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)

    def test_reflection_lists_the_service(self):
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        reqs = iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        names = [s.name for r in stub.ServerReflectionInfo(reqs, timeout=10)
                 for s in r.list_services_response.service]
        self.assertIn("tensorcompute.v1.TensorService", names)
        self.assertIn("grpc.health.v1.Health", names)

    def test_broadcast_add_matches_numpy(self):
        rng = np.random.default_rng()
        for shapes in [((2, 3), (3,)), ((4, 1, 5), (3, 1)), ((), (7,)), ((1031,), ()),
                       ((3, 1, 2, 1), (1, 4, 1, 5))]:
            a = rng.standard_normal(shapes[0]).astype(np.float32)
            b = rng.standard_normal(shapes[1]).astype(np.float32)
            got = self.compute("add", a, b, alpha=-1.5)
            want = a + np.float32(-1.5) * b
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

    def test_strided_views_are_sent_without_copies(self):
        rng = np.random.default_rng()
        base = rng.standard_normal((6, 9)).astype(np.float32)
        for a, b in [(base.T, base.T[::-1]), (base[1::2, ::-3], base[::2, 2::3]),
                     (np.broadcast_to(base[0], (6, 9)), base)]:
            got = self.compute("add", a, b)
            np.testing.assert_allclose(got, a + b, rtol=1e-6, atol=1e-6)

    def test_bad_inputs_get_invalid_argument(self):
        bad = [
            pb.ComputeRequest(op="nope"),
            pb.ComputeRequest(op="add", inputs=[pb.Tensor(dtype=pb.float32, shape=[4], data=b"\0" * 12),
                                                pb.Tensor(dtype=pb.float32, data=b"\0" * 4)]),
            pb.ComputeRequest(op="add", inputs=[pb.Tensor(dtype=pb.float32, shape=[2], strides=[5], data=b"\0" * 8),
                                                pb.Tensor(dtype=pb.float32, data=b"\0" * 4)]),
            pb.ComputeRequest(op="add", inputs=[pb.Tensor(dtype=pb.float32, shape=[2], data=b"\0" * 8),
                                                pb.Tensor(dtype=pb.float32, shape=[3], data=b"\0" * 12)]),
            pb.ComputeRequest(op="add", inputs=[pb.Tensor(dtype=pb.float32, shape=[-1], data=b""),
                                                pb.Tensor(dtype=pb.float32, data=b"\0" * 4)]),
            pb.ComputeRequest(op="add", inputs=[pb.Tensor(shape=[1], data=b"\0" * 4),
                                                pb.Tensor(dtype=pb.float32, data=b"\0" * 4)]),
        ]
        for req in bad:
            with self.assertRaises(grpc.RpcError) as ctx:
                self.stub.Compute(req, timeout=10)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, req)
            self.assertTrue(ctx.exception.details())
            self.assert_serving()

    def test_ghz_request_file(self):
        """The JSON that docs/operations.md hands to ghz and grpcurl is a valid request."""
        from google.protobuf import json_format
        with open(os.path.join(REPO, "deploy/ghz/add.json")) as f:
            req = json_format.Parse(f.read(), pb.ComputeRequest())
        out = array_of(self.stub.Compute(req, timeout=10).output)
        np.testing.assert_array_equal(out, [[21, 42, 63], [24, 45, 66]])

    def test_cli(self):
        out = subprocess.run([ARGS.cli, f"--target={self.target}", "compute", "add",
                              "--input=float32[2,3]=1,2,3,4,5,6", "--input=float32[3]=10,20,30"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        self.assertEqual(out.strip(), "float32[2,3]\n[[11, 22, 33], [14, 25, 36]]")
        out = subprocess.run([ARGS.cli, f"--target={self.target}", "compute", "where",
                              "--input=bool[3]=1,0,true", "--input=int16[3]=1,2,3",
                              "--input=float32[]=9.5", "--output_dtype=float64"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        self.assertEqual(out.strip(), "float64[3]\n[1, 9.5, 3]")
        r = subprocess.run([ARGS.cli, f"--target={self.target}", "compute", "add",
                            "--input=float32[2]=1,2", "--input=float32[3]=1,2,3"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("INVALID_ARGUMENT", r.stderr)

    def test_cli_npy_files_and_resident_tensors(self):
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="tc-cli-")
        self.addCleanup(shutil.rmtree, d)
        rng = np.random.default_rng()
        a = rng.standard_normal((300, 70)).astype(np.float32)
        b = np.asfortranarray(rng.standard_normal((300, 70)).astype(np.float32))
        np.save(os.path.join(d, "a.npy"), a)
        np.save(os.path.join(d, "b.npy"), b)  # Fortran order: sent with column-major strides.
        cli = [ARGS.cli, f"--target={self.target}"]
        run = lambda *args: subprocess.run(cli + list(args), capture_output=True, text=True,
                                           timeout=60, check=True)
        for extra in ([], ["--stream"]):
            c = os.path.join(d, "c.npy")
            run("compute", "add", f"--input={d}/a.npy", f"--input={d}/b.npy",
                f"--output={c}", *extra)
            np.testing.assert_array_equal(np.load(c), a + b)
        # Resident: upload (20 MiB: with a progress bar), compute kept on the server, download.
        big = rng.standard_normal((1024, 5120)).astype(np.float32)
        np.save(os.path.join(d, "big.npy"), big)
        up = run("upload", f"{d}/big.npy", "--ttl=60")
        handle = up.stdout.split()[0]
        self.assertEqual(len(handle), 32)
        self.assertIn("float32[1024,5120]", up.stdout)
        self.assertIn("upload [", up.stderr)
        kept = run("compute", "mul", f"--input=@{handle}", "--input=float32[]=2", "--keep")
        doubled = kept.stdout.split()[0]
        run("download", doubled, f"--output={d}/doubled.npy")
        np.testing.assert_array_equal(np.load(f"{d}/doubled.npy"), big * 2)
        info = run("info").stdout
        self.assertIn("resident: 2 tensors", info)
        self.assertIn("backend cpu", info)
        released = run("release", handle, doubled).stdout
        self.assertEqual(released.strip(), f"released {2 * big.nbytes} bytes")
        r = subprocess.run(cli + ["download", handle, f"--output={d}/x.npy"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("NOT_FOUND", r.stderr)

    def test_readme_example(self):
        env = dict(os.environ)
        out = subprocess.run([sys.executable, os.path.join(REPO, "client/python/example.py"),
                              self.target], capture_output=True, text=True, timeout=30,
                             check=True, env=env).stdout
        self.assertEqual(out.split(), "[[20. 41. 62.] [23. 44. 65.]]".split())
        out = subprocess.run([ARGS.example, self.target], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        self.assertEqual(out, "20 41 62\n23 44 65\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--example", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
