#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus (fuzz/corpus/*): valid requests of many kinds, as the
server would receive them, for the fuzzers to mutate. Run with the build's Python stubs:
    PYTHONPATH=build/python /usr/bin/python3 fuzz/make_corpus.py"""
import os
import struct

from inference import grpc_service_pb2 as v2
from tensorcompute.v1 import tensor_service_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))


def t(dtype, shape, data, strides=(), offset=0):
    return pb.Tensor(dtype=dtype, shape=shape, strides=strides, offset=offset, data=data)


f32 = lambda *v: struct.pack(f"<{len(v)}f", *v)
i32 = lambda *v: struct.pack(f"<{len(v)}i", *v)

requests = {
    "add_broadcast": pb.ComputeRequest(op="add", inputs=[t(pb.float32, [2, 3], f32(*range(6))),
                                                          t(pb.float32, [3], f32(1, 2, 3))],
                                       attributes={"alpha": pb.Attribute(float_value=2)}),
    "neg_strided": pb.ComputeRequest(op="neg", inputs=[t(pb.float32, [3, 2], f32(*range(8)),
                                                         [-1, 3], 2)]),
    "zero_stride": pb.ComputeRequest(op="mul", inputs=[t(pb.int32, [4, 4], i32(1, 2, 3, 4), [0, 1]),
                                                       t(pb.int32, [4], i32(5, 6, 7, 8))]),
    "div_zero": pb.ComputeRequest(op="floor_divide", inputs=[t(pb.int32, [2], i32(7, -7)),
                                                             t(pb.int32, [2], i32(0, 2))]),
    "where": pb.ComputeRequest(op="where", inputs=[t(pb.bool, [3], b"\x01\x00\x01"),
                                                   t(pb.int16, [3], struct.pack("<3h", 1, 2, 3)),
                                                   t(pb.float32, [], f32(9.5))],
                               output_dtype=pb.float64),
    "cast": pb.ComputeRequest(op="cast", inputs=[t(pb.float32, [3], f32(1.7, -2.5, 300))],
                              attributes={"dtype": pb.Attribute(dtype_value=pb.uint8)}),
    "quantized": pb.ComputeRequest(op="quantized_add",
                                   inputs=[t(pb.int8, [4], bytes([1, 2, 250, 127])),
                                           t(pb.int8, [4], bytes([3, 4, 5, 6]))],
                                   attributes={"scale_a": pb.Attribute(float_value=0.5),
                                               "scale_b": pb.Attribute(float_value=0.25),
                                               "scale_out": pb.Attribute(float_value=0.5)}),
    "clamp_f16": pb.ComputeRequest(op="clamp", inputs=[t(pb.float16, [2, 2],
                                                         struct.pack("<4e", 1, -2, 3, 9))],
                                   attributes={"min": pb.Attribute(float_value=0),
                                               "max": pb.Attribute(float_value=2)},
                                   output_layout=pb.OUTPUT_LAYOUT_LIKE_FIRST_INPUT),
    "output_strides": pb.ComputeRequest(op="add", inputs=[t(pb.float64, [2, 2], struct.pack("<4d", 1, 2, 3, 4)),
                                                          t(pb.float64, [], struct.pack("<d", 1))],
                                        output_strides=[1, 3]),
}


def write(kind, name, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


for name, req in requests.items():
    write("compute_request", name, req.SerializeToString())
    # The same request streamed: inline inputs become storage_bytes plus chunks of 5 bytes.
    header = pb.ComputeRequest()
    header.CopyFrom(req)
    chunks = []
    for i, tensor in enumerate(header.inputs):
        if i == 0:
            tensor.storage_bytes = len(tensor.data)
            data = tensor.data
            tensor.ClearField("data")
            for at in range(0, len(data), 5):
                chunks.append(pb.ComputeStreamRequest(chunk=pb.DataChunk(
                    tensor=0, offset=at, data=data[at:at + 5])))
    msgs = [pb.ComputeStreamRequest(header=header)] + chunks
    blob = b"".join(struct.pack("<H", len(m.SerializeToString())) + m.SerializeToString()
                    for m in msgs)
    write("stream", name, blob)


def infer(model, inputs, parameters=None, contents=False, **kw):
    """A KServe v2 ModelInferRequest: inputs as (name, datatype, shape, bytes or contents)."""
    req = v2.ModelInferRequest(model_name=model, **kw)
    for name, datatype, shape, data in inputs:
        t = req.inputs.add(name=name, datatype=datatype, shape=shape)
        if contents:
            t.contents.CopyFrom(data)
        else:
            req.raw_input_contents.append(data)
    for key, p in (parameters or {}).items():
        req.parameters[key].CopyFrom(p)
    return req


infer_requests = {
    "add_broadcast": infer("add", [("INPUT0", "FP32", [2, 3], f32(*range(6))),
                                   ("INPUT1", "FP32", [3], f32(1, 2, 3))],
                           {"alpha": v2.InferParameter(double_param=2)}, id="a"),
    "where_by_name": infer("where", [("INPUT2", "FP16", [], struct.pack("<e", 9.5)),
                                     ("INPUT0", "BOOL", [3], b"\x01\x00\x01"),
                                     ("INPUT1", "INT16", [3], struct.pack("<3h", 1, 2, 3))]),
    "contents": infer("mul", [("INPUT0", "INT8", [3], v2.InferTensorContents(int_contents=[1, -2, 3])),
                              ("INPUT1", "INT8", [1], v2.InferTensorContents(int_contents=[4]))],
                      contents=True),
    "cast": infer("cast", [("INPUT0", "FP64", [2], struct.pack("<2d", 1.5, -3))],
                  {"dtype": v2.InferParameter(string_param="UINT8")}),
    "expression": infer("expression", [("x", "FP32", [2], f32(1, 2)), ("y", "INT32", [], i32(3))],
                        {"expression": v2.InferParameter(string_param="clamp(x * y, min=0)")}),
    "div_zero": infer("floor_divide", [("INPUT0", "INT64", [2], struct.pack("<2q", 7, -7)),
                                       ("INPUT1", "INT64", [2], struct.pack("<2q", 0, 2))],
                      outputs=[v2.ModelInferRequest.InferRequestedOutputTensor(name="OUTPUT0")]),
}
for name, req in infer_requests.items():
    write("model_infer", name, req.SerializeToString())

# Region socket scripts (region_socket_fuzzer.cc): 0 opens a connection (pid, uid), 1 closes
# one, 2 sends a message (connection, words, descriptors), 3 claims a ticket, 4 unregisters,
# 5 checks a range.
OPEN, CLOSE, SEND, CLAIM, UNREGISTER, RANGE = range(6)
register_1mib = [SEND, 0, 0, 1, 0, 0, 1, 0, 0x10, 0x00]
region_scripts = {
    "register_claim_unregister": [OPEN, 1, 1] + register_1mib + [CLAIM, 0, 0, 0, 0, RANGE, 0, 1, 1,
                                                                UNREGISTER, 0, 1, CLOSE, 0],
    "claim_then_close": [OPEN, 1, 1] + register_1mib + [CLAIM, 0, 0, 1, 0, CLOSE, 0],
    "unclaimed_tickets": [OPEN, 1, 1] + register_1mib * 5 + [OPEN, 2, 1] + register_1mib * 2,
    "cuda_words": [OPEN, 1, 1, SEND, 0, 0, 2, 1, 4, 0, 0],
    "descriptor_kinds": [OPEN, 1, 1] + sum(([SEND, 0, 0, 1, 0, 0, 1, k, 0, 1] for k in range(8)), []),
    "many_connections": [OPEN, 1, 1] * 4 + [OPEN, 2, 2] * 4 + [CLOSE, 0] * 3,
}
for name, script in region_scripts.items():
    write("region_socket", name, bytes(script))
print("corpus written")
