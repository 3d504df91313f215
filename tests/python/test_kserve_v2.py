#!/usr/bin/env python3
"""The open inference protocol (KServe v2 / Triton's inference.GRPCInferenceService) through the
real server, spoken only in the protocol's own messages (generated from proto/inference), with
Debian's python3-grpcio; results compared with PyTorch on the same inputs.

    test_kserve_v2.py --server build/server/tensorcompute-server [--backend=cpu|cuda]
"""
import argparse
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from multiprocessing import shared_memory

import grpc
import numpy as np
import torch

from inference import grpc_service_pb2 as v2
from inference import grpc_service_pb2_grpc as v2_grpc
from tc_std import health_pb2, health_pb2_grpc, reflection_pb2, reflection_pb2_grpc
from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc
from harness import start_server, stop_server, wait_for

ARGS = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "v2-client-token-0123456789"

# The protocol's datatype names and PyTorch's dtypes.
DATATYPES = {
    "BOOL": torch.bool, "UINT8": torch.uint8, "INT8": torch.int8, "INT16": torch.int16,
    "INT32": torch.int32, "INT64": torch.int64, "FP16": torch.float16, "BF16": torch.bfloat16,
    "FP32": torch.float32, "FP64": torch.float64,
}
NAMES = {v: k for k, v in DATATYPES.items()}


def raw_bytes(t: torch.Tensor) -> bytes:
    """Little-endian row-major bytes, as raw_input_contents carries them."""
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def tensor_from(datatype: str, shape, raw: bytes) -> torch.Tensor:
    dtype = DATATYPES[datatype]
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(tuple(shape))


def random_tensor(rng, shape, dtype):
    if dtype == torch.bool:
        return torch.from_numpy(rng.integers(0, 2, size=shape).astype(np.bool_))
    if dtype.is_floating_point:
        return torch.from_numpy(rng.standard_normal(size=shape)).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -100), min(info.max, 100)
    return torch.from_numpy(rng.integers(lo, hi + 1, size=shape)).to(dtype)


def infer_request(model, tensors, parameters=None, **kw):
    """A ModelInferRequest with the tensors as INPUT0, INPUT1, ... (or the names given as
    (name, tensor) pairs), their bytes in raw_input_contents."""
    req = v2.ModelInferRequest(model_name=model, **kw)
    for i, t in enumerate(tensors):
        name, t = t if isinstance(t, tuple) else (f"INPUT{i}", t)
        req.inputs.add(name=name, datatype=NAMES[t.dtype], shape=list(t.shape))
        req.raw_input_contents.append(raw_bytes(t))
    for key, value in (parameters or {}).items():
        p = req.parameters[key]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, int):
            p.int64_param = value
        elif isinstance(value, float):
            p.double_param = value
        else:
            p.string_param = value
    return req


def output_of(resp: v2.ModelInferResponse) -> torch.Tensor:
    assert len(resp.outputs) == 1 and len(resp.raw_output_contents) == 1
    out = resp.outputs[0]
    return tensor_from(out.datatype, out.shape, resp.raw_output_contents[0])


def rpc_error(test, code, fn, *args, **kw):
    with test.assertRaises(grpc.RpcError) as e:
        fn(*args, **kw)
    test.assertEqual(e.exception.code(), code, e.exception.details())
    return e.exception.details()


