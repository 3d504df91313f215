#!/usr/bin/env python3
"""torch.cuda tensors through CUDA IPC, with the Python client against a CUDA server on the
same GPU: results against PyTorch on fresh random tensors and views, out=, mixed with host
arrays; other identities refused; bad handles and unknown devices answered with an error;
regions gone and the server healthy after a client dies. Exits 77 (skipped) where PyTorch
sees no GPU."""
import argparse
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import numpy as np

from harness import wait_for

ARGS = None
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"


class CudaIpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tensorcompute_client as tcc
        from harness import start_server
        tokens = tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False)
        tokens.write(f"alice:{ALICE}\nbob:{BOB}\n")
        tokens.close()
        cls.proc, cls.target = start_server(ARGS.server, f"--auth_tokens_file={tokens.name}",
                                            "--backend=cuda")
        cls.alice = tcc.Client(cls.target, token=ALICE)
        cls.bob = tcc.Client(cls.target, token=BOB)

    @classmethod
    def tearDownClass(cls):
        from harness import stop_server
        cls.alice.close()
        cls.bob.close()
        stop_server(cls.proc)

    def test_results_match_torch(self):
        g = torch.Generator(device="cuda").manual_seed(int(time.time()))
        for shape in [(1,), (1031,), (257, 129), (3, 5, 1031)]:
            with self.subTest(shape=shape):
                x = torch.randn(shape, device="cuda", generator=g)
                y = torch.randn(shape[-1:], device="cuda", generator=g)
                got = self.alice.compute("add", x, y, alpha=2.0)
                self.assertTrue(got.is_cuda)
                torch.testing.assert_close(got, x + 2 * y, rtol=0, atol=0)
        h = torch.randn(300, 77, device="cuda", generator=g).half()
        views = {"transpose": h.t(), "slice with steps": h[3::2, 5:70:3],
                 "offset row": h[17], "expanded": h[:, :1].expand(300, 40)}
        for name, v in views.items():
            with self.subTest(name):
                torch.testing.assert_close(self.alice.compute("mul", v, v), v * v,
                                           rtol=0, atol=0)
        b = torch.rand(5000, device="cuda", generator=g) > 0.5
        i = torch.randint(-9, 9, (5000,), device="cuda", dtype=torch.int32, generator=g)
        torch.testing.assert_close(self.alice.compute("where", b, i, np.int32(7)),
                                   torch.where(b, i, torch.tensor(7, device="cuda")))
        self.assertTrue(torch.equal(self.alice.compute("gt", i, np.int32(0)), i > 0))

    def test_out_and_a_chain_stay_on_the_gpu(self):
        x = torch.randn(1 << 20, device="cuda")
        out = torch.empty_like(x)
        self.assertIs(self.alice.compute("sigmoid", x, out=out), out)
        torch.testing.assert_close(out, torch.sigmoid(x))
        # The output is an ordinary torch tensor: the next request takes it as input.
        y = self.alice.compute("mul", out, out)
        torch.testing.assert_close(y, torch.sigmoid(x) ** 2)

    def test_many_calls_at_once_new_expressions_and_errors(self):
        # Requests wholly in the caller's GPU memory start on the server's gRPC thread where
        # a result slot is free; more at once than a stream has slots, and a new expression
        # (its kernel still to compile), take the long way: every result still right.
        import concurrent.futures
        g = torch.Generator(device="cuda").manual_seed(int(time.time()))
        n = (1 << 22) + 3
        xs = [torch.randn(n, device="cuda", generator=g) for _ in range(4)]
        scale = 1.5 + (time.time_ns() % 997) / 997  # A new expression's text each run.

        def work(k):
            x, y = xs[k % 4], xs[(k + 1) % 4]
            out = torch.empty_like(x)
            for _ in range(6):
                self.alice.compute("mul", x, y, out=out)
                torch.testing.assert_close(out, x * y, rtol=0, atol=0)
            got = self.alice.eval(f"a * {scale!r} + b", x, y)
            torch.testing.assert_close(got, x * scale + y)
            return k

        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            self.assertEqual(sorted(pool.map(work, range(24))), list(range(24)))
        i = torch.randint(-9, 9, (1031,), device="cuda", dtype=torch.int32, generator=g)
        z = i.clone()
        z[517] = 0
        with self.assertRaises(grpc.RpcError) as caught:
            self.alice.compute("floor_divide", i, z, out=torch.empty_like(i))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("division by zero", caught.exception.details())
        # The server goes on.
        torch.testing.assert_close(self.alice.compute("add", i, i), i + i)

    def test_other_identities_cannot_use_a_shared_allocation(self):
        from tensorcompute_client.v1 import tensor_service_pb2 as pb
        x = torch.ones(1024, device="cuda")
        self.alice.compute("neg", x)
        region = self.alice._shm().device_regions
        rid = next(iter(region.values())).id
        t = pb.Tensor(dtype=pb.float32, shape=[16], region=rid, storage_bytes=64)
        with self.assertRaises(grpc.RpcError) as e:
            self.bob.stub.Compute(pb.ComputeRequest(op="neg", inputs=[t]),
                                  metadata=self.bob.metadata)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        # Past the allocation's end (its extent comes from the driver, not the client).
        r = next(iter(region.values()))
        big = pb.Tensor(dtype=pb.float32, shape=[r.nbytes // 4 + 1], region=rid,
                        storage_bytes=r.nbytes + 4)
        with self.assertRaises(grpc.RpcError) as e:
            self.alice.stub.Compute(pb.ComputeRequest(op="neg", inputs=[big]),
                                    metadata=self.alice.metadata)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_bad_registrations(self):
        from tensorcompute_client.v1 import tensor_service_pb2 as pb
        shm = self.alice._shm()
        uuid = self.alice.server_info().devices[0].uuid
        self.assertEqual(len(uuid), 32)
        cases = {"unknown device": f"cuda {'0' * 32} {'00' * 64}",
                 "not hex": f"cuda {uuid} {'zz' * 64}",
                 "short handle": f"cuda {uuid} 0011"}
        for name, msg in cases.items():
            with self.subTest(name):
                shm.sock.send(msg.encode())
                self.assertTrue(shm.sock.recv(512).startswith(b"error"), name)
        # A handle is opened only when its ticket is claimed: one that opens nothing is refused
        # there.
        shm.sock.send(f"cuda {uuid} {'5a' * 64}".encode())
        reply = shm.sock.recv(512).decode()
        self.assertTrue(reply.startswith("ticket "), reply)
        with self.assertRaises(grpc.RpcError) as e:
            self.alice.stub.RegisterRegion(pb.RegisterRegionRequest(ticket=reply.split()[1]),
                                           metadata=self.alice.metadata)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("CUDA IPC handle", e.exception.details())
        # The device is fine afterwards.
        x = torch.arange(10, device="cuda", dtype=torch.float32)
        torch.testing.assert_close(self.alice.compute("square", x), x * x)
        info = self.alice.server_info()
        self.assertEqual(info.devices[0].failure, "")
        # The shared allocation (as large as the driver says) counts against the limit.
        self.assertGreaterEqual(info.shared_memory_bytes, x.nbytes)
        self.assertLessEqual(info.shared_memory_bytes, info.limits.shared_memory_limit_bytes)

    def test_regions_end_with_their_client(self):
        before = self.alice.server_info()
        child = subprocess.Popen([sys.executable, "-c", f"""
import time, torch, tensorcompute_client as tcc
c = tcc.Client({self.target!r}, token={BOB!r})
x = torch.ones(1 << 22, device="cuda")
assert torch.equal(c.compute("add", x, x), x + x)
print("ready", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
        self.assertEqual(child.stdout.readline().strip(), "ready")
        self.assertGreater(self.alice.server_info().regions, before.regions)
        child.kill()
        child.wait()
        child.stdout.close()
        self.assertTrue(wait_for(lambda: self.alice.server_info().regions == before.regions))
        x = torch.ones(7, device="cuda")
        torch.testing.assert_close(self.alice.compute("add", x, x), x + x)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("skipped: PyTorch sees no GPU")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + rest)
