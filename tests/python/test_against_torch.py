#!/usr/bin/env python3
"""Hand-picked cases checked against PyTorch's own results (Debian's python3-torch), through the
real server: type promotion, integer and floating division conventions, rounding, NaN handling,
half types and the other places where the semantics are easy to get subtly wrong."""
import argparse
import math
import sys
import unittest

import grpc
import numpy as np
import torch

from tensorcompute.v1 import tensor_service_pb2 as pb
from tensorcompute.v1 import tensor_service_pb2_grpc as pb_grpc
from harness import start_server, stop_server
from torch_wire import DTYPES, from_pb

ARGS = None


def to_pb(t: torch.Tensor) -> pb.Tensor:
    t = t.contiguous()
    raw = t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t
    return pb.Tensor(dtype=pb.DType.Value(DTYPES[t.dtype]), shape=list(t.shape),
                     data=raw.numpy().tobytes())


class AgainstTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, target = start_server(ARGS.server, f"--backend={ARGS.backend}")
        cls.channel = grpc.insecure_channel(target)
        cls.stub = pb_grpc.TensorServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_server(cls.proc)

    def run_op(self, op, *inputs, **attrs):
        attributes = {}
        for k, v in attrs.items():
            if isinstance(v, bool):
                attributes[k] = pb.Attribute(bool_value=v)
            elif isinstance(v, int):
                attributes[k] = pb.Attribute(int_value=v)
            elif isinstance(v, float):
                attributes[k] = pb.Attribute(float_value=v)
            elif isinstance(v, torch.dtype):
                attributes[k] = pb.Attribute(dtype_value=pb.DType.Value(DTYPES[v]))
            else:
                attributes[k] = pb.Attribute(string_value=v)
        reply = self.stub.Compute(pb.ComputeRequest(
            op=op, inputs=[to_pb(t) for t in inputs], attributes=attributes), timeout=30)
        return from_pb(reply.output)

    def check(self, got, want, exact=True):
        self.assertEqual(got.dtype, want.dtype, f"{got} vs {want}")
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        if exact:
            self.assertTrue(torch.equal(got, want) or
                            torch.allclose(got.double(), want.double(), rtol=0, atol=0, equal_nan=True),
                            f"\ngot  {got}\nwant {want}")
        else:
            tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6}.get(want.dtype, 1e-12)
            self.assertTrue(torch.allclose(got.double(), want.double(), rtol=tol, atol=tol, equal_nan=True),
                            f"\ngot  {got}\nwant {want}")

    def test_type_promotion(self):
        cases = [
            (torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([-1, 5, 7], dtype=torch.int8)),
            (torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor(2.5, dtype=torch.float64)),
            (torch.tensor([1.5, 2.5], dtype=torch.float16), torch.tensor(3, dtype=torch.int64)),
            (torch.tensor([1.5, 2.5], dtype=torch.float16), torch.tensor([1.0, 2.0], dtype=torch.bfloat16)),
            (torch.tensor([True, False]), torch.tensor([3, 4], dtype=torch.int16)),
            (torch.tensor([1, 2], dtype=torch.int8), torch.tensor(1000, dtype=torch.int64)),
            (torch.tensor(7, dtype=torch.int32), torch.tensor(1.5, dtype=torch.float16)),
        ]
        for a, b in cases:
            with self.subTest(a=a.dtype, b=b.dtype):
                self.check(self.run_op("add", a, b), torch.add(a, b), exact=False)
                self.check(self.run_op("mul", a, b), torch.mul(a, b), exact=False)
                self.check(self.run_op("lt", a, b), torch.lt(a, b))

    def test_integer_division_conventions(self):
        a = torch.tensor([-7, 7, -7, 7, 0, -128], dtype=torch.int32)
        b = torch.tensor([3, -3, -3, 3, 5, 7], dtype=torch.int32)
        self.check(self.run_op("floor_divide", a, b), torch.floor_divide(a, b))
        self.check(self.run_op("remainder", a, b), torch.remainder(a, b))
        self.check(self.run_op("fmod", a, b), torch.fmod(a, b))
        self.check(self.run_op("div", a, b), torch.div(a, b), exact=False)

    def test_floating_division_conventions(self):
        a = torch.tensor([-7.5, 7.5, -7.5, 1e10, -0.0, 5.0, 3.0, -3.0], dtype=torch.float32)
        b = torch.tensor([2.0, -2.0, -2.0, 3.0, 1.0, 0.0, math.inf, math.inf], dtype=torch.float32)
        self.check(self.run_op("floor_divide", a, b), torch.floor_divide(a, b))
        self.check(self.run_op("remainder", a, b), torch.remainder(a, b))
        self.check(self.run_op("fmod", a, b), torch.fmod(a, b))

    def test_rounding_and_sign(self):
        x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, -2.6, 0.0], dtype=torch.float32)
        for op in ["round", "floor", "ceil", "trunc", "sign", "relu", "abs", "neg"]:
            with self.subTest(op=op):
                self.check(self.run_op(op, x), getattr(torch, op)(x))

    def test_nan_propagation(self):
        a = torch.tensor([1.0, math.nan, 3.0, -math.inf], dtype=torch.float32)
        b = torch.tensor([math.nan, 2.0, 1.0, 0.0], dtype=torch.float32)
        self.check(self.run_op("maximum", a, b), torch.maximum(a, b))
        self.check(self.run_op("minimum", a, b), torch.minimum(a, b))
        self.check(self.run_op("isnan", a), torch.isnan(a))
        self.check(self.run_op("isinf", a), torch.isinf(a))
        self.check(self.run_op("isfinite", a), torch.isfinite(a))
        self.check(self.run_op("clamp", a, min=0.5, max=2.0), torch.clamp(a, 0.5, 2.0))
        self.check(self.run_op("relu", a), torch.relu(a))

    def test_clamp_with_tensor_bounds(self):
        # Promoted and broadcast like any inputs; NaN from any of the three; min above max
        # gives max.
        a = torch.tensor([[1.0, math.nan, 3.0, -math.inf, 0.5, 7.0]], dtype=torch.float32)
        lo = torch.tensor([[0.0], [math.nan], [4.0]], dtype=torch.float64)
        hi = torch.tensor([2, 2, 1, 2, 2, 9], dtype=torch.int32)
        self.check(self.run_op("clamp", a, lo, hi), torch.clamp(a, lo, hi))
        i = torch.tensor([-5, 0, 5, 100], dtype=torch.int16)
        lo_i = torch.tensor(-1, dtype=torch.int8)
        hi_i = torch.tensor([3, 3, 3, -2], dtype=torch.int64)
        self.check(self.run_op("clamp", i, lo_i, hi_i), torch.clamp(i, lo_i, hi_i))

    def test_unary_float_functions(self):
        x = torch.linspace(-6, 6, 97, dtype=torch.float32)
        pos = torch.linspace(0.01, 20, 97, dtype=torch.float32)
        for op in ["sigmoid", "tanh", "exp", "sin", "cos", "erf", "expm1", "neg", "square"]:
            with self.subTest(op=op):
                self.check(self.run_op(op, x), getattr(torch, op)(x), exact=False)
        for op in ["log", "log1p", "sqrt", "rsqrt", "reciprocal"]:
            with self.subTest(op=op):
                self.check(self.run_op(op, pos), getattr(torch, op)(pos), exact=False)
        F = torch.nn.functional
        self.check(self.run_op("gelu", x), F.gelu(x), exact=False)
        self.check(self.run_op("gelu", x, approximate="tanh"), F.gelu(x, approximate="tanh"), exact=False)
        self.check(self.run_op("silu", x), F.silu(x), exact=False)
        self.check(self.run_op("leaky_relu", x, negative_slope=0.2), F.leaky_relu(x, 0.2), exact=False)
        ints = torch.tensor([0, 1, 4, 9], dtype=torch.int32)
        self.check(self.run_op("sqrt", ints), torch.sqrt(ints), exact=False)

    def test_half_types(self):
        for dtype in (torch.float16, torch.bfloat16):
            a = torch.linspace(-300, 300, 61).to(dtype)
            b = torch.linspace(0.1, 7, 61).to(dtype)
            with self.subTest(dtype=dtype):
                self.check(self.run_op("add", a, b), a + b)
                self.check(self.run_op("mul", a, b), a * b)
                self.check(self.run_op("div", a, b), a / b, exact=False)
                self.check(self.run_op("cast", a, dtype=torch.float32), a.float())
                self.check(self.run_op("cast", a.float() * 1.001, dtype=dtype), (a.float() * 1.001).to(dtype))

    def test_bitwise_and_shifts(self):
        a = torch.tensor([5, -6, 127, -128, 0], dtype=torch.int8)
        b = torch.tensor([3, 1, 2, 7, 4], dtype=torch.int8)
        for op, fn in [("bitwise_and", torch.bitwise_and), ("bitwise_or", torch.bitwise_or),
                       ("bitwise_xor", torch.bitwise_xor), ("left_shift", torch.bitwise_left_shift),
                       ("right_shift", torch.bitwise_right_shift)]:
            with self.subTest(op=op):
                self.check(self.run_op(op, a, b), fn(a, b))
        self.check(self.run_op("bitwise_not", a), torch.bitwise_not(a))
        t = torch.tensor([True, False, True])
        self.check(self.run_op("bitwise_not", t), torch.bitwise_not(t))
        self.check(self.run_op("bitwise_xor", t, torch.tensor([True, True, False])),
                   torch.bitwise_xor(t, torch.tensor([True, True, False])))

    def test_ternary_and_attributes(self):
        cond = torch.tensor([True, False, True, False])
        a = torch.tensor([1.0, 2.0, 3.0, 4.0])
        b = torch.tensor([10, 20, 30, 40], dtype=torch.int64)
        self.check(self.run_op("where", cond, a, b), torch.where(cond, a, b))
        c = torch.tensor([0.5, -1.0, 2.0, 0.25])
        self.check(self.run_op("addcmul", a, a, c, value=2.0), torch.addcmul(a, a, c, value=2.0), exact=False)
        self.check(self.run_op("lerp", a, a * 3, c), torch.lerp(a, a * 3, c), exact=False)
        self.check(self.run_op("add", b, b, alpha=3), torch.add(b, b, alpha=3))
        self.check(self.run_op("sub", a, c, alpha=0.5), torch.sub(a, c, alpha=0.5), exact=False)
        self.check(self.run_op("pow", torch.tensor([2, 3, -2], dtype=torch.int32),
                               torch.tensor([10, 3, 3], dtype=torch.int32)),
                   torch.pow(torch.tensor([2, 3, -2], dtype=torch.int32), torch.tensor([10, 3, 3], dtype=torch.int32)))
        self.check(self.run_op("fill", b, value=7.0), torch.full_like(b, 7))
        self.check(self.run_op("prelu", torch.tensor([-2.0, 3.0]), torch.tensor([0.25])),
                   torch.nn.functional.prelu(torch.tensor([-2.0, 3.0]), torch.tensor([0.25])))

    def test_quantized_add_matches_the_formula(self):
        a = torch.tensor([0, 10, 100, 255, 128], dtype=torch.uint8)
        b = torch.tensor([5, 250, 3, 255, 0], dtype=torch.uint8)
        got = self.run_op("quantized_add", a, b, a_scale=0.1, a_zero_point=3, b_scale=0.2,
                          b_zero_point=2, scale=0.3, zero_point=1)
        real = (a.double() - 3) * 0.1 + (b.double() - 2) * 0.2
        want = torch.clamp(torch.round(real / 0.3) + 1, 0, 255).to(torch.uint8)
        self.check(got, want)

    def test_signed_zeros_and_infinities(self):
        # Every op PyTorch has under the same name, over +-0, +-1, +-2.5 and +-inf and every
        # pair of them: wherever PyTorch's result is a zero or an infinity, ours is the same one,
        # sign included (1 / -x and atan2(-x, y) follow from neg(+0.0) being -0.0).
        ops = self.stub.ListOps(pb.ListOpsRequest(), timeout=30).ops
        for dtype in (torch.float32, torch.float64, torch.float16):
            vals = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, math.inf, -math.inf], dtype=dtype)
            a, b = torch.cartesian_prod(vals, vals).unbind(1)
            checked = 0
            for op in ops:
                fn = getattr(torch, op.name, None)
                if (fn is None or any(x.required for x in op.attributes) or
                        op.arity not in (1, 2)):
                    continue
                inputs = (vals,) if op.arity == 1 else (a.contiguous(), b.contiguous())
                try:
                    want = fn(*inputs)
                except RuntimeError:
                    continue  # Not in this PyTorch for this dtype.
                if not want.dtype.is_floating_point:
                    continue
                try:
                    got = self.run_op(op.name, *inputs)
                except grpc.RpcError:
                    continue
                special = (want == 0) | want.isinf()
                with self.subTest(op=op.name, dtype=dtype):
                    self.assertEqual(got.dtype, want.dtype)
                    self.assertTrue(torch.equal(got[special], want[special]) and
                                    torch.equal(got[special].signbit(), want[special].signbit()),
                                    f"\ninputs {[t[special] for t in inputs]}"
                                    f"\ngot  {got[special]}\nwant {want[special]}")
                checked += 1
            self.assertGreater(checked, 10, dtype)

    def test_integer_division_by_zero_is_an_error(self):
        for op in ["floor_divide", "remainder", "fmod"]:
            with self.assertRaises(grpc.RpcError) as ctx:
                self.run_op(op, torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 0], dtype=torch.int32))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("division by zero", ctx.exception.details())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--backend", default="cpu", help="cpu, or cuda on a GPU machine")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
