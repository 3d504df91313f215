#!/usr/bin/env python3
"""The package as `pip install client/python` leaves it, with nothing set: its own
libtensorcompute_native is the transport of a plain Client(target), over plain TCP and over
TLS given as paths or as PEM bytes (mutual TLS too); grpcio's credentials= falls back to
grpcio with a warning that says why. Run by run_client_package_test.sh from a fresh virtual
environment, TENSORCOMPUTE_NATIVE_LIB unset."""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

import grpc
import numpy as np

import tensorcompute_client as tcc
from tensorcompute_client import client as tcc_client
from tensorcompute_client import native as native_mod
from tensorcompute_client.v1 import tensor_service_pb2 as pb
from harness import start_server, stop_server

ARGS = None
PKI = """
set -e
q() { "$@" >/dev/null 2>&1; }
q openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=tc-ca
q openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue-ca.key -out rogue-ca.pem -days 2 -subj /CN=rogue
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext
q openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
  -days 2 -extfile san.ext
q openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=alice
q openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2
"""


def read(path):
    with open(path, "rb") as f:
        return f.read()


class PackageNativeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        assert "TENSORCOMPUTE_NATIVE_LIB" not in os.environ
        cls.pki = tempfile.mkdtemp(prefix="tc-pki-")
        subprocess.run(["bash", "-c", PKI], cwd=cls.pki, check=True)
        p = lambda name: os.path.join(cls.pki, name)  # noqa: E731
        cls.plain, cls.plain_target = start_server(ARGS.server)
        cls.tls, cls.tls_target = start_server(ARGS.server, f"--tls_cert={p('server.pem')}",
                                               f"--tls_key={p('server.key')}")
        cls.mtls, cls.mtls_target = start_server(ARGS.server, f"--tls_cert={p('server.pem')}",
                                                 f"--tls_key={p('server.key')}",
                                                 f"--tls_client_ca={p('ca.pem')}")
        cls.rng = np.random.default_rng()

    @classmethod
    def tearDownClass(cls):
        for proc in (cls.plain, cls.tls, cls.mtls):
            stop_server(proc)
        subprocess.run(["rm", "-rf", cls.pki])

    def path(self, name):
        return os.path.join(self.pki, name)

    def check_native_add(self, client, mib=4):
        """A `mib` MiB float32 add through `client`, checked; returns the seconds it took."""
        n = (mib << 20) // 4 + 3
        x = self.rng.standard_normal(n, dtype=np.float32)
        y = self.rng.standard_normal(n, dtype=np.float32)
        start = time.perf_counter()
        got = client.compute("add", x, y)
        seconds = time.perf_counter() - start
        np.testing.assert_array_equal(got, x + y)
        self.assertIsNotNone(client._native_state, "the add did not take the native library")
        return seconds

    def test_the_package_carries_its_library(self):
        lib = native_mod.load()
        self.assertIsNotNone(lib, native_mod.error())
        package = os.path.dirname(os.path.abspath(tcc.__file__))
        self.assertEqual(os.path.dirname(os.path.abspath(lib._name)), package)

    def test_a_plain_client_takes_the_native_path(self):
        # Off this host's shared memory: it would come first for a loopback target.
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # No fallback warning.
            c = tcc.Client(self.plain_target, shared_memory=False)
            self.assertTrue(c.native_available())
            self.check_native_add(c)
            # A 64 MiB add, spread over the client's connections, beside the same request
            # handed to the C++ client straight (tcn_compute, no Python around it): their
            # rates for the log (2 inputs + 1 output), medians of 3. Printed, not asserted.
            n = (64 << 20) // 4
            x = self.rng.standard_normal(n, dtype=np.float32)
            y = self.rng.standard_normal(n, dtype=np.float32)
            spans = [tcc_client._span(v) for v in (x, y)]
            request = pb.ComputeRequest(op="add", inputs=[
                sp.meta(storage_bytes=sp.hi - sp.lo) for sp in spans])
            native = c._native()

            def rate(fn):
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - start)
                return 3 * n * 4 / 1e9 / sorted(times)[1]

            python = rate(lambda: c.compute("add", x, y))
            direct = rate(lambda: native.compute(request, [(sp.lo, sp.hi - sp.lo)
                                                           for sp in spans]))
            print(f"\n64 MiB float32 add: Python client {python:.2f} GB/s, the C++ client "
                  f"under it called directly {direct:.2f} GB/s", file=sys.stderr)
            self.assertIsNotNone(c._native_state)
            c.close()

    def test_tls_from_paths_and_from_bytes_keeps_the_native_path(self):
        clients = {
            "paths": tcc.Client(self.tls_target, shared_memory=False,
                                tls_ca=self.path("ca.pem")),
            "bytes, named": tcc.Client(self.tls_target.replace("127.0.0.1", "localhost"),
                                       shared_memory=False, tls_ca=read(self.path("ca.pem")),
                                       tls_server_name="localhost"),
            "mutual, paths": tcc.Client(self.mtls_target, shared_memory=False,
                                        tls_ca=self.path("ca.pem"),
                                        tls_cert=self.path("client.pem"),
                                        tls_key=self.path("client.key")),
            "mutual, bytes": tcc.Client(self.mtls_target, shared_memory=False,
                                        tls_ca=read(self.path("ca.pem")),
                                        tls_cert=read(self.path("client.pem")),
                                        tls_key=read(self.path("client.key"))),
        }
        for name, c in clients.items():
            with self.subTest(name):
                self.assertTrue(c.native_available())
                self.check_native_add(c)
                # Small calls go through grpcio over the same TLS settings.
                x = self.rng.standard_normal(100)
                np.testing.assert_array_equal(c.compute("neg", x), -x)
                c.close()

    def test_tls_failures_are_errors_on_both_transports(self):
        # A mutual-TLS server without a client certificate; a server certificate signed by a
        # CA the client does not trust.
        for target, kwargs in ((self.mtls_target, dict(tls_ca=self.path("ca.pem"))),
                               (self.tls_target, dict(tls_ca=self.path("rogue-ca.pem")))):
            c = tcc.Client(target, shared_memory=False, timeout=5, **kwargs)
            for n in (10, 1 << 20):  # grpcio, native
                with self.subTest(target=target, n=n):
                    with self.assertRaises(grpc.RpcError) as e:
                        c.compute("neg", np.ones(n, np.float32))
                    self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            c.close()
        with self.assertRaises(ValueError):
            tcc.Client(self.tls_target, tls_ca=self.path("ca.pem"),
                       tls_cert=self.path("client.pem"))

    def test_grpcio_credentials_fall_back_with_a_warning(self):
        creds = grpc.ssl_channel_credentials(read(self.path("ca.pem")))
        c = tcc.Client(self.tls_target, shared_memory=False, credentials=creds)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = self.rng.standard_normal(1 << 18, dtype=np.float32)
            np.testing.assert_array_equal(c.compute("neg", x), -x)
        self.assertIsNone(c._native_state)
        messages = [str(w.message) for w in caught]
        self.assertTrue(any("tls_ca=" in m for m in messages), messages)
        strict = tcc.Client(self.tls_target, shared_memory=False, credentials=creds,
                            native=True)
        with self.assertRaises(RuntimeError):
            strict.compute("neg", x)
        strict.close()
        c.close()


