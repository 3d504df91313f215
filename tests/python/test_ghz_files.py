#!/usr/bin/env python3
"""The ghz request files in deploy/ghz, used the way ghz uses them: the service's descriptors
fetched through server reflection (the file containing the service symbol, with its
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
SERVICE = "tensorcompute.v1.TensorService"
# Every request file and the method the README runs it against.
FILES = {"add.json": "Compute", "compute_stream.json": "ComputeStream",
         "expression.json": "Compute"}


class GhzFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(ARGS.server)
        cls.channel = grpc.insecure_channel(cls.target)
        # What ghz does: ask for the file that defines the service, with its dependencies.
        stub = reflection_pb2_grpc.ServerReflectionStub(cls.channel)
        reply = next(stub.ServerReflectionInfo(iter([
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE)]), timeout=10))
        cls.pool = descriptor_pool.DescriptorPool()
        protos = [descriptor_pb2.FileDescriptorProto.FromString(b)
                  for b in reply.file_descriptor_response.file_descriptor_proto]
        added = set()
        while len(added) < len(protos):  # Dependencies first.
            for p in protos:
                if p.name not in added and all(d in added for d in p.dependency):
                    cls.pool.Add(p)
                    added.add(p.name)
        cls.service = cls.pool.FindServiceByName(SERVICE)

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
        for name, method_name in FILES.items():
            with self.subTest(name):
                method = self.service.FindMethodByName(method_name)
                req_cls = self.message_class(method.input_type)
                resp_cls = self.message_class(method.output_type)
                with open(os.path.join(GHZ_DIR, name)) as f:
                    data = json.load(f)
                # ghz takes an array of messages for streaming calls, one object otherwise.
                items = data if isinstance(data, list) else [data]
                self.assertEqual(isinstance(data, list), method.client_streaming or
                                 method.server_streaming)
                requests = [json_format.ParseDict(d, req_cls()) for d in items]
                path = f"/{SERVICE}/{method_name}"
                ser, de = (lambda m: m.SerializeToString()), resp_cls.FromString
                if method.client_streaming and method.server_streaming:
                    call = self.channel.stream_stream(path, ser, de)
                    replies = list(call(iter(requests), timeout=10))
                    header = replies[0].header
                    data_bytes = b"".join(r.chunk.data for r in replies[1:])
                else:
                    call = self.channel.unary_unary(path, ser, de)
                    header = call(requests[0], timeout=10).output
                    data_bytes = header.data
                self.assertEqual(list(header.shape), [2, 3])
                self.assertEqual(list(struct.unpack("<6f", data_bytes)),
                                 [21, 42, 63, 24, 45, 66])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
