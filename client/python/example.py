#!/usr/bin/env python3
"""Broadcast add through tensorcompute from Python.

Stubs come from the build (build/python); run as
    PYTHONPATH=build/python /usr/bin/python3 client/python/example.py [HOST:PORT]
"""
import sys

import grpc
import numpy as np

from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc


def to_tensor(a: np.ndarray) -> pb.Tensor:
    a = np.ascontiguousarray(a, dtype=np.float32)
    return pb.Tensor(dtype=pb.float32, shape=a.shape, data=a.tobytes())


def from_tensor(t: pb.Tensor) -> np.ndarray:
    assert t.dtype == pb.float32
    flat = np.frombuffer(t.data, dtype=np.float32)
    return np.lib.stride_tricks.as_strided(
        flat[t.offset:], shape=tuple(t.shape), strides=tuple(s * 4 for s in t.strides))


def main() -> None:
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
    stub = pb_grpc.TensorServiceStub(grpc.insecure_channel(target))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([10, 20, 30], dtype=np.float32)
    reply = stub.Compute(pb.ComputeRequest(
        op="add", inputs=[to_tensor(a), to_tensor(b)],
        attributes={"alpha": pb.Attribute(float_value=2.0)}), timeout=10)
    print(from_tensor(reply.output))


if __name__ == "__main__":
    main()
