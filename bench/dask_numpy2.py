#!/usr/bin/env python3
"""bench/dask_bench.py with Debian 12's dask 2022.12 under NumPy 2 (the GPU machine's): the
names NumPy 2 removed that this dask refers to come back as the aliases they were; nothing
else changes. Same arguments as dask_bench.py; run from the repository root, with that dask
on PYTHONPATH (a copy of /usr/lib/python3/dist-packages/{dask,tlz,tblib})."""
import os
import runpy
import sys
import types
import numpy as np
m = types.ModuleType("numpy.compat")
m.basestring = str
sys.modules["numpy.compat"] = m
for old, new in (("round_", "round"), ("product", "prod"), ("cumproduct", "cumprod"),
                 ("alltrue", "all"), ("sometrue", "any"), ("float_", "float64"),
                 ("complex_", "complex128"), ("NaN", "nan"), ("Inf", "inf"), ("NINF", None),
                 ("PINF", "inf"), ("unicode_", "str_"), ("string_", "bytes_"),
                 ("Infinity", "inf"), ("infty", "inf"), ("NZERO", None), ("PZERO", None)):
    if old not in np.__dict__:
        try:
            setattr(np, old, getattr(np, new) if new else {"NINF": -np.inf, "NZERO": -0.0,
                                                            "PZERO": 0.0}[old])
        except AttributeError:
            pass
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.argv = [os.path.join(here, "dask_bench.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
