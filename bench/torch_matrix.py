"""PyTorch on the cases of tensorcompute-gpu-matrix-bench: each case's inputs built as the same
views (as_strided over a storage of the same size, values uniform over the same range), the same
op run eagerly into a preallocated output where PyTorch's function takes one, timed as the C++
side times its own: the median over --reps of CUDA events around one call, after 10 warm-ups.
Prints `torch VERSION`, then `case NAME MS` per case it can run (a line saying why for one it
cannot). Quantized ops run as the dequantize, compute, requantize composite, since PyTorch's
quantized kernels do not run on CUDA."""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}


class NoSuchView(Exception):
    pass


def make_input(spec, seed, device):
    if any(s < 0 for s in spec["strides"]):
        raise NoSuchView("PyTorch has no negative strides (its users flip, a copy, first)")
    dtype = DTYPES[spec["dtype"]]
    g = torch.Generator(device=device).manual_seed(seed)
    u = torch.rand(spec["storage"], generator=g, device=device)
    if dtype == torch.bool:
        storage = u < 0.5
    elif dtype.is_floating_point:
        storage = (spec["lo"] + u * (spec["hi"] - spec["lo"])).to(dtype)
    else:
        storage = torch.floor(spec["lo"] + u * (spec["hi"] - spec["lo"])).to(dtype)
    return storage.as_strided(spec["shape"], spec["strides"], spec["offset"])


def quantized(kind, a, b, attrs, dtype):
    x = (a.float() - attrs["a_zero_point"]) * attrs["a_scale"]
    y = (b.float() - attrs["b_zero_point"]) * attrs["b_scale"]
    r = x + y if kind == "add" else x - y if kind == "sub" else x * y
    lo, hi = (0, 255) if dtype == torch.uint8 else (-128, 127)
    q = torch.round(r / attrs["scale"]) + attrs["zero_point"]
    return q.clamp_(lo, hi).to(dtype)


def call(op, attrs, x):
    """A function of `out` (None: PyTorch allocates) that runs the op as PyTorch spells it."""
    binary = {
        "add": lambda out: torch.add(x[0], x[1], alpha=attrs.get("alpha", 1), out=out),
        "sub": lambda out: torch.sub(x[0], x[1], alpha=attrs.get("alpha", 1), out=out),
        "mul": lambda out: torch.mul(x[0], x[1], out=out),
        "div": lambda out: torch.div(x[0], x[1], out=out),
        "pow": lambda out: torch.pow(x[0], x[1], out=out),
        "atan2": lambda out: torch.atan2(x[0], x[1], out=out),
        "maximum": lambda out: torch.maximum(x[0], x[1], out=out),
        "minimum": lambda out: torch.minimum(x[0], x[1], out=out),
        "remainder": lambda out: torch.remainder(x[0], x[1], out=out),
        "floor_divide": lambda out: torch.floor_divide(x[0], x[1], out=out),
        "fmod": lambda out: torch.fmod(x[0], x[1], out=out),
        "bitwise_and": lambda out: torch.bitwise_and(x[0], x[1], out=out),
        "bitwise_or": lambda out: torch.bitwise_or(x[0], x[1], out=out),
        "bitwise_xor": lambda out: torch.bitwise_xor(x[0], x[1], out=out),
        "left_shift": lambda out: torch.bitwise_left_shift(x[0], x[1], out=out),
        "right_shift": lambda out: torch.bitwise_right_shift(x[0], x[1], out=out),
        "logical_and": lambda out: torch.logical_and(x[0], x[1], out=out),
        "logical_or": lambda out: torch.logical_or(x[0], x[1], out=out),
        "logical_xor": lambda out: torch.logical_xor(x[0], x[1], out=out),
    }
    for cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
        binary[cmp] = (lambda f: lambda out: f(x[0], x[1], out=out))(getattr(torch, cmp))
    if op in binary:
        return binary[op]
    unary_out = ("neg", "abs", "sign", "sigmoid", "tanh", "exp", "log", "log1p", "expm1", "sqrt",
                 "rsqrt", "reciprocal", "square", "sin", "cos", "floor", "ceil", "round", "trunc",
                 "erf", "bitwise_not", "logical_not")
    if op in unary_out:
        f = getattr(torch, op)
        return lambda out: f(x[0], out=out)
    if op == "relu":
        return lambda out: torch.relu(x[0])
    if op in ("isnan", "isinf", "isfinite"):
        f = getattr(torch, op)
        return lambda out: f(x[0])
    if op == "leaky_relu":
        return lambda out: F.leaky_relu(x[0], attrs["negative_slope"])
    if op == "gelu":
        return lambda out: F.gelu(x[0], approximate=attrs.get("approximate", "none"))
    if op == "silu":
        return lambda out: F.silu(x[0])
    if op == "clamp":
        if len(x) == 3:
            return lambda out: torch.clamp(x[0], x[1], x[2], out=out)
        return lambda out: torch.clamp(x[0], attrs.get("min"), attrs.get("max"), out=out)
    if op == "cast":
        return lambda out: out.copy_(x[0])
    if op == "fill":
        return lambda out: out.fill_(attrs["value"])
    if op == "where":
        return lambda out: torch.where(x[0], x[1], x[2], out=out)
    if op == "addcmul":
        return lambda out: torch.addcmul(x[0], x[1], x[2], value=attrs.get("value", 1), out=out)
    if op == "lerp":
        return lambda out: torch.lerp(x[0], x[1], x[2], out=out)
    if op.startswith("quantized_"):
        kind = op.split("_")[1]
        return lambda out: quantized(kind, x[0], x[1], attrs, x[0].dtype)
    return None


def median_ms(fn, reps, warmup, device):
    for _ in range(warmup):
        fn()
    ts = []
    if device == "cpu":  # for trying the case list where there is no GPU
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)
    torch.cuda.synchronize()
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", required=True)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    print(f"torch {torch.__version__}", flush=True)
    for k, case in enumerate(json.load(open(args.cases))):
        try:
            run(case, k, args)
        except (RuntimeError, NoSuchView) as e:  # said, and the rest still run
            print(f"{case['name']}: PyTorch: {str(e).splitlines()[0]}", flush=True)
    if args.device == "cuda":
        torch.cuda.empty_cache()


def run(case, k, args):
    dev = args.device
    attrs = dict(case["attrs"])
    x = [make_input(spec, 1000 * k + i, dev) for i, spec in enumerate(case["inputs"])]
    fn = call(case["op"], attrs, x)
    if fn is None:
        print(f"{case['name']}: no PyTorch form for op {case['op']}", flush=True)
        return
    if case["op"] == "cast":
        out = torch.empty(x[0].shape, dtype=DTYPES[attrs["dtype"]["dtype"]], device=dev)
        if case["out_strides"]:
            out = out.as_strided(x[0].shape, case["out_strides"])
    elif case["op"] == "fill":
        out = torch.empty_like(x[0], memory_format=torch.contiguous_format)
    else:
        like = fn(None)
        if case["out_strides"]:
            out = torch.empty(like.numel(), dtype=like.dtype, device=dev).as_strided(
                like.shape, case["out_strides"])
        else:
            out = torch.empty(like.shape, dtype=like.dtype, device=dev)
        del like
    try:
        fn(out)
    except (TypeError, RuntimeError):
        out = None  # no out= form: PyTorch allocates, as its users see it
    ms = median_ms(lambda: fn(out), args.reps, args.warmup, dev)
    print(f"case {case['name']} {ms:.5f}", flush=True)

if __name__ == "__main__":
    main()
