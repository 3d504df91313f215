#!/usr/bin/env python3
"""A server stopped with SIGTERM exits 0, whatever shared memory its callers left with it:
regions of every kind registered (memfd regions over the region socket, KServe system shared
memory, CUDA IPC where there is a GPU), some unregistered again and some still held, calls
of both front doors in flight at the signal. Several rounds, since a teardown race shows
only now and then.

    test_clean_exit.py --server build/server/tensorcompute-server [--backend cpu|cuda]
                       [--rounds 4]
"""
import argparse
import signal
import sys
import threading
import time
import unittest
from multiprocessing import shared_memory

import grpc
import numpy as np

import tensorcompute_client as tcc
from harness import start_server
from inference import grpc_service_pb2 as v2
from inference import grpc_service_pb2_grpc as v2_grpc

ARGS = None


def shm_input(req, name, datatype, shape, region, nbytes, offset=0):
    t = req.inputs.add(name=name, datatype=datatype, shape=shape)
    t.parameters["shared_memory_region"].string_param = region
    t.parameters["shared_memory_byte_size"].int64_param = nbytes
    t.parameters["shared_memory_offset"].int64_param = offset


def cuda_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


class CleanExitTest(unittest.TestCase):
    def one_round(self, round_):
        proc, target = start_server(ARGS.server, "--system_shared_memory",
                                    "--shutdown_grace_seconds=5", f"--backend={ARGS.backend}")
        rng = np.random.default_rng(round_)
        channel = grpc.insecure_channel(target)
        stub = v2_grpc.GRPCInferenceServiceStub(channel)
        client = tcc.Client(target, shared_memory=True)
        posix = [shared_memory.SharedMemory(create=True, size=1 << 16) for _ in range(3)]
        try:
            # memfd regions over the region socket: one kept, one let go.
            kept = client.shared_array((4096,), np.float32)
            kept[:] = rng.standard_normal(4096)
            np.testing.assert_array_equal(client.compute("neg", kept), -kept)
            gone = client.region(1 << 16)
            x = gone.array((1000,), np.float32)
            x[:] = rng.standard_normal(1000)
            np.testing.assert_array_equal(client.compute("mul", x, x), x * x)
            gone.close()
            # KServe system shared memory, as a Triton client registers it: one region
            # unregistered again, two left registered.
            for k, shm in enumerate(posix):
                stub.SystemSharedMemoryRegister(v2.SystemSharedMemoryRegisterRequest(
                    name=f"r{k}", key="/" + shm.name, byte_size=1 << 16), timeout=10)
                a = rng.standard_normal(256).astype(np.float32)
                np.ndarray((256,), np.float32, buffer=shm.buf)[:] = a
                req = v2.ModelInferRequest(model_name="neg")
                shm_input(req, "INPUT0", "FP32", [256], f"r{k}", a.nbytes)
                out = req.outputs.add(name="OUTPUT0")
                out.parameters["shared_memory_region"].string_param = f"r{k}"
                out.parameters["shared_memory_offset"].int64_param = 4096
                out.parameters["shared_memory_byte_size"].int64_param = a.nbytes
                stub.ModelInfer(req, timeout=30)
                got = np.ndarray((256,), np.float32, buffer=shm.buf, offset=4096)
                np.testing.assert_array_equal(got, -a)
            stub.SystemSharedMemoryUnregister(
                v2.SystemSharedMemoryUnregisterRequest(name="r0"), timeout=10)
            torch = cuda_torch() if ARGS.backend == "cuda" else None
            if torch is not None:  # CUDA IPC: the server computes in this process's memory.
                g = torch.randn(1 << 20, device="cuda")
                torch.testing.assert_close(client.compute("neg", g), -g)
            # Calls of both front doors in flight at the signal.
            stop = threading.Event()

            def hammer():
                a = np.ones(1 << 16, np.float32)
                while not stop.is_set():
                    try:
                        client.compute("add", kept, kept)
                        req = v2.ModelInferRequest(model_name="add",
                                                   raw_input_contents=[a.tobytes()] * 2)
                        for n in ("INPUT0", "INPUT1"):
                            req.inputs.add(name=n, datatype="FP32", shape=[a.size])
                        stub.ModelInfer(req, timeout=10)
                    except grpc.RpcError:
                        pass  # refused while draining, or gone: what a stopping server does

            threads = [threading.Thread(target=hammer, daemon=True) for _ in range(4)]
            for t in threads:
                t.start()
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
            stop.set()
            for t in threads:
                t.join(30)
            return code
        finally:
            if proc.poll() is None:
                proc.kill()
            client.close()
            channel.close()
            for shm in posix:
                shm.close()
                shm.unlink()

    def test_exit_status_is_zero(self):
        codes = [self.one_round(r) for r in range(ARGS.rounds)]
        print(f"exit codes over {ARGS.rounds} rounds: {codes}", flush=True)
        self.assertEqual(codes, [0] * ARGS.rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--rounds", type=int, default=4)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
