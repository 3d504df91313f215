"""Dask arrays computed by a pool of tensorcompute servers: each chunk of an element-wise chain
goes to a server as one fused expression.

    import dask.array as da
    from tensorcompute_client.dask import Pool, on_servers
    pool = Pool(["10.0.0.5:50051", "10.0.0.6:50051"])
    x = da.random.random((40000, 40000), chunks=(4000, 40000)).astype("float32")
    y = on_servers(pool, da.sqrt(x * x + 1) - 0.5)   # still a Dask array
    y.sum().compute()

`on_servers` reads the Dask graph of its argument: the chain of element-wise layers on top
(NumPy ufuncs, operators, `where`, over arrays of the same blocks, scalars included) becomes
one expression, and one Dask task per output chunk sends that expression and the chunks of
the arrays below the chain (random numbers, a file, a rechunk: anything Dask computes) to a
server. Nothing of the chain is materialized on the workers. `evaluate(pool, "a * b + c",
a, b, c)` does the same for an expression written out.

Which server: by default the servers of the pool in turn, chunk by chunk; with
`Pool(targets, per_worker=True)` each Dask worker sends all its chunks to one server (worker
i of a LocalCluster to server i modulo the pool), for servers placed beside their workers.
Either way a chunk whose server fails (it restarts, is killed, drains or freezes) is sent
again to another server of the pool: each process holds one client over the whole pool
(Client with the pool's servers as its replicas), so a computation carries on, and finishes
right, while its servers restart one by one.
"""
import functools
import operator
import threading
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .lazy import _UFUNCS, _literal

# Operators and functions Dask's element-wise layers call, as the ops they are.
_FUNCS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
    operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "pow",
    operator.neg: "neg", operator.abs: "abs", operator.invert: "bitwise_not",
    operator.and_: "bitwise_and", operator.or_: "bitwise_or", operator.xor: "bitwise_xor",
    operator.lshift: "left_shift", operator.rshift: "right_shift",
    operator.eq: "eq", operator.ne: "ne", operator.lt: "lt", operator.le: "le",
    operator.gt: "gt", operator.ge: "ge", np.where: "where",
}
_FUNCS.update(_UFUNCS)
_MAX_INPUTS = 16
_MAX_NODES = 1000

_clients: Dict[tuple, object] = {}
_clients_lock = threading.Lock()


class Pool:
    """Servers that compute chunks. Picklable: each process (each Dask worker) makes its own
    clients, one per server, on first use. `client_options` go to every Client."""

    def __init__(self, targets: Sequence[str], per_worker: bool = False, **client_options):
        if not targets:
            raise ValueError("a pool needs at least one server")
        self.targets = list(targets)
        self.per_worker = per_worker
        self.client_options = client_options

    def _client_of(self, home: Optional[str]):
        """This process's client over the pool's servers: with `home`, one that sends to it
        first (and to the others when it fails)."""
        from .client import Client
        key = (tuple(self.targets), home, tuple(sorted(self.client_options.items())))
        with _clients_lock:
            c = _clients.get(key)
            if c is None:
                options = dict(self.client_options)
                if len(self.targets) == 1:
                    c = Client(self.targets[0], **options)
                else:
                    options.setdefault("spread_replicas", home is None)
                    c = Client(",".join(self.targets), home=home, **options)
                _clients[key] = c
            return c

    def target(self) -> Optional[str]:
        """The server this process sends its chunks to first (per_worker), or None (the pool
        in turn)."""
        if self.per_worker:
            try:
                from distributed import get_worker
                w = get_worker()
            except (ImportError, ValueError):
                w = None
            if w is not None:
                key = w.name if isinstance(w.name, int) else zlib.crc32(str(w.address).encode())
                return self.targets[key % len(self.targets)]
        return None

    def client(self):
        return self._client_of(self.target())


def _run_chunk(pool: Pool, expression: str, names: Tuple[str, ...], dtype, *chunks):
    out = pool.client().eval(expression, **dict(zip(names, chunks)))
    out = np.asarray(out)
    return out if out.dtype == dtype else out.astype(dtype)


def _op_of(func) -> Optional[str]:
    try:
        return _FUNCS.get(func)
    except TypeError:  # unhashable
        return None


def _fusable(layer, name) -> bool:
    from dask.blockwise import Blockwise
    return (isinstance(layer, Blockwise) and len(layer.dsk) == 1 and name in layer.dsk
            and not layer.concatenate and not layer.new_axes
            and getattr(layer, "output_blocks", None) is None
            and isinstance(layer.dsk[name], tuple) and _op_of(layer.dsk[name][0]) is not None)


