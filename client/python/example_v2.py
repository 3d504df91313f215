#!/usr/bin/env python3
"""The same broadcast add through the open inference protocol (KServe v2 / Triton's
inference.GRPCInferenceService): model "add", inputs INPUT0 and INPUT1, attribute alpha as a
request parameter.

Stubs come from the build (build/python); run as
    PYTHONPATH=build/python /usr/bin/python3 client/python/example_v2.py [HOST:PORT]
"""
import sys

import grpc
import numpy as np

from inference import grpc_service_pb2 as v2
from inference import grpc_service_pb2_grpc as v2_grpc


def main() -> None:
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
    stub = v2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(target))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([10, 20, 30], dtype=np.float32)
    request = v2.ModelInferRequest(model_name="add", raw_input_contents=[a.tobytes(), b.tobytes()])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=a.shape)
    request.inputs.add(name="INPUT1", datatype="FP32", shape=b.shape)
    request.parameters["alpha"].double_param = 2.0
    reply = stub.ModelInfer(request, timeout=10)
    out = reply.outputs[0]
    print(out.name, out.datatype, list(out.shape))
    print(np.frombuffer(reply.raw_output_contents[0], dtype=np.float32).reshape(out.shape))


if __name__ == "__main__":
    main()
