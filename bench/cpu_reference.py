#!/usr/bin/env python3
"""NumPy and PyTorch (CPU) timings for the CPU benchmark's case matrix.

Run by tensorcompute-cpu-bench in the same invocation (Debian's /usr/bin/python3 with
python3-numpy, python3-torch and python3-numexpr); prints one line per case: name numpy_ms
torch_ms, and numexpr_ms for the expression cases.
Arguments: PyTorch thread count, repetitions, then optionally the case names to run, or
--serve: case names read from stdin one per line, a result line printed for each.
"""
import statistics
import sys
import time

import numexpr as ne
import numpy as np
import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
ne.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 15


def bench(fn, reps=REPS, warm=3):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


N, M = 1 << 24, 4096
rng = np.random.default_rng(0)
a = rng.random(N, dtype=np.float32)
b = rng.random(N, dtype=np.float32)
o = np.empty_like(a)
ta, tb, to = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(o)
h1, h2 = a.astype(np.float16), b.astype(np.float16)
ho = np.empty_like(h1)
th1, th2, tho = torch.from_numpy(h1), torch.from_numpy(h2), torch.from_numpy(ho)
bo = np.empty(N, dtype=np.bool_)
tbo = torch.from_numpy(bo)
A, O = a.reshape(M, M), o.reshape(M, M)
tA, tO = ta.view(M, M), to.view(M, M)
row = rng.random(M, dtype=np.float32)
col = rng.random((M, 1), dtype=np.float32)
trow, tcol = torch.from_numpy(row), torch.from_numpy(col)
Bm, tB = b.reshape(M, M), tb.view(M, M)
i1 = (a * 1000).astype(np.int32)
i2 = (b * 1000).astype(np.int32) + 1
io = np.empty_like(i1)
ti1, ti2, tio = torch.from_numpy(i1), torch.from_numpy(i2), torch.from_numpy(io)
c = rng.random(N, dtype=np.float32)
d = rng.random(N, dtype=np.float32)
t1 = np.empty_like(a)
tc_, td, tt1 = torch.from_numpy(c), torch.from_numpy(d), torch.from_numpy(t1)
T1 = t1.reshape(M, M)
tT1 = tt1.view(M, M)
sa, sb = a[:4096].copy(), b[:4096].copy()
so = np.empty_like(sa)
tsa, tsb, tso = torch.from_numpy(sa), torch.from_numpy(sb), torch.from_numpy(so)

cases = [
    ("add_f32_contig", lambda: np.add(a, b, out=o), lambda: torch.add(ta, tb, out=to)),
    ("div_f32_contig", lambda: np.divide(a, b, out=o), lambda: torch.div(ta, tb, out=to)),
    ("pow_f32_contig", lambda: np.power(a, b, out=o), lambda: torch.pow(ta, tb, out=to)),
    ("mul_f16_contig", lambda: np.multiply(h1, h2, out=ho), lambda: torch.mul(th1, th2, out=tho)),
    ("add_f16_f32_mixed", lambda: np.add(h1, b, out=o), lambda: torch.add(th1, tb, out=to)),
    ("gt_f32_to_bool", lambda: np.greater(a, b, out=bo), lambda: torch.gt(ta, tb, out=tbo)),
    ("add_f32_bcast_row", lambda: np.add(A, row, out=O), lambda: torch.add(tA, trow, out=tO)),
    ("add_f32_bcast_col", lambda: np.add(A, col, out=O), lambda: torch.add(tA, tcol, out=tO)),
    ("add_f32_transposed_in", lambda: np.add(A, Bm.T, out=O), lambda: torch.add(tA, tB.t(), out=tO)),
    ("add_i32_contig", lambda: np.add(i1, i2, out=io), lambda: torch.add(ti1, ti2, out=tio)),
    ("add_f32_small_4k", lambda: np.add(sa, sb, out=so), lambda: torch.add(tsa, tsb, out=tso)),
]


def np_sigmoid_chain():
    # sigmoid(a * b + c) * d with NumPy's ufuncs, in place into two buffers.
    np.multiply(a, b, out=t1)
    np.add(t1, c, out=t1)
    np.negative(t1, out=t1)
    np.exp(t1, out=t1)
    np.add(t1, 1, out=t1)
    np.divide(d, t1, out=o)


def th_sigmoid_chain():
    torch.mul(ta, tb, out=tt1)
    torch.add(tt1, tc_, out=tt1)
    torch.sigmoid(tt1, out=tt1)
    torch.mul(tt1, td, out=to)


def np_affine_row():
    np.multiply(A, row, out=T1)
    np.add(T1, col[:, 0], out=T1)
    np.tanh(T1, out=O)


def th_affine_row():
    torch.mul(tA, trow, out=tT1)
    torch.add(tT1, tcol[:, 0], out=tT1)
    torch.tanh(tT1, out=tO)


bias = col[:, 0].copy()
# Expression cases: NumPy and PyTorch op by op, numexpr on the expression.
expr_cases = [
    ("expr_sigmoid_chain_f32", np_sigmoid_chain, th_sigmoid_chain,
     lambda: ne.evaluate("1 / (1 + exp(-(a * b + c))) * d", out=o)),
    ("expr_affine_bcast_row_f32", np_affine_row, th_affine_row,
     lambda: ne.evaluate("tanh(A * row + bias)", local_dict={"A": A, "row": row, "bias": bias},
                         out=O)),
]
by_name = {name: (fnp, fth, None) for name, fnp, fth in cases}
by_name.update({name: (fnp, fth, fne) for name, fnp, fth, fne in expr_cases})


def run(name):
    fnp, fth, fne = by_name[name]
    line = f"{name} {bench(fnp):.6f} {bench(fth):.6f}"
    if fne is not None:
        line += f" {bench(fne):.6f}"
    print(line, flush=True)


print(f"# numpy {np.__version__} torch {torch.__version__} numexpr {ne.__version__} "
      f"threads {torch.get_num_threads()}", flush=True)
if sys.argv[3:4] == ["--serve"]:
    # One case per line read from stdin, one result line each, until stdin closes: the
    # benchmark keeps this process for the whole run, so that no process starts or exits
    # between its own timings and these.
    for request in sys.stdin:
        if request.strip() in by_name:
            run(request.strip())
        else:
            print(f"{request.strip()} unknown", flush=True)
else:
    only = set(sys.argv[3:])
    for name in by_name:
        if not only or name in only:
            run(name)