def on_servers(pool: Pool, x):
    """`x` with its top chain of element-wise layers computed on the pool's servers, one
    expression per chunk; `x` itself where its top layer is not element-wise."""
    from dask.array import Array
    from dask.base import tokenize
    from dask.blockwise import blockwise, blockwise_token
    from dask.highlevelgraph import HighLevelGraph

    layers = x.dask.layers
    top = layers.get(x.name)
    if not _fusable(top, x.name):
        return x
    out_idx = tuple(top.output_indices)
    prefix = blockwise_token(0)[:-1]
    leaves: Dict[tuple, str] = {}       # (name, index) -> variable
    leaf_pairs: List[tuple] = []        # (name, index, numblocks) in variable order
    constants: List[object] = []        # 0-dim NumPy values, inputs of their own
    nodes = [0]

    def variable(arr, idx, numblocks):
        key = (arr, idx)
        if key not in leaves:
            leaves[key] = f"x{len(leaves) + len(constants)}"
            leaf_pairs.append((arr, idx, numblocks))
        return leaves[key]

    def value(v) -> str:
        if isinstance(v, (bool, int, float)) and not isinstance(v, np.generic):
            return _literal(v)
        if isinstance(v, (np.generic, np.ndarray)) and np.ndim(v) == 0:
            constants.append(np.asarray(v))
            return f"x{len(leaves) + len(constants) - 1}"
        raise _NotFusable()

    def node(name, idx, numblocks) -> str:
        nodes[0] += 1
        if nodes[0] > _MAX_NODES or idx != out_idx[len(out_idx) - len(idx):]:
            raise _NotFusable()
        layer = layers.get(name)
        if not _fusable(layer, name) or len(idx) != len(layer.output_indices):
            return variable(name, idx, numblocks)
        func, *args = layer.dsk[name]
        rename = dict(zip(layer.output_indices, idx))
        parts = []
        for a in args:
            if isinstance(a, str) and a.startswith(prefix) and a[len(prefix):].isdigit():
                arr, ind = layer.indices[int(a[len(prefix):])]
                if ind is None:
                    parts.append(value(arr))
                else:
                    parts.append(node(arr, tuple(rename[s] for s in ind), layer.numblocks[arr]))
            else:
                parts.append(value(a))
        return f"{_op_of(func)}({', '.join(parts)})"

    try:
        expression = node(x.name, out_idx, None)
    except _NotFusable:
        return x
    # Variables are numbered in the order met, leaves and constants alike.
    if len(leaves) + len(constants) > _MAX_INPUTS or not leaves:
        return x
    names = tuple(f"x{i}" for i in range(len(leaves) + len(constants)))
    order = sorted(list(leaves.items()), key=lambda kv: int(kv[1][1:]))
    by_var = {var: key for key, var in order}
    pairs, numblocks, deps = [], {}, set()
    const_iter = iter(constants)
    for var in names:
        if var in by_var:
            arr, idx = by_var[var]
            nb = next(p[2] for p in leaf_pairs if p[0] == arr and p[1] == idx)
            pairs += [arr, idx]
            numblocks[arr] = nb
            deps.add(arr)
        else:
            pairs += [next(const_iter), None]
    out_name = "tensorcompute-" + tokenize(x.name, expression, pool.targets)
    fn = functools.partial(_run_chunk, pool, expression, names, x.dtype)
    layer = blockwise(fn, out_name, out_idx, *pairs, numblocks=numblocks)
    graph = HighLevelGraph({**layers, out_name: layer},
                           {**x.dask.dependencies, out_name: deps})
    fused = Array(graph, out_name, chunks=x.chunks, meta=x._meta)
    fused.tensorcompute_expression = expression
    return fused


class _NotFusable(Exception):
    pass


def evaluate(pool: Pool, expression: str, *arrays, names: Optional[Sequence[str]] = None,
             **named):
    """`expression` over Dask arrays (and NumPy ones), broadcast together, computed chunk by
    chunk on the pool's servers: a Dask array of the dtype the server computes."""
    import dask.array as da
    if arrays and named:
        raise ValueError("pass the inputs in order or by name, not both")
    if named:
        names, arrays = list(named), list(named.values())
    names = list(names) if names is not None else [chr(ord("a") + i) for i in range(len(arrays))]
    arrays = [a if isinstance(a, da.Array) else da.asarray(a) for a in arrays]
    arrays = da.broadcast_arrays(*arrays)
    # What the server makes of these dtypes (one metadata-only request).
    probe = {n: np.zeros((1,) * a.ndim, a.dtype) for n, a in zip(names, arrays)}
    dtype = np.dtype(pool.client().plan_eval(expression, **probe).dtype)
    ind = tuple(range(arrays[0].ndim))
    fn = functools.partial(_run_chunk, pool, expression, tuple(names), dtype)
    args = [p for a in arrays for p in (a, ind)]
    return da.blockwise(fn, ind, *args, dtype=dtype)
