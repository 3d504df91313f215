"""The client: a channel reused for every call, deadlines, chunked streaming, resident tensors."""
import concurrent.futures
import ctypes
import itertools
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

from . import errors
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
    """A tensor kept on a server: its handle and metadata (pass it as an input), the server
    device holding it where known, and the replica it is kept on."""
    tensor: pb.Tensor
    device: Optional[int] = None
    # The replica (one of Client.replicas) that holds it; None: the client's home.
    replica: Optional[str] = None

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


def _region_lost(e: grpc.RpcError) -> bool:
    """The server does not know a region this client registered with it: the process behind
    the address is not the one it was registered with (it restarted)."""
    return (e.code() == grpc.StatusCode.NOT_FOUND and
            "no such region" in (e.details() or ""))


_PER_TRY = "per-try deadline"


def _as_rpc_error(e: BaseException) -> Optional[grpc.RpcError]:
    """A failure as the caller sees it: grpc.RpcError as it is; a local connection's OSError
    as UNAVAILABLE; anything else (a bug, a bad argument) None, raised as it is."""
    if isinstance(e, grpc.RpcError):
        return e
    if isinstance(e, OSError):
        return errors.from_os_error(e, "connection to the server")
    return None


def _stateless_request(inputs, keep_resident: bool) -> bool:
    """Keeps nothing on a server and names nothing kept there: any replica may run it, and
    run it again. Arrays (in regions or not) count as the caller's own; a Resident or a wire
    Tensor naming a handle or a region does not."""
    if keep_resident:
        return False
    for x in inputs:
        if isinstance(x, Resident):
            return False
        if isinstance(x, pb.Tensor) and (x.handle or x.region):
            return False
    return True


