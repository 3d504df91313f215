"""The client: a channel reused for every call, deadlines, chunked streaming, resident tensors."""
import concurrent.futures
import ctypes
import os
import secrets
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Optional

import grpc
import numpy as np

from . import native as _native_mod
from . import replicas as _replicas
from . import shm
from .v1 import tensor_service_pb2 as pb
from .v1 import tensor_service_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from .lazy import RemoteArray  # noqa: F401

_NUMPY_TO_WIRE = {
    np.dtype(np.bool_): pb.bool, np.dtype(np.uint8): pb.uint8, np.dtype(np.int8): pb.int8,
    np.dtype(np.int16): pb.int16, np.dtype(np.int32): pb.int32, np.dtype(np.int64): pb.int64,
    np.dtype(np.float16): pb.float16, np.dtype(np.float32): pb.float32,
    np.dtype(np.float64): pb.float64,
}
_WIRE_TO_NUMPY = {v: k for k, v in _NUMPY_TO_WIRE.items()}
# bfloat16 travels as its 16 bits; NumPy has no such type, so it arrives as uint16 bits (or
# as a torch.bfloat16 tensor with as_torch=True).
_WIRE_TO_NUMPY[pb.bfloat16] = np.dtype(np.uint16)


def _torch():
    try:
        import torch  # noqa: F401
        return torch
    except ImportError:
        return None


def _as_numpy(x):
    """(array, wire dtype) for a NumPy array, a PyTorch tensor or anything np.asarray takes."""
    # A torch tensor comes from a process that imported torch: never import it here (it
    # takes a second or more).
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), pb.bfloat16
        return t.numpy(), None
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    return a, None


