#!/usr/bin/env python3
"""NumPy and PyTorch (CPU) timings for the CPU benchmark's case matrix.

Run by tensorcompute-cpu-bench in the same invocation (Debian's /usr/bin/python3 with
python3-numpy and python3-torch); prints one line per case: name numpy_ms torch_ms.
Arguments: PyTorch thread count, repetitions, then optionally the case names to run.
"""
import statistics
import sys
import time

import numpy as np
import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
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
only = set(sys.argv[3:])
print(f"# numpy {np.__version__} torch {torch.__version__} threads {torch.get_num_threads()}")
for name, fnp, fth in cases:
    if only and name not in only:
        continue
    print(f"{name} {bench(fnp):.4f} {bench(fth):.4f}", flush=True)
