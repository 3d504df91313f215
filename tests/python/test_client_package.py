#!/usr/bin/env python3
"""The pip-installed Python client (client/python) against the real server, checked with
NumPy and PyTorch. Run by run_client_package_test.sh from a fresh virtual environment."""
import argparse
import os
import subprocess
import sys
import unittest

import grpc
import numpy as np

import tensorcompute_client as tcc
from harness import start_server, stop_server

ARGS = None


class ClientPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        assert "build/python" not in ":".join(sys.path), "must use the package's own stubs"
        # Small messages, so that large inputs take ComputeStream.
        # Two devices (the CPU split in two), so that placement can be checked too.
        cls.proc, cls.target = start_server(ARGS.server, "--max_message_bytes=1048576",
                                            "--chunk_bytes=65536", "--test_cpu_devices=2")
        # Over the socket through grpcio only: test_regions.py covers shared memory, and
        # test_native.py and test_package_native.py the native library.
        cls.client = tcc.Client(cls.target, max_message_bytes=1 << 20, chunk_bytes=100_000,
                                shared_memory=False, native=False)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        stop_server(cls.proc)

    def test_views_are_sent_as_their_span_with_strides(self):
        rng = np.random.default_rng()
        base = rng.standard_normal((37, 41)).astype(np.float32)
        views = {
            "transpose": base.T,
            "step slice": base[1::3, ::2],
            "negative steps": base[::-1, ::-3],
            "column": base[:, 5],
        }
        for name, v in views.items():
            with self.subTest(name):
                t = tcc.to_tensor(v)
                self.assertLessEqual(len(t.data), base.nbytes, name)
                self.assertEqual(list(t.shape), list(v.shape))
                got = self.client.compute("mul", v, v)
                np.testing.assert_array_equal(got, v * v)
        # Broadcast: 16 bytes travel for a 1000x4 operand.
        row = np.arange(4, dtype=np.float32)
        b = np.broadcast_to(row, (1000, 4))
        t = tcc.to_tensor(b)
        self.assertEqual(len(t.data), 16)
        self.assertEqual(list(t.strides), [0, 1])
        x = rng.standard_normal((1000, 4)).astype(np.float32)
        np.testing.assert_array_equal(self.client.compute("add", x, b), x + b)

    def test_arrays_at_unaligned_addresses(self):
        # Arrays inside a foreign buffer at an odd byte (as pickle or Dask hand them over).
        rng = np.random.default_rng()
        for dtype in (np.float32, np.float64, np.int16):
            x = rng.standard_normal(1001).astype(dtype)
            for skew in (1, 3):
                buf = bytes(skew) + x.tobytes()
                v = np.frombuffer(buf, dtype=dtype, offset=skew)
                self.assertNotEqual(v.__array_interface__["data"][0] % v.itemsize, 0)
                with self.subTest(dtype=np.dtype(dtype).name, skew=skew):
                    np.testing.assert_array_equal(self.client.compute("mul", v, v), x * x)
                    np.testing.assert_array_equal(self.client.compute("neg", v[::-2]),
                                                  -x[::-2])

    def test_plan_tells_what_compute_returns_without_bytes(self):
        rng = np.random.default_rng()
        x = rng.standard_normal((33, 17)).astype(np.float32)
        i8 = rng.integers(-100, 100, (17,)).astype(np.int8)
        h = rng.standard_normal((33, 1)).astype(np.float16)
        cases = [
            ("compute", ("add", x.T, i8[:, None])),
            ("compute", ("mul", h, i8)),
            ("compute", ("lt", x, h)),
            ("compute", ("div", i8, i8[::-1])),
            ("eval", ("a * 2 + b", h, np.float64(3.0))),
            ("eval", ("where(a > 0, a, b)", x, i8)),
        ]
        for kind, (what, *inputs) in cases:
            with self.subTest(kind=kind, what=what):
                run = getattr(self.client, kind)(what, *inputs)
                planned = getattr(self.client, "plan" if kind == "compute" else "plan_eval")(
                    what, *inputs)
                self.assertEqual(planned.dtype, run.dtype)
                self.assertEqual(planned.shape, run.shape)
                self.assertEqual(planned.storage_bytes, run.nbytes)
        planned = self.client.plan("add", x, x, output_dtype="float64")
        self.assertEqual((planned.dtype, planned.shape), (np.dtype(np.float64), x.shape))
        r = self.client.upload(x)
        self.assertEqual(self.client.plan_eval("u - 1", u=r).shape, x.shape)
        self.client.release(r)
        with self.assertRaises(grpc.RpcError) as e:
            self.client.plan("add", x, i8[:5])
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_remote_arrays_build_one_expression(self):
        rng = np.random.default_rng()
        a = rng.standard_normal((257, 33)).astype(np.float32)
        w = rng.standard_normal(33).astype(np.float32)
        calls = []
        real_eval, real_plan = self.client.eval, self.client.plan_eval

        def counting_eval(*args, **kwargs):
            calls.append(("eval", args[0]))
            return real_eval(*args, **kwargs)

        def counting_plan(*args, **kwargs):
            calls.append(("plan", args[0]))
            return real_plan(*args, **kwargs)

        self.client.eval, self.client.plan_eval = counting_eval, counting_plan
        try:
            x = self.client.array(a)
            y = np.sqrt(np.abs(x * w + 1.5)) - x
            self.assertEqual(calls, [])  # Nothing sent while building.
            self.assertEqual((y.dtype, y.shape), (np.dtype(np.float32), a.shape))
            self.assertEqual([c[0] for c in calls], ["plan"])
            got = np.asarray(y)
            self.assertEqual(calls[1], ("eval", "sub(sqrt(abs(add(mul(x0, x1), 1.5))), x0)"))
            np.testing.assert_allclose(got, np.sqrt(np.abs(a * w + np.float32(1.5))) - a,
                                       rtol=1e-6)
            self.assertIs(np.asarray(y), got)  # Computed once.
            self.assertEqual(len(calls), 2)
        finally:
            del self.client.eval, self.client.plan_eval
        # NumPy's functions, casts, comparisons, integer inputs with weak literals.
        i8 = rng.integers(-100, 100, (257, 1)).astype(np.int8)
        xi = self.client.array(i8)
        cases = {
            "where": (np.where(x > 0, x, 0.0), np.where(a > 0, a, np.float32(0))),
            "clip": (np.clip(x, -1, 1), np.clip(a, np.float32(-1), np.float32(1))),
            "astype": ((x > 0).astype(np.int32), (a > 0).astype(np.int32)),
            "maximum int8": (np.maximum(xi, -3) * 2, np.maximum(i8, np.int8(-3)) * np.int8(2)),
            "int8 and a float": (xi + 1.5, (i8 + np.float32(1.5)).astype(np.float32)),
            "broadcast": (x * xi, a * i8.astype(np.float32)),
        }
        for name, (remote, expect) in cases.items():
            with self.subTest(name):
                self.assertEqual((remote.dtype, remote.shape), (expect.dtype, expect.shape))
                np.testing.assert_allclose(remote.numpy(), expect, rtol=1e-6)
        # Kept on the server, then read there by the next expression.
        z = (x * 2).persist()
        np.testing.assert_allclose(np.asarray(z + 1), a * 2 + 1, rtol=1e-6)
        self.assertEqual(z.shape, a.shape)
        # More inputs than one request takes: operands go first, kept on the server.
        parts = [rng.standard_normal(100).astype(np.float32) for _ in range(20)]
        total = self.client.array(parts[0])
        for p in parts[1:]:
            total = total + self.client.array(p)
        expect = parts[0].copy()
        for p in parts[1:]:
            expect = expect + p
        np.testing.assert_allclose(np.asarray(total), expect, rtol=1e-5)
        self.assertIn("[", repr(total))
        with self.assertRaises(TypeError):
            np.add.reduce(x)  # Reductions are not element-wise: refused.

    def test_the_documented_remote_array_example_prints_what_it_shows(self):
        readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                                   "clients.md")).read()
        start = readme.index("Remote arrays let NumPy-shaped code")
        code = readme[readme.index("```python\n", start) + 10:]
        code, rest = code.split("```\n", 1)
        shown = rest[rest.index("```text\n") + 8:].split("```", 1)[0]
        code = code.replace("127.0.0.1:50051", self.target)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        self.assertEqual(out, shown)

    def test_dtypes_attributes_and_output_dtype(self):
        a = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
        np.testing.assert_array_equal(self.client.compute("add", a, a, alpha=3), a + 3 * a)
        f = self.client.compute("add", a, a, output_dtype="float64")
        self.assertEqual(f.dtype, np.float64)
        np.testing.assert_array_equal(self.client.compute("gt", a, np.int32(0)), a > 0)
        h = np.linspace(-2, 2, 11).astype(np.float16)
        np.testing.assert_array_equal(self.client.compute("neg", h), -h)
        c = self.client.compute("cast", a, dtype="float32")
        self.assertEqual(c.dtype, np.float32)

    def test_torch_tensors(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch not importable")
        x = torch.randn(5, 7)
        y = torch.randn(7)
        got = self.client.compute("add", x.t().contiguous().t(), y, as_torch=True)
        self.assertTrue(torch.equal(got, x + y))
        bf = torch.randn(9, 3).to(torch.bfloat16)
        out = self.client.compute("mul", bf.t(), bf.t(), as_torch=True)
        self.assertEqual(out.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(out, bf.t() * bf.t()))

    def test_large_inputs_stream_in_chunks(self):
        rng = np.random.default_rng()
        a = rng.standard_normal((700, 1000)).astype(np.float32)  # 2.8 MB > 1 MiB messages
        b = rng.standard_normal(1000).astype(np.float32)
        with self.assertRaises(grpc.RpcError):
            self.client.compute("add", a, b, stream=False)
        np.testing.assert_array_equal(self.client.compute("add", a.T.copy().T, b), a + b)

    def test_resident_tensors(self):
        m = np.arange(600_000, dtype=np.float32).reshape(600, 1000)
        r = self.client.upload(m, ttl_seconds=60)
        self.assertEqual(len(r.handle), 32)
        self.assertEqual(r.shape, (600, 1000))
        kept = self.client.compute("mul", r, np.float32(2), keep_resident=True)
        self.assertIsInstance(kept, tcc.Resident)
        np.testing.assert_array_equal(self.client.download(kept), m * 2)
        self.assertEqual(self.client.release(r, kept), 2 * m.nbytes)
        with self.assertRaises(grpc.RpcError) as e:
            self.client.download(r)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_upload_to_a_device(self):
        a = self.client.upload(np.ones(10, np.float32), device=1)
        b = self.client.upload(np.arange(10, dtype=np.float32), device=0)
        self.assertEqual((a.device, b.device), (1, 0))
        # Inputs on two devices: one is copied to the other.
        np.testing.assert_array_equal(self.client.compute("add", a, b),
                                      np.arange(10, dtype=np.float32) + 1)
        # Unnamed, one client's tensors share a device.
        c = self.client.upload(np.zeros(3, np.float32))
        d = self.client.upload(np.zeros(3, np.float32))
        self.assertEqual(c.device, d.device)
        with self.assertRaises(grpc.RpcError) as e:
            self.client.upload(np.ones(2, np.float32), device=7)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("no device 7", e.exception.details())
        self.client.release(a, b, c, d)

    def test_expressions(self):
        rng = np.random.default_rng()
        x = rng.standard_normal((300, 41)).astype(np.float32)
        w = rng.standard_normal(41).astype(np.float32)
        b = np.float32(0.25)
        # Positional inputs are a, b, c...; views and broadcasts travel as they are.
        got = self.client.eval("sigmoid(a * b + c) * 0.5", x.T[:, ::2], w[::-1, None], b)
        want = 0.5 / (1 + np.exp(-(x.T[:, ::2] * w[::-1, None] + b)))
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
        # By name, with attributes, comparisons, where and casts inside.
        got = self.client.eval("where(x > 0, clamp(x * w, min=-1, max=1), cast(x, float16))",
                               x=x, w=w)
        self.assertEqual(got.dtype, np.float32)
        want = np.where(x > 0, np.clip(x * w, -1, 1), x.astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(got, want)
        # Each float16 value is rounded as its op alone rounds it: NumPy's float16 ops do the
        # same (computed in float32, rounded to float16 after each).
        h = rng.standard_normal((7, 1000)).astype(np.float16)
        got = self.client.eval("a * a - a * 3 + 1", h)
        self.assertEqual(got.dtype, np.float16)
        np.testing.assert_array_equal(got, h * h - h * np.float16(3) + np.float16(1))
        # Large inputs stream in chunks like any op's.
        big = rng.standard_normal(600_000).astype(np.float32)
        np.testing.assert_array_equal(self.client.eval("a * a + 2", big), big * big + 2)
        grammar = self.client.list_ops_response().expression_grammar
        self.assertIn("where(cond, x, y)", grammar)
        for bad, code, message in [
                ("a +", grpc.StatusCode.INVALID_ARGUMENT, "expression: at 3:"),
                ("a & 1", grpc.StatusCode.INVALID_ARGUMENT, "'bitwise_and' does not accept"),
                ("a + zz", grpc.StatusCode.INVALID_ARGUMENT, "'zz' names no input")]:
            with self.subTest(bad):
                with self.assertRaises(grpc.RpcError) as e:
                    self.client.eval(bad, x)
                self.assertEqual(e.exception.code(), code)
                self.assertIn(message, e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.client.eval("a // b", np.array([1, 2], np.int32), np.array([1, 0], np.int32))
        self.assertIn("division by zero in 'floor_divide'", e.exception.details())

    def test_errors_are_grpc_errors(self):
        with self.assertRaises(grpc.RpcError) as e:
            self.client.compute("floor_divide", np.array([1, 2], np.int32),
                                np.array([1, 0], np.int32))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("division by zero", e.exception.details())
        info = self.client.server_info()
        self.assertEqual(info.backend, "cpu")
        self.assertIn("add", [op.name for op in self.client.list_ops()])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
