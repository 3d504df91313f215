#!/usr/bin/env python3
"""PyTorch's own operator test inputs through the real server.

PyTorch ships the sample inputs its operator tests use (op_db in
torch.testing._internal.common_methods_invocations: per op and dtype, extremal values, empty
and zero-dim tensors, non-contiguous views, broadcasting). Every sample of every op the server
also has is sent with its strides and storage offset intact, and the result compared with
PyTorch's on the same inputs: the same dtype and shape, integers and bools exactly, floating
values within torch.testing.assert_close's tolerances for the dtype (NaN equal to NaN).

Where PyTorch's result differs from the same op evaluated in float64 and rounded once, ours
may equal the latter instead (counted apart: PyTorch's CPU kernels have a few such cases). A
sample may also be refused, or differ, but only for a reason listed in EXPECTED_REFUSALS or
EXPECTED_DIFFERENCES (each one a documented difference: docs/semantics.md); samples whose arguments have no form in the
protocol (a Python number where a tensor goes, keyword arguments the op does not have) are
counted as skipped. Anything else fails the test: a wrong value, a wrong dtype, or a refusal
of something PyTorch computes.

    test_torch_op_db.py --server build/server/tensorcompute-server [--backend=cpu|cuda]
                        [--device=cpu|cuda]

--device is where PyTorch computes the reference (cuda: the GPU, against --backend=cuda).
"""
import argparse
import collections
import os
import random
import sys
import types
import unittest

import grpc
import torch

from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc
from harness import start_server, stop_server
from torch_wire import DTYPES, from_pb

ARGS = None

# Refusals that are documented differences (docs/semantics.md), by the op and a piece of the
# server's message.
EXPECTED_REFUSALS = [
    # `div` has no rounding modes: floor_divide and the truncating casts do that.
    ("div", "no attribute 'rounding_mode'"),
    # alpha and value must be whole numbers for integer inputs (PyTorch truncates 3.14).
    ("add", "must be a whole number"),
    ("sub", "must be a whole number"),
    ("addcmul", "must be a whole number"),
    # prelu's weight broadcasts like any input; PyTorch's applies a 1-D weight along dim 1.
    ("prelu", "cannot be broadcast together"),
]
# Results that differ for a documented reason, by the op and a piece of what differs.
EXPECTED_DIFFERENCES = [
    # The same: a zero-dim input with a [1] weight gives [1] here, () in PyTorch.
    ("prelu", "shape (1,), PyTorch's ()"),
]


def import_op_db():
    """op_db, with a stand-in for the `expecttest` module its test framework imports."""
    if "expecttest" not in sys.modules:
        stand_in = types.ModuleType("expecttest")
        stand_in.TestCase = unittest.TestCase
        stand_in.ACCEPT = False
        sys.modules["expecttest"] = stand_in
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def storage_of(t: torch.Tensor):
    """The bytes of t's whole storage, t's strides and its offset: the view as it lies."""
    whole = torch.empty(0, dtype=t.dtype, device=t.device)
    whole.set_(t.storage(), 0, (t.storage().size(),), (1,))
    whole = whole.cpu()
    if t.dtype in (torch.float16, torch.bfloat16):
        whole = whole.view(torch.int16)
    return whole.numpy().tobytes(), list(t.stride()), t.storage_offset()


def to_pb(t: torch.Tensor) -> pb.Tensor:
    data, strides, offset = storage_of(t)
    return pb.Tensor(dtype=pb.DType.Value(DTYPES[t.dtype]), shape=list(t.shape),
                     strides=strides, offset=offset, data=data)


def attribute(v):
    if isinstance(v, bool):
        return pb.Attribute(bool_value=v)
    if isinstance(v, int):
        return pb.Attribute(int_value=v)
    if isinstance(v, float):
        return pb.Attribute(float_value=v)
    if isinstance(v, str):
        return pb.Attribute(string_value=v)
    return None


class Skip(Exception):
    pass


def request_for(name, sample, attrs_known):
    """Our ComputeRequest for a sample, or Skip when it has no form in the protocol."""
    args = list(sample.args)
    kwargs = dict(sample.kwargs)
    inputs = [sample.input]
    if name == "where":
        # op_db calls it as input.where(condition, other).
        if len(args) != 2 or not all(isinstance(a, torch.Tensor) for a in args):
            raise Skip("where with a number")
        inputs = [args[0], sample.input, args[1]]
        args = []
    elif name == "clamp":
        for key, value in zip(("min", "max"), args):
            kwargs[key] = value
        args = []
        bounds = [kwargs.get("min"), kwargs.get("max")]
        if any(isinstance(v, torch.Tensor) for v in bounds):
            # The tensor form takes both bounds; one alone is maximum (min) or minimum (max),
            # the ops PyTorch's clamp_min/clamp_max run (docs/semantics.md).
            kwargs = {k: v for k, v in kwargs.items() if k not in ("min", "max")}
            if all(isinstance(v, torch.Tensor) for v in bounds):
                inputs += bounds
            else:
                name = "maximum" if bounds[0] is not None else "minimum"
                inputs.append(bounds[0] if bounds[0] is not None else bounds[1])
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
    elif name == "prelu" and isinstance(kwargs.get("weight"), torch.Tensor):
        args.append(kwargs.pop("weight"))
    for a in args:
        if not isinstance(a, torch.Tensor):
            raise Skip("a number where a tensor goes")
        inputs.append(a)
    attributes = {}
    for key, value in kwargs.items():
        if key not in attrs_known and key != "rounding_mode":
            raise Skip(f"keyword '{key}'")
        a = attribute(value)
        if a is None:
            raise Skip(f"keyword '{key}' of type {type(value).__name__}")
        attributes[key] = a
    if not all(isinstance(t, torch.Tensor) and t.dtype in DTYPES for t in inputs):
        raise Skip("a dtype the protocol does not have")
    return pb.ComputeRequest(op=name, inputs=[to_pb(t) for t in inputs], attributes=attributes)


