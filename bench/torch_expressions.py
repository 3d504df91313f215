"""PyTorch on the cases of tensorcompute-expr-bench: each expression run eagerly (one kernel
per op) and through torch.compile (Triton's fused kernel), timed as the C++ side times its
own: the median over --reps of CUDA events around one call, after warm-up. Prints
`name eager_ms compiled_ms` per case."""
import argparse

import torch

N, M = 1 << 26, 8192


def cases():
    f32, f16 = torch.float32, torch.float16

    def r(shape, dtype, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        return (torch.rand(shape, generator=g, device="cuda") * 4 - 2).to(dtype)

    chain = lambda a, b, c, d: torch.sigmoid(a * b + c) * d
    chain_f32_out = lambda a, b, c, d: (torch.sigmoid(a.float() * b.float() + c.float()) * d.float())
    yield "chain_f32", chain, [r((N,), f32, i) for i in range(4)]
    yield "chain_f16_in_f32_out", chain_f32_out, [r((N,), f16, i) for i in range(4)]
    yield "chain_f32_bcast_rows", chain, [r((M, M), f32, 0), r((M,), f32, 1), r((M,), f32, 2),
                                          r((M, M), f32, 3)]
    yield "affine_norm_f32", lambda a, b, c: (a - 0.5) * 1.7 * b + c, [
        r((M, M), f32, 0), r((M,), f32, 1), r((M,), f32, 2)]
    yield "where_f32", lambda a, b: torch.where(a > 0, a * 0.1, b), [r((N,), f32, 0), r((N,), f32, 1)]
    yield "transposed_f32", lambda a, b, c: torch.sigmoid(a.t()) * b + c, [
        r((M, M), f32, 0), r((M, M), f32, 1), r((M, M), f32, 2)]
    yield "permuted_rank4_f32", lambda a, b, c: a.transpose(1, 2) * b + c, [
        r((64,) * 4, f32, i) for i in range(3)]


def median_ms(fn, reps):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ts.append(start.elapsed_time(stop))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    for name, fn, inputs in cases():
        eager = median_ms(lambda: fn(*inputs), args.reps)
        compiled_fn = torch.compile(fn)
        compiled = median_ms(lambda: compiled_fn(*inputs), args.reps)
        print(f"{name} {eager:.4f} {compiled:.4f}", flush=True)


if __name__ == "__main__":
    main()
