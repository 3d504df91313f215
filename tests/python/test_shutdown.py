#!/usr/bin/env python3
"""A server told to stop is gone within its grace period and a few seconds, whatever its
clients do: streams of both front doors left open, a client that stops reading its results,
an upload left half done, a client that vanishes mid-call.

    test_shutdown.py --server build/server/tensorcompute-server [--backend=cpu|cuda]
"""
import argparse
import queue
import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc
import numpy as np

from inference import grpc_service_pb2 as v2
from inference import grpc_service_pb2_grpc as v2_grpc
from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc
from harness import start_server

ARGS = None
GRACE = 2
# What "a few seconds" past the grace period allows: gRPC's own shutdown and the process's exit.
SLACK = 5


def held_stream(first, gate):
    """Request messages: `first`, then nothing until `gate` is set (the stream stays open)."""
    for m in first:
        yield m
    gate.wait()


def consume_in_background(responses, got):
    """Reads a response stream on a thread, noting each message; stops at the stream's end."""
    def run():
        try:
            for r in responses:
                got.put(r)
        except grpc.RpcError as e:
            got.put(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


# A client that opens a ComputeStream, sends the header and one chunk of a streamed input, says
# so on stdout, and waits to be killed.
VANISHING_CLIENT = r"""
import sys, time, grpc
from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc
stub = pb_grpc.TensorServiceStub(grpc.insecure_channel(sys.argv[1]))
def msgs():
    yield pb.ComputeStreamRequest(header=pb.ComputeRequest(op="neg", inputs=[
        pb.Tensor(dtype=pb.float32, shape=[1 << 20], storage_bytes=4 << 20)]))
    yield pb.ComputeStreamRequest(chunk=pb.DataChunk(tensor=0, offset=0, data=bytes(1 << 20)))
    print("sent", flush=True)
    time.sleep(600)
for _ in stub.ComputeStream(msgs()):
    pass
"""


class ShutdownTest(unittest.TestCase):
    def test_stops_within_the_grace_period_whatever_clients_do(self):
        proc, target = start_server(ARGS.server, f"--backend={ARGS.backend}",
                                    f"--shutdown_grace_seconds={GRACE}",
                                    "--chunk_bytes=65536")
        gate = threading.Event()
        channel = grpc.insecure_channel(target)
        stub = pb_grpc.TensorServiceStub(channel)
        v2stub = v2_grpc.GRPCInferenceServiceStub(channel)
        readers = []
        try:
            # A resident tensor of 64 MiB, for a download nobody reads.
            big = np.ones(16 << 20, np.float32)
            kept = stub.ComputeStream(iter([
                pb.ComputeStreamRequest(header=pb.ComputeRequest(
                    op="neg", keep_output_resident=True,
                    inputs=[pb.Tensor(dtype=pb.float32, shape=[big.size],
                                      storage_bytes=big.nbytes)]))] + [
                pb.ComputeStreamRequest(chunk=pb.DataChunk(
                    tensor=0, offset=off, data=big.tobytes()[off:off + (4 << 20)]))
                for off in range(0, big.nbytes, 4 << 20)]), timeout=60)
            handle = next(iter(kept)).header.handle
            self.assertTrue(handle)

            # 1. A ComputeStream whose streamed input never completes.
            got1 = queue.Queue()
            readers.append(consume_in_background(stub.ComputeStream(held_stream([
                pb.ComputeStreamRequest(header=pb.ComputeRequest(op="neg", inputs=[
                    pb.Tensor(dtype=pb.float32, shape=[1024], storage_bytes=4096)]))], gate)),
                got1))
            # 2. A ModelStreamInfer answered once, then left open.
            got2 = queue.Queue()
            req = v2.ModelInferRequest(model_name="neg", id="one")
            req.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
            req.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
            readers.append(consume_in_background(
                v2stub.ModelStreamInfer(held_stream([req], gate)), got2))
            first = got2.get(timeout=30)
            self.assertFalse(isinstance(first, grpc.RpcError), first)
            self.assertEqual(first.infer_response.id, "one")
            # 3. A Download of 64 MiB whose reader stops after one message.
            download = stub.Download(pb.DownloadRequest(handle=handle, chunk_bytes=65536))
            next(iter(download))
            # 4. A ModelStreamInfer of large results the client never reads.
            big_req = v2.ModelInferRequest(model_name="neg")
            big_req.inputs.add(name="INPUT0", datatype="FP32", shape=[4 << 20])
            big_req.raw_input_contents.append(bytes(16 << 20))
            unread = v2stub.ModelStreamInfer(held_stream([big_req] * 8, gate))
            # 5. An Upload left after its header.
            got5 = queue.Queue()
            upload = stub.Upload.future(held_stream([pb.UploadRequest(header=pb.UploadHeader(
                tensor=pb.Tensor(dtype=pb.float32, shape=[1 << 20], storage_bytes=4 << 20)))],
                gate))
            # 6. A client process that vanishes in the middle of a stream.
            client = subprocess.Popen([sys.executable, "-c", VANISHING_CLIENT, target],
                                      stdout=subprocess.PIPE, text=True)
            self.assertEqual(client.stdout.readline().strip(), "sent")
            client.send_signal(signal.SIGKILL)
            client.wait(timeout=10)
            client.stdout.close()
            time.sleep(0.5)  # every call has reached the server

            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=GRACE + SLACK + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.fail("the server did not stop")
            took = time.monotonic() - start
            self.assertLess(took, GRACE + SLACK, f"stopped after {took:.1f} s")
            self.assertEqual(code, 0)
            # Every call of the clients that stayed has ended, one way or another.
            for r in readers:
                r.join(timeout=10)
                self.assertFalse(r.is_alive())
            self.assertTrue(upload.done() or upload.exception(timeout=10) is not None)
            del unread, download, got5
        finally:
            gate.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            channel.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--backend", default="cpu")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