class Client:
    def __init__(self, target: str, timeout: float = 60.0,
                 max_message_bytes: int = 256 << 20, chunk_bytes: int = 1 << 20,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None, shared_memory: Optional[bool] = None,
                 shared_memory_threshold: int = 256 << 10, native: Optional[bool] = None,
                 connections: int = 8, native_threshold: int = 1 << 20,
                 spread_bytes: int = 32 << 20, tls_ca: _Pem = None, tls_cert: _Pem = None,
                 tls_key: _Pem = None, tls_server_name: Optional[str] = None,
                 retry_attempts: int = 4, home: Optional[str] = None,
                 spread_replicas: bool = True, keepalive: float = 1.0,
                 keepalive_timeout: float = 2.0, try_timeout: float = 5.0,
                 try_bytes_per_second: float = 10e6):
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
        it is found: from the arrays' memory, as pipelined slices over `connections`
        connections from 16 MiB where the request can be cut by rows, else spread over them
        when it reaches `spread_bytes` (docs/large-tensors.md), outside the interpreter lock.
        None (the default) uses it when
        found (not with `credentials`), and warns once where it is not; True requires it;
        False never uses it.

        Several replicas: `target` may list them ("host:port,host:port") or name them through
        DNS ("dns:///name:port"). A stateless call (a compute or eval over the caller's
        arrays whose result comes back to it, on any road: inline, native, spread, shared
        memory, CUDA IPC; list_ops; plan) goes to the replicas in turn (`spread_replicas`;
        False: to `home` while it answers), and where its replica fails (refused or lost
        connection, UNAVAILABLE, draining, a server that restarted and no longer knows this
        client's regions, or no answer within the try's deadline) it is sent again to
        another, through whatever road that one offers, up to `retry_attempts` tries in all
        within `timeout`. Everything that keeps state on a server (resident tensors,
        uploads, keep_resident) goes to one replica, `home` (by default one at random); when
        it fails, the next stateful call goes to another, and a Resident names the replica
        that holds it (lost with it). `rehome()` picks a new home explicitly.

        A frozen replica: every connection is pinged every `keepalive` seconds and given up
        when a ping is not answered within `keepalive_timeout`, failing its calls over to
        another replica; each try of a stateless call also has a deadline of `try_timeout`
        seconds plus the time its bytes take at `try_bytes_per_second` (for a balancer in
        front, which answers pings for a replica behind it that froze). keepalive=0 turns
        pings off; try_timeout=0 leaves each try the whole `timeout`."""
        if credentials is not None and tls_ca is not None:
            raise ValueError("pass either credentials= or tls_ca=, not both")
        self._tls_files = None
        self._tls_name = None
        if tls_ca is not None:
            if (tls_cert is None) != (tls_key is None):
                raise ValueError("tls_cert and tls_key come together")
            pems = [_read_pem(p) for p in (tls_ca, tls_key, tls_cert)]
            credentials = grpc.ssl_channel_credentials(*pems)
            self._tls_name = tls_server_name or None
            # For the native library: paths, or the PEM text itself.
            self._tls_files = [p if p is None or isinstance(p, str) else _read_pem(p).decode()
                               for p in (tls_ca, tls_cert, tls_key)] + [tls_server_name]
        elif tls_cert is not None or tls_key is not None or tls_server_name:
            raise ValueError("tls_cert, tls_key and tls_server_name need tls_ca")
        self.target = target
        self.retry_attempts = retry_attempts
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self.chunk_bytes = chunk_bytes
        self.keepalive = keepalive
        self.keepalive_timeout = keepalive_timeout
        self.try_timeout = try_timeout
        self.try_bytes_per_second = try_bytes_per_second
        self.spread_replicas = spread_replicas
        addresses, balanced = _replicas.resolve(target)
        self.replicas = addresses if balanced else [target]
        self._credentials = credentials
        self._options = _replicas.channel_options(
            max_message_bytes, min(spread_bytes + (1 << 20), max_message_bytes), keepalive,
            keepalive_timeout)
        if self._tls_name:
            self._options.append(("grpc.ssl_target_name_override", self._tls_name))
        # No retry policy of gRPC's: retries are _stateless's, for the calls that are safe to
        # send again, on whichever replica (two layers of retries would multiply their tries).
        config = _replicas.service_config()
        self._replica_list = []
        for a in self.replicas:
            ch = self._channel(a, config)
            self._replica_list.append(_replicas.Replica(a, ch, pb_grpc.TensorServiceStub(ch)))
        if home is not None and home not in self.replicas:
            raise ValueError(f"home {home} is not one of the target's replicas {self.replicas}")
        self._home = (self._replica_list[self.replicas.index(home)] if home is not None else
                      self._replica_list[secrets.randbelow(len(self._replica_list))])
        self._turn = itertools.count(secrets.randbelow(1 << 16))
        # One session over every connection of this client (the native transport's too): the
        # server keeps its resident tensors on one device.
        self.session = secrets.token_hex(16)
        self.metadata = [("tc-session", self.session)]
        if token:
            self.metadata.append(("authorization", f"Bearer {token}"))
        self.shared_memory = shared_memory
        self.shared_memory_threshold = shared_memory_threshold
        self.native = native
        self.connections = connections
        self.native_threshold = native_threshold
        self.spread_bytes = spread_bytes
        self._token = token
        # grpcio's credentials object, which the native library cannot take.
        self._grpc_credentials_only = credentials is not None and self._tls_files is None
        self._native_checked = False
        self._native_lock = threading.Lock()
        self._plans = {}
        self._plan_lock = threading.Lock()
        # Regions this client made (its own and each thread's scratch), by address.
        self._regions = {}
        self._regions_lock = threading.Lock()
        self._scratch_local = threading.local()
        self._closed = False

    def _channel(self, address: str, config: str):
        opts = self._options + [("grpc.service_config", config)]
        return (grpc.secure_channel(address, self._credentials, opts) if self._credentials
                else grpc.insecure_channel(address, opts))

    # Replicas ---------------------------------------------------------------------------

    @property
    def home(self) -> str:
        """The replica stateful calls go to now."""
        return self._home.address

    @property
    def stub(self):
        """The home replica's TensorService stub."""
        return self._home.stub

    @property
    def channel(self):
        return self._home.channel

    def rehome(self, replica: Optional[str] = None) -> str:
        """Makes `replica` (one of `replicas`; None: the next one that answers lately) the
        home of this client's stateful calls, and returns it. Tensors kept on the old home
        stay there (a Resident names its replica)."""
        if replica is not None:
            if replica not in self.replicas:
                raise ValueError(f"{replica} is not one of {self.replicas}")
            self._home = self._replica_list[self.replicas.index(replica)]
        else:
            self._home = _replicas.pick(self._replica_list, next(self._turn), [self._home])
        return self._home.address

    def _replica_of(self, address: Optional[str]) -> "_replicas.Replica":
        if address:
            for r in self._replica_list:
                if r.address == address:
                    return r
        return self._home

    def _failed(self, replica: "_replicas.Replica", e: grpc.RpcError):
        """A call on `replica` failed as a replica that is gone (or going) fails."""
        replica.failed()
        if _region_lost(e) or e.code() == grpc.StatusCode.UNAVAILABLE:
            self._drop_shm(replica)
        if replica is self._home and len(self._replica_list) > 1:
            self._home = _replicas.pick(self._replica_list, next(self._turn), [replica])

    def _try_timeout(self, nbytes: int) -> float:
        if self.try_timeout <= 0:
            return float("inf")
        return self.try_timeout + nbytes / max(1.0, self.try_bytes_per_second)

    def _stateless(self, nbytes: int, attempt, local: bool = False, prefer=None):
        """attempt(replica, timeout) on one replica after another until one answers: the
        retry loop every stateless call takes, whatever its road. Each try gets the time left
        of `timeout`, at most its per-try deadline; a try that fails as a gone replica fails
        (see _retryable) is sent again to another replica, after a backoff of 0.1 s doubling
        to 0.5 s (gRPC's retry policy as this client sets it, service_config)."""
        end = time.monotonic() + self.timeout
        tried = []
        if prefer is None and not self.spread_replicas:
            prefer = self._home
        pool = self._replica_list
        if local:
            pool = [r for r in pool if shm.is_local_target(r.address)] or pool
        error = None
        for n in range(max(1, self.retry_attempts)):
            left = end - time.monotonic()
            if left <= 0:
                break
            replica = _replicas.pick(pool, next(self._turn), tried, prefer)
            per_try = min(left, self._try_timeout(nbytes))
            try:
                out = attempt(replica, per_try)
            except BaseException as e:  # noqa: BLE001 - sorted below
                err = _as_rpc_error(e)
                if err is None:
                    raise
                expired = (err.code() == grpc.StatusCode.DEADLINE_EXCEEDED and
                           per_try < left - 0.05)
                if not (expired or self._retryable(err)):
                    if err is e:
                        raise
                    raise err from e
                self._failed(replica, err)
                error = err if not expired else errors.ClientError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"{replica.address} did not answer within the {_PER_TRY} "
                    f"({per_try:.1f} s): {err.details()}")
                tried.append(replica)
                time.sleep(max(0.0, min(0.1 * 2 ** n, 0.5, end - time.monotonic())))
                continue
            replica.answered()
            return out
        if error is None:
            error = errors.ClientError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                       f"no replica answered within {self.timeout} s")
        raise error

    @staticmethod
    def _retryable(e: grpc.RpcError) -> bool:
        """Failures that say the replica is gone or going, not that the request is wrong: a
        server that refuses it while draining or cannot be reached (UNAVAILABLE), cancels it
        in its last second (CANCELLED, which this client never asks for), a stream a balancer
        reset when the replica behind it died mid-call (INTERNAL, "Received RST_STREAM"; a
        server's own INTERNAL carries its own message), and a server that no longer knows a
        region this client registered (it restarted)."""
        return (e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) or
                _stream_reset(e) or _region_lost(e))

    def _stateful(self, replica: "_replicas.Replica", call):
        """call(replica) for state kept on `replica`: not sent elsewhere; a failure that says
        the replica is gone moves this client's home on."""
        try:
            return call(replica)
        except BaseException as e:  # noqa: BLE001 - sorted below
            err = _as_rpc_error(e)
            if err is None:
                raise
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                self._failed(replica, err)
            if err is e:
                raise
            raise err from e

    def close(self):
        self._closed = True
        with self._regions_lock:
            regions = list(self._regions.values())
        for r in regions:
            r._close_fd()
        for rep in self._replica_list:
            if rep.native is not None:
                rep.native.close()
                rep.native = None
            if rep.shm is not None:
                rep.shm.close()
            rep.channel.close()

    # Shared memory ----------------------------------------------------------------------

    def _add_region(self, r: shm.Region):
        with self._regions_lock:
            self._regions[id(r)] = r

    def _remove_region(self, r: shm.Region):
        with self._regions_lock:
            self._regions.pop(id(r), None)

    def _find_region(self, lo: int, hi: int):
        """(region, offset) of one of this client's regions holding [lo, hi), or None."""
        with self._regions_lock:
            regions = list(self._regions.values())
        for r in regions:
            at = r.locate(lo, hi)
            if at is not None:
                return r, at
        return None

    def _drop_shm(self, replica: "_replicas.Replica"):
        with replica.lock:
            old, replica.shm = replica.shm, None
        if old is not None:
            old.close()

    def _replica_shm(self, replica: "_replicas.Replica") -> Optional[shm.Shm]:
        """The region socket connection to the server process now behind `replica`, opened
        on first use and again when that process changed; None where regions do not apply
        there (another host, regions off, shared_memory=False; the reason in no_shm).
        Raises UNAVAILABLE where the replica cannot be reached."""
        s = replica.shm
        if s is not None and s.alive():
            return s
        if s is not None:
            self._drop_shm(replica)
        if replica.no_shm is not None:
            return None
        if self.shared_memory is False:
            replica.no_shm = "shared memory is off for this client (shared_memory=False)"
            return None
        if self.shared_memory is None and not shm.is_local_target(replica.address):
            replica.no_shm = f"{replica.address} is not on this host"
            return None
        info = replica.stub.ServerInfo(pb.ServerInfoRequest(), timeout=self.timeout,
                                       metadata=self.metadata)
        if not info.region_socket:
            replica.no_shm = "the server has shared-memory regions off"
            return None
        fresh = shm.Shm(info.region_socket, replica.stub, self.metadata, self.timeout,
                        info.instance)
        with replica.lock:
            if replica.shm is None:
                replica.shm, fresh = fresh, None
            s = replica.shm
        if fresh is not None:
            fresh.close()
        return s

    def _shm_of(self, replica: "_replicas.Replica") -> shm.Shm:
        """_replica_shm, raising FAILED_PRECONDITION where regions do not apply there."""
        s = self._replica_shm(replica)
        if s is None:
            raise errors.ClientError(grpc.StatusCode.FAILED_PRECONDITION,
                                     f"no shared-memory regions: {replica.no_shm}")
        return s

    def _shm(self) -> shm.Shm:
        """The home replica's region socket connection; raises where regions are not
        available there."""
        return self._stateful(self._home, self._shm_of)

    def _register_region(self, region: shm.Region):
        """Registers a new region with the home replica (another one where home does not
        answer): a region that cannot be registered fails where it is made."""
        self._stateless(0, lambda r, t: region.id_at(self._shm_of(r)), local=True,
                        prefer=self._home)

    def _native_ok(self) -> bool:
        """Whether the native transport is to be used (loads the library once; says why not
        once, or raises with native=True)."""
        if self.native is False:
            return False
        if self._native_checked:
            return True
        with self._native_lock:
            if self._native_checked:
                return True
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
                return False
            self._native_checked = True
            return True

    def _replica_native(self, replica: "_replicas.Replica"
                        ) -> Optional[_native_mod.NativeClient]:
        """The native transport to `replica` (its own connections), or None where it is off
        or not found."""
        if not self._native_ok():
            return None
        with replica.lock:
            if replica.native is None:
                replica.native = _native_mod.NativeClient(
                    replica.address, self.timeout, self.max_message_bytes, self.chunk_bytes,
                    self._token, self.connections, self.spread_bytes, self.session,
                    self._tls_files, retry_attempts=1)  # Retries are this client's.
            return replica.native

    def _native(self) -> Optional[_native_mod.NativeClient]:
        """The native transport to the home replica, or None where it is off or not found."""
        return self._replica_native(self._home)

    @property
    def _native_state(self):
        return next((r.native for r in self._replica_list if r.native is not None), None)

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
        dtype, offset)` places arrays in it, `.close()` unregisters it. It is registered with
        other replicas of this client (and a restarted server) as calls there need it."""
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

    def _scratch(self, nbytes: int) -> shm.Region:
        """This thread's scratch region, at least `nbytes` (grown, never shrunk)."""
        r = getattr(self._scratch_local, "region", None)
        if r is None or r.nbytes < nbytes:
            grown = r.nbytes * 3 // 2 if r is not None else 0
            if r is not None:
                r.close()
            # Registered with a server when a try there first names it.
            r = shm.Region(self, max(nbytes, grown), "scratch", register=False)
            self._scratch_local.region = r
        return r

    def _region_inputs(self, replica, state, what, spans, output_dtype, attrs, out):
        """Region references at `state` (the replica's region socket) for the inputs (copied
        into this thread's scratch where they are not in a region already), and where the
        output goes: (tensors, output region id, offset, scratch region or None)."""
        placed = {}
        need = 0
        for k, s in enumerate(spans):
            if isinstance(s, _Span) and s.array.size:
                found = self._find_region(s.lo, s.hi)
                if found is not None:
                    placed[k] = found
                else:
                    need += _align(s.array.nbytes)
        out_at = None
        if out is None:
            # Room for the output, as the server says it will be.
            out_at = need
            planned = self._output_plan(what, spans, attrs, output_dtype, replica)
            need += _align(max(1, planned.storage_bytes))
        scratch = self._scratch(need) if need else None
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
                tensors.append(s.meta(region=r.id_at(state), region_offset=offset,
                                      storage_bytes=s.hi - s.lo))
            else:
                dst = scratch.array(s.array.shape, s.array.dtype, at)
                _copy(dst, s.array)
                tensors.append(pb.Tensor(dtype=s.wire, shape=s.array.shape,
                                         region=scratch.id_at(state), region_offset=at,
                                         storage_bytes=dst.nbytes))
                at += _align(dst.nbytes)
        if out is not None:
            o = _span(out)
            found = self._find_region(o.lo, o.hi) if o.array.size else None
            if found is None or not o.array.flags.c_contiguous:
                raise ValueError("out= must be a C-contiguous array in a shared-memory region "
                                 "(Client.shared_array or Client.region(...).array)")
            return tensors, found[0].id_at(state), found[1], None
        return tensors, scratch.id_at(state), out_at, scratch

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def server_info(self) -> pb.ServerInfoResponse:
        """The home replica's description of itself (instance: the id of its process, new
        at every start)."""
        return self._stateful(self._home, lambda r: r.stub.ServerInfo(
            pb.ServerInfoRequest(), timeout=self.timeout, metadata=self.metadata))

    def list_ops(self):
        return list(self.list_ops_response().ops)

    def list_ops_response(self) -> pb.ListOpsResponse:
        """The catalog, and the grammar of expressions (expression_grammar)."""
        return self._stateless(0, lambda r, t: r.stub.ListOps(
            pb.ListOpsRequest(), timeout=t, metadata=self.metadata))

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

    def _output_plan(self, what, inputs, attrs, output_dtype, replica=None) -> "OutputPlan":
        """What a request over `inputs` (arrays' spans, Residents or wire tensors) returns,
        asked of the server once per kind of request (op or expression, attributes, output
        dtype, and the inputs' dtypes and shapes) and kept (the last 256 kinds). `replica`:
        asked of that one (a try on it), else of any (a stateless call of its own)."""
        described = []
        key = [tuple(sorted((k, v) for k, v in what.items() if k != "input_names")),
               tuple(what.get("input_names", ())),
               tuple(sorted((k, v.SerializeToString()) for k, v in attrs.items())),
               output_dtype]
        holder = None
        for x in inputs:
            if isinstance(x, Resident):
                t = pb.Tensor(handle=x.handle)
                holder = x.replica
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
        if replica is not None or holder is not None:
            r = replica if replica is not None else self._replica_of(holder)
            meta = self._metadata_on(r, request, self.timeout)
        else:
            meta = self._stateless(0, lambda r, t: self._metadata_on(r, request, t))
        found = _output_plan_of(meta)
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
        input names. A stateless request is one try after another (_stateless), each on the
        road its replica offers; one that keeps or names state goes where that state is."""
        attrs = {k: _attribute(v) for k, v in attributes.items()}
        if _is_cuda(out) or any(_is_cuda(x) for x in inputs):
            return self._stateless(0, lambda r, t: self._compute_cuda(
                r, t, what, inputs, attrs, output_dtype, out), local=True)
        spans = [x if isinstance(x, (Resident, pb.Tensor)) else _span(x) for x in inputs]
        size = sum(sp.hi - sp.lo for sp in spans if isinstance(sp, _Span))
        size += sum(len(x.data) for x in inputs if isinstance(x, pb.Tensor))

        def attempt(replica, timeout):
            return self._run_on(replica, timeout, what, inputs, spans, size, output_dtype,
                                keep_resident, as_torch, stream, out, attrs)

        if _stateless_request(inputs, keep_resident):
            return self._stateless(size, attempt)
        holder = next((x.replica for x in inputs if isinstance(x, Resident)), None)
        return self._stateful(self._replica_of(holder),
                              lambda r: attempt(r, self.timeout))

    def _run_on(self, replica, timeout, what, inputs, spans, size, output_dtype,
                keep_resident, as_torch, stream, out, attrs):
        """One try of a compute or eval on `replica`, on the cheapest road it offers: shared
        memory (a local server with regions on), the native transport, grpcio."""
        if stream is not True and not keep_resident and (
                out is not None or size >= self.shared_memory_threshold):
            state = (self._shm_of(replica) if out is not None or self.shared_memory
                     else self._replica_shm(replica))
            if state is not None:
                return self._run_regions(replica, state, timeout, what, spans, output_dtype,
                                         as_torch, out, attrs)
        native = self._replica_native(replica) if stream is not True else None
        if native is not None and (size >= self.native_threshold or self.native):
            return self._compute_native(replica, native, timeout, what, inputs, spans, attrs,
                                        output_dtype, keep_resident, as_torch)
        request = pb.ComputeRequest(**what, inputs=[self._input(x) for x in inputs],
                                    attributes=attrs, keep_output_resident=keep_resident)
        if output_dtype is not None:
            request.output_dtype = getattr(pb, output_dtype)
        if stream is None:
            stream = size > self.max_message_bytes // 2
        if stream:
            t = self._compute_stream(replica, request, timeout)
        else:
            t = replica.stub.Compute(request, timeout=timeout, metadata=self.metadata).output
        if keep_resident:
            return Resident(t, replica=replica.address)
        return from_tensor(t, as_torch=as_torch)

    def _run_regions(self, replica, state, timeout, what, spans, output_dtype, as_torch, out,
                     attrs):
        tensors, region, offset, scratch = self._region_inputs(
            replica, state, what, spans, output_dtype, attrs, out)
        request = pb.ComputeRequest(**what, inputs=tensors, attributes=attrs,
                                    output_region=region, output_region_offset=offset)
        if output_dtype is not None:
            request.output_dtype = getattr(pb, output_dtype)
        t = self._metadata_on(replica, request, timeout)
        if out is not None:
            result = out.reshape(tuple(t.shape)) if tuple(t.shape) != out.shape else out
        else:
            view = scratch.array(
                (t.storage_bytes // max(1, _WIRE_TO_NUMPY[t.dtype].itemsize),),
                _WIRE_TO_NUMPY[t.dtype], offset)
            src = np.lib.stride_tricks.as_strided(
                view, shape=tuple(t.shape), strides=tuple(st * view.itemsize for st in t.strides))
            result = np.empty(src.shape, src.dtype)
            _copy(result, src)
        return _to_torch(result, t.dtype) if as_torch else result

    def _metadata_on(self, replica, request: pb.ComputeRequest, timeout: float) -> pb.Tensor:
        """One Compute on `replica` whose output goes into a region (or is only planned):
        only metadata comes back. Through the native library where it is loaded (a C++ call
        costs a fraction of grpcio's), else grpcio."""
        native = self._replica_native(replica) if self.native is not False else None
        if native is None:
            return replica.stub.Compute(request, timeout=timeout, metadata=self.metadata).output
        if any(t.data for t in request.inputs):
            req = pb.ComputeRequest()
            req.CopyFrom(request)
            keep = [_take_data(t) for t in req.inputs]  # The bytes stay alive through the call.
            where = [(_address(d), len(d)) for d in keep]
        else:  # Nothing inline (regions, handles, GPU memory): sent as it is.
            req, where = request, [(0, 0)] * len(request.inputs)
        meta, raw = native.compute(req, where, timeout)
        if raw is not None:
            meta.data = raw.tobytes()
        return meta

    def _compute_native(self, replica, native, timeout, what, inputs, spans, attrs,
                        output_dtype, keep_resident, as_torch):
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
        t, raw = native.compute(request, where, timeout)
        del keep
        if keep_resident:
            return Resident(t, replica=replica.address)
        return _array_over(t, raw, as_torch)

    def _cuda_input(self, state, t) -> pb.Tensor:
        """A torch.cuda tensor as a view of its allocation, shared through CUDA IPC."""
        wire = _torch_wire(t.dtype)
        if t.numel() == 0:
            return pb.Tensor(dtype=wire, shape=t.shape)
        item = t.element_size()
        ptr = t.data_ptr()
        span = sum((n - 1) * st for n, st in zip(t.shape, t.stride())) * item + item
        r = state.device_region(ptr, t.device.index)
        return pb.Tensor(dtype=wire, shape=t.shape, strides=t.stride(), region=r.id,
                         region_offset=ptr - r.base, storage_bytes=span)

    def _compute_cuda(self, replica, timeout, what, inputs, attrs, output_dtype, out):
        """The request (`what`: op or expression) on torch.cuda tensors, computed in place on
        `replica`'s GPU: no byte leaves the GPU. The result is `out` (a contiguous
        torch.cuda tensor) or a new one."""
        torch = _torch()
        state = self._shm_of(replica)
        device = (out if _is_cuda(out) else next(x for x in inputs if _is_cuda(x))).device
        tensors = []
        for x in inputs:
            if _is_cuda(x):
                tensors.append(self._cuda_input(state, x))
            else:
                tensors.append(self._input(x))
        if out is None:
            planned = self._output_plan(what, tensors, attrs, output_dtype, replica)
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
        t = self._metadata_on(replica, request, timeout)
        if out is not None:
            return out if tuple(t.shape) == tuple(out.shape) else out.reshape(tuple(t.shape))
        flat = buf[:t.storage_bytes].view(_torch_dtype(t.dtype))
        return flat.as_strided(tuple(t.shape), tuple(t.strides))

    def _compute_stream(self, replica, request: pb.ComputeRequest, timeout: float) -> pb.Tensor:
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

        return _assemble(replica.stub.ComputeStream(messages(), timeout=timeout,
                                                    metadata=self.metadata))

    def upload(self, x, ttl_seconds: int = 0, device: Optional[int] = None) -> Resident:
        """Keeps `x` on the home replica. `device`: the server device (ServerInfo's index) to
        keep it on; by default the one this client's other tensors are on."""
        return self._stateful(self._home, lambda r: self._upload_on(r, x, ttl_seconds, device))

    def _upload_on(self, replica, x, ttl_seconds, device) -> Resident:
        native = self._replica_native(replica) if device is None else None
        if native is not None and not isinstance(x, pb.Tensor):
            sp = _span(x)
            if sp.hi - sp.lo >= self.native_threshold or self.native:
                # Read where it lies, over several connections when large.
                resp = native.upload(sp.meta(storage_bytes=sp.hi - sp.lo), sp.lo,
                                     sp.hi - sp.lo, ttl_seconds)
                return Resident(resp.tensor, resp.device, replica.address)
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

        resp = replica.stub.Upload(messages(), timeout=self.timeout, metadata=self.metadata)
        return Resident(resp.tensor, resp.device, replica.address)

    def download(self, resident: Resident, as_torch: bool = False):
        """A resident tensor's value, from the replica that holds it."""
        return self._stateful(self._replica_of(resident.replica),
                              lambda r: self._download_on(r, resident, as_torch))

    def _download_on(self, replica, resident: Resident, as_torch: bool):
        native = self._replica_native(replica)
        size = resident.tensor.storage_bytes
        if native is not None and (size >= self.native_threshold or self.native):
            # Into memory that becomes the array, over several connections when large.
            return _array_over(resident.tensor, native.download(resident.handle, size),
                               as_torch)
        stream = replica.stub.Download(pb.DownloadRequest(handle=resident.handle,
                                                          chunk_bytes=self.chunk_bytes),
                                       timeout=self.timeout, metadata=self.metadata)
        return from_tensor(_assemble(stream), as_torch=as_torch)

    def release(self, *residents: Resident) -> int:
        """Frees resident tensors (each on the replica that holds it); the bytes released."""
        by_replica = {}
        for r in residents:
            by_replica.setdefault(self._replica_of(r.replica).address, []).append(r.handle)
        released = 0
        for address, handles in by_replica.items():
            reply = self._stateful(self._replica_of(address), lambda rep: rep.stub.Release(
                pb.ReleaseRequest(handles=handles), timeout=self.timeout,
                metadata=self.metadata))
            released += reply.released_bytes
        return released


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
