#!/usr/bin/env python3
"""tensorcompute_client.dask on a LocalCluster of two worker processes and three servers:
element-wise chains of ordinary Dask code become one expression per chunk, computed by the
pool's servers, checked against the same Dask code computed by NumPy.

    test_dask.py --server build/server/tensorcompute-server
"""
import argparse
import re
import sys
import unittest
import urllib.request

import numpy as np

ARGS = None


def expression_calls(client):
    """Compute calls this server finished OK with an expression (its /metrics)."""
    port = client.server_info().metrics_port
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(int(m.group(1)) for m in re.finditer(
        r'tensorcompute_requests_total\{method="Compute",op="expression",code="OK"\} (\d+)',
        body))


class DaskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import dask
        from distributed import Client as DaskClient, LocalCluster
        import tensorcompute_client as tcc
        from harness import start_server
        cls.servers = [start_server(ARGS.server) for _ in range(3)]
        cls.targets = [t for _, t in cls.servers]
        cls.direct = [tcc.Client(t, native=False) for t in cls.targets]
        cls.cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                   dashboard_address=None, host="127.0.0.1")
        cls.dask = DaskClient(cls.cluster)
        dask.config.set(scheduler=cls.dask.get)

    @classmethod
    def tearDownClass(cls):
        cls.dask.close()
        cls.cluster.close()
        for c in cls.direct:
            c.close()
        from harness import stop_server
        for p, _ in cls.servers:
            stop_server(p)

    def calls(self):
        return [expression_calls(c) for c in self.direct]

    def test_chain_becomes_one_expression_per_chunk(self):
        import dask.array as da
        from tensorcompute_client.dask import Pool, on_servers
        # Chunks over gRPC, so that the servers' call counts are the chunks (through shared
        # memory, the default on one host, a client first asks each new shape's plan).
        pool = Pool(self.targets, shared_memory=False)
        rs = da.random.RandomState(np.random.randint(1 << 30))
        # Odd sizes, uneven last chunks.
        x = rs.standard_normal((1003, 701), chunks=(250, 701)).astype(np.float32)
        y = rs.standard_normal((1003, 701), chunks=(250, 701)).astype(np.float32)
        row = rs.standard_normal((701,), chunks=701).astype(np.float32)
        plain = da.sqrt(abs(x * y) + 1.5) - np.float32(2) * row
        before = self.calls()
        fused = on_servers(pool, plain)
        self.assertIsNot(fused, plain)
        # One expression over x, y, the 0-dim 2 and row: nothing of the chain left to Dask.
        self.assertEqual(fused.tensorcompute_expression,
                         "sub(sqrt(add(abs(mul(x0, x1)), 1.5)), mul(x2, x3))")
        got, want = da.compute(fused, plain)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        self.assertEqual(got.dtype, want.dtype)
        used = [a - b for a, b in zip(self.calls(), before)]
        self.assertEqual(sum(used), fused.npartitions, used)   # one call per chunk

    def test_where_comparisons_and_literals(self):
        import dask.array as da
        from tensorcompute_client.dask import Pool, on_servers
        pool = Pool(self.targets)
        rs = da.random.RandomState(np.random.randint(1 << 30))
        x = rs.standard_normal((517, 33), chunks=(100, 33)).astype(np.float32)
        plain = da.where(x > 0.25, x * 3, -x) + 1
        fused = on_servers(pool, plain)
        self.assertIn("where(gt(x0, 0.25)", fused.tensorcompute_expression)
        got, want = da.compute(fused, plain)
        np.testing.assert_array_equal(got, want)

    def test_per_worker_servers(self):
        import dask.array as da
        from tensorcompute_client.dask import Pool, on_servers
        pool = Pool(self.targets[:2], per_worker=True, shared_memory=False)
        x = da.arange(40000, chunks=1000, dtype=np.float32)
        before = self.calls()
        got = on_servers(pool, x * x - 3).compute()
        np.testing.assert_array_equal(got, np.arange(40000, dtype=np.float32) ** 2 - 3)
        used = [a - b for a, b in zip(self.calls(), before)]
        # Worker 0 to server 0, worker 1 to server 1; the third server is not in this pool.
        self.assertEqual(used[2], 0)
        self.assertEqual(used[0] + used[1], 40)
        self.assertTrue(used[0] > 0 and used[1] > 0, used)

    def test_what_is_not_element_wise_stays_dask(self):
        import dask.array as da
        from tensorcompute_client.dask import Pool, on_servers
        pool = Pool(self.targets)
        x = da.ones((300, 200), chunks=(100, 200), dtype=np.float32)
        s = x.sum(axis=0)
        self.assertIs(on_servers(pool, s), s)
        # A transposed input is a leaf: Dask transposes its chunks, the server adds.
        t = on_servers(pool, x.T + 1)
        self.assertEqual(t.tensorcompute_expression, "add(x0, 1)")
        np.testing.assert_array_equal(t.compute(), np.full((200, 300), 2, np.float32))

    def test_the_documented_example(self):
        # docs/clients.md's Dask example, on this test's servers and a smaller array.
        import os
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                               "clients.md")) as f:
            doc = f.read()
        code = re.search(r"#### Dask arrays.*?```python\n(.*?)```", doc, re.S).group(1)
        code = code.replace('["10.0.0.5:50051", "10.0.0.6:50051"]', repr(self.targets[:2]))
        code = code.replace("(40000, 40000), chunks=(4000, 40000)", "(400, 400), chunks=(40, 400)")
        scope = {}
        exec(code, scope)
        shown = re.search(r"y.tensorcompute_expression\s+# '([^']*)'", code).group(1)
        self.assertEqual(scope["y"].tensorcompute_expression, shown)
        x = scope["x"].compute()
        np.testing.assert_allclose(scope["y"].compute(), np.sqrt(x * x + 1) - 0.5, rtol=1e-6)
        want = 1 / (1 + np.exp(-(x * x.T))) + np.float32(0.5)
        np.testing.assert_allclose(scope["z"].compute(), want, rtol=1e-5, atol=1e-6)

    def test_evaluate(self):
        import dask.array as da
        from tensorcompute_client.dask import Pool, evaluate
        pool = Pool(self.targets)
        rng = np.random.default_rng()
        a = rng.standard_normal((401, 77)).astype(np.float32)
        b = rng.standard_normal((77,)).astype(np.float32)
        out = evaluate(pool, "sigmoid(a * b) + c", da.from_array(a, chunks=(100, 77)), b,
                       np.float32(0.5))
        self.assertEqual(out.dtype, np.float32)
        want = 1 / (1 + np.exp(-(a * b))) + np.float32(0.5)
        np.testing.assert_allclose(out.compute(), want, rtol=1e-6, atol=1e-6)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
