#!/usr/bin/env python3
"""The ghz request files in deploy/ghz, used the way ghz uses them: the service's descriptors
fetched through server reflection (the file containing each service's symbol, with its
dependencies), request types built from them, every file parsed with protobuf's JSON parser,
and the requests sent. No generated stubs are involved."""
import argparse
import json
import os
import struct
import sys
import unittest

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from tc_std import reflection_pb2, reflection_pb2_grpc
from harness import start_server, stop_server

ARGS = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GHZ_DIR = os.path.join(REPO, "deploy", "ghz")
V1 = "tensorcompute.v1.TensorService"
V2 = "inference.GRPCInferenceService"
# Every request file and the service and method docs/operations.md runs it against.
FILES = {"add.json": (V1, "Compute"), "compute_stream.json": (V1, "ComputeStream"),
         "expression.json": (V1, "Compute"), "model_infer.json": (V2, "ModelInfer"),
         "model_stream_infer.json": (V2, "ModelStreamInfer")}


class GhzFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(ARGS.server)
        cls.channel = grpc.insecure_channel(cls.target)
        # What ghz does: ask for the file that defines the service, with its dependencies.
        stub = reflection_pb2_grpc.ServerReflectionStub(cls.channel)
        cls.pool = descriptor_pool.DescriptorPool()
        added = set()
        for service in (V1, V2):
            reply = next(stub.ServerReflectionInfo(iter([
                reflection_pb2.ServerReflectionRequest(file_containing_symbol=service)]),
                timeout=10))
            protos = [descriptor_pb2.FileDescriptorProto.FromString(b)
                      for b in reply.file_descriptor_response.file_descriptor_proto]
            protos = [p for p in protos if p.name not in added]
            while any(p.name not in added for p in protos):  # Dependencies first.
                for p in protos:
                    if p.name not in added and all(d in added for d in p.dependency):
                        cls.pool.Add(p)
                        added.add(p.name)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def message_class(self, descriptor):
        return message_factory.MessageFactory(self.pool).GetPrototype(descriptor)

    def test_every_file_is_covered(self):
        shipped = sorted(f for f in os.listdir(GHZ_DIR) if f.endswith(".json"))
        self.assertEqual(shipped, sorted(FILES))

    def test_files_parse_and_run(self):
        for name, (service, method_name) in FILES.items():
            with self.subTest(name):
                method = self.pool.FindServiceByName(service).FindMethodByName(method_name)
                req_cls = self.message_class(method.input_type)
                resp_cls = self.message_class(method.output_type)
                with open(os.path.join(GHZ_DIR, name)) as f:
                    data = json.load(f)
                # ghz takes an array of messages for streaming calls, one object otherwise.
                items = data if isinstance(data, list) else [data]
                self.assertEqual(isinstance(data, list), method.client_streaming or
                                 method.server_streaming)
                requests = [json_format.ParseDict(d, req_cls()) for d in items]
                path = f"/{service}/{method_name}"
                ser, de = (lambda m: m.SerializeToString()), resp_cls.FromString
                if method.client_streaming and method.server_streaming:
                    replies = list(self.channel.stream_stream(path, ser, de)(iter(requests),
                                                                             timeout=10))
                else:
                    replies = [self.channel.unary_unary(path, ser, de)(requests[0], timeout=10)]
                if service == V1 and method.client_streaming:
                    # A header, then the output's chunks.
                    results = [(replies[0].header.shape,
                                b"".join(r.chunk.data for r in replies[1:]))]
                elif service == V1:
                    results = [(replies[0].output.shape, replies[0].output.data)]
                else:
                    for r in replies:
                        r = getattr(r, "infer_response", r)
                        self.assertEqual(r.outputs[0].datatype, "FP32")
                    results = [(getattr(r, "infer_response", r).outputs[0].shape,
                                getattr(r, "infer_response", r).raw_output_contents[0])
                               for r in replies]
                self.assertEqual(len(results), 2 if method_name == "ModelStreamInfer" else 1)
                for shape, data_bytes in results:
                    self.assertEqual(list(shape), [2, 3])
                    self.assertEqual(list(struct.unpack("<6f", data_bytes)),
                                     [21, 42, 63, 24, 45, 66])

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