def same(got: torch.Tensor, want: torch.Tensor):
    """None, or what differs."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, PyTorch's {want.dtype}"
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, PyTorch's {tuple(want.shape)}"
    # Most results are equal element for element: one pass, before assert_close's several.
    if torch.equal(got, want):
        return None
    try:
        torch.testing.assert_close(got, want, equal_nan=True, check_device=False)
    except AssertionError as e:
        return str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:4])
    return None


def exact(info, sample, dtype):
    """The op on the sample's floating inputs in float64, rounded once to `dtype`."""
    def wide(x):
        return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
    return info.op(wide(sample.input), *[wide(a) for a in sample.args],
                   **{k: wide(v) for k, v in sample.kwargs.items()}).to(dtype).cpu()


class AgainstOpDb(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, target = start_server(ARGS.server, f"--backend={ARGS.backend}")
        cls.channel = grpc.insecure_channel(target, options=[
            ("grpc.max_send_message_length", 256 << 20),
            ("grpc.max_receive_message_length", 256 << 20)])
        cls.stub = pb_grpc.TensorServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def test_samples_agree_with_pytorch(self):
        seed = int(os.environ.get("TC_TEST_SEED", "0")) or random.randrange(1, 2**31)
        print(f"TC_TEST_SEED={seed}")
        torch.manual_seed(seed)
        # Each op's attribute names, over all its forms (clamp has one with tensor bounds).
        ours = collections.defaultdict(set)
        for o in self.stub.ListOps(pb.ListOpsRequest(), timeout=10).ops:
            ours[o.name].update(a.name for a in o.attributes)
        counts = collections.Counter()
        skipped = collections.Counter()
        failures = []
        ops_seen = set()
        exact_ops = collections.Counter()
        documented = collections.Counter()
        for info in import_op_db():
            name = info.name.split(".")[-1]
            if name not in ours:
                continue
            ops_seen.add(name)
            attrs_known = ours[name]
            for dtype in sorted(info.supported_dtypes(ARGS.device), key=str):
                if dtype not in DTYPES:
                    continue
                try:
                    # reference_inputs: sample_inputs and more (extremal values, broadcasts,
                    # type promotions) where the op has them.
                    samples = list(info.reference_inputs(ARGS.device, dtype, requires_grad=False))
                except Exception as e:  # a sample generator PyTorch itself cannot run here
                    skipped[f"{name}: samples: {type(e).__name__}"] += 1
                    continue
                for i, sample in enumerate(samples):
                    where = f"{info.name}{'.' + info.variant_test_name if info.variant_test_name else ''} {dtype} sample {i}"
                    try:
                        want = info.op(sample.input, *sample.args, **sample.kwargs)
                    except Exception:
                        skipped["PyTorch refuses it"] += 1
                        continue
                    if not isinstance(want, torch.Tensor):
                        skipped["PyTorch gives no tensor"] += 1
                        continue
                    try:
                        req = request_for(name, sample, attrs_known)
                    except Skip as s:
                        skipped[str(s)] += 1
                        continue
                    try:
                        reply = self.stub.Compute(req, timeout=60)
                    except grpc.RpcError as e:
                        reason = [(op, piece) for op, piece in EXPECTED_REFUSALS
                                  if op == name and piece in e.details()]
                        if e.code() == grpc.StatusCode.INVALID_ARGUMENT and reason:
                            counts["refused as documented"] += 1
                            documented[f"{reason[0][0]}: {reason[0][1]}"] += 1
                        else:
                            failures.append(f"{where}: refused: {e.code().name}: {e.details()}")
                        continue
                    got = from_pb(reply.output)
                    diff = same(got, want.cpu())
                    if diff is None:
                        counts["agree"] += 1
                    elif want.is_floating_point() and same(got, exact(info, sample, want.dtype)) is None:
                        # PyTorch's kernel and the same op in float64, rounded once, disagree,
                        # and ours is the latter (PyTorch 1.13's CPU bfloat16 fmod gives NaN
                        # for the smallest normal divisor, its float16 add rounds alpha first).
                        counts["exact where PyTorch is not"] += 1
                        exact_ops[info.name] += 1
                    elif any(op == name and piece in diff for op, piece in EXPECTED_DIFFERENCES):
                        counts["differ as documented"] += 1
                        documented[f"{name}: {diff}"] += 1
                    else:
                        failures.append(f"{where}: {diff}")
        print(f"op_db: {len(ops_seen)} of the server's {len(ours)} ops; {counts['agree']} samples "
              f"agree, {counts['refused as documented']} refused as documented, "
              f"{counts['exact where PyTorch is not']} exact where PyTorch is not "
              f"({dict(exact_ops)}), {counts['differ as documented']} differ as documented, "
              f"{len(failures)} differ; documented: {dict(documented)}; skipped: {dict(skipped)}")
        self.assertGreater(len(ops_seen), 40)
        self.assertGreater(counts["agree"], 10000)
        for f in failures[:60]:
            print("  " + f)
        self.assertEqual(failures[:40], [], f"{len(failures)} samples differ")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--device", default="cpu")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