class WithoutLibraryTest(unittest.TestCase):
    """An install that did not build the library (TENSORCOMPUTE_NATIVE_BUILD=0 here; a missing
    compiler or gRPC's development files the same way)."""

    def test_the_client_says_why_once_and_uses_grpcio(self):
        self.assertIsNone(native_mod.load())
        self.assertIn("not built at install: TENSORCOMPUTE_NATIVE_BUILD=0", native_mod.error())
        proc, target = start_server(ARGS.server)
        try:
            x = np.random.default_rng().standard_normal(1 << 20, dtype=np.float32)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(2):
                    c = tcc.Client(target, shared_memory=False)
                    np.testing.assert_array_equal(c.compute("neg", x), -x)
                    self.assertIsNone(c._native_state)
                    c.close()
            messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
            self.assertEqual(len(messages), 1, messages)
            self.assertIn("TENSORCOMPUTE_NATIVE_BUILD=0", messages[0])
            self.assertIn("grpcio", messages[0])
            with self.assertRaises(RuntimeError):
                tcc.Client(target, shared_memory=False, native=True).compute("neg", x)
        finally:
            stop_server(proc)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--without_library", action="store_true",
                        help="the package was installed without the library")
    ARGS, rest = parser.parse_known_args()
    if ARGS.without_library:
        rest.append("WithoutLibraryTest")
    else:
        rest.append("PackageNativeTest")
    unittest.main(argv=[sys.argv[0]] + rest)