class KServeV2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(ARGS.server, f"--backend={ARGS.backend}")
        # As tritonclient does: messages of any size up to gRPC's 2 GB.
        cls.channel = grpc.insecure_channel(cls.target, options=[
            ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
        cls.stub = v2_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.rng = np.random.default_rng()

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def infer(self, model, *tensors, parameters=None):
        return output_of(self.stub.ModelInfer(infer_request(model, tensors, parameters), timeout=30))

    def assert_same(self, got, want):
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, equal_nan=True)
        else:
            self.assertTrue(torch.equal(got, want), f"{got} != {want}")

    def test_health_live_ready(self):
        self.assertTrue(self.stub.ServerLive(v2.ServerLiveRequest(), timeout=10).live)
        self.assertTrue(self.stub.ServerReady(v2.ServerReadyRequest(), timeout=10).ready)
        health = health_pb2_grpc.HealthStub(self.channel)
        r = health.Check(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"),
                         timeout=10)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)
        self.assertTrue(self.stub.ModelReady(v2.ModelReadyRequest(name="add"), timeout=10).ready)
        self.assertTrue(self.stub.ModelReady(v2.ModelReadyRequest(name="expression", version="1"),
                                             timeout=10).ready)
        self.assertFalse(self.stub.ModelReady(v2.ModelReadyRequest(name="resnet50"),
                                              timeout=10).ready)
        self.assertFalse(self.stub.ModelReady(v2.ModelReadyRequest(name="add", version="2"),
                                              timeout=10).ready)

    def test_reflection_lists_the_service(self):
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        reqs = iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        names = [s.name for r in stub.ServerReflectionInfo(reqs, timeout=10)
                 for s in r.list_services_response.service]
        self.assertIn("inference.GRPCInferenceService", names)
        self.assertIn("tensorcompute.v1.TensorService", names)

    def test_server_metadata(self):
        r = self.stub.ServerMetadata(v2.ServerMetadataRequest(), timeout=10)
        self.assertEqual(r.name, "tensorcompute")
        info = pb_grpc.TensorServiceStub(self.channel).ServerInfo(pb.ServerInfoRequest(), timeout=10)
        self.assertEqual(r.version, info.version)
        self.assertIn("parameters", r.extensions)
        self.assertIn("model_configuration", r.extensions)
        self.assertNotIn("system_shared_memory", r.extensions)

    def test_statistics_count_each_models_requests(self):
        """ModelStatistics as Triton reports it: whole requests that succeeded and failed, through
        either protocol, and the stages of the successful ones."""
        def stats(name):
            r = self.stub.ModelStatistics(v2.ModelStatisticsRequest(name=name), timeout=10)
            self.assertEqual(len(r.model_stats), 1)
            self.assertEqual((r.model_stats[0].name, r.model_stats[0].version), (name, "1"))
            return r.model_stats[0]

        before = stats("atan2")
        t0_ms = int(time.time() * 1000)
        a = random_tensor(self.rng, (3, 5), torch.float32)
        b = random_tensor(self.rng, (5,), torch.float32)
        for _ in range(4):
            self.assert_same(self.infer("atan2", a, b), torch.atan2(a, b))
        # Through tensorcompute.v1 too.
        v1 = pb_grpc.TensorServiceStub(self.channel)
        v1.Compute(pb.ComputeRequest(op="atan2", inputs=[
            pb.Tensor(dtype=pb.float32, shape=list(t.shape), data=raw_bytes(t)) for t in (a, b)]),
            timeout=10)
        # Shapes that do not broadcast: a failed request of the model.
        c = random_tensor(self.rng, (4,), torch.float32)
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.stub.ModelInfer,
                  infer_request("atan2", [a, c]), timeout=10)
        after = stats("atan2")
        s0, s1 = before.inference_stats, after.inference_stats
        self.assertEqual(s1.success.count - s0.success.count, 5)
        self.assertEqual(s1.fail.count - s0.fail.count, 1)
        self.assertGreater(s1.success.ns, s0.success.ns)
        self.assertGreater(s1.fail.ns, s0.fail.ns)
        # One execution a request (no batching), successful ones only.
        self.assertEqual(after.inference_count - before.inference_count, 5)
        self.assertEqual(after.execution_count - before.execution_count, 5)
        for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
            d0, d1 = getattr(s0, stage), getattr(s1, stage)
            self.assertEqual(d1.count - d0.count, 5, stage)
        # The stages lie within the requests.
        stage_ns = sum(getattr(s1, k).ns - getattr(s0, k).ns
                       for k in ("queue", "compute_input", "compute_infer", "compute_output"))
        self.assertLessEqual(stage_ns, s1.success.ns - s0.success.ns)
        self.assertGreater(s1.compute_infer.ns, s0.compute_infer.ns)
        self.assertGreaterEqual(after.last_inference, t0_ms)
        self.assertLessEqual(after.last_inference, int(time.time() * 1000))
        self.assertEqual(len(after.batch_stats), 0)
        # Every model when none is named: each op once, and the expression model.
        every = self.stub.ModelStatistics(v2.ModelStatisticsRequest(), timeout=10).model_stats
        names = [m.name for m in every]
        self.assertEqual(len(names), len(set(names)))
        self.assertIn("atan2", names)
        self.assertIn("expression", names)
        ops = {o.name for o in v1.ListOps(pb.ListOpsRequest(), timeout=10).ops}
        self.assertEqual(set(names), ops | {"expression"})
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.ModelStatistics,
                            v2.ModelStatisticsRequest(name="resnet50"), timeout=10)
        self.assertIn("'resnet50'", details)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.ModelStatistics,
                  v2.ModelStatisticsRequest(name="atan2", version="2"), timeout=10)
        r = self.stub.ServerMetadata(v2.ServerMetadataRequest(), timeout=10)
        self.assertIn("statistics", r.extensions)

    def test_repository_index(self):
        v1 = pb_grpc.TensorServiceStub(self.channel)
        ops = {o.name for o in v1.ListOps(pb.ListOpsRequest(), timeout=10).ops}
        for ready in (False, True):
            r = self.stub.RepositoryIndex(v2.RepositoryIndexRequest(ready=ready), timeout=10)
            self.assertEqual({m.name for m in r.models}, ops | {"expression"})
            self.assertEqual(len(r.models), len(ops) + 1)
            for m in r.models:
                self.assertEqual((m.version, m.state, m.reason), ("1", "READY", ""), m.name)
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.RepositoryIndex,
                            v2.RepositoryIndexRequest(repository_name="models"), timeout=10)
        self.assertIn("'models'", details)

    def test_model_metadata(self):
        r = self.stub.ModelMetadata(v2.ModelMetadataRequest(name="add"), timeout=10)
        self.assertEqual(r.name, "add")
        self.assertEqual(list(r.versions), ["1"])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in r.inputs],
                         [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in r.outputs],
                         [("OUTPUT0", "FP32", [-1])])
        r = self.stub.ModelMetadata(v2.ModelMetadataRequest(name="gt", version="1"), timeout=10)
        self.assertEqual(r.outputs[0].datatype, "BOOL")
        r = self.stub.ModelMetadata(v2.ModelMetadataRequest(name="where"), timeout=10)
        self.assertEqual([t.datatype for t in r.inputs], ["BOOL", "FP32", "FP32"])
        r = self.stub.ModelMetadata(v2.ModelMetadataRequest(name="bitwise_and"), timeout=10)
        self.assertEqual(r.inputs[0].datatype, r.outputs[0].datatype)
        # Every op of ListOps is a model, whose output datatype is what a request with the
        # inputs' datatypes gets (ops that need an attribute aside).
        ops = pb_grpc.TensorServiceStub(self.channel).ListOps(pb.ListOpsRequest(), timeout=10).ops
        checked = 0
        for op in ops:
            r = self.stub.ModelMetadata(v2.ModelMetadataRequest(name=op.name), timeout=10)
            self.assertEqual(r.name, op.name)
            self.assertEqual(len(r.outputs), 1)
            req = v2.ModelInferRequest(model_name=op.name)
            for t in r.inputs:
                size = {"BOOL": 1, "UINT8": 1, "INT8": 1, "INT16": 2, "FP16": 2, "BF16": 2,
                        "INT32": 4, "FP32": 4, "INT64": 8, "FP64": 8}[t.datatype]
                req.inputs.add(name=t.name, datatype=t.datatype, shape=[2])
                req.raw_input_contents.append(b"\x01" + b"\x00" * (2 * size - 1))
            try:
                out = self.stub.ModelInfer(req, timeout=10)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, op.name)
                continue
            self.assertEqual(out.outputs[0].datatype, r.outputs[0].datatype, op.name)
            checked += 1
        self.assertGreater(checked, 40)
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.ModelMetadata,
                            v2.ModelMetadataRequest(name="resnet50"), timeout=10)
        self.assertIn("'resnet50'", details)
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.ModelMetadata,
                            v2.ModelMetadataRequest(name="add", version="3"), timeout=10)
        self.assertIn("version '3'", details)

    def test_model_config(self):
        c = self.stub.ModelConfig(v2.ModelConfigRequest(name="add"), timeout=10).config
        self.assertEqual((c.name, c.platform, c.backend, c.max_batch_size), ("add", "tensorcompute",
                                                                            "tensorcompute", 0))
        self.assertEqual([(i.name, i.data_type, list(i.dims)) for i in c.input],
                         [("INPUT0", v2.TYPE_FP32, [-1]), ("INPUT1", v2.TYPE_FP32, [-1])])
        self.assertEqual([(o.name, o.data_type, list(o.dims)) for o in c.output],
                         [("OUTPUT0", v2.TYPE_FP32, [-1])])
        self.assertFalse(c.model_transaction_policy.decoupled)
        c = self.stub.ModelConfig(v2.ModelConfigRequest(name="where", version="1"),
                                  timeout=10).config
        self.assertEqual([i.data_type for i in c.input], [v2.TYPE_BOOL, v2.TYPE_FP32, v2.TYPE_FP32])
        c = self.stub.ModelConfig(v2.ModelConfigRequest(name="gt"), timeout=10).config
        self.assertEqual(c.output[0].data_type, v2.TYPE_BOOL)
        # It agrees with ModelMetadata for every op.
        ops = pb_grpc.TensorServiceStub(self.channel).ListOps(pb.ListOpsRequest(), timeout=10).ops
        for op in ops:
            c = self.stub.ModelConfig(v2.ModelConfigRequest(name=op.name), timeout=10).config
            m = self.stub.ModelMetadata(v2.ModelMetadataRequest(name=op.name), timeout=10)
            self.assertEqual([(i.name, v2.DataType.Name(i.data_type)) for i in c.input],
                             [(i.name, "TYPE_" + i.datatype) for i in m.inputs])
            self.assertEqual(v2.DataType.Name(c.output[0].data_type), "TYPE_" + m.outputs[0].datatype)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.ModelConfig,
                  v2.ModelConfigRequest(name="resnet50"), timeout=10)

    def test_every_datatype(self):
        for name, dtype in DATATYPES.items():
            for shape in [(5,), (3, 7), (), (0, 4), (2, 1, 3)]:
                a = random_tensor(self.rng, shape, dtype)
                b = random_tensor(self.rng, shape, dtype)
                want = torch.maximum(a, b)
                self.assert_same(self.infer("maximum", a, b), want)
                self.assert_same(self.infer("eq", a, b), torch.eq(a, b))
            if dtype != torch.bool:
                a = random_tensor(self.rng, (9,), dtype)
                b = random_tensor(self.rng, (9,), dtype)
                self.assert_same(self.infer("add", a, b), torch.add(a, b))

    def test_broadcasting_and_mixed_types(self):
        for sa, sb in [((2, 3), (3,)), ((4, 1, 5), (3, 1)), ((), (7,)), ((1031,), ()),
                       ((3, 1, 2, 1), (1, 4, 1, 5))]:
            a = random_tensor(self.rng, sa, torch.float32)
            b = random_tensor(self.rng, sb, torch.float16)
            self.assert_same(self.infer("mul", a, b), torch.mul(a, b))
        cond = random_tensor(self.rng, (6, 1), torch.bool)
        x = random_tensor(self.rng, (6, 5), torch.float32)
        y = random_tensor(self.rng, (), torch.float64)
        self.assert_same(self.infer("where", cond, x, y), torch.where(cond, x, y))
        i = random_tensor(self.rng, (4, 4), torch.int32)
        self.assert_same(self.infer("sigmoid", i), torch.sigmoid(i))

    def test_inputs_by_name_in_any_order(self):
        a = random_tensor(self.rng, (3, 4), torch.float32)
        b = random_tensor(self.rng, (4,), torch.float32)
        req = infer_request("sub", [("INPUT1", b), ("INPUT0", a)])
        self.assert_same(output_of(self.stub.ModelInfer(req, timeout=30)), a - b)

    def test_attributes_as_parameters(self):
        a = random_tensor(self.rng, (17,), torch.float32)
        b = random_tensor(self.rng, (17,), torch.float32)
        self.assert_same(self.infer("add", a, b, parameters={"alpha": 2.5}),
                         torch.add(a, b, alpha=2.5))
        # A whole number as int64_param where a float is expected.
        self.assert_same(self.infer("add", a, b, parameters={"alpha": 3}),
                         torch.add(a, b, alpha=3))
        self.assert_same(self.infer("clamp", a, parameters={"min": -0.5, "max": 0.25}),
                         torch.clamp(a, -0.5, 0.25))
        i = random_tensor(self.rng, (8,), torch.int64)
        self.assert_same(self.infer("add", i, i, parameters={"alpha": 2}), i + 2 * i)
        # The protocol's scheduling parameters are taken and change nothing.
        self.assert_same(self.infer("add", a, b, parameters={"priority": 1, "timeout": 100000}),
                         a + b)

    def test_typed_contents(self):
        req = v2.ModelInferRequest(model_name="add")
        req.inputs.add(name="INPUT0", datatype="FP32", shape=[2, 2],
                       contents=v2.InferTensorContents(fp32_contents=[1, 2, 3, 4]))
        req.inputs.add(name="INPUT1", datatype="FP32", shape=[2],
                       contents=v2.InferTensorContents(fp32_contents=[10, 20]))
        self.assert_same(output_of(self.stub.ModelInfer(req, timeout=30)),
                         torch.tensor([[11.0, 22.0], [13.0, 24.0]]))
        req = v2.ModelInferRequest(model_name="mul")
        req.inputs.add(name="INPUT0", datatype="INT8", shape=[3],
                       contents=v2.InferTensorContents(int_contents=[-3, 5, 100]))
        req.inputs.add(name="INPUT1", datatype="INT8", shape=[3],
                       contents=v2.InferTensorContents(int_contents=[2, -2, 2]))
        # int8 wraps, as in PyTorch.
        self.assert_same(output_of(self.stub.ModelInfer(req, timeout=30)),
                         torch.tensor([-6, -10, -56], dtype=torch.int8))
        req = v2.ModelInferRequest(model_name="logical_not")
        req.inputs.add(name="INPUT0", datatype="BOOL", shape=[3],
                       contents=v2.InferTensorContents(bool_contents=[True, False, True]))
        self.assert_same(output_of(self.stub.ModelInfer(req, timeout=30)),
                         torch.tensor([False, True, False]))

    def test_expression_model(self):
        a, b, c = (random_tensor(self.rng, (5, 6), torch.float32) for _ in range(3))
        req = infer_request("expression", [("a", a), ("b", b), ("c", c)],
                            {"expression": "sigmoid(a * b + c)"})
        self.assert_same(output_of(self.stub.ModelInfer(req, timeout=30)),
                         torch.sigmoid(a * b + c))
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.stub.ModelInfer,
                            infer_request("expression", [("a", a)]), timeout=30)
        self.assertIn("'expression'", details)

    def test_request_id_and_requested_output(self):
        a = random_tensor(self.rng, (4,), torch.float32)
        req = infer_request("neg", [a], id="request-17")
        req.outputs.add(name="OUTPUT0")
        resp = self.stub.ModelInfer(req, timeout=30)
        self.assertEqual(resp.id, "request-17")
        self.assertEqual(resp.model_name, "neg")
        self.assertEqual(resp.model_version, "1")
        self.assert_same(output_of(resp), -a)

    def test_errors_in_the_protocols_terms(self):
        a = random_tensor(self.rng, (4,), torch.float32)
        infer = self.stub.ModelInfer
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, infer,
                            infer_request("resnet50", [a]), timeout=10)
        self.assertIn("'resnet50'", details)
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, infer,
                            infer_request("add", [a, a], model_version="7"), timeout=10)
        self.assertIn("version '7'", details)
        # A datatype the server does not have.
        req = infer_request("add", [a, a])
        req.inputs[1].datatype = "UINT32"
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        self.assertIn("UINT32", details)
        self.assertIn("FP32", details)
        req.inputs[1].datatype = "BYTES"
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        # Bytes that do not match the shape.
        req = infer_request("add", [a, a])
        req.raw_input_contents[1] = req.raw_input_contents[1][:-4]
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        self.assertIn("16 bytes", details)
        # Shapes that do not broadcast, a wrong input name, a wrong arity, a missing raw entry.
        b = random_tensor(self.rng, (3,), torch.float32)
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, infer_request("add", [a, b]),
                  timeout=10)
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer,
                            infer_request("add", [a, ("x", a)]), timeout=10)
        self.assertIn("INPUT0, INPUT1", details)
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer,
                            infer_request("add", [a]), timeout=10)
        self.assertIn("takes 2 inputs, got 1", details)
        req = infer_request("add", [a, a])
        del req.raw_input_contents[1]
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        # Negative dims, and more elements than the server takes.
        req = infer_request("neg", [a])
        req.inputs[0].shape[:] = [-4]
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        req.inputs[0].shape[:] = [1 << 40, 1 << 40]
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        # Integer division by zero, an unknown attribute, a wrong output name.
        i = torch.tensor([1, 2, 3], dtype=torch.int32)
        z = torch.tensor([1, 0, 1], dtype=torch.int32)
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer,
                            infer_request("floor_divide", [i, z]), timeout=10)
        self.assertIn("division by zero", details)
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer,
                  infer_request("add", [a, a], {"beta": 1.0}), timeout=10)
        req = infer_request("add", [a, a])
        req.outputs.add(name="OUTPUT1")
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        self.assertIn("OUTPUT0", details)
        req = infer_request("add", [a, a])
        req.outputs.add(name="OUTPUT0")
        req.outputs.add(name="OUTPUT0")
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        # An expression of more inputs than one may have, refused before anything is read.
        many = infer_request("expression", [(f"x{k}", a) for k in range(17)],
                             {"expression": " + ".join(f"x{k}" for k in range(17))})
        self.assertIn("at most 16", rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, many,
                                              timeout=10))
        # FP16 has no typed contents.
        req = v2.ModelInferRequest(model_name="neg")
        req.inputs.add(name="INPUT0", datatype="FP16", shape=[1],
                       contents=v2.InferTensorContents(fp32_contents=[1.0]))
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        # Contents and raw bytes together.
        req = infer_request("neg", [a])
        req.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4])
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        # A shared-memory input on a server without system shared memory: its region is
        # unknown, and the message says the feature is off; so is a registration refused.
        req = infer_request("neg", [a])
        del req.raw_input_contents[:]
        req.inputs[0].parameters["shared_memory_region"].string_param = "r0"
        req.inputs[0].parameters["shared_memory_byte_size"].int64_param = 16
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, infer, req, timeout=10)
        self.assertIn("--system_shared_memory", details)
        del req.inputs[0].parameters["shared_memory_byte_size"]
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, infer, req, timeout=10)
        self.assertIn("shared_memory_byte_size", details)
        rpc_error(self, grpc.StatusCode.FAILED_PRECONDITION, self.stub.SystemSharedMemoryRegister,
                  v2.SystemSharedMemoryRegisterRequest(name="r0", key="/x", byte_size=16),
                  timeout=10)
        # Still serving after all of it.
        self.assertTrue(self.stub.ServerReady(v2.ServerReadyRequest(), timeout=10).ready)
        self.assert_same(self.infer("add", a, a), a + a)

    def test_stream_infer(self):
        a = random_tensor(self.rng, (64,), torch.float32)
        b = random_tensor(self.rng, (64,), torch.float32)
        requests = [infer_request("add", [a, b], id="0"),
                    infer_request("resnet50", [a], id="1"),
                    infer_request("mul", [a, b], id="2"),
                    infer_request("add", [a, random_tensor(self.rng, (3,), torch.float32)], id="3"),
                    infer_request("neg", [b], id="4")]
        responses = list(self.stub.ModelStreamInfer(iter(requests), timeout=30))
        self.assertEqual(len(responses), 5)
        self.assertEqual([r.infer_response.id for r in responses], ["0", "1", "2", "3", "4"])
        self.assertEqual(responses[0].error_message, "")
        self.assert_same(output_of(responses[0].infer_response), a + b)
        self.assertIn("'resnet50'", responses[1].error_message)
        self.assert_same(output_of(responses[2].infer_response), a * b)
        self.assertNotEqual(responses[3].error_message, "")
        self.assert_same(output_of(responses[4].infer_response), -b)

    def test_large_tensor(self):
        a = random_tensor(self.rng, (1 << 22,), torch.float32)
        b = random_tensor(self.rng, (1 << 22,), torch.float32)
        self.assert_same(self.infer("add", a, b), a + b)

    def test_readme_example(self):
        out = subprocess.run([sys.executable, os.path.join(REPO, "client/python/example_v2.py"),
                              self.target], capture_output=True, text=True, timeout=30,
                             check=True).stdout
        self.assertEqual(out.split(), "OUTPUT0 FP32 [2, 3] [[20. 41. 62.] [23. 44. 65.]]".split())

    def requests_total(self):
        """tensorcompute_requests_total by (method, op, code)."""
        info = pb_grpc.TensorServiceStub(self.channel).ServerInfo(pb.ServerInfoRequest(), timeout=10)
        with urllib.request.urlopen(f"http://127.0.0.1:{info.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        counts = {}
        for line in text.splitlines():
            if line.startswith("tensorcompute_requests_total{"):
                labels, value = line[len("tensorcompute_requests_total{"):].split("} ")
                d = dict(kv.split("=", 1) for kv in labels.split(","))
                key = tuple(d[k].strip('"') for k in ("method", "op", "code"))
                counts[key] = float(value)
        return counts

    def test_metrics_count_the_calls(self):
        a = random_tensor(self.rng, (8,), torch.float32)
        before = self.requests_total()
        for _ in range(3):
            self.infer("sub", a, a)
        with self.assertRaises(grpc.RpcError):
            self.stub.ModelInfer(infer_request("no-such-model", [a]), timeout=10)
        list(self.stub.ModelStreamInfer(iter([infer_request("sub", [a, a])]), timeout=10))
        after = self.requests_total()
        delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        # An unknown model's name is not a label.
        self.assertEqual(delta, {("ModelInfer", "sub", "OK"): 3,
                                 ("ModelInfer", "", "NOT_FOUND"): 1,
                                 ("ModelStreamInfer", "sub", "OK"): 1,
                                 ("ServerInfo", "", "OK"): 1})


def shm_input(req, name, datatype, shape, region, nbytes, offset=0):
    t = req.inputs.add(name=name, datatype=datatype, shape=shape)
    t.parameters["shared_memory_region"].string_param = region
    t.parameters["shared_memory_byte_size"].int64_param = nbytes
    if offset:
        t.parameters["shared_memory_offset"].int64_param = offset
    return t


class KServeV2SharedMemoryTest(unittest.TestCase):
    """System shared memory: POSIX objects registered by key, inputs read from them and outputs
    written into them, bad ranges and a truncated object answered with errors."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(ARGS.server, f"--backend={ARGS.backend}",
                                            "--system_shared_memory", "--max_request_bytes=500000")
        cls.channel = grpc.insecure_channel(cls.target)
        cls.stub = v2_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.rng = np.random.default_rng()

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def setUp(self):
        self.shm = shared_memory.SharedMemory(create=True, size=1 << 16)
        self.key = "/" + self.shm.name

    def tearDown(self):
        self.stub.SystemSharedMemoryUnregister(v2.SystemSharedMemoryUnregisterRequest(), timeout=10)
        self.shm.close()
        self.shm.unlink()

    def register(self, name, offset=0, byte_size=1 << 16, key=None):
        return self.stub.SystemSharedMemoryRegister(v2.SystemSharedMemoryRegisterRequest(
            name=name, key=key or self.key, offset=offset, byte_size=byte_size), timeout=10)

    def test_inputs_and_output_in_shared_memory(self):
        a = self.rng.standard_normal((16, 32)).astype(np.float32)
        b = self.rng.standard_normal(32).astype(np.float32)
        buf = np.ndarray((1 << 14,), dtype=np.float32, buffer=self.shm.buf)
        buf[:512] = a.ravel()
        buf[1024:1056] = b
        self.register("in", byte_size=8192)      # a: bytes [0, 2048)
        self.register("rest", offset=4096, byte_size=(1 << 16) - 4096)  # b, the output at 8192
        status = self.stub.SystemSharedMemoryStatus(v2.SystemSharedMemoryStatusRequest(),
                                                    timeout=10).regions
        self.assertEqual(sorted(status), ["in", "rest"])
        self.assertEqual((status["rest"].key, status["rest"].offset, status["rest"].byte_size),
                         (self.key, 4096, (1 << 16) - 4096))
        req = v2.ModelInferRequest(model_name="add")
        shm_input(req, "INPUT0", "FP32", [16, 32], "in", a.nbytes)
        shm_input(req, "INPUT1", "FP32", [32], "rest", b.nbytes)
        out = req.outputs.add(name="OUTPUT0")
        out.parameters["shared_memory_region"].string_param = "rest"
        out.parameters["shared_memory_offset"].int64_param = 8192
        out.parameters["shared_memory_byte_size"].int64_param = a.nbytes
        resp = self.stub.ModelInfer(req, timeout=30)
        self.assertEqual(list(resp.raw_output_contents), [b""])
        self.assertEqual(list(resp.outputs[0].shape), [16, 32])
        got = np.ndarray((16, 32), dtype=np.float32, buffer=self.shm.buf, offset=4096 + 8192)
        np.testing.assert_array_equal(got, a + b)
        # One input in shared memory, one inline (its raw entry is the only one), the output
        # inline; and through a stream.
        c = self.rng.standard_normal(32).astype(np.float32)
        req = v2.ModelInferRequest(model_name="mul", raw_input_contents=[c.tobytes()])
        shm_input(req, "INPUT0", "FP32", [16, 32], "in", a.nbytes)
        req.inputs.add(name="INPUT1", datatype="FP32", shape=[32])
        np.testing.assert_array_equal(
            np.frombuffer(self.stub.ModelInfer(req, timeout=30).raw_output_contents[0],
                          np.float32).reshape(16, 32), a * c)
        replies = list(self.stub.ModelStreamInfer(iter([req, req]), timeout=30))
        self.assertEqual([r.error_message for r in replies], ["", ""])

    def test_bad_ranges_and_names(self):
        call = lambda code, req: rpc_error(self, code, self.stub.ModelInfer, req, timeout=10)
        self.register("r", byte_size=4096)
        details = rpc_error(self, grpc.StatusCode.ALREADY_EXISTS, self.register, "r")
        self.assertIn("'r'", details)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.register, "s", key="/no-such-object-tc")
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.register, "s", key="/../etc")
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.register, "s", offset=1 << 15,
                  byte_size=1 << 16)
        req = v2.ModelInferRequest(model_name="neg")
        shm_input(req, "INPUT0", "FP32", [4], "nope", 16)
        self.assertIn("'nope'", call(grpc.StatusCode.NOT_FOUND, req))
        req = v2.ModelInferRequest(model_name="neg")
        shm_input(req, "INPUT0", "FP32", [4], "r", 12)
        self.assertIn("16 bytes", call(grpc.StatusCode.INVALID_ARGUMENT, req))
        req = v2.ModelInferRequest(model_name="neg")
        shm_input(req, "INPUT0", "FP32", [4], "r", 16, offset=4090)
        self.assertIn("outside", call(grpc.StatusCode.INVALID_ARGUMENT, req))
        req = v2.ModelInferRequest(model_name="neg")
        shm_input(req, "INPUT0", "FP32", [4], "r", 16)
        out = req.outputs.add(name="OUTPUT0")
        out.parameters["shared_memory_region"].string_param = "r"
        out.parameters["shared_memory_byte_size"].int64_param = 8
        self.assertIn("8", call(grpc.StatusCode.INVALID_ARGUMENT, req))
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.SystemSharedMemoryUnregister,
                  v2.SystemSharedMemoryUnregisterRequest(name="nope"), timeout=10)
        self.assertTrue(self.stub.ServerReady(v2.ServerReadyRequest(), timeout=10).ready)

    def test_reads_stay_within_the_request_limit(self):
        # Eight 64 KiB inputs read from one region: past --max_request_bytes=500000 at the
        # eighth, refused before it is read.
        self.register("r")
        names = "abcdefgh"
        req = v2.ModelInferRequest(model_name="expression")
        req.parameters["expression"].string_param = " + ".join(names)
        for name in names:
            shm_input(req, name, "FP32", [16384], "r", 65536)
        details = rpc_error(self, grpc.StatusCode.RESOURCE_EXHAUSTED, self.stub.ModelInfer, req,
                            timeout=10)
        self.assertIn("500000", details)
        del req.inputs[7:]
        req.parameters["expression"].string_param = " + ".join(names[:7])
        got = np.frombuffer(self.stub.ModelInfer(req, timeout=10).raw_output_contents[0],
                            np.float32)
        np.testing.assert_array_equal(got, 7 * np.ndarray((16384,), np.float32, self.shm.buf))

    def test_truncated_object_fails_the_request_not_the_server(self):
        self.register("r")
        os.ftruncate(self.shm._fd, 64)
        req = v2.ModelInferRequest(model_name="neg")
        shm_input(req, "INPUT0", "FP32", [1024], "r", 4096)
        details = rpc_error(self, grpc.StatusCode.FAILED_PRECONDITION, self.stub.ModelInfer, req,
                            timeout=10)
        self.assertIn("shorter", details)
        a = np.arange(4, dtype=np.float32)
        req = v2.ModelInferRequest(model_name="neg", raw_input_contents=[a.tobytes()])
        req.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
        out = req.outputs.add(name="OUTPUT0")
        out.parameters["shared_memory_region"].string_param = "r"
        out.parameters["shared_memory_offset"].int64_param = 1024
        out.parameters["shared_memory_byte_size"].int64_param = 16
        rpc_error(self, grpc.StatusCode.FAILED_PRECONDITION, self.stub.ModelInfer, req, timeout=10)
        self.assertEqual(os.fstat(self.shm._fd).st_size, 64)
        os.ftruncate(self.shm._fd, 1 << 16)
        self.assertTrue(self.stub.ServerReady(v2.ServerReadyRequest(), timeout=10).ready)

    def test_server_metadata_lists_the_extension(self):
        r = self.stub.ServerMetadata(v2.ServerMetadataRequest(), timeout=10)
        self.assertIn("system_shared_memory", r.extensions)

    def test_cuda_shared_memory_needs_a_gpu(self):
        if ARGS.backend == "cuda":
            self.skipTest("the CPU backend's answer")
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT,
                            self.stub.CudaSharedMemoryRegister,
                            v2.CudaSharedMemoryRegisterRequest(name="g", raw_handle=bytes(64),
                                                               device_id=0, byte_size=16),
                            timeout=10)
        self.assertIn("no GPU", details)
        status = self.stub.CudaSharedMemoryStatus(v2.CudaSharedMemoryStatusRequest(), timeout=10)
        self.assertEqual(len(status.regions), 0)
        # One namespace: a CUDA name cannot shadow a system region either.
        self.register("sys")
        req = v2.ModelInferRequest(model_name="neg")
        shm_input(req, "INPUT0", "FP32", [4], "gpu-nope", 16)
        self.assertIn("CudaSharedMemoryRegister",
                      rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.ModelInfer, req,
                                timeout=10))

    def test_unregister(self):
        self.register("a")
        self.register("b")
        self.stub.SystemSharedMemoryUnregister(v2.SystemSharedMemoryUnregisterRequest(name="a"),
                                               timeout=10)
        status = self.stub.SystemSharedMemoryStatus(v2.SystemSharedMemoryStatusRequest(),
                                                    timeout=10)
        self.assertEqual(list(status.regions), ["b"])
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.SystemSharedMemoryStatus,
                  v2.SystemSharedMemoryStatusRequest(name="a"), timeout=10)
        self.stub.SystemSharedMemoryUnregister(v2.SystemSharedMemoryUnregisterRequest(), timeout=10)
        status = self.stub.SystemSharedMemoryStatus(v2.SystemSharedMemoryStatusRequest(),
                                                    timeout=10)
        self.assertEqual(len(status.regions), 0)


class KServeV2SharedMemoryLimitsTest(unittest.TestCase):
    """System shared memory against the server's memory: bytes read out of an object count
    against the device budget, registrations against the server-wide shared-memory limit, and
    keys that are not plain shared-memory objects are refused by name."""
    BUDGET = 64 << 20
    LIMIT = 200 << 20

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.target = start_server(ARGS.server, f"--backend={ARGS.backend}",
                                            "--system_shared_memory",
                                            f"--memory_budget={cls.BUDGET}",
                                            f"--shared_memory_limit_bytes={cls.LIMIT}")
        cls.channel = grpc.insecure_channel(cls.target)
        cls.stub = v2_grpc.GRPCInferenceServiceStub(cls.channel)
        # Sparse: nothing is allocated until written.
        cls.shm = shared_memory.SharedMemory(create=True, size=256 << 20)
        cls.key = "/" + cls.shm.name

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.shm.close()
        cls.shm.unlink()
        stop_server(cls.proc)

    def tearDown(self):
        self.stub.SystemSharedMemoryUnregister(v2.SystemSharedMemoryUnregisterRequest(), timeout=10)

    def register(self, name, byte_size, key=None):
        return self.stub.SystemSharedMemoryRegister(v2.SystemSharedMemoryRegisterRequest(
            name=name, key=key or self.key, byte_size=byte_size), timeout=10)

    def test_reads_count_against_the_memory_budget(self):
        self.register("big", 128 << 20)
        req = v2.ModelInferRequest(model_name="abs")
        shm_input(req, "INPUT0", "UINT8", [128 << 20], "big", 128 << 20)
        details = rpc_error(self, grpc.StatusCode.RESOURCE_EXHAUSTED, self.stub.ModelInfer, req,
                            timeout=60)
        self.assertIn("in shared memory", details)
        self.assertTrue(self.stub.ServerReady(v2.ServerReadyRequest(), timeout=10).ready)
        # Within the budget it is read, and the budget is whole again after each request.
        np.ndarray((1 << 20,), np.int8, buffer=self.shm.buf)[:] = -3
        for _ in range(3):
            req = v2.ModelInferRequest(model_name="abs")
            shm_input(req, "INPUT0", "INT8", [1 << 20], "big", 1 << 20)
            out = self.stub.ModelInfer(req, timeout=60).raw_output_contents[0]
            self.assertEqual(np.frombuffer(out, np.int8).tolist(), [3] * (1 << 20))

    def test_registrations_count_against_the_limit(self):
        self.register("a", 150 << 20)
        details = rpc_error(self, grpc.StatusCode.RESOURCE_EXHAUSTED, self.register, "b",
                            100 << 20)
        self.assertIn("limit", details)
        self.stub.SystemSharedMemoryUnregister(
            v2.SystemSharedMemoryUnregisterRequest(name="a"), timeout=10)
        self.register("b", 100 << 20)

    def test_keys_that_are_not_shared_memory_objects(self):
        details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.register, "n", 16,
                            key=self.key + "\0tail")
        self.assertIn("NUL", details)
        fifo = f"tc-fifo-{os.getpid()}"
        os.mkfifo(f"/dev/shm/{fifo}")
        try:
            details = rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.register, "f", 16,
                                key="/" + fifo)
            self.assertIn("not a regular file", details)
        finally:
            os.unlink(f"/dev/shm/{fifo}")
        details = rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.SystemSharedMemoryStatus,
                            v2.SystemSharedMemoryStatusRequest(name="x" * 65536), timeout=10)
        self.assertLess(len(details), 512)


class KServeV2OneRegistryTest(unittest.TestCase):
    """KServe v2's shared memory and tensorcompute.v1's regions are one registry: one quota of
    regions per client across every kind, one count in ServerInfo, one name per region; v1's
    region calls do not see system shared memory, which only KServe requests name."""

    def test_one_registry(self):
        proc, target = start_server(ARGS.server, f"--backend={ARGS.backend}",
                                    "--system_shared_memory", "--region_max_count=2")
        shm = shared_memory.SharedMemory(create=True, size=1 << 12)
        sock = None
        fd = -1
        try:
            channel = grpc.insecure_channel(target)
            stub = v2_grpc.GRPCInferenceServiceStub(channel)
            v1 = pb_grpc.TensorServiceStub(channel)

            def register(name, byte_size):
                return stub.SystemSharedMemoryRegister(v2.SystemSharedMemoryRegisterRequest(
                    name=name, key="/" + shm.name, byte_size=byte_size), timeout=10)

            before = v1.ServerInfo(pb.ServerInfoRequest(), timeout=10)
            register("a", 1 << 12)
            info = v1.ServerInfo(pb.ServerInfoRequest(), timeout=10)
            self.assertEqual(info.regions, before.regions + 1)
            self.assertEqual(info.shared_memory_bytes, before.shared_memory_bytes + (1 << 12))
            self.assertEqual(len(v1.ListRegions(pb.ListRegionsRequest(), timeout=10).regions), 0)
            # One name, one region: the name is taken for both kinds.
            details = rpc_error(self, grpc.StatusCode.ALREADY_EXISTS, register, "a", 16)
            self.assertIn("already registered", details)
            # A memfd region over the socket takes the client's second place...
            fd = os.memfd_create("tc-one-registry", os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, 1 << 12)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            address = info.region_socket
            sock.connect("\0" + address[1:] if address.startswith("@") else address)
            socket.send_fds(sock, [b"register"], [fd])
            reply = sock.recv(256).decode()
            self.assertTrue(reply.startswith("ticket "), reply)
            region = v1.RegisterRegion(pb.RegisterRegionRequest(ticket=reply.split()[1]),
                                       timeout=10)
            self.assertEqual(len(v1.ListRegions(pb.ListRegionsRequest(), timeout=10).regions), 1)
            # ...and a third, of either kind, is past the quota.
            details = rpc_error(self, grpc.StatusCode.RESOURCE_EXHAUSTED, register, "b", 16)
            self.assertIn("quota", details)
            v1.UnregisterRegion(pb.UnregisterRegionRequest(region=region.region), timeout=10)
            register("b", 16)
            stub.SystemSharedMemoryUnregister(v2.SystemSharedMemoryUnregisterRequest(),
                                              timeout=10)
            after = v1.ServerInfo(pb.ServerInfoRequest(), timeout=10)
            self.assertEqual(after.regions, before.regions)
            # A region's bytes are counted until the last holder of its mapping lets go, which
            # can come a moment after the reply that unregistered it: wait a little for that.
            deadline = time.monotonic() + 5
            while (after.shared_memory_bytes != before.shared_memory_bytes and
                   time.monotonic() < deadline):
                time.sleep(0.05)
                after = v1.ServerInfo(pb.ServerInfoRequest(), timeout=10)
            self.assertEqual(after.shared_memory_bytes, before.shared_memory_bytes)
            channel.close()
        finally:
            if sock is not None:
                sock.close()
            if fd >= 0:
                os.close(fd)
            shm.close()
            shm.unlink()
            self.assertEqual(stop_server(proc), 0)


class _CudaDriver:
    """The two driver calls a CUDA shared-memory client makes: the allocation holding a device
    address (cuPointerGetAttributes) and its IPC handle (cuIpcGetMemHandle)."""

    def __init__(self):
        import ctypes
        self.ctypes = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")

    def allocation(self, ptr):
        c = self.ctypes
        start, size = c.c_uint64(), c.c_uint64()
        # CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, _RANGE_SIZE
        for attr, out in ((11, start), (12, size)):
            rc = self.lib.cuPointerGetAttribute(c.byref(out), attr, c.c_uint64(ptr))
            assert rc == 0, f"cuPointerGetAttribute: CUDA error {rc}"
        return start.value, size.value

    def ipc_handle(self, base):
        handle = (self.ctypes.c_char * 64)()
        rc = self.lib.cuIpcGetMemHandle(handle, self.ctypes.c_uint64(base))
        assert rc == 0, f"cuIpcGetMemHandle: CUDA error {rc}"
        return bytes(handle)


class KServeV2CudaSharedMemoryTest(unittest.TestCase):
    """CUDA shared memory: a torch.cuda allocation registered by IPC handle, inputs read from
    it and the output written into it on the GPU; bad handles, devices and sizes refused.
    Skipped without --backend=cuda and a GPU PyTorch sees."""

    @classmethod
    def setUpClass(cls):
        if ARGS.backend != "cuda" or not torch.cuda.is_available():
            raise unittest.SkipTest("needs --backend=cuda and a GPU")
        cls.proc, cls.target = start_server(ARGS.server, "--backend=cuda")
        cls.channel = grpc.insecure_channel(cls.target)
        cls.stub = v2_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.driver = _CudaDriver()

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def test_inputs_and_output_in_gpu_memory(self):
        n = 1000003
        buf = torch.zeros(3 * n + 64, dtype=torch.float32, device="cuda")
        base, size = self.driver.allocation(buf.data_ptr())
        at = buf.data_ptr() - base  # where buf starts in the allocation
        self.stub.CudaSharedMemoryRegister(v2.CudaSharedMemoryRegisterRequest(
            name="gpu", raw_handle=self.driver.ipc_handle(base), device_id=0, byte_size=size),
            timeout=30)
        status = self.stub.CudaSharedMemoryStatus(v2.CudaSharedMemoryStatusRequest(), timeout=10)
        self.assertEqual((status.regions["gpu"].device_id, status.regions["gpu"].byte_size),
                         (0, size))
        r = v2.ServerMetadataRequest()
        self.assertIn("cuda_shared_memory", self.stub.ServerMetadata(r, timeout=10).extensions)
        a, b, out = buf[:n], buf[n:2 * n], buf[2 * n:3 * n]
        a.copy_(torch.randn(n, device="cuda"))
        b.copy_(torch.randn(n, device="cuda"))
        torch.cuda.synchronize()
        req = v2.ModelInferRequest(model_name="mul")
        shm_input(req, "INPUT0", "FP32", [n], "gpu", 4 * n, offset=at)
        shm_input(req, "INPUT1", "FP32", [n], "gpu", 4 * n, offset=at + 4 * n)
        o = req.outputs.add(name="OUTPUT0")
        o.parameters["shared_memory_region"].string_param = "gpu"
        o.parameters["shared_memory_offset"].int64_param = at + 8 * n
        o.parameters["shared_memory_byte_size"].int64_param = 4 * n
        resp = self.stub.ModelInfer(req, timeout=30)
        self.assertEqual(list(resp.raw_output_contents), [b""])
        torch.testing.assert_close(out, a * b, rtol=0, atol=0)
        # An input in GPU memory, one inline, the output inline.
        c = np.random.default_rng().standard_normal(n).astype(np.float32)
        req = v2.ModelInferRequest(model_name="add", raw_input_contents=[c.tobytes()])
        shm_input(req, "INPUT0", "FP32", [n], "gpu", 4 * n, offset=at)
        req.inputs.add(name="INPUT1", datatype="FP32", shape=[n])
        got = np.frombuffer(self.stub.ModelInfer(req, timeout=30).raw_output_contents[0],
                            np.float32)
        np.testing.assert_array_equal(got, a.cpu().numpy() + c)
        # Bad requests: a duplicate name, an unknown device, a size past the allocation, a
        # handle of zeros; a range past the region.
        handle = self.driver.ipc_handle(base)
        for code, req in [
                (grpc.StatusCode.ALREADY_EXISTS, v2.CudaSharedMemoryRegisterRequest(
                    name="gpu", raw_handle=handle, device_id=0, byte_size=size)),
                (grpc.StatusCode.INVALID_ARGUMENT, v2.CudaSharedMemoryRegisterRequest(
                    name="g2", raw_handle=handle, device_id=7, byte_size=size)),
                (grpc.StatusCode.INVALID_ARGUMENT, v2.CudaSharedMemoryRegisterRequest(
                    name="g2", raw_handle=handle, device_id=0, byte_size=size + 1)),
                (grpc.StatusCode.INVALID_ARGUMENT, v2.CudaSharedMemoryRegisterRequest(
                    name="g2", raw_handle=bytes(64), device_id=0, byte_size=16))]:
            rpc_error(self, code, self.stub.CudaSharedMemoryRegister, req, timeout=30)
        req = v2.ModelInferRequest(model_name="neg")
        shm_input(req, "INPUT0", "FP32", [16], "gpu", 64, offset=size - 32)
        rpc_error(self, grpc.StatusCode.INVALID_ARGUMENT, self.stub.ModelInfer, req, timeout=30)
        self.stub.CudaSharedMemoryUnregister(v2.CudaSharedMemoryUnregisterRequest(name="gpu"),
                                             timeout=10)
        rpc_error(self, grpc.StatusCode.NOT_FOUND, self.stub.CudaSharedMemoryStatus,
                  v2.CudaSharedMemoryStatusRequest(name="gpu"), timeout=10)
        self.assertTrue(self.stub.ServerReady(v2.ServerReadyRequest(), timeout=10).ready)


class KServeV2DrainTest(unittest.TestCase):
    """SIGTERM with a stream open: ServerReady turns false, new ModelInfer calls get
    UNAVAILABLE, the open stream is answered UNAVAILABLE at its next request, and the server
    exits once it has closed."""

    def test_drain(self):
        proc, target = start_server(ARGS.server, f"--backend={ARGS.backend}",
                                    "--shutdown_grace_seconds=20")
        channel = grpc.insecure_channel(target)
        stub = v2_grpc.GRPCInferenceServiceStub(channel)
        a = torch.arange(8, dtype=torch.float32)
        pending = queue.Queue()
        pending.put(infer_request("neg", [a], id="before"))
        replies = stub.ModelStreamInfer(iter(pending.get, None), timeout=60)
        self.assertEqual(next(replies).infer_response.id, "before")
        proc.send_signal(signal.SIGTERM)
        self.assertTrue(wait_for(lambda: not stub.ServerReady(v2.ServerReadyRequest(),
                                                              timeout=10).ready))
        self.assertTrue(stub.ServerLive(v2.ServerLiveRequest(), timeout=10).live)
        rpc_error(self, grpc.StatusCode.UNAVAILABLE, stub.ModelInfer,
                  infer_request("neg", [a]), timeout=10)
        pending.put(infer_request("neg", [a], id="after"))
        with self.assertRaises(grpc.RpcError) as e:
            next(replies)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        pending.put(None)
        self.assertEqual(proc.wait(timeout=30), 0)
        channel.close()


class KServeV2AuthTest(unittest.TestCase):
    """Tokens cover the new service as they cover tensorcompute.v1; liveness and readiness,
    like the standard health service, need none."""

    @classmethod
    def setUpClass(cls):
        tokens = tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False)
        tokens.write(f"client:{TOKEN}\n")
        tokens.close()
        cls.proc, cls.target = start_server(ARGS.server, f"--auth_tokens_file={tokens.name}",
                                            f"--backend={ARGS.backend}")
        cls.channel = grpc.insecure_channel(cls.target)
        cls.stub = v2_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def test_tokens(self):
        a = torch.arange(4, dtype=torch.float32)
        self.assertTrue(self.stub.ServerLive(v2.ServerLiveRequest(), timeout=10).live)
        self.assertTrue(self.stub.ServerReady(v2.ServerReadyRequest(), timeout=10).ready)
        for call, req in [(self.stub.ModelInfer, infer_request("add", [a, a])),
                          (self.stub.ModelMetadata, v2.ModelMetadataRequest(name="add")),
                          (self.stub.ServerMetadata, v2.ServerMetadataRequest()),
                          (self.stub.ModelReady, v2.ModelReadyRequest(name="add"))]:
            rpc_error(self, grpc.StatusCode.UNAUTHENTICATED, call, req, timeout=10)
            call(req, timeout=10, metadata=[("authorization", f"Bearer {TOKEN}")])
        with self.assertRaises(grpc.RpcError) as e:
            list(self.stub.ModelStreamInfer(iter([infer_request("add", [a, a])]), timeout=10))
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        out = list(self.stub.ModelStreamInfer(iter([infer_request("add", [a, a])]), timeout=10,
                                              metadata=[("authorization", f"Bearer {TOKEN}")]))
        self.assertEqual(output_of(out[0].infer_response).tolist(), (a + a).tolist())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--backend", default="cpu")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