@dataclass
class _Span:
    """An array's memory: the addresses [lo, hi) its elements occupy, and its view of them."""
    array: np.ndarray
    wire: int
    lo: int
    hi: int

    def meta(self, **storage) -> pb.Tensor:
        a = self.array
        item = a.itemsize
        if a.size == 0:
            return pb.Tensor(dtype=self.wire, shape=a.shape, **storage)
        ptr = a.__array_interface__["data"][0]
        return pb.Tensor(dtype=self.wire, shape=a.shape, strides=[s // item for s in a.strides],
                         offset=(ptr - self.lo) // item, **storage)


def _span(x) -> _Span:
    a, wire = _as_numpy(x)
    if wire is None:
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        wire = _NUMPY_TO_WIRE.get(np.dtype(a.dtype.str.replace(">", "<").replace("=", "<")))
        if wire is None:
            raise TypeError(f"dtype {a.dtype} is not supported by tensorcompute")
    item = a.itemsize
    if a.size == 0:
        return _Span(a, wire, 0, 0)
    if any(s % item for s in a.strides):
        a = np.ascontiguousarray(a)  # Strides that are not whole elements: a copy is needed.
    ptr = a.__array_interface__["data"][0]
    lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + item
    # lo need not be aligned to the element size (an array inside a foreign buffer, such as
    # one Dask or pickle received): the bytes are what is sent, and the server copies a blob
    # it cannot read in place.
    return _Span(a, wire, lo, hi)


def to_tensor(x) -> pb.Tensor:
    """A wire Tensor for `x` without making it contiguous: the bytes between its lowest and
    highest element, and its strides and offset (in elements) into them."""
    sp = _span(x)
    if sp.array.size == 0:
        return sp.meta()
    return sp.meta(data=ctypes.string_at(sp.lo, sp.hi - sp.lo))


def from_tensor(t: pb.Tensor, as_torch: bool = False):
    """A NumPy array (or torch tensor) of a wire Tensor with its data, honouring its strides."""
    dt = _WIRE_TO_NUMPY[t.dtype]
    flat = np.frombuffer(t.data, dtype=dt)
    shape = tuple(t.shape)
    strides = tuple(t.strides) if len(t.strides) else None
    if strides is None:
        arr = flat[t.offset:t.offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)
    else:
        arr = np.lib.stride_tricks.as_strided(flat[t.offset:], shape=shape,
                                              strides=tuple(s * dt.itemsize for s in strides))
    arr = np.array(arr)  # Own the memory, writable.
    return _to_torch(arr, t.dtype) if as_torch else arr


def _is_cuda(x) -> bool:
    torch = _torch() if x is not None and type(x).__module__.startswith("torch") else None
    return torch is not None and isinstance(x, torch.Tensor) and x.is_cuda


_TORCH_NAMES = {"bool": pb.bool, "uint8": pb.uint8, "int8": pb.int8, "int16": pb.int16,
                "int32": pb.int32, "int64": pb.int64, "float16": pb.float16,
                "bfloat16": pb.bfloat16, "float32": pb.float32, "float64": pb.float64}


_TORCH_WIRE = {}  # torch dtype -> wire dtype, filled as met


def _torch_wire(dtype) -> int:
    wire = _TORCH_WIRE.get(dtype)
    if wire is None:
        wire = _TORCH_NAMES.get(str(dtype).replace("torch.", ""))
        if wire is None:
            raise TypeError(f"dtype {dtype} is not supported by tensorcompute")
        _TORCH_WIRE[dtype] = wire
    return wire


def _torch_dtype(wire: int):
    name = {v: k for k, v in _TORCH_NAMES.items()}[wire]
    return getattr(_torch(), name)


def _to_torch(arr: np.ndarray, wire: int):
    torch = _torch()
    if torch is None:
        raise RuntimeError("as_torch=True needs torch")
    out = torch.from_numpy(arr.view(np.int16) if wire == pb.bfloat16 else arr)
    return out.view(torch.bfloat16) if wire == pb.bfloat16 else out


@dataclass
class Resident:
    """A tensor kept on the server: its handle and metadata (pass it as an input), and the
    server device holding it where known."""
    tensor: pb.Tensor
    device: Optional[int] = None

    @property
    def handle(self) -> str:
        return self.tensor.handle

    @property
    def shape(self):
        return tuple(self.tensor.shape)


def _attribute(v) -> pb.Attribute:
    if isinstance(v, bool) or isinstance(v, np.bool_):
        return pb.Attribute(bool_value=bool(v))
    if isinstance(v, (int, np.integer)):
        return pb.Attribute(int_value=int(v))
    if isinstance(v, (float, np.floating)):
        return pb.Attribute(float_value=float(v))
    if isinstance(v, str):
        wire = getattr(pb, v, None)
        if isinstance(wire, int) and v in pb.DType.keys():
            return pb.Attribute(dtype_value=wire)
        return pb.Attribute(string_value=v)
    raise TypeError(f"attribute value {v!r} is not a bool, int, float or str")


# Copies of at least this many bytes are split over threads (NumPy releases the interpreter
# lock while it copies): one thread moves a few GB/s, a machine's memory several times that.
_PARALLEL_COPY_BYTES = 8 << 20
_copy_pool = None
_copy_pool_lock = threading.Lock()


def _copy(dst: np.ndarray, src: np.ndarray):
    """dst[...] = src, over several threads for large arrays (split along the first axis)."""
    global _copy_pool
    parts = min(os.cpu_count() or 1, 8, max(1, dst.nbytes // _PARALLEL_COPY_BYTES))
    if parts < 2 or dst.ndim == 0 or dst.shape[0] < parts:
        np.copyto(dst, src)
        return
    with _copy_pool_lock:
        if _copy_pool is None:
            _copy_pool = concurrent.futures.ThreadPoolExecutor(8, "tensorcompute-copy")
    src = np.broadcast_to(src, dst.shape)
    bounds = [dst.shape[0] * k // parts for k in range(parts + 1)]
    futures = [_copy_pool.submit(np.copyto, dst[a:b], src[a:b])
               for a, b in zip(bounds, bounds[1:])]
    for f in futures:
        f.result()


def _take_data(t: pb.Tensor) -> bytes:
    """Clears `t`'s inline data and returns it (for the native library, which takes the bytes
    by address; keep them referenced until the call returns)."""
    data = t.data
    t.ClearField("data")
    return data


def _address(data: bytes) -> int:
    """Where a bytes object's contents lie (0 when empty)."""
    if not data:
        return 0
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value


def _array_over(t: pb.Tensor, raw: Optional[np.ndarray], as_torch: bool):
    """The array `t` describes over its storage bytes `raw` (the native library's memory):
    that memory itself when the layout is C-contiguous from its start, else a copy."""
    dt = _WIRE_TO_NUMPY[t.dtype]
    shape = tuple(t.shape)
    numel = int(np.prod(shape, dtype=np.int64))
    if raw is None or numel == 0:
        arr = np.empty(shape, dt)
    else:
        flat = raw[:raw.size - raw.size % dt.itemsize].view(dt)
        contiguous = list(t.strides) in ([], list(_contiguous_strides(shape)))
        if contiguous and t.offset == 0:
            arr = flat[:numel].reshape(shape)  # The library's memory, no copy.
        else:
            arr = np.array(np.lib.stride_tricks.as_strided(
                flat[t.offset:], shape=shape,
                strides=tuple(st * dt.itemsize for st in t.strides)))
    return _to_torch(arr, t.dtype) if as_torch else arr


def _contiguous_strides(shape):
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(1, n)
    return tuple(reversed(out))


_Pem = Optional[object]  # A PEM file's path (str) or its bytes.
_warned = set()


def _warn_once(message: str):
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _read_pem(p) -> Optional[bytes]:
    if p is None:
        return None
    if isinstance(p, (bytes, bytearray)):
        return bytes(p)
    with open(p, "rb") as f:
        return f.read()


def _align(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class OutputPlan:
    """What a request would produce (Client.plan): its NumPy dtype ("bfloat16" for bfloat16),
    shape, strides in elements, and the bytes its storage spans."""
    dtype: object
    shape: tuple
    strides: tuple
    storage_bytes: int


def _output_plan_of(t: pb.Tensor) -> OutputPlan:
    return OutputPlan(dtype="bfloat16" if t.dtype == pb.bfloat16 else _WIRE_TO_NUMPY[t.dtype],
                      shape=tuple(t.shape), strides=tuple(t.strides),
                      storage_bytes=t.storage_bytes)


def _stream_reset(e: grpc.RpcError) -> bool:
    """The call's stream was reset under it (a balancer whose replica died mid-call): no
    server answered it. A server's own INTERNAL carries its own message."""
    return e.code() == grpc.StatusCode.INTERNAL and "RST_STREAM" in (e.details() or "")


class Client:
    def __init__(self, target: str, timeout: float = 60.0,
                 max_message_bytes: int = 256 << 20, chunk_bytes: int = 1 << 20,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None, shared_memory: Optional[bool] = None,
                 shared_memory_threshold: int = 256 << 10, native: Optional[bool] = None,
                 connections: int = 8, native_threshold: int = 1 << 20,
                 spread_bytes: int = 32 << 20, tls_ca: _Pem = None, tls_cert: _Pem = None,
                 tls_key: _Pem = None, tls_server_name: Optional[str] = None,
                 retry_attempts: int = 4):
        """TLS: `tls_ca`, the CA certificate that signed the server's (a PEM file's path, or
        its bytes), turns it on; `tls_cert` and `tls_key` (the same way) for servers that
        require client certificates; `tls_server_name` to check the server's certificate
        against a name other than the target's host. Both transports take these.
        `credentials`: grpc.ssl_channel_credentials(...) instead, for grpcio alone (the
        native library cannot take grpcio's objects).
        `token`: a bearer token sent with every call.

        `shared_memory`: None (the default) uses shared-memory regions where the server is on
        this host (a unix: target, localhost or a loopback address) and offers them; True
        requires them; False never uses them. With regions, requests whose inputs span at
        least `shared_memory_threshold` bytes send no tensor bytes over the socket.

        `native`: where bytes do cross the socket, requests of at least `native_threshold`
        bytes go through libtensorcompute_native (the C++ client library, see native.py) when
        it is found: from the arrays' memory, spread over `connections` connections when they
        reach `spread_bytes`, outside the interpreter lock. None (the default) uses it when
        found (not with `credentials`), and warns once where it is not; True requires it;
        False never uses it.
        Several replicas: `target` may list them ("host:port,host:port") or name them through
        DNS ("dns:///name:port"). Stateless computes (inputs sent inline, the output returned)
        and list_ops are then spread over the replicas per call, each retry on another;
        everything that keeps state on a server (resident tensors, uploads, streams,
        regions, server_info) goes to one replica, `home`, picked at random. Unary computes
        and list_ops are tried up to `retry_attempts` times in all on UNAVAILABLE (a
        draining server, a lost connection, a balancer's 502), one server or several."""
        options = [("grpc.max_receive_message_length", max_message_bytes),
                   ("grpc.max_send_message_length", max_message_bytes)]
        if credentials is not None and tls_ca is not None:
            raise ValueError("pass either credentials= or tls_ca=, not both")
        self._tls_files = None
        if tls_ca is not None:
            if (tls_cert is None) != (tls_key is None):
                raise ValueError("tls_cert and tls_key come together")
            pems = [_read_pem(p) for p in (tls_ca, tls_key, tls_cert)]
            credentials = grpc.ssl_channel_credentials(*pems)
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            # For the native library: paths, or the PEM text itself.
            self._tls_files = [p if p is None or isinstance(p, str) else _read_pem(p).decode()
                               for p in (tls_ca, tls_cert, tls_key)] + [tls_server_name]
        elif tls_cert is not None or tls_key is not None or tls_server_name:
            raise ValueError("tls_cert, tls_key and tls_server_name need tls_ca")
        self.replicas, balanced = _replicas.resolve(target)
        self.home = (self.replicas[secrets.randbelow(len(self.replicas))] if balanced
                     else target)

        def channel(t, opts):
            return (grpc.secure_channel(t, credentials, opts) if credentials
                    else grpc.insecure_channel(t, opts))
        # A retried call's request is kept for its next try.
        options += [("grpc.enable_retries", 1),
                    ("grpc.per_rpc_retry_buffer_size", min(spread_bytes + (1 << 20),
                                                           max_message_bytes))]
        self.channel = channel(self.home, options + [
            ("grpc.service_config", _replicas.service_config(retry_attempts, False))])
        self.stub = pb_grpc.TensorServiceStub(self.channel)
        self._balanced_channel = None
        self._balanced_stub = self.stub
        if balanced:
            self._balanced_channel = channel(balanced, options + [
                ("grpc.service_config", _replicas.service_config(retry_attempts, True))])
            self._balanced_stub = pb_grpc.TensorServiceStub(self._balanced_channel)
        self.target = target
        self.retry_attempts = retry_attempts
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self.chunk_bytes = chunk_bytes
        # One session over every connection of this client (the native transport's too): the
        # server keeps its resident tensors on one device.
        self.session = secrets.token_hex(16)
        self.metadata = [("tc-session", self.session)]
        if token:
            self.metadata.append(("authorization", f"Bearer {token}"))
        self.shared_memory = shared_memory
        self.shared_memory_threshold = shared_memory_threshold
        self._shm_state = None
        self._shm_error = None
        self._shm_lock = threading.Lock()
        self.native = native
        self.connections = connections
        self.native_threshold = native_threshold
        self.spread_bytes = spread_bytes
        self._token = token
        # grpcio's credentials object, which the native library cannot take.
        self._grpc_credentials_only = credentials is not None and self._tls_files is None
        self._native_state = None
        self._native_lock = threading.Lock()
        self._plans = {}
        self._plan_lock = threading.Lock()

    def close(self):
        if self._native_state is not None:
            self._native_state.close()
            self._native_state = None
        if self._shm_state is not None:
            self._shm_state.close()
        self.channel.close()
        if self._balanced_channel is not None:
            self._balanced_channel.close()

    # Shared memory ----------------------------------------------------------------------

    def _shm(self) -> shm.Shm:
        """The region socket connection, opened on first use; raises where regions are not
        available (another host, regions off, or shared_memory=False)."""
        with self._shm_lock:
            if self._shm_state is None and self._shm_error is None:
                if self.shared_memory is False:
                    self._shm_error = "shared memory is off for this client (shared_memory=False)"
                elif self.shared_memory is None and not shm.is_local_target(self.home):
                    self._shm_error = f"{self.target} is not on this host"
                else:
                    address = self.server_info().region_socket
                    if not address:
                        self._shm_error = "the server has shared-memory regions off"
                    else:
                        try:
                            self._shm_state = shm.Shm(address)
                        except OSError as e:
                            self._shm_error = f"cannot reach region socket {address}: {e}"
            if self._shm_state is None:
                raise RuntimeError(f"no shared-memory regions: {self._shm_error}")
            return self._shm_state

    def _native(self) -> Optional[_native_mod.NativeClient]:
        """The native transport, or None where it is off or not found."""
        if self.native is False:
            return None
        with self._native_lock:
            if self._native_state is None:
                why = None
                if self._grpc_credentials_only:
                    why = ("credentials= is a grpcio object the native library cannot take "
                           "(pass tls_ca=, tls_cert=, tls_key= instead)")
                elif _native_mod.load() is None:
                    why = _native_mod.error()
                if why is not None:
                    if self.native:
                        raise RuntimeError(f"no native transport: {why}")
                    self.native = False
                    _warn_once(f"tensorcompute_client: no native transport ({why}); large "
                               "tensors go through grpcio, tens of times slower")
                    return None
                self._native_state = _native_mod.NativeClient(
                    self.target, self.timeout, self.max_message_bytes, self.chunk_bytes,
                    self._token, self.connections, self.spread_bytes, self.session,
                    self._tls_files, home=self.home if self._balanced_channel else None)
            return self._native_state

    def native_available(self) -> bool:
        try:
            return self._native() is not None
        except RuntimeError:
            return False

    def shared_memory_available(self) -> bool:
        if self.shared_memory is False:
            return False
        try:
            self._shm()
            return True
        except RuntimeError:
            if self.shared_memory:
                raise
            return False

    def region(self, nbytes: int, name: str = "") -> shm.Region:
        """A shared-memory region of `nbytes` registered with the server; `.array(shape,
        dtype, offset)` places arrays in it, `.close()` unregisters it."""
        return shm.Region(self, nbytes, name)

    def shared_array(self, shape, dtype=np.float32) -> np.ndarray:
        """A zeroed C-contiguous array in a region of its own: as an input or as `out=` of
        compute, its bytes never cross the socket. The region is unregistered once the array
        (and every view of it) is gone."""
        dt = np.dtype(dtype)
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dt.itemsize)
        r = self.region(nbytes)
        arr = r.array(shape, dt)
        mm = r._mmap
        r._mmap = None  # The arrays keep the mapping; the region ends with the last of them.
        weakref.finalize(mm, r.close)
        return arr

    def _scratch(self, state: shm.Shm, nbytes: int) -> shm.Region:
        """This thread's scratch region, at least `nbytes` (grown, never shrunk)."""
        r = getattr(state.scratch, "region", None)
        if r is None or r.nbytes < nbytes:
            if r is not None:
                r.close()
            r = shm.Region(self, max(nbytes, (r.nbytes * 3 // 2) if r else 0), "scratch")
            state.scratch.region = r
        return r

    def _region_inputs(self, what, inputs, output_dtype, attrs, out, keep_resident):
        """Region references for the inputs (copied into scratch where they are not in a
        region already), and where the output goes: (tensors, output_region, offset,
        scratch_output) or None when regions do not apply."""
        spans = []
        for x in inputs:
            if isinstance(x, (Resident, pb.Tensor)):
                spans.append(x)
            else:
                spans.append(_span(x))
        arrays = [s for s in spans if isinstance(s, _Span)]
        size = sum(s.hi - s.lo for s in arrays)
        if out is None and (keep_resident or size < self.shared_memory_threshold):
            return None
        if out is None and not self.shared_memory_available():
            return None
        state = self._shm()
        placed = {}
        need = 0
        for k, s in enumerate(spans):
            if isinstance(s, _Span) and s.array.size:
                found = state.find(s.array, s.lo, s.hi)
                if found is not None:
                    placed[k] = found
                else:
                    need += _align(s.array.nbytes)
        out_at = None
        if out is None:
            # Room for the output, as the server says it will be.
            out_at = need
            planned = self._output_plan(what, spans, attrs, output_dtype)
            need += _align(max(1, planned.storage_bytes))
        scratch = self._scratch(state, need) if need else None
        at = 0
        tensors = []
        for k, s in enumerate(spans):
            if isinstance(s, Resident):
                tensors.append(pb.Tensor(handle=s.handle))
            elif isinstance(s, pb.Tensor):
                tensors.append(s)
            elif s.array.size == 0:
                tensors.append(s.meta())
            elif k in placed:
                r, offset = placed[k]
                tensors.append(s.meta(region=r.id, region_offset=offset,
                                      storage_bytes=s.hi - s.lo))
            else:
                dst = scratch.array(s.array.shape, s.array.dtype, at)
                _copy(dst, s.array)
                tensors.append(pb.Tensor(dtype=s.wire, shape=s.array.shape, region=scratch.id,
                                         region_offset=at, storage_bytes=dst.nbytes))
                at += _align(dst.nbytes)
        if out is not None:
            o = _span(out)
            found = state.find(o.array, o.lo, o.hi) if o.array.size else None
            if found is None or not o.array.flags.c_contiguous:
                raise ValueError("out= must be a C-contiguous array in a shared-memory region "
                                 "(Client.shared_array or Client.region(...).array)")
            return tensors, found[0], found[1], None
        return tensors, scratch, out_at, scratch

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def server_info(self) -> pb.ServerInfoResponse:
        return self.stub.ServerInfo(pb.ServerInfoRequest(), timeout=self.timeout, metadata=self.metadata)

    def list_ops(self):
        return list(self.list_ops_response().ops)

    def list_ops_response(self) -> pb.ListOpsResponse:
        """The catalog, and the grammar of expressions (expression_grammar)."""
        return self._balanced_stub.ListOps(pb.ListOpsRequest(), timeout=self.timeout,
                                           metadata=self.metadata)

    def _unary_compute(self, request: pb.ComputeRequest) -> pb.Tensor:
        """One unary Compute. A stateless one (it keeps nothing on a server and uses nothing
        kept there) goes over the balanced channel, and is sent again where gRPC's own retry
        could not (a balancer in front passed the server's answer on as headers first, which
        commits the call): a server that refuses it while draining (UNAVAILABLE) or cancels it
        in its last second (CANCELLED, which this client never asks for) has not answered it,
        and neither has one whose stream a balancer reset when the replica behind it died
        mid-call (INTERNAL, "Received RST_STREAM": nginx, 8 calls of 14225 in one CI run)."""
        stateless = not (request.keep_output_resident or request.output_region
                         or any(t.handle or t.region for t in request.inputs))
        stub = self._balanced_stub if stateless else self.stub
        attempt = 1
        while True:
            try:
                return stub.Compute(request, timeout=self.timeout, metadata=self.metadata).output
            except grpc.RpcError as e:
                if (not stateless or attempt >= self.retry_attempts or
                        (e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                          grpc.StatusCode.CANCELLED) and
                         not _stream_reset(e))):
                    raise
            time.sleep(min(0.5, 0.1 * 2 ** (attempt - 1)))
            attempt += 1

    def _input(self, x) -> pb.Tensor:
        if isinstance(x, Resident):
            return pb.Tensor(handle=x.handle)
        if isinstance(x, pb.Tensor):
            return x
        return to_tensor(x)

    def compute(self, op: str, *inputs, output_dtype: Optional[str] = None,
                keep_resident: bool = False, as_torch: bool = False,
                stream: Optional[bool] = None, out: Optional[np.ndarray] = None,
                **attributes):
        """Runs `op`; returns a NumPy array (torch tensor with as_torch), or a Resident with
        keep_resident. Inputs too large for one message (or stream=True) go in chunks.

        On the server's host (see shared_memory in the constructor) large inputs travel
        through shared memory: arrays that lie in regions (shared_array) without a copy,
        others copied once into a scratch region. `out=` a shared array receives the result
        in place, so nothing is copied at all."""
        return self._run({"op": op}, inputs, output_dtype, keep_resident, as_torch, stream,
                         out, attributes)

    def eval(self, expression: str, *inputs, output_dtype: Optional[str] = None,
             keep_resident: bool = False, as_torch: bool = False,
             stream: Optional[bool] = None, out: Optional[np.ndarray] = None, **named):
        """Evaluates an element-wise expression over the inputs in one pass on the server:
        c.eval("sigmoid(a * b + c) * 0.5", x, y, z) names them a, b, c in order, or
        c.eval("x * w + bias", x=x, w=w, bias=b) by keyword. Operators, calls of any op
        (clamp(x, min=0), cast(x, float16), where(m, x, y)) and literals; the server's
        ListOps describes the language (list_ops_response().expression_grammar). Otherwise
        as compute()."""
        if inputs and named:
            raise ValueError("eval takes its inputs positionally (a, b, c...) or by name, "
                             "not both")
        what = {"expression": expression}
        if named:
            what["input_names"] = list(named.keys())
            inputs = tuple(named.values())
        return self._run(what, inputs, output_dtype, keep_resident, as_torch, stream, out, {})

    def array(self, x, resident: bool = False) -> "RemoteArray":
        """A remote array over `x` (a NumPy array, or a Resident): NumPy's operators and
        element-wise functions on it build one expression, which runs on the server as one
        request when its value is needed (see lazy.py). resident=True uploads `x` now, so
        that every expression over it reads it there."""
        from .lazy import RemoteArray
        if isinstance(x, Resident):
            return RemoteArray(self, leaf=x)
        return RemoteArray(self, leaf=self.upload(x) if resident else np.asarray(x))

    def plan(self, op: str, *inputs, output_dtype: Optional[str] = None,
             **attributes) -> "OutputPlan":
        """What compute(op, *inputs, ...) would return, asked of the server without running
        it (ComputeRequest.plan_only): the output's dtype, shape, strides and bytes, by the
        server's own promotion and broadcasting. Arrays are described by their metadata: no
        tensor bytes travel."""
        return self._plan({"op": op}, inputs, output_dtype, attributes)

    def plan_eval(self, expression: str, *inputs, output_dtype: Optional[str] = None,
                  **named) -> "OutputPlan":
        """plan() for eval(expression, ...)."""
        what = {"expression": expression}
        if named:
            if inputs:
                raise ValueError("plan_eval takes its inputs positionally or by name, not both")
            what["input_names"] = list(named.keys())
            inputs = tuple(named.values())
        return self._plan(what, inputs, output_dtype, {})

    def _output_plan(self, what, inputs, attrs, output_dtype) -> "OutputPlan":
        """What a request over `inputs` (arrays' spans, Residents or wire tensors) returns,
        asked of the server once per kind of request (op or expression, attributes, output
        dtype, and the inputs' dtypes and shapes) and kept (the last 256 kinds)."""
        described = []
        key = [tuple(sorted((k, v) for k, v in what.items() if k != "input_names")),
               tuple(what.get("input_names", ())),
               tuple(sorted((k, v.SerializeToString()) for k, v in attrs.items())),
               output_dtype]
        for x in inputs:
            if isinstance(x, Resident):
                t = pb.Tensor(handle=x.handle)
            elif isinstance(x, pb.Tensor):
                t = pb.Tensor()
                t.CopyFrom(x)
                t.storage_bytes = len(t.data) if t.data else t.storage_bytes
                for f in ("data", "region", "region_offset"):
                    t.ClearField(f)
            else:
                t = x.meta(storage_bytes=x.hi - x.lo)
            described.append(t)
            key.append((t.handle, t.dtype, tuple(t.shape)))
        key = tuple(key)
        with self._plan_lock:
            found = self._plans.get(key)
        if found is not None:
            return found
        request = pb.ComputeRequest(**what, inputs=described, attributes=attrs, plan_only=True)
        if output_dtype is not None:
            request.output_dtype = getattr(pb, output_dtype)
        found = _output_plan_of(self._compute_metadata(request))
        with self._plan_lock:
            if len(self._plans) >= 256:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = found
        return found

    def _plan(self, what, inputs, output_dtype, attributes) -> "OutputPlan":
        spans = [x if isinstance(x, (Resident, pb.Tensor)) else _span(x) for x in inputs]
        return self._output_plan(what, spans, {k: _attribute(v) for k, v in attributes.items()},
                                 output_dtype)

    def _run(self, what, inputs, output_dtype, keep_resident, as_torch, stream, out,
             attributes):
        """compute() and eval(): `what` holds the request's op, or its expression and
        input names."""
        attrs = {k: _attribute(v) for k, v in attributes.items()}
        if _is_cuda(out) or any(_is_cuda(x) for x in inputs):
            return self._compute_cuda(what, inputs, attrs, attributes, output_dtype, out)
        placed = None
        if stream is not True:
            placed = self._region_inputs(what, inputs, output_dtype, attrs, out, keep_resident)
        if placed is not None:
            tensors, region, offset, scratch = placed
            request = pb.ComputeRequest(**what, inputs=tensors, attributes=attrs,
                                        output_region=region.id, output_region_offset=offset)
            if output_dtype is not None:
                request.output_dtype = getattr(pb, output_dtype)
            t = self._compute_metadata(request)
            if out is not None:
                result = out.reshape(tuple(t.shape)) if tuple(t.shape) != out.shape else out
            else:
                view = region.array((t.storage_bytes // max(1, _WIRE_TO_NUMPY[t.dtype].itemsize),),
                                    _WIRE_TO_NUMPY[t.dtype], offset)
                src = np.lib.stride_tricks.as_strided(
                    view, shape=tuple(t.shape),
                    strides=tuple(s * view.itemsize for s in t.strides))
                result = np.empty(src.shape, src.dtype)
                _copy(result, src)
            return _to_torch(result, t.dtype) if as_torch else result
        native = self._native() if stream is not True else None
        if native is not None:
            spans = [None if isinstance(x, (Resident, pb.Tensor)) else _span(x) for x in inputs]
            size = sum(sp.hi - sp.lo for sp in spans if sp is not None)
            size += sum(len(x.data) for x in inputs if isinstance(x, pb.Tensor))
            if size >= self.native_threshold or self.native:
                return self._compute_native(native, what, inputs, spans, attrs, output_dtype,
                                            keep_resident, as_torch)
        request = pb.ComputeRequest(**what, inputs=[self._input(x) for x in inputs],
                                    attributes=attrs, keep_output_resident=keep_resident)
        if output_dtype is not None:
            request.output_dtype = getattr(pb, output_dtype)
        size = sum(len(t.data) for t in request.inputs)
        if stream is None:
            stream = size > self.max_message_bytes // 2
        if stream:
            out = self._compute_stream(request)
        else:
            out = self._unary_compute(request)
        if keep_resident:
            return Resident(out)
        return from_tensor(out, as_torch=as_torch)

    def _compute_metadata(self, request: pb.ComputeRequest) -> pb.Tensor:
        """One Compute whose output goes into a region: only metadata comes back. Through the
        native library where it is loaded (a C++ call costs a fraction of grpcio's), else
        grpcio."""
        native = self._native() if self.native is not False else None
        if native is None:
            return self.stub.Compute(request, timeout=self.timeout,
                                     metadata=self.metadata).output
        if any(t.data for t in request.inputs):
            req = pb.ComputeRequest()
            req.CopyFrom(request)
            keep = [_take_data(t) for t in req.inputs]  # The bytes stay alive through the call.
            where = [(_address(d), len(d)) for d in keep]
        else:  # Nothing inline (regions, handles, GPU memory): sent as it is.
            req, where = request, [(0, 0)] * len(request.inputs)
        meta, raw = native.compute(req, where)
        if raw is not None:
            meta.data = raw.tobytes()
        return meta

    def _compute_native(self, native, what, inputs, spans, attrs, output_dtype, keep_resident,
                        as_torch):
        """The request (`what`: op or expression) through the native library: each array's
        bytes are read where they lie."""
        tensors, where, keep = [], [], []
        for x, sp in zip(inputs, spans):
            if isinstance(x, Resident):
                tensors.append(pb.Tensor(handle=x.handle))
                where.append((0, 0))
            elif isinstance(x, pb.Tensor):
                t = pb.Tensor()
                t.CopyFrom(x)
                data = _take_data(t)
                tensors.append(t)
                keep.append(data)
                where.append((_address(data), len(data)))
            else:
                tensors.append(sp.meta(storage_bytes=sp.hi - sp.lo))
                where.append((sp.lo, sp.hi - sp.lo))
        request = pb.ComputeRequest(**what, inputs=tensors, attributes=attrs,
                                    keep_output_resident=keep_resident)
        if output_dtype is not None:
            request.output_dtype = getattr(pb, output_dtype)
        t, raw = native.compute(request, where)
        del keep
        if keep_resident:
            return Resident(t)
        return _array_over(t, raw, as_torch)

    def _cuda_input(self, state, t) -> pb.Tensor:
        """A torch.cuda tensor as a view of its allocation, shared through CUDA IPC."""
        wire = _torch_wire(t.dtype)
        if t.numel() == 0:
            return pb.Tensor(dtype=wire, shape=t.shape)
        item = t.element_size()
        ptr = t.data_ptr()
        span = sum((n - 1) * st for n, st in zip(t.shape, t.stride())) * item + item
        r = state.device_region(self, ptr, t.device.index)
        return pb.Tensor(dtype=wire, shape=t.shape, strides=t.stride(), region=r.id,
                         region_offset=ptr - r.base, storage_bytes=span)

    def _compute_cuda(self, what, inputs, attrs, attributes, output_dtype, out):
        """The request (`what`: op or expression) on torch.cuda tensors, computed in place on
        the server's GPU: no byte leaves the GPU. The result is `out` (a contiguous
        torch.cuda tensor) or a new one."""
        torch = _torch()
        state = self._shm()
        device = (out if _is_cuda(out) else next(x for x in inputs if _is_cuda(x))).device
        tensors = []
        for x in inputs:
            if _is_cuda(x):
                tensors.append(self._cuda_input(state, x))
            else:
                tensors.append(self._input(x))
        if out is None:
            planned = self._output_plan(what, tensors, attrs, output_dtype)
            buf = torch.empty(max(1, planned.storage_bytes), dtype=torch.uint8, device=device)
        else:
            if not out.is_contiguous():
                raise ValueError("out= must be a contiguous torch.cuda tensor")
            buf = out
        target = self._cuda_input(state, buf.reshape(-1)) if buf.numel() else None
        request = pb.ComputeRequest(**what, inputs=tensors, attributes=attrs)
        if target is not None:
            request.output_region = target.region
            request.output_region_offset = target.region_offset
        if output_dtype is not None:
            request.output_dtype = getattr(pb, output_dtype)
        # The server's GPU work is not ordered after this process's streams: finish them.
        torch.cuda.synchronize(device)
        t = self._compute_metadata(request)
        if out is not None:
            return out if tuple(t.shape) == tuple(out.shape) else out.reshape(tuple(t.shape))
        flat = buf[:t.storage_bytes].view(_torch_dtype(t.dtype))
        return flat.as_strided(tuple(t.shape), tuple(t.strides))

    def _compute_stream(self, request: pb.ComputeRequest) -> pb.Tensor:
        header = pb.ComputeRequest()
        header.CopyFrom(request)
        for t in header.inputs:
            if not t.handle:
                t.storage_bytes = len(t.data)
                t.ClearField("data")

        def messages():
            yield pb.ComputeStreamRequest(header=header)
            for i, t in enumerate(request.inputs):
                for at in range(0, len(t.data), self.chunk_bytes):
                    yield pb.ComputeStreamRequest(chunk=pb.DataChunk(
                        tensor=i, offset=at, data=t.data[at:at + self.chunk_bytes]))

        return _assemble(self.stub.ComputeStream(messages(), timeout=self.timeout, metadata=self.metadata))

    def upload(self, x, ttl_seconds: int = 0, device: Optional[int] = None) -> Resident:
        """Keeps `x` on the server. `device`: the server device (ServerInfo's index) to keep
        it on; by default the one this client's other tensors are on."""
        native = self._native() if device is None else None
        if native is not None and not isinstance(x, pb.Tensor):
            sp = _span(x)
            if sp.hi - sp.lo >= self.native_threshold or self.native:
                # Read where it lies, over several connections when large.
                resp = native.upload(sp.meta(storage_bytes=sp.hi - sp.lo), sp.lo,
                                     sp.hi - sp.lo, ttl_seconds)
                return Resident(resp.tensor, resp.device)
        t = to_tensor(x)
        data = t.data
        meta = pb.Tensor()
        meta.CopyFrom(t)
        meta.ClearField("data")
        meta.storage_bytes = len(data)

        def messages():
            yield pb.UploadRequest(header=pb.UploadHeader(tensor=meta, ttl_seconds=ttl_seconds,
                                                          device=device))
            for at in range(0, len(data), self.chunk_bytes):
                yield pb.UploadRequest(chunk=pb.DataChunk(offset=at,
                                                          data=data[at:at + self.chunk_bytes]))

        resp = self.stub.Upload(messages(), timeout=self.timeout, metadata=self.metadata)
        return Resident(resp.tensor, resp.device)

    def download(self, resident: Resident, as_torch: bool = False):
        native = self._native()
        size = resident.tensor.storage_bytes
        if native is not None and (size >= self.native_threshold or self.native):
            # Into memory that becomes the array, over several connections when large.
            return _array_over(resident.tensor, native.download(resident.handle, size),
                               as_torch)
        stream = self.stub.Download(pb.DownloadRequest(handle=resident.handle,
                                                       chunk_bytes=self.chunk_bytes),
                                    timeout=self.timeout, metadata=self.metadata)
        return from_tensor(_assemble(stream), as_torch=as_torch)

    def release(self, *residents: Resident) -> int:
        reply = self.stub.Release(pb.ReleaseRequest(handles=[r.handle for r in residents]),
                                  timeout=self.timeout, metadata=self.metadata)
        return reply.released_bytes


def _assemble(replies: Iterable[pb.TensorStreamMessage]) -> pb.Tensor:
    """One Tensor (with data) from a header and its chunks."""
    out = None
    parts = []
    expected = 0
    for m in replies:
        if m.HasField("header"):
            out = m.header
            continue
        if out is None:
            raise RuntimeError("server sent a chunk before the header")
        if not parts:
            expected = m.chunk.offset
        if m.chunk.offset != expected:
            raise RuntimeError("server sent chunks out of order")
        parts.append(m.chunk.data)
        expected += len(m.chunk.data)
    if out is None:
        raise RuntimeError("server sent no header")
    result = pb.Tensor()
    result.CopyFrom(out)
    if parts:
        result.data = b"".join(parts)
    return result
