"""Remote arrays: NumPy-shaped code that runs on the server as one fused expression.

    x = c.array(np_x)                    # nothing is sent yet
    y = np.sqrt(x * w + 1.5)             # still nothing: an expression is being built
    y.dtype, y.shape                     # asked of the server (plan_only), no bytes sent
    print(np.asarray(y))                 # one request: eval("sqrt(x0 * x1 + 1.5)", np_x, w)

Arithmetic, comparison and bitwise operators, NumPy's element-wise functions (np.sqrt,
np.maximum, np.where, np.clip...) and `astype` build the expression; its value is computed
once, when something needs it (np.asarray, .numpy(), printing, float(), indexing), and kept.
Dtypes are the server's: its promotion rules (PyTorch's, which NumPy 2 shares for most
cases) decide, and `.dtype` reports them before anything runs."""
import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from .v1 import tensor_service_pb2 as pb

# NumPy's element-wise functions and the server's op of the same meaning.
_UFUNCS = {
    np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
    np.floor_divide: "floor_divide", np.remainder: "remainder", np.fmod: "fmod",
    np.power: "pow", np.maximum: "maximum", np.minimum: "minimum", np.arctan2: "atan2",
    np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
    np.left_shift: "left_shift", np.right_shift: "right_shift", np.equal: "eq",
    np.not_equal: "ne", np.less: "lt", np.less_equal: "le", np.greater: "gt",
    np.greater_equal: "ge", np.logical_and: "logical_and", np.logical_or: "logical_or",
    np.logical_xor: "logical_xor", np.logical_not: "logical_not", np.isnan: "isnan",
    np.isinf: "isinf", np.isfinite: "isfinite", np.negative: "neg", np.absolute: "abs",
    np.sign: "sign", np.tanh: "tanh", np.exp: "exp", np.log: "log", np.log1p: "log1p",
    np.expm1: "expm1", np.sqrt: "sqrt", np.square: "square", np.reciprocal: "reciprocal",
    np.sin: "sin", np.cos: "cos", np.floor: "floor", np.ceil: "ceil", np.trunc: "trunc",
    np.rint: "round", np.invert: "bitwise_not",
}
_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
           "float64"}
# What one request may carry (the server's expression limits).
_MAX_INPUTS = 16
_MAX_NODES = 1000


class RemoteArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A value on its way to the server: an input (a NumPy array or a resident tensor), or an
    op over other values. Build with Client.array and NumPy's operators and functions."""

    __array_priority__ = 100

    def __init__(self, client, op: Optional[str] = None, args: Tuple = (),
                 attrs: Optional[Dict[str, object]] = None, leaf=None):
        self._client = client
        self._op = op
        self._args = args
        self._attrs = attrs or {}
        self._leaf = leaf      # A NumPy array or a Resident, for an input.
        self._plan = None      # The server's OutputPlan, once asked.
        self._value = None     # The computed NumPy array, once computed.

    # Building ------------------------------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        op = _UFUNCS.get(ufunc)
        if method != "__call__" or op is None or kwargs:
            return NotImplemented
        args = tuple(self._wrap(x) for x in inputs)
        return RemoteArray(self._client, op, args)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where and len(args) == 3 and not kwargs:
            return RemoteArray(self._client, "where", tuple(self._wrap(x) for x in args))
        if func is np.clip:
            a, lo, hi = (list(args) + [kwargs.get("a_min"), kwargs.get("a_max")])[:3]
            attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
            if all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   for v in attrs.values()):
                return RemoteArray(self._client, "clamp", (self._wrap(a),), attrs)
        # Anything else works on the value.
        args = [np.asarray(x) if isinstance(x, RemoteArray) else x for x in args]
        return func(*args, **kwargs)

    def _wrap(self, x):
        if isinstance(x, RemoteArray):
            if x._client is not self._client:
                raise ValueError("remote arrays of two clients cannot be combined")
            return x
        if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
            return x  # A literal: weak, as Python numbers are to NumPy 2 and PyTorch.
        return RemoteArray(self._client, leaf=np.asarray(x))

    def astype(self, dtype) -> "RemoteArray":
        name = np.dtype(dtype).name
        if name not in _DTYPES:
            raise TypeError(f"dtype {dtype} is not supported by tensorcompute")
        return RemoteArray(self._client, "cast", (self,), {"dtype": name})

    # The expression -------------------------------------------------------------------

    def _expression(self) -> Tuple[str, List[object], int]:
        """The expression's text over inputs x0, x1, ..., those inputs in order, and its
        number of nodes."""
        inputs: List[object] = []
        seen: Dict[int, str] = {}
        nodes = [0]

        def name_of(value) -> str:
            key = id(value)
            if key not in seen:
                seen[key] = f"x{len(inputs)}"
                inputs.append(value)
            return seen[key]

        def text(node) -> str:
            nodes[0] += 1
            if not isinstance(node, RemoteArray):
                return _literal(node)
            if node._value is not None:
                return name_of(node._value)
            if node._leaf is not None:
                return name_of(node._leaf)
            args = [text(a) for a in node._args]
            if node._op == "cast":
                return f"cast({args[0]}, {node._attrs['dtype']})"
            attrs = [f"{k}={_literal(v)}" for k, v in node._attrs.items()]
            return f"{node._op}({', '.join(args + attrs)})"

        return text(self), inputs, nodes[0]

    def _compiled(self) -> Tuple[str, List[object]]:
        """The expression, within what one request may carry: where it is too large, its
        largest operands are computed first (kept on the server) and enter as inputs."""
        while True:
            expr, inputs, nodes = self._expression()
            if len(inputs) <= _MAX_INPUTS and nodes <= _MAX_NODES:
                return expr, inputs
            pending = [a for a in self._args if isinstance(a, RemoteArray)
                       and a._value is None and a._leaf is None]
            if not pending:
                raise ValueError(f"an op over {len(inputs)} inputs: the server takes "
                                 f"{_MAX_INPUTS} in one expression")
            max(pending, key=lambda a: a._expression()[2]).persist()

    # Values ----------------------------------------------------------------------------

    def _input(self):
        return self._value if self._value is not None else self._leaf

    @property
    def plan(self):
        """What the server will compute (an OutputPlan of dtype, shape, strides, bytes):
        asked once, with nothing sent but metadata."""
        if self._plan is None:
            if self._op is None and self._value is None:
                self._plan = self._client.plan("neg", self._leaf) if not _is_bool(
                    self._leaf) else self._client.plan("logical_not", self._leaf)
            else:
                expr, inputs = self._compiled()
                self._plan = self._client.plan_eval(expr, **_named(inputs))
        return self._plan

    @property
    def dtype(self) -> np.dtype:
        leaf = self._input()
        if isinstance(leaf, np.ndarray):
            return leaf.dtype
        return np.dtype(self.plan.dtype)

    @property
    def shape(self) -> tuple:
        leaf = self._input()
        if isinstance(leaf, np.ndarray):
            return leaf.shape
        return tuple(self.plan.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def numpy(self) -> np.ndarray:
        """The value: computed on the server (one request for the whole expression) the first
        time, kept after."""
        if self._value is None:
            if self._op is None and isinstance(self._leaf, np.ndarray):
                return self._leaf
            if self._op is None:
                self._value = self._client.download(self._leaf)
            else:
                expr, inputs = self._compiled()
                self._value = self._client.eval(expr, **_named(inputs))
            self._args = ()
        if isinstance(self._value, np.ndarray):
            return self._value
        return self._client.download(self._value)

    def persist(self) -> "RemoteArray":
        """Computes the value into a resident tensor on the server, which later expressions
        read there (no bytes travel back); returns self."""
        if self._value is None and self._op is not None:
            expr, inputs = self._compiled()
            self._value = self._client.eval(expr, keep_resident=True, **_named(inputs))
            self._args = ()
        return self

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, index):
        return self.numpy()[index]

    def __float__(self):
        return float(self.numpy())

    def __int__(self):
        return int(self.numpy())

    def __bool__(self):
        return bool(self.numpy())

    def __repr__(self):
        return f"RemoteArray({self.numpy()!r})"

    def __str__(self):
        return str(self.numpy())


def _named(inputs) -> Dict[str, object]:
    return {f"x{i}": v for i, v in enumerate(inputs)}


def _is_bool(leaf) -> bool:
    if isinstance(leaf, np.ndarray):
        return leaf.dtype == np.bool_
    return leaf.tensor.dtype == pb.bool


def _literal(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v} cannot be written in an expression: pass "
                             f"np.float64({v}) (a 0-dim input) instead")
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"{type(v).__name__} is not an expression literal")
