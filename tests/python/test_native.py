#!/usr/bin/env python3
"""The Python client through libtensorcompute_native (the C++ client library under ctypes)
against the real server: results against NumPy on fresh random inputs and views, spread over
several connections or not, errors as grpc.RpcError, resident tensors, concurrent callers,
and results that outlive their client. Run by run_client_package_test.sh with --native."""
import argparse
import os
import sys
import threading
import unittest

import grpc
import numpy as np

import tensorcompute_client as tcc
from tensorcompute_client.v1 import tensor_service_pb2 as pb
from harness import start_server, stop_server

ARGS = None


class NativeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["TENSORCOMPUTE_NATIVE_LIB"] = ARGS.native
        cls.proc, cls.target = start_server(ARGS.server, f"--backend={ARGS.backend}",
                                            "--max_message_bytes=4194304", "--chunk_bytes=65536")
        common = dict(shared_memory=False, native=True, native_threshold=0,
                      max_message_bytes=4 << 20, chunk_bytes=100_003)
        # Everything spread over 3 connections; nothing spread (unary or one stream).
        cls.spread = tcc.Client(cls.target, connections=3, spread_bytes=1, **common)
        cls.single = tcc.Client(cls.target, spread_bytes=1 << 40, **common)
        cls.rng = np.random.default_rng()

    @classmethod
    def tearDownClass(cls):
        cls.spread.close()
        cls.single.close()
        stop_server(cls.proc)

    def clients(self):
        return {"spread": self.spread, "single": self.single}

    def test_native_library_is_used(self):
        self.assertTrue(self.spread.native_available())
        self.assertIsNotNone(self.spread._native_state)

    def test_views_match_numpy(self):
        rng = self.rng
        base = rng.standard_normal((301, 517)).astype(np.float32)
        wide = rng.standard_normal(4099)
        views = {
            "transpose": (base.T, base.T),
            "negative steps": (base[::-1, ::-3], base[::-1, ::-3]),
            "broadcast row": (base, np.broadcast_to(base[7], base.shape)),
            "odd offset float64": (wide[3:4002:3], wide[5:4004:3]),
            "0-dim": (base, np.float32(2.5)),
        }
        for name, client in self.clients().items():
            for view, (x, y) in views.items():
                with self.subTest(client=name, view=view):
                    got = client.compute("add", x, y)
                    np.testing.assert_array_equal(got, np.add(x, y, dtype=got.dtype))
                    self.assertEqual(got.shape, np.broadcast_shapes(np.shape(x), np.shape(y)))

    def test_large_input_over_many_chunks(self):
        n = (3 << 20) + 17  # 12 MiB of float32 per input, an odd count of elements.
        x = self.rng.standard_normal(n, dtype=np.float32)
        y = self.rng.standard_normal(n, dtype=np.float32)
        for name, client in self.clients().items():
            with self.subTest(client=name):
                got = client.compute("mul", x, y)
                np.testing.assert_array_equal(got, x * y)
                self.assertTrue(got.flags.writeable)

    def test_dtypes(self):
        a = self.rng.integers(-1000, 1000, 10001).astype(np.int32)
        b = self.rng.integers(1, 50, 10001).astype(np.int32)
        h = self.rng.standard_normal(777).astype(np.float16)
        m = self.rng.random(10001) > 0.5
        for name, client in self.clients().items():
            with self.subTest(client=name):
                np.testing.assert_array_equal(client.compute("sub", a, b), a - b)
                np.testing.assert_array_equal(client.compute("neg", h), -h)
                np.testing.assert_array_equal(client.compute("where", m, a, b), np.where(m, a, b))
                np.testing.assert_array_equal(client.compute("gt", a, b), a > b)
                got = client.compute("add", a, b, output_dtype="float64")
                self.assertEqual(got.dtype, np.float64)
                np.testing.assert_array_equal(got, (a + b).astype(np.float64))

    def test_errors_are_grpc_errors(self):
        for name, client in self.clients().items():
            with self.subTest(client=name):
                with self.assertRaises(grpc.RpcError) as e:
                    client.compute("add", np.ones((3, 4), np.float32), np.ones(5, np.float32))
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("broadcast", e.exception.details())
                with self.assertRaises(grpc.RpcError) as e:
                    client.compute("frobnicate", np.ones(4, np.float32))
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                with self.assertRaises(grpc.RpcError) as e:
                    client.compute("floor_divide", np.ones(4, np.int32), np.zeros(4, np.int32))
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # Nothing left resident by the failed spreads, and the server still serves.
        self.assertEqual(self.spread.server_info().resident_tensors, 0)
        np.testing.assert_array_equal(self.spread.compute("abs", np.array([-1.0, 2.0])),
                                      [1.0, 2.0])

    def test_resident_and_wire_tensor_inputs(self):
        x = self.rng.standard_normal(50_000).astype(np.float32)
        for name, client in self.clients().items():
            with self.subTest(client=name):
                kept = client.compute("mul", x, np.float32(3), keep_resident=True)
                self.assertIsInstance(kept, tcc.Resident)
                np.testing.assert_array_equal(client.download(kept), x * np.float32(3))
                wire = tcc.to_tensor(x)
                np.testing.assert_array_equal(client.compute("add", kept, wire),
                                              x * np.float32(3) + x)
                client.release(kept)

    def test_upload_and_download(self):
        base = self.rng.standard_normal((513, 1031)).astype(np.float32)
        views = {"contiguous": base, "transpose": base.T, "negative steps": base[::-2, ::-1],
                 "bool": base > 0, "empty": base[:0]}
        for name, client in self.clients().items():
            for view, x in views.items():
                with self.subTest(client=name, view=view):
                    r = client.upload(x)
                    self.assertEqual(r.shape, x.shape)
                    back = client.download(r)
                    self.assertEqual(back.dtype, x.dtype)
                    np.testing.assert_array_equal(back, x)
                    try:
                        if x.size and x.dtype != np.bool_:
                            np.testing.assert_array_equal(client.compute("neg", r), -x)
                    finally:
                        client.release(r)
        self.assertEqual(self.spread.server_info().resident_tensors, 0)

    def test_concurrent_callers(self):
        errors = []

        def work(seed):
            rng = np.random.default_rng(seed)
            for _ in range(5):
                x = rng.standard_normal((rng.integers(1, 300), 257)).astype(np.float32)
                try:
                    np.testing.assert_array_equal(self.spread.compute("add", x, x.T.T), x + x)
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_results_outlive_their_client(self):
        c = tcc.Client(self.target, shared_memory=False, native=True, native_threshold=0)
        x = self.rng.standard_normal(100_000)
        got = c.compute("neg", x)
        c.close()
        del c
        np.testing.assert_array_equal(got, -x)

    def test_without_the_library_grpcio_is_used(self):
        c = tcc.Client(self.target, shared_memory=False, native=False)
        x = self.rng.standard_normal(1000)
        np.testing.assert_array_equal(c.compute("neg", x), -x)
        self.assertIsNone(c._native_state)
        c.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--native", required=True)
    parser.add_argument("--backend", default="cpu")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
